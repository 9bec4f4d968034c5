// Gradients of TensorFlow's image and patch ops that no C++ registry has in TensorFlow 2.21,
// written from the formulas of Python's python/ops/image_grad.py, image_ops.py and
// array_grad.py (the patch extractions). Each is registered in both C++ registries when the op
// library loads, unless TensorFlow has one already (TF_EXT_REGISTER_TF_GRADIENT). Where Python
// returns None the gradient is zeros.
//
// Checked against numeric Jacobians (tests/tf_spectral_image_grads_test.cc) and against
// Python's gradients on the same inputs (tests/python/test_tf_spectral_image_grads.py).
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tf_ext/grads/tf/tf_gradient.h"

namespace tensorflow::tf_ext {
namespace {

// ExtractImagePatches(images [B, R, C, D]) / ExtractVolumePatches(input [B, P, R, C, D]) copy
// input pixels (or padding zeros) into patches [B, ..., k*D]; the gradient sums each patch
// entry's incoming gradient back onto the pixel it came from. Which pixel: the same op applied
// to an image of pixel numbers 1..n (0 = padding) tells, for every patch entry, its source.
// `spatial` = 2 (images) or 3 (volumes).
absl::Status PatchesGrad(const std::string& op, const std::string& in, int spatial,
                         const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(op, attrs);
  const NodeAttrs i64 = {{"T", DT_INT64}};
  b.Add(FDH::Const<int32>("axis0", 0));
  b.Add(FDH::Const<int32>("one", 1));
  // [-1], not -1: a Reshape's shape is a vector to shape inference (TfExtAddGradients and the
  // Python bridge build this body in a graph that infers shapes; the kernel takes either).
  b.Add(FDH::Const<int32>("minus_one", std::vector<int32>{-1}));
  b.Add(FDH::Const<int64_t>("one64", 1));
  b.Add(FDH::Const<int32>("batch_at", 0));
  b.Add(FDH::Const<int32>("channels_at", spatial + 1));
  b.Add(FDH::Const<int32>("spatial_begin", std::vector<int32>{1}));
  b.Add(FDH::Const<int32>("spatial_end", std::vector<int32>{spatial + 1}));
  b.Add(FDH::Const<int32>("stride1", std::vector<int32>{1}));
  const NodeAttrs gather = {{"Tparams", DT_INT32}, {"Tindices", DT_INT32}, {"Taxis", DT_INT32}};
  b.Add({{"in_shape"}, "Shape", {in}, {{"T", Placeholder("T")}, {"out_type", DT_INT32}}});
  b.Add({{"batch"}, "GatherV2", {"in_shape", "batch_at", "axis0"}, gather});       // B
  b.Add({{"channels"}, "GatherV2", {"in_shape", "channels_at", "axis0"}, gather});  // D
  b.Add({{"spatial_shape"}, "StridedSlice", {"in_shape", "spatial_begin", "spatial_end", "stride1"},
         {{"T", DT_INT32}, {"Index", DT_INT32}}});                                  // [(P,) R, C]
  b.Add({{"pixels"}, "Prod", {"spatial_shape", "axis0"},
         {{"T", DT_INT32}, {"Tidx", DT_INT32}, {"keep_dims", false}}});              // n
  b.Add({{"pixels64"}, "Cast", {"pixels"}, {{"SrcT", DT_INT32}, {"DstT", DT_INT64}}});
  b.Add({{"end64"}, "AddV2", {"pixels64", "one64"}, i64});
  b.Add({{"numbers"}, "Range", {"one64", "end64", "one64"}, {{"Tidx", DT_INT64}}});  // 1 .. n
  b.Add({{"one_v"}, "Reshape", {"one", "minus_one"}, {{"T", DT_INT32}, {"Tshape", DT_INT32}}});
  b.Add({{"numbered_shape"}, "ConcatV2", {"one_v", "spatial_shape", "one_v", "axis0"},
         {{"N", 3}, {"T", DT_INT32}, {"Tidx", DT_INT32}}});                          // [1, ..., 1]
  b.Add({{"numbered"}, "Reshape", {"numbers", "numbered_shape"},
         {{"T", DT_INT64}, {"Tshape", DT_INT32}}});
  // the source pixel (1-based, 0 = padding) of every patch entry: [1, ..., k]
  NodeAttrs patch_attrs = b.PassAttrs({"ksizes", "strides", "padding"});
  if (spatial == 2) patch_attrs.push_back({"rates", Placeholder("rates")});
  patch_attrs.push_back({"T", DT_INT64});
  b.Add({{"sources"}, op, {"numbered"}, patch_attrs});
  b.Add({{"sources_flat"}, "Reshape", {"sources", "minus_one"},
         {{"T", DT_INT64}, {"Tshape", DT_INT32}}});
  b.Add({{"segment_ids"}, "Sub", {"sources_flat", "one64"}, i64});  // 0-based; padding -1
  b.Add({{"entries"}, "Size", {"sources_flat"}, {{"T", DT_INT64}, {"out_type", DT_INT32}}});
  // d(patches) [B, ..., k*D] as [B, entries, D], entries first
  b.Add({{"grad_shape"}, "Pack", {"batch", "entries", "channels"}, {{"N", 3}, {"T", DT_INT32}}});
  b.Add({{"grad_3d"}, "Reshape", {GradName("patches"), "grad_shape"},
         {{"T", Placeholder("T")}, {"Tshape", DT_INT32}}});
  b.Add(FDH::Const<int32>("entries_first", std::vector<int32>{1, 0, 2}));
  b.Add({{"grad_entries"}, "Transpose", {"grad_3d", "entries_first"},
         {{"T", Placeholder("T")}, {"Tperm", DT_INT32}}});
  // [n, B, D]: every entry's gradient summed onto its source pixel (padding entries dropped)
  b.Add({{"summed"}, "UnsortedSegmentSum", {"grad_entries", "segment_ids", "pixels"},
         {{"T", Placeholder("T")}, {"Tindices", DT_INT64}, {"Tnumsegments", DT_INT32}}});
  b.Add({{"batch_v"}, "Reshape", {"batch", "minus_one"}, {{"T", DT_INT32}, {"Tshape", DT_INT32}}});
  b.Add({{"channels_v"}, "Reshape", {"channels", "minus_one"},
         {{"T", DT_INT32}, {"Tshape", DT_INT32}}});
  b.Add({{"pixel_shape"}, "ConcatV2", {"spatial_shape", "batch_v", "channels_v", "axis0"},
         {{"N", 3}, {"T", DT_INT32}, {"Tidx", DT_INT32}}});                         // [..., B, D]
  b.Add({{"pixel_grad"}, "Reshape", {"summed", "pixel_shape"},
         {{"T", Placeholder("T")}, {"Tshape", DT_INT32}}});
  b.Add(FDH::Const<int32>("batch_first", spatial == 2 ? std::vector<int32>{2, 0, 1, 3}
                                                      : std::vector<int32>{3, 0, 1, 2, 4}));
  // d(input) [B, ..., D]
  b.Return(in, b.Add({{"dx"}, "Transpose", {"pixel_grad", "batch_first"},
                      {{"T", Placeholder("T")}, {"Tperm", DT_INT32}}}));
  return b.Build(g);
}

// ImageProjectiveTransformV2/V3(images, transforms, output_shape[, fill_value]): Python's
// gradient warps d(transformed_images) back with the inverse transforms, at the input's size,
// with the same interpolation and fill mode (fill value 0). That is the adjoint exactly where
// the warp is a permutation (integer shifts, quarter turns) and Python's approximation of it
// elsewhere. transforms, output_shape and fill_value: zeros (Python: None).
absl::Status ProjectiveTransformGrad(const std::string& op, const AttrSlice& attrs,
                                     FunctionDef* g) {
  grad::GradBuilder b(op, attrs);
  const NodeAttrs f32 = {{"T", DT_FLOAT}};
  const NodeAttrs reshape = {{"T", DT_FLOAT}, {"Tshape", DT_INT32}};
  const NodeAttrs slice = {{"T", DT_FLOAT}, {"Index", DT_INT32}};
  b.Add(FDH::Const<int32>("rows8", std::vector<int32>{-1, 8}));
  b.Add(FDH::Const<int32>("rows9", std::vector<int32>{-1, 9}));
  b.Add(FDH::Const<int32>("mat_shape", std::vector<int32>{-1, 3, 3}));
  b.Add(FDH::Const<int32>("origin", std::vector<int32>{0, 0}));
  b.Add(FDH::Const<int32>("col8", std::vector<int32>{0, 8}));
  b.Add(FDH::Const<int32>("one_col", std::vector<int32>{-1, 1}));
  b.Add(FDH::Const<int32>("eight_cols", std::vector<int32>{-1, 8}));
  b.Add(FDH::Const<int32>("axis1", 1));
  // transforms [N, 8] -> matrices [N, 3, 3] (a_0 .. a_7, 1): output -> input coordinates
  b.Add({{"flat"}, "Reshape", {"transforms", "rows8"}, reshape});
  b.Add({{"first_col"}, "Slice", {"flat", "origin", "one_col"}, slice});
  b.Add({{"ones"}, "OnesLike", {"first_col"}, f32});
  b.Add({{"flat9"}, "ConcatV2", {"flat", "ones", "axis1"},
         {{"N", 2}, {"T", DT_FLOAT}, {"Tidx", DT_INT32}}});
  b.Add({{"matrices"}, "Reshape", {"flat9", "mat_shape"}, reshape});
  b.Add({{"inverse"}, "MatrixInverse", {"matrices"}, f32});            // input -> output coords
  b.Add({{"inverse9"}, "Reshape", {"inverse", "rows9"}, reshape});
  b.Add({{"last"}, "Slice", {"inverse9", "col8", "one_col"}, slice});
  b.Add({{"normalised"}, "RealDiv", {"inverse9", "last"}, f32});       // last entry 1
  b.Add({{"inverse8"}, "Slice", {"normalised", "origin", "eight_cols"}, slice});
  b.Add(FDH::Const<int32>("hw_begin", std::vector<int32>{1}));
  b.Add(FDH::Const<int32>("hw_end", std::vector<int32>{3}));
  b.Add(FDH::Const<int32>("stride1", std::vector<int32>{1}));
  b.Add({{"image_shape"}, "Shape", {"images"}, {{"T", Placeholder("dtype")}, {"out_type", DT_INT32}}});
  b.Add({{"image_hw"}, "StridedSlice", {"image_shape", "hw_begin", "hw_end", "stride1"},
         {{"T", DT_INT32}, {"Index", DT_INT32}}});                              // [H, W]
  std::vector<std::string> args = {GradName("transformed_images"), "inverse8", "image_hw"};
  if (op == "ImageProjectiveTransformV3") {
    b.Add(FDH::Const<float>("zero_fill", 0.0f));
    args.push_back("zero_fill");
  }
  // d(images) = d(transformed_images) warped by the inverse transforms to the input's size
  b.Return("images", b.Add({{"dimages"}, op, args,
                            b.PassAttrs({"dtype", "interpolation", "fill_mode"})}));
  b.NotDifferentiable("transforms");
  b.NotDifferentiable("output_shape");
  if (op == "ImageProjectiveTransformV3") b.NotDifferentiable("fill_value");
  return b.Build(g);
}

// RGBToHSV(images [..., 3]) = [..., (h, s, v)], v = max, s = (max - min) / max,
// h = (60 deg / 360 deg) * (difference of the other two channels) / (max - min) + offset,
// piecewise by which channel is the largest / smallest. Python's partial derivatives, with
// Python's tie rules (largest: red, then green; smallest: blue, then green) and its safe
// reciprocal (1/0 = 0), per channel.
absl::Status RgbToHsvGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("RGBToHSV", attrs);
  const NodeAttrs t = b.PassAttrs({"T"});
  const FDH::AttrValueWrapper tt = Placeholder("T");
  auto add = [&](const std::string& name, const std::string& op,
                 std::vector<std::string> in) { return b.Add({{name}, op, std::move(in), t}); };
  auto cast = [&](const std::string& name, const std::string& bool_in) {
    return b.Add({{name}, "Cast", {bool_in}, {{"SrcT", DT_BOOL}, {"DstT", tt}}});
  };
  auto both = [&](const std::string& name, const std::string& c1, const std::string& a1,
                  const std::string& b1, const std::string& c2, const std::string& a2,
                  const std::string& b2) {  // (a1 c1 b1) & (a2 c2 b2), as T
    b.Add({{name + "_1"}, c1, {a1, b1}, t});
    b.Add({{name + "_2"}, c2, {a2, b2}, t});
    b.Add({{name + "_and"}, "LogicalAnd", {name + "_1", name + "_2"}, {}});
    return cast(name, name + "_and");
  };
  const std::string one = b.TypedConst("one", 1.0);
  const std::string zero = b.TypedConst("zero", 0.0);
  const std::string minus_one = b.TypedConst("minus_one", -1.0);
  const std::string sixth = b.TypedConst("sixth", 60.0 / 360.0);
  auto recip = [&](const std::string& name, const std::string& x) {  // 1/x, 0 at x = 0
    return add(name, "DivNoNan", {one, x});
  };
  // channel k of a [..., 3] tensor
  b.Add(FDH::Const<int32>("last_axis", -1));
  auto channel = [&](const std::string& of, int k) {
    const std::string index = absl::StrCat(of, "_at_", k);
    b.Add(FDH::Const<int32>(index, k));
    return b.Add({{absl::StrCat(of, "_", k)}, "GatherV2", {of, index, "last_axis"},
                  {{"Tparams", tt}, {"Tindices", DT_INT32}, {"Taxis", DT_INT32}}});
  };
  const std::string r = channel("images", 0), gr = channel("images", 1),
                    bl = channel("images", 2);
  const std::string s = channel("output", 1), v = channel("output", 2);
  const std::string dh = channel(GradName("output"), 0), dsat = channel(GradName("output"), 1),
                    dv = channel(GradName("output"), 2);
  // largest / smallest channel indicators (ties: see above)
  both("rb", "GreaterEqual", r, bl, "GreaterEqual", r, gr);
  both("gb", "Greater", gr, r, "GreaterEqual", gr, bl);
  both("bb", "Greater", bl, r, "Greater", bl, gr);
  both("rs", "Less", r, bl, "Less", r, gr);
  both("gs", "LessEqual", gr, r, "Less", gr, bl);
  both("bs", "LessEqual", bl, r, "LessEqual", bl, gr);
  b.Add({{"r_pos_b"}, "Greater", {r, zero}, t});
  b.Add({{"g_pos_b"}, "Greater", {gr, zero}, t});
  b.Add({{"b_pos_b"}, "Greater", {bl, zero}, t});
  cast("r_pos", "r_pos_b");
  cast("g_pos", "g_pos_b");
  cast("b_pos", "b_pos_b");
  // 1 / (s^2 v^2) = 1 / (max - min)^2
  add("s2", "Square", {s});
  add("v2", "Square", {v});
  recip("inv_s2", "s2");
  recip("inv_v2", "v2");
  add("inv_range2", "Mul", {"inv_s2", "inv_v2"});

  struct Channel {
    std::string name, x, pos, big, small;
  };
  const Channel ch[3] = {{"r", r, "r_pos", "rb", "rs"},
                         {"g", gr, "g_pos", "gb", "gs"},
                         {"b", bl, "b_pos", "bb", "bs"}};
  std::string p_now;  // the channel whose gradient is being built (node name prefix)
  // X - Y for two channels
  auto diff = [&](const Channel& x, const Channel& y) {
    const std::string name = absl::StrCat(x.name, "_minus_", y.name, "_for_", p_now);
    add(name, "Sub", {x.x, y.x});
    return name;
  };
  // (mask product) * value, term by term
  auto prod = [&](const std::string& name, std::vector<std::string> factors) {
    std::string acc = factors[0];
    for (size_t i = 1; i < factors.size(); ++i) {
      acc = add(absl::StrCat(name, "_", i), "Mul", {acc, factors[i]});
    }
    return acc;
  };
  std::vector<std::string> per_channel;
  for (int i = 0; i < 3; ++i) {
    const Channel& x = ch[i];
    const Channel& y = ch[(i + 1) % 3];  // the next channel (r -> g -> b -> r)
    const Channel& z = ch[(i + 2) % 3];  // the previous one
    const std::string p = x.name;
    p_now = p;
    // dv/dx = [x is the largest]
    const std::string dv_dx = x.big;
    // ds/dx = [x > 0] ([x largest] (smallest of y, z) / x^2 - [x smallest] / (largest of y, z))
    add(p + "_ys", "Mul", {y.small, y.x});
    add(p + "_zs", "Mul", {z.small, z.x});
    add(p + "_min_other", "AddV2", {p + "_ys", p + "_zs"});
    add(p + "_x2", "Square", {x.x});
    recip(p + "_inv_x2", p + "_x2");
    const std::string s_big = prod(p + "_s_big", {x.big, p + "_min_other", p + "_inv_x2"});
    add(p + "_yb", "Mul", {y.big, y.x});
    add(p + "_zb", "Mul", {z.big, z.x});
    add(p + "_max_other", "AddV2", {p + "_yb", p + "_zb"});
    recip(p + "_inv_max_other", p + "_max_other");
    const std::string s_small = prod(p + "_s_small", {x.small, p + "_inv_max_other"});
    add(p + "_s_sum", "Sub", {s_big, s_small});
    const std::string ds_dx = add(p + "_ds", "Mul", {x.pos, p + "_s_sum"});
    // dh/dx (in turns: 60/360 times the degree formulas), five cases:
    //  x largest:               -(y - z) / (max - min)^2
    //  y largest, x smallest:   (z - y) / (x - y)^2      y largest, z smallest: -1 / (y - z)
    //  z largest, x smallest:   (z - y) / (z - x)^2      z largest, y smallest:  1 / (z - y)
    // (for the next channel y and the previous z; each case also needs its largest > 0)
    const std::string d_yz = diff(y, z), d_zy = diff(z, y), d_xy = diff(x, y), d_zx = diff(z, x);
    add(p + "_neg_yz", "Neg", {d_yz});
    const std::string h1 = prod(p + "_h1", {x.pos, x.big, p + "_neg_yz", "inv_range2"});
    add(p + "_xy2", "Square", {d_xy});
    recip(p + "_inv_xy2", p + "_xy2");
    const std::string h2 = prod(p + "_h2", {y.pos, y.big, x.small, d_zy, p + "_inv_xy2"});
    recip(p + "_inv_yz", d_yz);
    const std::string h3 = prod(p + "_h3", {y.pos, y.big, z.small, minus_one, p + "_inv_yz"});
    add(p + "_zx2", "Square", {d_zx});
    recip(p + "_inv_zx2", p + "_zx2");
    const std::string h4 = prod(p + "_h4", {z.pos, z.big, x.small, d_zy, p + "_inv_zx2"});
    recip(p + "_inv_zy", d_zy);
    const std::string h5 = prod(p + "_h5", {z.pos, z.big, y.small, p + "_inv_zy"});
    add(p + "_h12", "AddV2", {h1, h2});
    add(p + "_h123", "AddV2", {p + "_h12", h3});
    add(p + "_h1234", "AddV2", {p + "_h123", h4});
    add(p + "_h_deg", "AddV2", {p + "_h1234", h5});
    const std::string dh_dx = add(p + "_dh", "Mul", {p + "_h_deg", sixth});
    // d(x) = d(h) dh/dx + d(s) ds/dx + d(v) dv/dx
    add(p + "_gh", "Mul", {dh, dh_dx});
    add(p + "_gs", "Mul", {dsat, ds_dx});
    add(p + "_gv", "Mul", {dv, dv_dx});
    add(p + "_ghs", "AddV2", {p + "_gh", p + "_gs"});
    per_channel.push_back(add(p + "_grad", "AddV2", {p + "_ghs", p + "_gv"}));
  }
  // d(images) = (d(r), d(g), d(b)) along the last axis
  b.Return("images", b.Add({{"dimages"}, "Pack", per_channel, {{"N", 3}, {"T", tt}, {"axis", -1}}}));
  return b.Build(g);
}

}  // namespace

TF_EXT_REGISTER_TF_GRADIENT("ExtractImagePatches", [](const AttrSlice& a, FunctionDef* g) {
  return PatchesGrad("ExtractImagePatches", "images", 2, a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("ExtractVolumePatches", [](const AttrSlice& a, FunctionDef* g) {
  return PatchesGrad("ExtractVolumePatches", "input", 3, a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("ImageProjectiveTransformV2", [](const AttrSlice& a, FunctionDef* g) {
  return ProjectiveTransformGrad("ImageProjectiveTransformV2", a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("ImageProjectiveTransformV3", [](const AttrSlice& a, FunctionDef* g) {
  return ProjectiveTransformGrad("ImageProjectiveTransformV3", a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("RGBToHSV", RgbToHsvGrad);

}  // namespace tensorflow::tf_ext
