// Gradients of TensorFlow's gamma and truncated-normal samplers that no C++ registry has in
// TensorFlow 2.21, written from Python's python/ops/random_grad.py: implicit reparameterisation
// (Figurnov et al., 2018). For the gamma samplers d(alpha) = sum over the sample axes of
// d(sample) * dsample/dalpha, the partial derivative from RandomGammaGrad(alpha, sample). Each is registered in both C++ registries when the op
// library loads, unless TensorFlow has one already (TF_EXT_REGISTER_TF_GRADIENT).
//
// The gradient reads the forward sample. The stateless samplers recompute it exactly (same
// seed, same sample); RandomGamma is stateful, so its gradient takes the sample from front ends
// that pass forward outputs (the C++ client registry: TF_AddGradients, cc AddSymbolicGradients)
// and refuses, naming the op, where none is passed (a bare SymbolicGradient would draw anew).
//
// Not a derivative a finite difference can check (a sampler's output for a fixed seed is not
// the quantile the implicit gradient holds fixed): checked in tests/tf_array_misc_grads_test.cc
// against RandomGammaGrad of the forward sample, and against Python's gradients
// (tests/python/test_tf_array_misc_grads.py).
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tf_ext/grads/tf/tf_gradient.h"

namespace tensorflow::tf_ext {
namespace {

// d(alpha) for a sample of shape [n sample axes..., alpha's shape]: `sample_axes` (int32
// scalar node) = n; `alpha_type` = alpha's type attr; `shape` / `shape_type` = the shape input.
void GammaAlphaGrad(grad::GradBuilder& b, const std::string& alpha,
                    const std::string& alpha_type, bool stateless, const std::string& shape,
                    const std::string& shape_type) {
  const FDH::AttrValueWrapper t = Placeholder(alpha_type);
  b.Add(FDH::Const<int32>("zero", 0));
  b.Add(FDH::Const<int32>("one", 1));
  b.Add({{"shape_len"}, "Size", {shape}, {{"T", Placeholder(shape_type)}, {"out_type", DT_INT32}}});
  std::string n = "shape_len";  // RandomGamma: the sample is [shape..., alpha's shape]
  if (stateless) {               // stateless: the sample is [shape], alpha its trailing axes
    b.Add({{"alpha_rank"}, "Rank", {alpha}, {{"T", t}}});
    n = b.Add({{"sample_axes"}, "Sub", {"shape_len", "alpha_rank"}, {{"T", DT_INT32}}});
  }
  // alpha with n leading unit axes, broadcastable against the sample
  b.Add({{"n_v"}, "Pack", {n}, {{"N", 1}, {"T", DT_INT32}}});
  b.Add({{"ones"}, "Fill", {"n_v", "one"}, {{"T", DT_INT32}, {"index_type", DT_INT32}}});
  b.Add({{"alpha_shape"}, "Shape", {alpha}, {{"T", t}, {"out_type", DT_INT32}}});
  b.Add(FDH::Const<int32>("axis0", 0));
  b.Add({{"expanded_shape"}, "ConcatV2", {"ones", "alpha_shape", "axis0"},
         {{"N", 2}, {"T", DT_INT32}, {"Tidx", DT_INT32}}});
  b.Add({{"alpha_b"}, "Reshape", {alpha, "expanded_shape"}, {{"T", t}, {"Tshape", DT_INT32}}});
  // dsample/dalpha at the forward sample (implicit differentiation of the gamma CDF)
  b.Add({{"partial"}, "RandomGammaGrad", {"alpha_b", "output"}, {{"T", t}}});
  b.Add({{"weighted"}, "Mul", {GradName("output"), "partial"}, {{"T", t}}});
  b.Add({{"sample_axes_range"}, "Range", {"zero", n, "one"}, {{"Tidx", DT_INT32}}});
  // d(alpha) = sum over the sample axes of d(sample) * dsample/dalpha
  b.Return(alpha, b.Add({{"dalpha"}, "Sum", {"weighted", "sample_axes_range"},
                         {{"T", t}, {"Tidx", DT_INT32}, {"keep_dims", false}}}));
}

absl::Status RandomGammaGradFn(const AttrSlice& attrs, FunctionDef* g) {
  if (!grad::WantsForwardOutputs(attrs)) {
    return absl::InvalidArgumentError(
        "RandomGamma: its gradient reads the forward sample, and a stateful sampler cannot be "
        "recomputed; differentiate it where the forward outputs are passed (TF_AddGradients, "
        "cc AddSymbolicGradients), not through a bare SymbolicGradient");
  }
  grad::GradBuilder b("RandomGamma", attrs);
  b.RequireTypes("T", {DT_FLOAT, DT_DOUBLE});  // RandomGammaGrad's kernels
  GammaAlphaGrad(b, "alpha", "T", false, "shape", "S");
  b.NotDifferentiable("shape");
  return b.Build(g);
}

absl::Status StatelessRandomGammaV2Grad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("StatelessRandomGammaV2", attrs);
  b.RequireTypes("dtype", {DT_FLOAT, DT_DOUBLE});
  GammaAlphaGrad(b, "alpha", "dtype", true, "shape", "T");
  b.NotDifferentiable("shape");
  b.NotDifferentiable("seed");
  return b.Build(g);
}

absl::Status StatelessRandomGammaV3Grad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("StatelessRandomGammaV3", attrs);
  b.RequireTypes("dtype", {DT_FLOAT, DT_DOUBLE});
  GammaAlphaGrad(b, "alpha", "dtype", true, "shape", "shape_dtype");
  b.NotDifferentiable("shape");
  b.NotDifferentiable("key");
  b.NotDifferentiable("counter");
  b.NotDifferentiable("alg");
  return b.Build(g);
}

// StatelessParameterizedTruncatedNormal(shape, seed, means, stddevs, minvals, maxvals): a
// normal(mean, stddev) sample truncated to [minval, maxval], the parameters broadcast against
// each other and against the trailing axes of `shape`. Implicit reparameterisation with
// standardised a = (minval - mean) / stddev, b = (maxval - mean) / stddev,
// s = (sample - mean) / stddev and c = (Phi(s) - Phi(a)) / (Phi(b) - Phi(a)) clipped to
// [tiny, 1 - eps] (Phi: the normal CDF, computed as Python's _Ndtr):
//   dsample/dmean = 1, dsample/dstddev = s,
//   dsample/dmaxval = exp((s^2 - b^2) / 2 + log c),
//   dsample/dminval = exp((s^2 - a^2) / 2 + log(1 - c)),
// each times d(sample), summed over the sample's extra leading axes and over the axes the
// parameter was broadcast along. shape and seed: zeros.
absl::Status StatelessParameterizedTruncatedNormalGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("StatelessParameterizedTruncatedNormal", attrs);
  b.RequireTypes("dtype", {DT_HALF, DT_FLOAT, DT_DOUBLE});
  const DataType dtype = b.GetAttr<DataType>("dtype");
  const grad::NodeAttrs tt = {{"T", Placeholder("dtype")}};
  const grad::NodeAttrs i32 = {{"T", DT_INT32}};
  auto add = [&](const std::string& name, const std::string& op, std::vector<std::string> in) {
    return b.Add({{name}, op, std::move(in), tt});
  };
  // the dtype's smallest normal number and machine epsilon (numpy's finfo, as Python)
  const double tiny = dtype == DT_DOUBLE ? 2.2250738585072014e-308
                      : dtype == DT_FLOAT ? 1.1754943508222875e-38 : 6.103515625e-05;
  const double eps = dtype == DT_DOUBLE ? 2.220446049250313e-16
                     : dtype == DT_FLOAT ? 1.1920928955078125e-07 : 0.0009765625;
  const std::string half = b.TypedConst("half", 0.5, "dtype");
  const std::string one = b.TypedConst("one", 1.0, "dtype");
  const std::string two = b.TypedConst("two", 2.0, "dtype");
  const std::string zero = b.TypedConst("zero", 0.0, "dtype");
  const std::string half_sqrt2 = b.TypedConst("half_sqrt2", 0.5 * std::sqrt(2.0), "dtype");
  const std::string lo = b.TypedConst("tiny", tiny, "dtype");
  const std::string hi = b.TypedConst("one_minus_eps", 1.0 - eps, "dtype");
  // Phi(x) = (1 + erf(x / sqrt 2)) / 2, via erfc away from 0 for accuracy in the tails
  auto ndtr = [&](const std::string& x) {
    const std::string p = "ndtr_" + x;
    add(p + "_w", "Mul", {x, half_sqrt2});
    add(p + "_z", "Abs", {p + "_w"});
    add(p + "_erf", "Erf", {p + "_w"});
    add(p + "_near", "AddV2", {one, p + "_erf"});             // 1 + erf(w)
    add(p + "_erfc", "Erfc", {p + "_z"});
    add(p + "_upper", "Sub", {two, p + "_erfc"});             // 2 - erfc(|w|)
    b.Add({{p + "_pos"}, "Greater", {p + "_w", zero}, tt});
    add(p + "_far", "Select", {p + "_pos", p + "_upper", p + "_erfc"});
    b.Add({{p + "_small"}, "Less", {p + "_z", half_sqrt2}, tt});
    add(p + "_y", "Select", {p + "_small", p + "_near", p + "_far"});
    return add(p, "Mul", {p + "_y", half});
  };
  add("a_num", "Sub", {"minvals", "means"});
  add("a", "RealDiv", {"a_num", "stddevs"});                  // (minval - mean) / stddev
  add("b_num", "Sub", {"maxvals", "means"});
  add("b", "RealDiv", {"b_num", "stddevs"});                  // (maxval - mean) / stddev
  add("s_num", "Sub", {"output", "means"});
  add("s", "RealDiv", {"s_num", "stddevs"});                  // (sample - mean) / stddev
  const std::string phi_a = ndtr("a"), phi_b = ndtr("b"), phi_s = ndtr("s");
  add("cdf_num", "Sub", {phi_s, phi_a});
  add("cdf_den", "Sub", {phi_b, phi_a});
  add("cdf_raw", "RealDiv", {"cdf_num", "cdf_den"});
  add("cdf_lo", "Maximum", {"cdf_raw", lo});
  add("cdf", "Minimum", {"cdf_lo", hi});                      // clipped to [tiny, 1 - eps]
  add("s2", "Square", {"s"});
  add("a2", "Square", {"a"});
  add("b2", "Square", {"b"});
  add("s2_b2", "Sub", {"s2", "b2"});
  add("s2_b2_half", "Mul", {"s2_b2", half});
  add("log_cdf", "Log", {"cdf"});
  add("log_dmax", "AddV2", {"s2_b2_half", "log_cdf"});
  add("dmax", "Exp", {"log_dmax"});                            // dsample/dmaxval
  add("s2_a2", "Sub", {"s2", "a2"});
  add("s2_a2_half", "Mul", {"s2_a2", half});
  add("neg_cdf", "Neg", {"cdf"});
  add("log_1m_cdf", "Log1p", {"neg_cdf"});
  add("log_dmin", "AddV2", {"s2_a2_half", "log_1m_cdf"});
  add("dmin", "Exp", {"log_dmin"});                            // dsample/dminval
  // the parameters' broadcast shape, and the sample's extra leading axes
  const grad::NodeAttrs shape_of = {{"T", Placeholder("dtype")}, {"out_type", DT_INT32}};
  for (const char* p : {"means", "stddevs", "minvals", "maxvals"}) {
    b.Add({{absl::StrCat(p, "_shape")}, "Shape", {p}, shape_of});
  }
  b.Add({{"bcast_ms"}, "BroadcastArgs", {"means_shape", "stddevs_shape"}, i32});
  b.Add({{"bcast_msn"}, "BroadcastArgs", {"minvals_shape", "bcast_ms"}, i32});
  b.Add({{"bcast"}, "BroadcastArgs", {"maxvals_shape", "bcast_msn"}, i32});
  b.Add({{"sample_rank"}, "Size", {"shape"}, {{"T", Placeholder("S")}, {"out_type", DT_INT32}}});
  b.Add({{"param_rank"}, "Size", {"bcast"}, {{"T", DT_INT32}, {"out_type", DT_INT32}}});
  b.Add({{"extra"}, "Sub", {"sample_rank", "param_rank"}, i32});
  b.Add(FDH::Const<int32>("zero_i", 0));
  b.Add(FDH::Const<int32>("one_i", 1));
  b.Add({{"extra_axes"}, "Range", {"zero_i", "extra", "one_i"}, {{"Tidx", DT_INT32}}});
  const std::string dy = GradName("output");
  // d(param) = d(sample) dsample/dparam, summed over the extra axes, then over the axes the
  // parameter was broadcast along, reshaped to the parameter
  auto reduce = [&](const std::string& param, const std::string& weighted) {
    const std::string p = "reduce_" + param;
    b.Add({{p + "_extra"}, "Sum", {weighted, "extra_axes"},
           {{"T", Placeholder("dtype")}, {"Tidx", DT_INT32}, {"keep_dims", false}}});
    b.Add({{p + "_r0", p + "_r1"}, "BroadcastGradientArgs", {"bcast", param + "_shape"}, i32});
    b.Add({{p + "_sum"}, "Sum", {p + "_extra", p + "_r1"},
           {{"T", Placeholder("dtype")}, {"Tidx", DT_INT32}, {"keep_dims", true}}});
    b.Return(param, b.Add({{p}, "Reshape", {p + "_sum", param + "_shape"},
                           {{"T", Placeholder("dtype")}, {"Tshape", DT_INT32}}}));
  };
  reduce("means", dy);                                         // dsample/dmean = 1
  reduce("stddevs", add("g_std", "Mul", {dy, "s"}));          // dsample/dstddev = s
  reduce("minvals", add("g_min", "Mul", {dy, "dmin"}));
  reduce("maxvals", add("g_max", "Mul", {dy, "dmax"}));
  b.NotDifferentiable("shape");
  b.NotDifferentiable("seed");
  return b.Build(g);
}

}  // namespace

TF_EXT_REGISTER_TF_GRADIENT("RandomGamma", RandomGammaGradFn);
// Front ends that have the forward node pass RandomGamma's sample instead of recomputing it.
static const bool random_gamma_reads_outputs [[maybe_unused]] =
    (DeclareReadsForwardOutputs("RandomGamma"), true);
TF_EXT_REGISTER_TF_GRADIENT("StatelessRandomGammaV2", StatelessRandomGammaV2Grad);
TF_EXT_REGISTER_TF_GRADIENT("StatelessRandomGammaV3", StatelessRandomGammaV3Grad);
TF_EXT_REGISTER_TF_GRADIENT("StatelessParameterizedTruncatedNormal",
                            StatelessParameterizedTruncatedNormalGrad);

}  // namespace tensorflow::tf_ext
