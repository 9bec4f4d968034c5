// XLA lowering of PsRoiAlign and PsRoiAlignGrad (see lowerings.h).
//
// The sample grid of every bin is the CPU kernel's (ps_roi_align_functor.h,
// MakePsRoiAlignAxis): the same operations in the same type, a division kept a division, and
// the binary searches for the samples that read the image unrolled (31 halvings cover the
// largest grid, 2^30). A loop then visits sample (ty, tx) of every bin at once, in the kernel's
// order (rows, then columns), up to the largest number of in-image samples of any bin; each
// step gathers the four taps of each bin's channel group (the features are transposed once to
// [N, H, W, bins, D], so a tap is one contiguous row) and adds the bilinear sample to a float64
// sum, as the kernel does (XLA contracts a product and the sum it feeds into one fused
// multiply-add, as nvcc does for the GPU kernels: within their tolerance, not bitwise). The gradient runs the same loop twice for DeterministicScatterSum
// (the terms' exponents, then their sum): integer scatters only.
#include <cstdint>
#include <vector>

#include "tf_ext/xla/lowering_util.h"
#include "tf_ext/xla/lowerings.h"
#include "tf_ext/xla/roi_lowering_util.h"
#include "xla/hlo/builder/lib/arithmetic.h"
#include "xla/hlo/builder/lib/constants.h"
#include "xla/shape.h"
#include "xla/shape_util.h"

namespace tensorflow::tf_ext::lowering {

namespace {

using xla::XlaOp;

constexpr int kSearchSteps = 31;  // halvings of [0, kPsRoiAlignMaxGrid = 2^30]

// One axis of every bin's sample grid, [R, pooled]: Sample(k) = start + (k + 0.5) * bin / grid
// in the compute type; the samples [begin, begin + span) read the image.
struct Axis {
  XlaOp start, bin, grid_t, grid, begin, span;
};

XlaOp Sample(const Axis& a, XlaOp k, xla::PrimitiveType t) {
  XlaOp offset = xla::Mul(xla::Add(xla::ConvertElementType(k, t), xla::ScalarLike(a.start, 0.5)),
                          a.bin);
  return xla::Add(a.start, xla::Div(offset, a.grid_t));
}

// First k in [lo, grid) with pred(Sample(k)) (grid if none), pred monotone in k.
template <typename Pred>
XlaOp Search(const Axis& a, XlaOp lo, xla::PrimitiveType t, Pred pred) {
  XlaOp hi = a.grid;
  for (int step = 0; step < kSearchSteps; ++step) {
    XlaOp active = xla::Lt(lo, hi);
    XlaOp mid = xla::Add(lo, xla::Div(xla::Sub(hi, lo), xla::ScalarLike(lo, 2)));
    XlaOp ok = pred(Sample(a, mid, t));
    hi = xla::Select(xla::And(active, ok), mid, hi);
    lo = xla::Select(xla::And(active, xla::Not(ok)), xla::Add(mid, xla::ScalarLike(mid, 1)), lo);
  }
  return lo;
}

// MakePsRoiAlignAxis for every ROI and bin index along one axis.
Axis MakeAxis(XlaOp lo_col, XlaOp hi_col, const functor::PsRoiAlignShape& s, int64_t pooled,
              int64_t size, xla::PrimitiveType t) {
  xla::XlaBuilder* b = lo_col.builder();
  const int64_t R = s.num_rois;
  const std::vector<int64_t> dims = {R, pooled};
  XlaOp scale = xla::ConstantR0WithType(b, t, static_cast<double>(s.spatial_scale));
  XlaOp roi_start = xla::Mul(xla::ConvertElementType(lo_col, t), scale);
  XlaOp roi_end = xla::Mul(xla::ConvertElementType(hi_col, t), scale);
  XlaOp roi_size = xla::Max(xla::Sub(roi_end, roi_start), xla::ScalarLike(roi_start, 1));
  Axis a;
  XlaOp bin = xla::Div(roi_size, OpaqueScalar(b, t, static_cast<double>(pooled)));
  a.bin = xla::BroadcastInDim(bin, dims, {0});
  XlaOp index = xla::BroadcastInDim(xla::Iota(b, t, pooled), dims, {1});
  a.start = xla::Add(xla::BroadcastInDim(roi_start, dims, {0}), xla::Mul(index, a.bin));
  const double cap = static_cast<double>(functor::kPsRoiAlignMaxGrid);
  if (s.sampling_ratio > 0) {
    a.grid = xla::Broadcast(IntConst(b, xla::S64, s.sampling_ratio), dims);
    a.grid_t = xla::Broadcast(OpaqueScalar(b, t, static_cast<double>(s.sampling_ratio)), dims);
  } else {
    XlaOp g = xla::Ceil(a.bin);
    a.grid = xla::Select(xla::Lt(g, xla::ScalarLike(g, cap)),
                         xla::Max(xla::ConvertElementType(g, xla::S64), IntConst(b, xla::S64, 1)),
                         xla::Broadcast(IntConst(b, xla::S64, functor::kPsRoiAlignMaxGrid), dims));
    a.grid_t = xla::ConvertElementType(a.grid, t);
  }
  a.begin = Search(a, xla::ZerosLike(a.grid), t,
                   [](XlaOp v) { return xla::Ge(v, xla::ScalarLike(v, -1)); });
  XlaOp end = Search(a, a.begin, t, [size](XlaOp v) {
    return xla::Gt(v, xla::ScalarLike(v, static_cast<double>(size)));
  });
  a.span = xla::Sub(end, a.begin);
  return a;
}

// PsRoiAlignBilinear along one axis at sample coordinates v [R, pooled]: the low / high
// positions (clamped into the image, so masked samples still index real pixels) and weights.
struct Taps {
  XlaOp low, high, lower_weight, upper_weight;
};

Taps Bilinear(XlaOp v, int64_t size, xla::PrimitiveType t, xla::PrimitiveType index_type) {
  xla::XlaBuilder* b = v.builder();
  XlaOp clamped = xla::Select(xla::Le(v, xla::ZerosLike(v)), xla::ZerosLike(v), v);
  XlaOp low = xla::Clamp(IntConst(b, index_type, 0), xla::ConvertElementType(clamped, index_type),
                         IntConst(b, index_type, size - 1));
  XlaOp at_edge = xla::Ge(low, IntConst(b, index_type, size - 1));
  XlaOp high = xla::Select(at_edge, low, xla::Add(low, IntConst(b, index_type, 1)));
  XlaOp position = xla::Select(at_edge, xla::ConvertElementType(low, t), clamped);
  Taps taps;
  taps.low = low;
  taps.high = high;
  taps.upper_weight = xla::Sub(position, xla::ConvertElementType(low, t));  // ly
  taps.lower_weight = xla::Sub(xla::ScalarLike(v, 1), taps.upper_weight);  // hy
  return taps;
}

// Everything a sampling step reads, as loop state.
struct Grid {
  Axis y, x;
  XlaOp valid, image, max_span_x;
  std::vector<XlaOp> Pack() const {
    return {y.start, y.bin, y.grid_t, y.begin, y.span, x.start, x.bin, x.grid_t, x.begin,
            x.span, valid, image, max_span_x};
  }
  static Grid Unpack(absl::Span<const XlaOp> v) {
    Grid g;
    g.y = {v[0], v[1], v[2], XlaOp(), v[3], v[4]};
    g.x = {v[5], v[6], v[7], XlaOp(), v[8], v[9]};
    g.valid = v[10];
    g.image = v[11];
    g.max_span_x = v[12];
    return g;
  }
  static constexpr int kSize = 13;
};

// Sample (ty, tx) = divmod(i, max_span_x) of every bin: whether it exists, and its four
// taps' rows of the transposed features [N * H * W * P, D] with their weights, [R, PH, PW].
struct SampleTaps {
  XlaOp exists;
  XlaOp row[4], weight[4];
};

SampleTaps TapsAt(const Grid& g, XlaOp i, const functor::PsRoiAlignShape& s, xla::PrimitiveType t,
                  xla::PrimitiveType index_type) {
  xla::XlaBuilder* b = i.builder();
  const int64_t R = s.num_rois, PH = s.pooled_height, PW = s.pooled_width;
  const std::vector<int64_t> bins = {R, PH, PW};
  XlaOp ty = xla::ConvertElementType(xla::Div(i, g.max_span_x), xla::S64);
  XlaOp tx = xla::ConvertElementType(xla::Rem(i, g.max_span_x), xla::S64);
  XlaOp iy = xla::Add(g.y.begin, ty), ix = xla::Add(g.x.begin, tx);
  SampleTaps out;
  out.exists = xla::And(xla::BroadcastInDim(xla::Lt(ty, g.y.span), bins, {0, 1}),
                        xla::BroadcastInDim(xla::Lt(tx, g.x.span), bins, {0, 2}));
  out.exists = xla::And(out.exists, xla::BroadcastInDim(g.valid, bins, {0}));
  const Taps ry = Bilinear(Sample(g.y, iy, t), s.height, t, index_type);
  const Taps rx = Bilinear(Sample(g.x, ix, t), s.width, t, index_type);
  auto rows = [&](XlaOp v) { return xla::BroadcastInDim(v, bins, {0, 1}); };
  auto cols = [&](XlaOp v) { return xla::BroadcastInDim(v, bins, {0, 2}); };
  const XlaOp ys[2] = {ry.low, ry.high}, xs[2] = {rx.low, rx.high};
  const XlaOp wy[2] = {ry.lower_weight, ry.upper_weight}, wx[2] = {rx.lower_weight, rx.upper_weight};
  const int64_t P = PH * PW;
  XlaOp bin = xla::Iota(b, xla::ShapeUtil::MakeShape(index_type, {PH, PW}), 0);
  bin = xla::Add(xla::Mul(bin, IntConst(b, index_type, PW)),
                 xla::Iota(b, xla::ShapeUtil::MakeShape(index_type, {PH, PW}), 1));
  XlaOp image_base = xla::BroadcastInDim(
      xla::Mul(xla::ConvertElementType(g.image, index_type), IntConst(b, index_type, s.height * s.width)),
      bins, {0});
  for (int k = 0; k < 4; ++k) {  // PsRoiAlignBilinear's order: (low, low), (low, high), ...
    XlaOp pos = xla::Add(xla::Mul(rows(ys[k / 2]), IntConst(b, index_type, s.width)), cols(xs[k % 2]));
    out.row[k] = xla::Add(xla::Mul(xla::Add(image_base, pos), IntConst(b, index_type, P)),
                          xla::BroadcastInDim(bin, bins, {1, 2}));
    out.weight[k] = xla::Mul(rows(wy[k / 2]), cols(wx[k % 2]));
  }
  return out;
}

struct Setup {
  Grid grid;
  XlaOp trips;
  xla::PrimitiveType t, index_type;
};

Setup MakeSetup(XlaOp rois, const functor::PsRoiAlignShape& s, xla::PrimitiveType type) {
  xla::XlaBuilder* b = rois.builder();
  Setup setup;
  setup.t = ComputeTypeOf(type);
  // Rows of the transposed features and elements of the gradient: at most N * H * W * C.
  setup.index_type = IndexTypeFor(s.batch * s.height * s.width * s.channels);
  const int64_t R = s.num_rois;
  const CheckedRois checked = CheckRois(rois, R, s.batch);
  Grid& g = setup.grid;
  g.y = MakeAxis(RoiColumn(rois, R, 2), RoiColumn(rois, R, 4), s, s.pooled_height, s.height, setup.t);
  g.x = MakeAxis(RoiColumn(rois, R, 1), RoiColumn(rois, R, 3), s, s.pooled_width, s.width, setup.t);
  g.valid = checked.valid;
  g.image = checked.image;
  auto largest = [&](XlaOp span, int64_t pooled) {
    XlaOp masked = xla::Select(xla::BroadcastInDim(checked.valid, {R, pooled}, {0}), span,
                               xla::ZerosLike(span));
    return xla::ConvertElementType(
        xla::Reduce(masked, IntConst(b, xla::S64, 0), xla::CreateScalarMaxComputation(xla::S64, b),
                    {0, 1}),
        xla::S32);
  };
  g.max_span_x = largest(g.x.span, s.pooled_width);
  setup.trips = xla::Mul(largest(g.y.span, s.pooled_height), g.max_span_x);
  return setup;
}

bool NothingToRead(const functor::PsRoiAlignShape& s) {
  return s.num_rois * s.pooled_height * s.pooled_width * s.output_channels == 0 ||
         s.batch * s.height * s.width == 0;
}

}  // namespace

absl::StatusOr<XlaOp> PsRoiAlign(XlaOp features, XlaOp rois, const functor::PsRoiAlignShape& s) {
  xla::XlaBuilder* b = features.builder();
  TF_ASSIGN_OR_RETURN(xla::Shape shape, b->GetShape(features));
  const xla::PrimitiveType type = shape.element_type();
  const int64_t R = s.num_rois, PH = s.pooled_height, PW = s.pooled_width, D = s.output_channels;
  const std::vector<int64_t> out_dims = {R, PH, PW, D};
  if (NothingToRead(s)) return xla::Broadcast(xla::Zero(b, type), out_dims);
  const Setup setup = MakeSetup(rois, s, type);
  const int64_t P = PH * PW;
  // [N, H, W, D * P] -> [N * H * W * P, D]: channel d * P + bin of a pixel is row bin, column d.
  XlaOp table = xla::Reshape(
      xla::Transpose(xla::Reshape(features, {s.batch, s.height, s.width, D, P}), {0, 1, 2, 4, 3}),
      {s.batch * s.height * s.width * P, D});
  std::vector<XlaOp> state = setup.grid.Pack();
  state.push_back(table);
  state.push_back(xla::Broadcast(xla::Zero(b, xla::F64), out_dims));
  auto step = [&](XlaOp i, absl::Span<const XlaOp> v,
                  xla::XlaBuilder*) -> absl::StatusOr<std::vector<XlaOp>> {
    const Grid g = Grid::Unpack(v);
    const SampleTaps taps = TapsAt(g, i, s, setup.t, setup.index_type);
    XlaOp value;  // w0 * p0 + w1 * p1 + w2 * p2 + w3 * p3, in the kernel's order
    for (int k = 0; k < 4; ++k) {
      TF_ASSIGN_OR_RETURN(XlaOp tap, GatherRows(v[Grid::kSize], taps.row[k]));
      XlaOp term = xla::Mul(xla::BroadcastInDim(taps.weight[k], out_dims, {0, 1, 2}),
                            Widen(tap, type));
      value = k == 0 ? term : xla::Add(value, term);
    }
    std::vector<XlaOp> next(v.begin(), v.end());
    XlaOp exists = xla::BroadcastInDim(taps.exists, out_dims, {0, 1, 2});
    next[Grid::kSize + 1] = xla::Select(
        exists, xla::Add(v[Grid::kSize + 1], xla::ConvertElementType(value, xla::F64)),
        v[Grid::kSize + 1]);
    return next;
  };
  TF_ASSIGN_OR_RETURN(std::vector<XlaOp> result,
                      CountedLoop(setup.trips, state, step, "ps_roi_align", b));
  // The average in float64, with the kernel's count (grid_h * grid_w as doubles).
  XlaOp count;
  if (s.sampling_ratio > 0) {
    count = OpaqueScalar(b, xla::F64, static_cast<double>(s.sampling_ratio * s.sampling_ratio));
  } else {
    count = xla::BroadcastInDim(xla::ConvertElementType(setup.grid.y.grid, xla::F64), out_dims, {0, 1});
    count = xla::Mul(count, xla::BroadcastInDim(xla::ConvertElementType(setup.grid.x.grid, xla::F64),
                                                out_dims, {0, 2}));
  }
  XlaOp mean = xla::ConvertElementType(xla::Div(result[Grid::kSize + 1], count), setup.t);
  return Narrow(mean, type);
}

absl::StatusOr<XlaOp> PsRoiAlignGrad(XlaOp rois, XlaOp d_output, const functor::PsRoiAlignShape& s) {
  xla::XlaBuilder* b = rois.builder();
  TF_ASSIGN_OR_RETURN(xla::Shape shape, b->GetShape(d_output));
  const xla::PrimitiveType type = shape.element_type();
  const int64_t R = s.num_rois, PH = s.pooled_height, PW = s.pooled_width, D = s.output_channels;
  const int64_t P = PH * PW;
  const std::vector<int64_t> in_dims = {s.batch, s.height, s.width, s.channels};
  if (NothingToRead(s)) return xla::Broadcast(xla::Zero(b, type), in_dims);
  const Setup setup = MakeSetup(rois, s, type);
  const std::vector<int64_t> out_dims = {R, PH, PW, D};
  // d_output / count in the compute type (bin.count = grid_h * grid_w in T), as the kernel.
  XlaOp count;
  if (s.sampling_ratio > 0) {
    count = OpaqueScalar(b, setup.t, static_cast<double>(s.sampling_ratio) *
                                         static_cast<double>(s.sampling_ratio));
  } else {
    count = xla::Mul(xla::BroadcastInDim(setup.grid.y.grid_t, out_dims, {0, 1}),
                     xla::BroadcastInDim(setup.grid.x.grid_t, out_dims, {0, 2}));
  }
  XlaOp scaled = xla::Div(Widen(d_output, type), count);
  const int64_t elements = s.batch * s.height * s.width * s.channels;
  const int64_t per_sample = s.sampling_ratio > 0 ? s.sampling_ratio * s.sampling_ratio : 25;
  ExactScatterSum sum(b, setup.t, elements, R * 4 * per_sample);
  TF_RETURN_IF_ERROR(sum.Check());
  const int64_t terms = 4 * R * P * D;
  // One sample of every bin: its 4 x [R, PH, PW, D] terms and their places in the transposed
  // gradient [N, H, W, P, D].
  auto terms_at = [&](const Grid& g, XlaOp i, XlaOp sc) {
    xla::XlaBuilder* lb = i.builder();  // the loop body's
    const SampleTaps taps = TapsAt(g, i, s, setup.t, setup.index_type);
    XlaOp d = xla::Iota(lb, xla::ShapeUtil::MakeShape(setup.index_type, out_dims), 3);
    XlaOp exists = xla::BroadcastInDim(taps.exists, out_dims, {0, 1, 2});
    std::vector<XlaOp> values, dests;
    for (int k = 0; k < 4; ++k) {
      values.push_back(xla::Mul(xla::BroadcastInDim(taps.weight[k], out_dims, {0, 1, 2}), sc));
      XlaOp dest = xla::Add(xla::Mul(xla::BroadcastInDim(taps.row[k], out_dims, {0, 1, 2}),
                                     IntConst(lb, setup.index_type, D)),
                            d);
      dests.push_back(xla::Select(exists, dest, xla::FullLike(dest, -1)));
    }
    return std::make_pair(xla::Reshape(xla::ConcatInDim(lb, values, 0), {terms}),
                          xla::Reshape(xla::ConcatInDim(lb, dests, 0), {terms}));
  };
  std::vector<XlaOp> state = setup.grid.Pack();
  state.push_back(scaled);
  state.push_back(sum.NoExponents());
  auto note = [&](XlaOp i, absl::Span<const XlaOp> v,
                  xla::XlaBuilder*) -> absl::StatusOr<std::vector<XlaOp>> {
    auto [values, dests] = terms_at(Grid::Unpack(v), i, v[Grid::kSize]);
    std::vector<XlaOp> next(v.begin(), v.end());
    next[Grid::kSize + 1] = sum.NoteExponents(v[Grid::kSize + 1], values, dests);
    return next;
  };
  TF_ASSIGN_OR_RETURN(std::vector<XlaOp> noted,
                      CountedLoop(setup.trips, state, note, "ps_roi_align_grad_exponents", b));
  state.back() = noted[Grid::kSize + 1];
  state.push_back(sum.NoTerms());
  auto add = [&](XlaOp i, absl::Span<const XlaOp> v,
                 xla::XlaBuilder*) -> absl::StatusOr<std::vector<XlaOp>> {
    auto [values, dests] = terms_at(Grid::Unpack(v), i, v[Grid::kSize]);
    std::vector<XlaOp> next(v.begin(), v.end());
    next[Grid::kSize + 2] = sum.AddTerms(v[Grid::kSize + 2], v[Grid::kSize + 1], values, dests);
    return next;
  };
  TF_ASSIGN_OR_RETURN(std::vector<XlaOp> added,
                      CountedLoop(setup.trips, state, add, "ps_roi_align_grad_sums", b));
  XlaOp flat = sum.Finish(added[Grid::kSize + 2], added[Grid::kSize + 1]);
  // [N, H, W, P, D] -> [N, H, W, D * P].
  XlaOp grad = xla::Reshape(
      xla::Transpose(xla::Reshape(flat, {s.batch, s.height, s.width, P, D}), {0, 1, 2, 4, 3}),
      in_dims);
  return Narrow(grad, type);
}

}  // namespace tensorflow::tf_ext::lowering
