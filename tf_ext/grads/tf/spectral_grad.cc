// Gradients of TensorFlow's spectral ops that no C++ registry has in TensorFlow 2.21, written
// from the formulas of Python's python/ops/signal/fft_ops.py. Each is registered in both C++
// registries when the op library loads, unless TensorFlow has one already
// (TF_EXT_REGISTER_TF_GRADIENT).
//
// Complex gradients follow TensorFlow's convention: for a real loss L of a complex z,
// d(z) = dL/dRe(z) + i dL/dIm(z); a linear map y = A x then has d(x) = A^H d(y).
//
// The real-input transforms crop their input to fft_length along the transformed axes (the
// Python wrappers zero-pad a shorter one first); the gradients here undo that (FitToShape), so
// they hold for inputs longer than fft_length too, where Python's own gradients fail. RFFT3D / IRFFT3D (no Python
// gradient) share the rank-generic bodies.
//
// Checked against numeric Jacobians (tests/tf_spectral_image_grads_test.cc) and against
// Python's gradients on the same inputs (tests/python/test_tf_spectral_image_grads.py).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tf_ext/grads/tf/tf_gradient.h"

namespace tensorflow::tf_ext {
namespace {

const NodeAttrs kI32 = {{"T", DT_INT32}};

// The inverse transform of each complex transform, by rank.
std::string FftOp(bool inverse, int rank) {
  const std::string base = inverse ? "IFFT" : "FFT";
  return rank == 1 ? base : absl::StrCat(base, rank, "D");
}

// Number of elements in the last `rank` axes of `v` (int32 scalar): the transform's size.
std::string InnerSize(grad::GradBuilder& b, const std::string& v,
                      const FDH::AttrValueWrapper& type, int rank) {
  b.Add(FDH::Const<int32>("inner_begin", std::vector<int32>{-rank}));
  b.Add(FDH::Const<int32>("inner_end", std::vector<int32>{0}));
  b.Add(FDH::Const<int32>("inner_stride", std::vector<int32>{1}));
  b.Add(FDH::Const<int32>("axis0", 0));
  b.Add({{"v_shape"}, "Shape", {v}, {{"T", type}, {"out_type", DT_INT32}}});
  b.Add({{"inner_shape"}, "StridedSlice", {"v_shape", "inner_begin", "inner_end", "inner_stride"},
         {{"T", DT_INT32}, {"Index", DT_INT32}, {"end_mask", 1}}});  // shape[-rank:]
  return b.Add({{"inner_size"}, "Prod", {"inner_shape", "axis0"},
                {{"T", DT_INT32}, {"Tidx", DT_INT32}, {"keep_dims", false}}});
}

// FFT / FFT2D / FFT3D: y = F x (unnormalised DFT over the last rank axes), so
// d(x) = F^H d(y) = n * IFFT(d(y)), n the transform's size.
// IFFT*: y = F^H x / n, so d(x) = F d(y) / n = FFT(d(y)) / n.
absl::Status ComplexFftGrad(bool inverse, int rank, const AttrSlice& attrs, FunctionDef* g) {
  const std::string op = FftOp(inverse, rank);
  grad::GradBuilder b(op, attrs);
  const NodeAttrs t = {{"T", Placeholder("Tcomplex")}};
  const std::string dy = GradName("output");
  InnerSize(b, dy, Placeholder("Tcomplex"), rank);                           // n
  b.Add({{"n"}, "Cast", {"inner_size"},
         {{"SrcT", DT_INT32}, {"DstT", Placeholder("Tcomplex")}}});        // n + 0i
  // the other direction's transform of d(y)
  b.Add({{"transformed"}, FftOp(!inverse, rank), {dy}, b.PassAttrs({"Tcomplex"})});
  // d(x) = n IFFT(d(y))  /  d(x) = FFT(d(y)) / n
  b.Return("input", b.Add({{"dx"}, inverse ? "Div" : "Mul", {"transformed", "n"}, t}));
  return b.Build(g);
}

// `v` (of type `type`) cropped and zero-padded to `shape` (int32 vector of v's rank): the
// inverse of the crop / zero-pad the real-input transforms apply to their input. `prefix`
// keeps the node names of two uses apart.
std::string FitToShape(grad::GradBuilder& b, const std::string& prefix, const std::string& v,
                       const FDH::AttrValueWrapper& type, const std::string& shape) {
  const auto name = [&](const char* n) { return absl::StrCat(prefix, "_", n); };
  b.Add({{name("from")}, "Shape", {v}, {{"T", type}, {"out_type", DT_INT32}}});
  b.Add({{name("kept")}, "Minimum", {name("from"), shape}, kI32});          // min(from, to)
  b.Add({{name("begin")}, "ZerosLike", {name("from")}, kI32});
  b.Add({{name("cropped")}, "Slice", {v, name("begin"), name("kept")},
         {{"T", type}, {"Index", DT_INT32}}});                                // v[:kept]
  b.Add({{name("after")}, "Sub", {shape, name("kept")}, kI32});             // to - kept
  b.Add({{name("paddings")}, "Pack", {name("begin"), name("after")},
         {{"N", 2}, {"T", DT_INT32}, {"axis", 1}}});                          // [[0, to-kept]]
  return b.Add({{name("fitted")}, "Pad", {name("cropped"), name("paddings")},
                {{"T", type}, {"Tpaddings", DT_INT32}}});                     // zeros after
}

// RFFT*(x, fft_length): y = the first n_last/2+1 entries (last axis) of F x', x' = x cropped to
// fft_length. For real x' and a real loss,
// dL/dx'_j = Re sum_k conj(dy_k) e^{-2 pi i j.k/n} = Re(n * IFFT(dy zero-padded to n))_j,
// which is Python's 0.5 (n irfft(dy) + extra terms) written without the Hermitian bookkeeping;
// then d(x) = d(x') cropped / zero-padded back to x's shape.
absl::Status RealFftGrad(int rank, const AttrSlice& attrs, FunctionDef* g) {
  const std::string op = rank == 1 ? "RFFT" : absl::StrCat("RFFT", rank, "D");
  grad::GradBuilder b(op, attrs);
  const FDH::AttrValueWrapper tc = Placeholder("Tcomplex"), tr = Placeholder("Treal");
  const std::string dy = GradName("output");
  b.Add(FDH::Const<int32>("zero_v", std::vector<int32>{0}));
  b.Add(FDH::Const<int32>("minus_rank", std::vector<int32>{-rank}));
  b.Add(FDH::Const<int32>("one_v", std::vector<int32>{1}));
  b.Add(FDH::Const<int32>("axis0", 0));
  b.Add({{"dy_shape"}, "Shape", {dy}, {{"T", tc}, {"out_type", DT_INT32}}});
  b.Add({{"batch_shape"}, "StridedSlice", {"dy_shape", "zero_v", "minus_rank", "one_v"},
         {{"T", DT_INT32}, {"Index", DT_INT32}}});                           // shape[:-rank]
  b.Add({{"full_shape"}, "ConcatV2", {"batch_shape", "fft_length", "axis0"},
         {{"N", 2}, {"T", DT_INT32}, {"Tidx", DT_INT32}}});                   // [..., n]
  // d(y) zero-padded along the last axis to the full spectrum's n_last entries
  const std::string padded = FitToShape(b, "spectrum", dy, tc, "full_shape");
  b.Add({{"inverse"}, FftOp(true, rank), {padded}, b.PassAttrs({"Tcomplex"})});
  b.Add({{"n_i"}, "Prod", {"fft_length", "axis0"},
         {{"T", DT_INT32}, {"Tidx", DT_INT32}, {"keep_dims", false}}});      // n = prod(fft_length)
  b.Add({{"n"}, "Cast", {"n_i"}, {{"SrcT", DT_INT32}, {"DstT", tc}}});
  b.Add({{"scaled"}, "Mul", {"inverse", "n"}, {{"T", tc}}});               // n IFFT(d(y))
  b.Add({{"grad_fitted"}, "Real", {"scaled"}, {{"T", tc}, {"Tout", tr}}}); // d(x') = Re(...)
  b.Add({{"x_shape"}, "Shape", {"input"}, {{"T", tr}, {"out_type", DT_INT32}}});
  // d(x) = d(x') cropped / zero-padded back to x's shape
  b.Return("input", FitToShape(b, "input", "grad_fitted", tr, "x_shape"));
  b.NotDifferentiable("fft_length");  // integer lengths
  return b.Build(g);
}

// IRFFT*(y, fft_length): x = real inverse transform of y' (y cropped / zero-padded to
// [..., n_0, ..., n_last/2+1]), whose Hermitian extension counts every entry of the last axis
// twice except the DC entry and, for even n_last, the Nyquist entry (their imaginary parts are
// ignored). So d(y'_k) = w_k RFFT(d(x))_k / n with w = 1 at k = 0 and k = n_last/2 (even),
// 2 elsewhere (Python's mask), and d(y) = d(y') cropped / zero-padded back to y's shape.
absl::Status InverseRealFftGrad(int rank, const AttrSlice& attrs, FunctionDef* g) {
  const std::string op = rank == 1 ? "IRFFT" : absl::StrCat("IRFFT", rank, "D");
  grad::GradBuilder b(op, attrs);
  const FDH::AttrValueWrapper tc = Placeholder("Tcomplex"), tr = Placeholder("Treal");
  const std::string dx = GradName("output");
  // RFFT(d(x)) with the forward's lengths: [..., n_0, ..., n_last/2+1]
  b.Add({{"spectrum"}, rank == 1 ? "RFFT" : absl::StrCat("RFFT", rank, "D"), {dx, "fft_length"},
         b.PassAttrs({"Treal", "Tcomplex"})});
  b.Add(FDH::Const<int32>("axis0", 0));
  b.Add(FDH::Const<int32>("last", rank - 1));
  b.Add(FDH::Const<int32>("zero", 0));
  b.Add(FDH::Const<int32>("one", 1));
  b.Add(FDH::Const<int32>("two", 2));
  b.Add({{"n_last"}, "GatherV2", {"fft_length", "last", "axis0"},
         {{"Tparams", DT_INT32}, {"Tindices", DT_INT32}, {"Taxis", DT_INT32}}});
  b.Add({{"half"}, "FloorDiv", {"n_last", "two"}, kI32});
  b.Add({{"bins"}, "AddV2", {"half", "one"}, kI32});                         // n_last/2 + 1
  b.Add({{"k"}, "Range", {"zero", "bins", "one"}, {{"Tidx", DT_INT32}}});    // 0 .. n_last/2
  b.Add({{"is_dc"}, "Equal", {"k", "zero"}, kI32});                          // k = 0
  b.Add({{"two_k"}, "Mul", {"k", "two"}, kI32});
  b.Add({{"is_nyquist"}, "Equal", {"two_k", "n_last"}, kI32});              // 2k = n_last
  b.Add({{"dc_i"}, "Cast", {"is_dc"}, {{"SrcT", DT_BOOL}, {"DstT", DT_INT32}}});
  b.Add({{"nyquist_i"}, "Cast", {"is_nyquist"}, {{"SrcT", DT_BOOL}, {"DstT", DT_INT32}}});
  b.Add({{"w_dc"}, "Sub", {"two", "dc_i"}, kI32});
  b.Add({{"w"}, "Sub", {"w_dc", "nyquist_i"}, kI32});                        // w = 2 - dc - nyq
  b.Add({{"w_r"}, "Cast", {"w"}, {{"SrcT", DT_INT32}, {"DstT", tr}}});
  b.Add({{"n_i"}, "Prod", {"fft_length", "axis0"},
         {{"T", DT_INT32}, {"Tidx", DT_INT32}, {"keep_dims", false}}});      // n = prod(fft_length)
  b.Add({{"n_r"}, "Cast", {"n_i"}, {{"SrcT", DT_INT32}, {"DstT", tr}}});
  b.Add({{"w_over_n"}, "RealDiv", {"w_r", "n_r"}, {{"T", tr}}});             // w / n
  b.Add({{"w_over_n_c"}, "Cast", {"w_over_n"}, {{"SrcT", tr}, {"DstT", tc}}});
  // d(y') = RFFT(d(x)) w / n (broadcast along the last axis)
  b.Add({{"grad_fitted"}, "Mul", {"spectrum", "w_over_n_c"}, {{"T", tc}}});
  b.Add({{"y_shape"}, "Shape", {"input"}, {{"T", tc}, {"out_type", DT_INT32}}});
  // d(y) = d(y') cropped / zero-padded back to y's shape
  b.Return("input", FitToShape(b, "input", "grad_fitted", tc, "y_shape"));
  b.NotDifferentiable("fft_length");  // integer lengths
  return b.Build(g);
}

}  // namespace

TF_EXT_REGISTER_TF_GRADIENT("FFT", [](const AttrSlice& a, FunctionDef* g) {
  return ComplexFftGrad(false, 1, a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("FFT2D", [](const AttrSlice& a, FunctionDef* g) {
  return ComplexFftGrad(false, 2, a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("FFT3D", [](const AttrSlice& a, FunctionDef* g) {
  return ComplexFftGrad(false, 3, a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("IFFT", [](const AttrSlice& a, FunctionDef* g) {
  return ComplexFftGrad(true, 1, a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("IFFT2D", [](const AttrSlice& a, FunctionDef* g) {
  return ComplexFftGrad(true, 2, a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("IFFT3D", [](const AttrSlice& a, FunctionDef* g) {
  return ComplexFftGrad(true, 3, a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("RFFT", [](const AttrSlice& a, FunctionDef* g) {
  return RealFftGrad(1, a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("RFFT2D", [](const AttrSlice& a, FunctionDef* g) {
  return RealFftGrad(2, a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("RFFT3D", [](const AttrSlice& a, FunctionDef* g) {
  return RealFftGrad(3, a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("IRFFT", [](const AttrSlice& a, FunctionDef* g) {
  return InverseRealFftGrad(1, a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("IRFFT2D", [](const AttrSlice& a, FunctionDef* g) {
  return InverseRealFftGrad(2, a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("IRFFT3D", [](const AttrSlice& a, FunctionDef* g) {
  return InverseRealFftGrad(3, a, g);
});

}  // namespace tensorflow::tf_ext
