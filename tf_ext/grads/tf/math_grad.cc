// Gradients of TensorFlow's math ops that no C++ registry has in TensorFlow 2.21, written from
// the formulas of Python's python/ops/math_grad.py. Each is registered in both C++ registries
// when the op library loads, unless TensorFlow has one already (TF_EXT_REGISTER_TF_GRADIENT).
//
// Checked against numeric Jacobians: tf_ext/tools/tf_core_gradcheck_spec.txt (`make gradcheck`).
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tf_ext/grads/manifest.h"
#include "tf_ext/grads/tf/tf_gradient.h"

namespace tensorflow::tf_ext {
namespace {

// Frozen Keras graphs hold Erfc (gelu).
absl::Status ErfcGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("Erfc", attrs);
  b.RequireTypes("T", {DT_HALF, DT_BFLOAT16, DT_FLOAT, DT_DOUBLE});
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  // erfc(x) = 1 - erf(x): d/dx = -2/sqrt(pi) * exp(-x^2)
  const std::string c = b.TypedConst("minus_two_over_sqrt_pi", -2.0 / std::sqrt(M_PI));
  b.UnaryCwise({
      {{"x2"}, "Square", {"x"}, t},                          // x^2
      {{"neg_x2"}, "Neg", {"x2"}, t},                        // -x^2
      {{"exp"}, "Exp", {"neg_x2"}, t},                       // exp(-x^2)
      {{"deriv"}, "Mul", {"exp", c}, t},                     // -2/sqrt(pi) exp(-x^2)
      {{"dx"}, "Mul", {grad::GradName("y"), "deriv"}, t},    // d(x) = d(y) * erfc'(x)
  });
  return b.Build(g);
}

// The backward ops of Tanh, Sigmoid, Sqrt, Rsqrt and Reciprocal: f(y, dy) with y the forward
// output and dy its incoming gradient. Their gradients are second-derivative building blocks
// (Hessian-vector products through tanh, sigmoid, ...). For complex types Python conjugates
// some arguments (which ones differs per op); the bodies do the same.
const std::vector<DataType> kRealFloatTypes = {DT_HALF, DT_BFLOAT16, DT_FLOAT, DT_DOUBLE};
// Gradients whose nodes are Python's for complex types too (the attribute-sweep audit,
// scripts/audit_gradients.py, compares them).
const std::vector<DataType> kFloatAndComplexTypes = {DT_HALF,   DT_BFLOAT16,  DT_FLOAT,
                                                     DT_DOUBLE, DT_COMPLEX64, DT_COMPLEX128};
const std::vector<DataType> kBackwardOpTypes = {DT_HALF,   DT_BFLOAT16,  DT_FLOAT,
                                                DT_DOUBLE, DT_COMPLEX64, DT_COMPLEX128};

// TanhGrad(y, dy) = dy * (1 - y^2).
absl::Status TanhGradGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("TanhGrad", attrs);
  b.RequireTypes("T", kBackwardOpTypes);
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  const std::string dz = grad::GradName("z");
  const std::string a = b.Conj("y"), c = b.Conj("dy");
  const std::string minus_two = b.TypedConst("minus_two", -2.0);
  b.Add({{"dz_dy"}, "Mul", {dz, c}, t});                           // d(z) * conj(dy)
  b.Add({{"dz_dy_y"}, "Mul", {"dz_dy", a}, t});                    // ... * conj(y)
  // d(y) = -2 d(z) conj(dy) conj(y)
  b.Return("y", b.Add({{"y_grad"}, "Mul", {"dz_dy_y", minus_two}, t}));
  // d(dy) = d(z) (1 - conj(y)^2) = TanhGrad(conj(y), d(z))
  b.Return("dy", b.Add({{"dy_grad"}, "TanhGrad", {a, dz}, t}));
  return b.Build(g);
}

// SigmoidGrad(y, dy) = dy * y * (1 - y).
absl::Status SigmoidGradGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("SigmoidGrad", attrs);
  b.RequireTypes("T", kBackwardOpTypes);
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  const std::string dz = grad::GradName("z");
  const std::string a = b.Conj("y"), c = b.Conj("dy");
  const std::string two = b.TypedConst("two", 2.0);
  b.Add({{"gb"}, "Mul", {dz, c}, t});                              // d(z) * conj(dy)
  b.Add({{"gb_y"}, "Mul", {"gb", a}, t});
  b.Add({{"two_gb_y"}, "Mul", {"gb_y", two}, t});                  // 2 d(z) conj(dy y)
  // d(y) = d(z) conj(dy) (1 - 2 conj(y))
  b.Return("y", b.Add({{"y_grad"}, "Sub", {"gb", "two_gb_y"}, t}));
  // d(dy) = d(z) conj(y) (1 - conj(y)) = SigmoidGrad(conj(y), d(z))
  b.Return("dy", b.Add({{"dy_grad"}, "SigmoidGrad", {a, dz}, t}));
  return b.Build(g);
}

// SqrtGrad(y, dy) = z = 0.5 * dy / conj(y).
absl::Status SqrtGradGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("SqrtGrad", attrs);
  b.RequireTypes("T", kBackwardOpTypes);
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  const std::string half = b.TypedConst("half", 0.5);
  b.Add({{"ga"}, "Div", {grad::GradName("z"), "y"}, t});            // d(z) / y
  const std::string ga = b.Conj("ga");
  b.Add({{"neg_ga"}, "Neg", {ga}, t});
  // d(y) = -conj(d(z) / y) * z  (z: the forward output)
  b.Return("y", b.Add({{"y_grad"}, "Mul", {"neg_ga", "z"}, t}));
  // d(dy) = 0.5 d(z) / y
  b.Return("dy", b.Add({{"dy_grad"}, "Mul", {"ga", half}, t}));
  return b.Build(g);
}

// RsqrtGrad(y, dy) = -0.5 * dy * conj(y)^3.
absl::Status RsqrtGradGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("RsqrtGrad", attrs);
  b.RequireTypes("T", kBackwardOpTypes);
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  const std::string dz = grad::GradName("z");
  const std::string a = b.Conj("y"), cg = b.Conj(dz);
  const std::string minus_1_5 = b.TypedConst("minus_one_and_half", -1.5);
  b.Add({{"y2"}, "Square", {a}, t});                               // conj(y)^2
  b.Add({{"dz_dy"}, "Mul", {cg, "dy"}, t});                        // conj(d(z)) * dy
  b.Add({{"dz_dy_y2"}, "Mul", {"dz_dy", "y2"}, t});
  // d(y) = -1.5 conj(d(z)) dy conj(y)^2
  b.Return("y", b.Add({{"y_grad"}, "Mul", {"dz_dy_y2", minus_1_5}, t}));
  // d(dy) = -0.5 d(z) conj(y)^3 = RsqrtGrad(conj(y), d(z))
  b.Return("dy", b.Add({{"dy_grad"}, "RsqrtGrad", {a, dz}, t}));
  return b.Build(g);
}

// ReciprocalGrad(y, dy) = InvGrad(y, dy) = -dy * conj(y)^2.
absl::Status ReciprocalGradGradOf(const std::string& op, const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(op, attrs);
  b.RequireTypes("T", kBackwardOpTypes);
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  const std::string dz = grad::GradName("z");
  const std::string a = b.Conj("y"), cg = b.Conj(dz);
  const std::string minus_two = b.TypedConst("minus_two", -2.0);
  b.Add({{"dz_dy"}, "Mul", {cg, "dy"}, t});                        // conj(d(z)) * dy
  b.Add({{"dz_dy_y"}, "Mul", {"dz_dy", a}, t});
  // d(y) = -2 conj(d(z)) dy conj(y)
  b.Return("y", b.Add({{"y_grad"}, "Mul", {"dz_dy_y", minus_two}, t}));
  // d(dy) = -d(z) conj(y)^2 = ReciprocalGrad(conj(y), d(z))
  b.Return("dy", b.Add({{"dy_grad"}, op, {a, dz}, t}));
  return b.Build(g);
}
absl::Status ReciprocalGradGrad(const AttrSlice& attrs, FunctionDef* g) {
  return ReciprocalGradGradOf("ReciprocalGrad", attrs, g);
}
absl::Status InvGradGrad(const AttrSlice& attrs, FunctionDef* g) {
  return ReciprocalGradGradOf("InvGrad", attrs, g);
}

// Round, Rint and Ceil are piecewise constant: Python returns None, so d(x) = 0 (a gradient
// of zeros, not "not differentiable": gradients flow through them as zeros, as in Python).
absl::Status PiecewiseConstantGrad(const std::string& op, const AttrSlice& attrs,
                                   FunctionDef* g) {
  grad::GradBuilder b(op, attrs);
  b.NotDifferentiable("x");  // d(x) = 0 almost everywhere
  return b.Build(g);
}
absl::Status RoundGrad(const AttrSlice& attrs, FunctionDef* g) {
  return PiecewiseConstantGrad("Round", attrs, g);
}
absl::Status RintGrad(const AttrSlice& attrs, FunctionDef* g) {
  return PiecewiseConstantGrad("Rint", attrs, g);
}
absl::Status CeilGrad(const AttrSlice& attrs, FunctionDef* g) {
  return PiecewiseConstantGrad("Ceil", attrs, g);
}

// ArgMax / ArgMin: integer outputs; Python returns None for both inputs (zeros here).
absl::Status ArgReductionGrad(const std::string& op, const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(op, attrs);
  b.NotDifferentiable("input");      // d(input) = 0: the output is an index
  b.NotDifferentiable("dimension");  // integer axis
  return b.Build(g);
}
absl::Status ArgMaxGrad(const AttrSlice& attrs, FunctionDef* g) {
  return ArgReductionGrad("ArgMax", attrs, g);
}
absl::Status ArgMinGrad(const AttrSlice& attrs, FunctionDef* g) {
  return ArgReductionGrad("ArgMin", attrs, g);
}

// ---------------------------------------------------------------------------------------------
// Special functions (Python's math_grad.py). Real types only, as their kernels.

const std::vector<DataType> kFloatDouble = {DT_FLOAT, DT_DOUBLE};

// Element-wise special function y = f(x): d(x) = d(y) * f'(x), where `derivative` adds the
// nodes of f'(x) (reading x, and y where the closed form uses it) and returns its name.
absl::Status SpecialUnaryGrad(
    const std::string& op, const std::vector<DataType>& types, const AttrSlice& attrs,
    FunctionDef* g,
    const std::function<std::string(grad::GradBuilder&, const grad::NodeAttrs&)>& derivative) {
  grad::GradBuilder b(op, attrs);
  b.RequireTypes("T", types);
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  const std::string deriv = derivative(b, t);
  // d(x) = d(y) * f'(x)
  b.Return("x", b.Add({{"dx"}, "Mul", {grad::GradName("y"), deriv}, t}));
  return b.Build(g);
}

// where(x == 0, at_zero, value): the closed forms below divide by x, whose limit at 0 is known.
std::string AtZero(grad::GradBuilder& b, const grad::NodeAttrs& t, double at_zero,
                   const std::string& value) {
  const std::string zero = b.TypedConst("zero", 0.0);
  const std::string limit = b.TypedConst("limit_at_zero", at_zero);
  b.Add({{"is_zero"}, "Equal", {"x", zero}, t});
  b.Add({{"limit"}, "ZerosLike", {"x"}, t});
  b.Add({{"limit_b"}, "AddV2", {"limit", limit}, t});                   // at_zero, x's shape
  return b.Add({{"deriv"}, "Select", {"is_zero", "limit_b", value}, t});
}

absl::Status DigammaGrad(const AttrSlice& attrs, FunctionDef* g) {
  // Polygamma has float and double kernels only (Python's gradient fails for half too).
  return SpecialUnaryGrad("Digamma", kFloatDouble, attrs, g, [](auto& b, const auto& t) {
    const std::string one = b.TypedConst("one", 1.0);
    return b.Add({{"trigamma"}, "Polygamma", {one, "x"}, t});  // digamma'(x) = polygamma(1, x)
  });
}

absl::Status DawsnGrad(const AttrSlice& attrs, FunctionDef* g) {
  return SpecialUnaryGrad("Dawsn", kRealFloatTypes, attrs, g, [](auto& b, const auto& t) {
    const std::string one = b.TypedConst("one", 1.0), two = b.TypedConst("two", 2.0);
    b.Add({{"xy"}, "Mul", {"x", "y"}, t});
    b.Add({{"two_xy"}, "Mul", {"xy", two}, t});
    return b.Add({{"deriv"}, "Sub", {one, "two_xy"}, t});  // dawsn'(x) = 1 - 2 x y
  });
}

absl::Status ExpintGrad(const AttrSlice& attrs, FunctionDef* g) {
  return SpecialUnaryGrad("Expint", kRealFloatTypes, attrs, g, [](auto& b, const auto& t) {
    b.Add({{"exp_x"}, "Exp", {"x"}, t});
    return b.Add({{"deriv"}, "RealDiv", {"exp_x", "x"}, t});  // Ei'(x) = exp(x) / x
  });
}

// FresnelCos / FresnelSin: C'(x) = cos(pi/2 x^2), S'(x) = sin(pi/2 x^2).
absl::Status FresnelGrad(const std::string& op, const std::string& trig, const AttrSlice& attrs,
                         FunctionDef* g) {
  return SpecialUnaryGrad(op, kRealFloatTypes, attrs, g, [&](auto& b, const auto& t) {
    const std::string half_pi = b.TypedConst("half_pi", M_PI / 2);
    b.Add({{"x2"}, "Square", {"x"}, t});
    b.Add({{"arg"}, "Mul", {"x2", half_pi}, t});               // pi/2 x^2
    return b.Add({{"deriv"}, trig, {"arg"}, t});
  });
}
absl::Status FresnelCosGrad(const AttrSlice& attrs, FunctionDef* g) {
  return FresnelGrad("FresnelCos", "Cos", attrs, g);
}
absl::Status FresnelSinGrad(const AttrSlice& attrs, FunctionDef* g) {
  return FresnelGrad("FresnelSin", "Sin", attrs, g);
}

absl::Status SpenceGrad(const AttrSlice& attrs, FunctionDef* g) {
  return SpecialUnaryGrad("Spence", kRealFloatTypes, attrs, g, [](auto& b, const auto& t) {
    const std::string one = b.TypedConst("one", 1.0);
    const std::string minus_one = b.TypedConst("minus_one", -1.0);
    b.Add({{"log_x"}, "Log", {"x"}, t});
    b.Add({{"one_minus_x"}, "Sub", {one, "x"}, t});
    b.Add({{"ratio"}, "RealDiv", {"log_x", "one_minus_x"}, t});  // log(x) / (1 - x)
    b.Add({{"is_one"}, "Equal", {"x", one}, t});
    b.Add({{"zeros"}, "ZerosLike", {"x"}, t});
    b.Add({{"minus_ones"}, "AddV2", {"zeros", minus_one}, t});
    // spence'(x) = log(x) / (1 - x), -1 at x = 1 (its limit)
    return b.Add({{"deriv"}, "Select", {"is_one", "minus_ones", "ratio"}, t});
  });
}

// I0' = I1.
absl::Status BesselI0Grad(const AttrSlice& attrs, FunctionDef* g) {
  return SpecialUnaryGrad("BesselI0", kRealFloatTypes, attrs, g, [](auto& b, const auto& t) {
    return b.Add({{"deriv"}, "BesselI1", {"x"}, t});
  });
}
// i0e = exp(-|x|) I0: i0e' = i1e - sign(x) i0e.
absl::Status BesselI0eGrad(const AttrSlice& attrs, FunctionDef* g) {
  return SpecialUnaryGrad("BesselI0e", kRealFloatTypes, attrs, g, [](auto& b, const auto& t) {
    b.Add({{"i1e"}, "BesselI1e", {"x"}, t});
    b.Add({{"sign"}, "Sign", {"x"}, t});
    b.Add({{"sign_y"}, "Mul", {"sign", "y"}, t});
    return b.Add({{"deriv"}, "Sub", {"i1e", "sign_y"}, t});
  });
}
// I1' = I0 - I1 / x (1 at x = 0).
absl::Status BesselI1Grad(const AttrSlice& attrs, FunctionDef* g) {
  return SpecialUnaryGrad("BesselI1", kRealFloatTypes, attrs, g, [](auto& b, const auto& t) {
    b.Add({{"i0"}, "BesselI0", {"x"}, t});
    b.Add({{"y_over_x"}, "RealDiv", {"y", "x"}, t});
    return AtZero(b, t, 1.0, b.Add({{"value"}, "Sub", {"i0", "y_over_x"}, t}));
  });
}
// i1e = exp(-|x|) I1: i1e' = i0e - i1e (sign(x) + 1/x) (0.5 at x = 0).
absl::Status BesselI1eGrad(const AttrSlice& attrs, FunctionDef* g) {
  return SpecialUnaryGrad("BesselI1e", kRealFloatTypes, attrs, g, [](auto& b, const auto& t) {
    b.Add({{"i0e"}, "BesselI0e", {"x"}, t});
    b.Add({{"sign"}, "Sign", {"x"}, t});
    b.Add({{"inv_x"}, "Reciprocal", {"x"}, t});
    b.Add({{"factor"}, "AddV2", {"sign", "inv_x"}, t});
    b.Add({{"y_factor"}, "Mul", {"y", "factor"}, t});
    return AtZero(b, t, 0.5, b.Add({{"value"}, "Sub", {"i0e", "y_factor"}, t}));
  });
}
// K0' = -K1.
absl::Status BesselK0Grad(const AttrSlice& attrs, FunctionDef* g) {
  return SpecialUnaryGrad("BesselK0", kRealFloatTypes, attrs, g, [](auto& b, const auto& t) {
    b.Add({{"k1"}, "BesselK1", {"x"}, t});
    return b.Add({{"deriv"}, "Neg", {"k1"}, t});
  });
}
// k0e = exp(x) K0: k0e' = k0e - k1e.
absl::Status BesselK0eGrad(const AttrSlice& attrs, FunctionDef* g) {
  return SpecialUnaryGrad("BesselK0e", kRealFloatTypes, attrs, g, [](auto& b, const auto& t) {
    b.Add({{"k1e"}, "BesselK1e", {"x"}, t});
    return b.Add({{"deriv"}, "Sub", {"y", "k1e"}, t});
  });
}
// K1' = -K0 - K1 / x.
absl::Status BesselK1Grad(const AttrSlice& attrs, FunctionDef* g) {
  return SpecialUnaryGrad("BesselK1", kRealFloatTypes, attrs, g, [](auto& b, const auto& t) {
    b.Add({{"k0"}, "BesselK0", {"x"}, t});
    b.Add({{"neg_k0"}, "Neg", {"k0"}, t});
    b.Add({{"y_over_x"}, "RealDiv", {"y", "x"}, t});
    return b.Add({{"deriv"}, "Sub", {"neg_k0", "y_over_x"}, t});
  });
}
// k1e = exp(x) K1: k1e' = k1e (1 - 1/x) - k0e.
absl::Status BesselK1eGrad(const AttrSlice& attrs, FunctionDef* g) {
  return SpecialUnaryGrad("BesselK1e", kRealFloatTypes, attrs, g, [](auto& b, const auto& t) {
    const std::string one = b.TypedConst("one", 1.0);
    b.Add({{"k0e"}, "BesselK0e", {"x"}, t});
    b.Add({{"inv_x"}, "Reciprocal", {"x"}, t});
    b.Add({{"factor"}, "Sub", {one, "inv_x"}, t});
    b.Add({{"y_factor"}, "Mul", {"y", "factor"}, t});
    return b.Add({{"deriv"}, "Sub", {"y_factor", "k0e"}, t});
  });
}
// J0' = -J1.
absl::Status BesselJ0Grad(const AttrSlice& attrs, FunctionDef* g) {
  return SpecialUnaryGrad("BesselJ0", kRealFloatTypes, attrs, g, [](auto& b, const auto& t) {
    b.Add({{"j1"}, "BesselJ1", {"x"}, t});
    return b.Add({{"deriv"}, "Neg", {"j1"}, t});
  });
}
// J1' = J0 - J1 / x (0.5 at x = 0).
absl::Status BesselJ1Grad(const AttrSlice& attrs, FunctionDef* g) {
  return SpecialUnaryGrad("BesselJ1", kRealFloatTypes, attrs, g, [](auto& b, const auto& t) {
    b.Add({{"j0"}, "BesselJ0", {"x"}, t});
    b.Add({{"y_over_x"}, "RealDiv", {"y", "x"}, t});
    return AtZero(b, t, 0.5, b.Add({{"value"}, "Sub", {"j0", "y_over_x"}, t}));
  });
}
// Y0' = -Y1.
absl::Status BesselY0Grad(const AttrSlice& attrs, FunctionDef* g) {
  return SpecialUnaryGrad("BesselY0", kRealFloatTypes, attrs, g, [](auto& b, const auto& t) {
    b.Add({{"y1"}, "BesselY1", {"x"}, t});
    return b.Add({{"deriv"}, "Neg", {"y1"}, t});
  });
}
// Y1' = Y0 - Y1 / x.
absl::Status BesselY1Grad(const AttrSlice& attrs, FunctionDef* g) {
  return SpecialUnaryGrad("BesselY1", kRealFloatTypes, attrs, g, [](auto& b, const auto& t) {
    b.Add({{"y0"}, "BesselY0", {"x"}, t});
    b.Add({{"y_over_x"}, "RealDiv", {"y", "x"}, t});
    return b.Add({{"deriv"}, "Sub", {"y0", "y_over_x"}, t});
  });
}

// Igamma(a, x) = P(a, x) (regularised lower incomplete gamma), Igammac = 1 - P: the same
// partial derivatives, negated for Igammac (`sign`).
absl::Status IncompleteGammaGrad(const std::string& op, double sign, const AttrSlice& attrs,
                                 FunctionDef* g) {
  grad::GradBuilder b(op, attrs);
  b.RequireTypes("T", kFloatDouble);  // IgammaGradA has float and double kernels
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  const std::string dz = grad::GradName("z");
  const std::string one = b.TypedConst("one", 1.0);
  const std::string s = b.TypedConst("sign", sign);
  b.Add({{"partial_a"}, "IgammaGradA", {"a", "x"}, t});       // dP/da
  // dP/dx = x^(a-1) exp(-x) / Gamma(a), in log space: exp(-x + (a-1) log x - lgamma(a))
  b.Add({{"a_minus_1"}, "Sub", {"a", one}, t});
  b.Add({{"log_x"}, "Log", {"x"}, t});
  b.Add({{"a1_log_x"}, "Mul", {"a_minus_1", "log_x"}, t});
  b.Add({{"a1_log_x_minus_x"}, "Sub", {"a1_log_x", "x"}, t});
  b.Add({{"lgamma_a"}, "Lgamma", {"a"}, t});
  b.Add({{"log_partial_x"}, "Sub", {"a1_log_x_minus_x", "lgamma_a"}, t});
  b.Add({{"partial_x"}, "Exp", {"log_partial_x"}, t});
  b.Add({{"signed_dz"}, "Mul", {dz, s}, t});                  // d(z), negated for Igammac
  b.Add({{"grad_a"}, "Mul", {"partial_a", "signed_dz"}, t});
  b.Add({{"grad_x"}, "Mul", {"partial_x", "signed_dz"}, t});
  // d(a), d(x): summed over the axes each was broadcast along
  const auto [da, dx] = b.ReduceForBroadcast("a", "x", "grad_a", "grad_x");
  b.Return("a", da).Return("x", dx);
  return b.Build(g);
}
absl::Status IgammaGrad(const AttrSlice& attrs, FunctionDef* g) {
  return IncompleteGammaGrad("Igamma", 1.0, attrs, g);
}
absl::Status IgammacGrad(const AttrSlice& attrs, FunctionDef* g) {
  return IncompleteGammaGrad("Igammac", -1.0, attrs, g);
}

// Betainc(a, b, x) = I_x(a, b): Python differentiates x only (a and b get zeros).
absl::Status BetaincGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("Betainc", attrs);
  b.RequireTypes("T", kFloatDouble);
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  const std::string one = b.TypedConst("one", 1.0);
  // log B(a, b) = lgamma(a) + lgamma(b) - lgamma(a + b)
  b.Add({{"lgamma_a"}, "Lgamma", {"a"}, t});
  b.Add({{"lgamma_b"}, "Lgamma", {"b"}, t});
  b.Add({{"a_plus_b"}, "AddV2", {"a", "b"}, t});
  b.Add({{"lgamma_ab"}, "Lgamma", {"a_plus_b"}, t});
  b.Add({{"lgamma_sum"}, "AddV2", {"lgamma_a", "lgamma_b"}, t});
  b.Add({{"log_beta"}, "Sub", {"lgamma_sum", "lgamma_ab"}, t});
  // dI/dx = (1-x)^(b-1) x^(a-1) / B(a, b) = exp(xlog1py(b-1, -x) + xlogy(a-1, x) - log B)
  b.Add({{"b_minus_1"}, "Sub", {"b", one}, t});
  b.Add({{"a_minus_1"}, "Sub", {"a", one}, t});
  b.Add({{"neg_x"}, "Neg", {"x"}, t});
  b.Add({{"log_1mx"}, "Xlog1py", {"b_minus_1", "neg_x"}, t});  // (b-1) log(1-x), 0 if b = 1
  b.Add({{"log_x"}, "Xlogy", {"a_minus_1", "x"}, t});          // (a-1) log(x), 0 if a = 1
  b.Add({{"log_sum"}, "AddV2", {"log_1mx", "log_x"}, t});
  b.Add({{"log_partial_x"}, "Sub", {"log_sum", "log_beta"}, t});
  b.Add({{"partial_x"}, "Exp", {"log_partial_x"}, t});
  b.Add({{"grad_x"}, "Mul", {"partial_x", grad::GradName("z")}, t});
  // d(x) summed over the axes x was broadcast along (against a's shape, as Python)
  b.Return("x", b.ReduceForBroadcast("a", "x", "grad_x", "grad_x").second);
  b.NotDifferentiable("a");  // Python: None
  b.NotDifferentiable("b");  // Python: None
  return b.Build(g);
}

// Zeta(x, q) = sum_k (k + q)^-x (Hurwitz): Python differentiates q only.
absl::Status ZetaGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("Zeta", attrs);
  b.RequireTypes("T", kFloatDouble);
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  const std::string one = b.TypedConst("one", 1.0);
  b.Add({{"x_plus_1"}, "AddV2", {"x", one}, t});
  b.Add({{"zeta_x1"}, "Zeta", {"x_plus_1", "q"}, t});
  b.Add({{"x_zeta"}, "Mul", {"x", "zeta_x1"}, t});
  b.Add({{"partial_q"}, "Neg", {"x_zeta"}, t});                  // dzeta/dq = -x zeta(x+1, q)
  b.Add({{"grad_q"}, "Mul", {"partial_q", grad::GradName("z")}, t});
  b.Return("q", b.ReduceForBroadcast("x", "q", "grad_q", "grad_q").second);
  b.NotDifferentiable("x");  // Python: None
  return b.Build(g);
}

// Polygamma(a, x) = psi^(a)(x): Python differentiates x only.
absl::Status PolygammaGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("Polygamma", attrs);
  b.RequireTypes("T", kFloatDouble);
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  const std::string one = b.TypedConst("one", 1.0);
  b.Add({{"a_plus_1"}, "AddV2", {"a", one}, t});
  b.Add({{"partial_x"}, "Polygamma", {"a_plus_1", "x"}, t});     // d psi^(a)/dx = psi^(a+1)
  b.Add({{"grad_x"}, "Mul", {"partial_x", grad::GradName("z")}, t});
  b.Return("x", b.ReduceForBroadcast("a", "x", "grad_x", "grad_x").second);
  b.NotDifferentiable("a");  // Python: None
  return b.Build(g);
}

// ---------------------------------------------------------------------------------------------
// Other math ops.

// FloorMod(x, y) = x - floor(x / y) y.
absl::Status FloorModGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("FloorMod", attrs);
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  const std::string dz = grad::GradName("z");
  b.Add({{"floor_xy"}, "FloorDiv", {"x", "y"}, t});            // floor(x / y)
  b.Add({{"neg_floor_xy"}, "Neg", {"floor_xy"}, t});
  b.Add({{"gy"}, "Mul", {dz, "neg_floor_xy"}, t});             // d(z) * -floor(x / y)
  // d(x) = d(z), d(y) = -d(z) floor(x / y), each summed over its broadcast axes
  const auto [dx, dy] = b.ReduceForBroadcast("x", "y", dz, "gy");
  b.Return("x", dx).Return("y", dy);
  return b.Build(g);
}

// SparseMatMul(a, b) = op(a) op(b) (op: transpose or not; a_is_sparse / b_is_sparse are speed
// hints; the product is float, a and b float or bfloat16): the MatMul gradients, products by
// SparseMatMul (the sparsity hints kept for a and b), cast back to each input's type.
absl::Status SparseMatMulGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("SparseMatMul", attrs);
  const bool ta = b.GetAttr<bool>("transpose_a"), tb = b.GetAttr<bool>("transpose_b");
  const bool a_sparse = b.GetAttr<bool>("a_is_sparse"), b_sparse = b.GetAttr<bool>("b_is_sparse");
  const std::string dp = grad::GradName("product");
  // name = op(x) op(y), cast to the type of input `to`
  auto mm = [&](const std::string& name, const std::string& x, bool tx, const std::string& y,
                bool ty, const std::string& to) {
    auto type_of = [&](const std::string& v) {
      return v == "a" ? grad::Placeholder("Ta") : v == "b" ? grad::Placeholder("Tb")
                                                           : grad::FDH::AttrValueWrapper(DT_FLOAT);
    };
    b.Add({{name + "_f"}, "SparseMatMul", {x, y},
           {{"transpose_a", tx}, {"transpose_b", ty},
            {"a_is_sparse", x == "a" ? a_sparse : x == "b" && b_sparse},
            {"b_is_sparse", y == "a" ? a_sparse : y == "b" && b_sparse},
            {"Ta", type_of(x)}, {"Tb", type_of(y)}}});
    return b.Add({{name}, "Cast", {name + "_f"},
                  {{"SrcT", DT_FLOAT}, {"DstT", grad::Placeholder(to == "a" ? "Ta" : "Tb")}}});
  };
  if (!ta && !tb) {         // p = a b:        d(a) = d(p) b^T,     d(b) = a^T d(p)
    b.Return("a", mm("da", dp, false, "b", true, "a"));
    b.Return("b", mm("db", "a", true, dp, false, "b"));
  } else if (!ta && tb) {   // p = a b^T:      d(a) = d(p) b,       d(b) = d(p)^T a
    b.Return("a", mm("da", dp, false, "b", false, "a"));
    b.Return("b", mm("db", dp, true, "a", false, "b"));
  } else if (ta && !tb) {   // p = a^T b:      d(a) = b d(p)^T,     d(b) = a d(p)
    b.Return("a", mm("da", "b", false, dp, true, "a"));
    b.Return("b", mm("db", "a", false, dp, false, "b"));
  } else {                  // p = a^T b^T:    d(a) = b^T d(p)^T,   d(b) = d(p)^T a^T
    b.Return("a", mm("da", "b", true, dp, true, "a"));
    b.Return("b", mm("db", dp, true, "a", true, "b"));
  }
  return b.Build(g);
}

// ComplexAbs(x) = |x| (real): d(x) = d(y) x / |x| as a complex number (0 at x = 0,
// Python's div_no_nan).
absl::Status ComplexAbsGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("ComplexAbs", attrs);
  const grad::NodeAttrs real = {{"T", grad::Placeholder("Tout")}};
  const grad::NodeAttrs to_complex = {{"T", grad::Placeholder("Tout")},
                                      {"Tout", grad::Placeholder("T")}};
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  b.Add({{"zeros"}, "ZerosLike", {grad::GradName("y")}, real});
  b.Add({{"grad_c"}, "Complex", {grad::GradName("y"), "zeros"}, to_complex});  // d(y) + 0i
  b.Add({{"y_c"}, "Complex", {"y", "zeros"}, to_complex});                     // |x| + 0i
  b.Add({{"grad_x"}, "Mul", {"grad_c", "x"}, t});
  b.Return("x", b.Add({{"dx"}, "DivNoNan", {"grad_x", "y_c"}, t}));            // d(y) x / |x|
  return b.Build(g);
}

// Cross(a, b) = a x b (last axis of size 3): <g, a x b> = <b x g, a> = <g x a, b>.
absl::Status CrossGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("Cross", attrs);
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  const std::string dp = grad::GradName("product");
  b.Return("a", b.Add({{"da"}, "Cross", {"b", dp}, t}));       // d(a) = b x d(product)
  b.Return("b", b.Add({{"db"}, "Cross", {dp, "a"}, t}));       // d(b) = d(product) x a
  return b.Build(g);
}

// Nodes of a reduction's gradient (Sum, Mean, Max, Min, EuclideanNorm: inputs `input` and
// `reduction_indices`): "axes_nonneg", the reduced axes as int32 in [0, rank) (a negative axis
// counts back from the rank, as the kernels take it), and "kept", the input's shape with every
// reduced axis set to 1 (the output's shape with keep_dims; any repeated or empty axis list and
// any empty dimension included).
void AddKeptShape(grad::GradBuilder& b) {
  const grad::NodeAttrs i32 = {{"T", DT_INT32}};
  b.Add({{"shape"}, "Shape", {"input"}, {{"T", b.TypeOf("input")}, {"out_type", DT_INT32}}});
  b.Add({{"rank"}, "Rank", {"input"}, {{"T", b.TypeOf("input")}}});
  b.Add({{"axes"}, "Cast", {"reduction_indices"},
         {{"SrcT", b.TypeOf("reduction_indices")}, {"DstT", DT_INT32}}});
  b.Add({{"axes_nonneg"}, "FloorMod", {"axes", "rank"}, i32});  // negative axes counted back
  b.Add(grad::FDH::Const<int32>("zero", 0));
  b.Add(grad::FDH::Const<int32>("one", 1));
  b.Add({{"all_axes"}, "Range", {"zero", "rank", "one"}, {{"Tidx", DT_INT32}}});
  b.Add({{"axes_shape"}, "Shape", {"axes_nonneg"}, {{"T", DT_INT32}, {"out_type", DT_INT32}}});
  b.Add({{"ones"}, "Fill", {"axes_shape", "one"}, i32});
  // kept = shape(input) with every reduced axis set to 1
  b.Add({{"kept"}, "DynamicStitch", {"all_axes", "axes_nonneg", "shape", "ones"},
         {{"N", 2}, {"T", DT_INT32}}});
}

// Sum(input, axes): d(input) = d(output) reshaped to the kept shape, broadcast to the input's.
// Mean divides that by the number of elements each output averages. Overrides TensorFlow's
// function gradients (declared below).
absl::Status SumOrMeanGrad(const std::string& op, const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(op, attrs);
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  AddKeptShape(b);
  b.Add({{"grad_kept"}, "Reshape", {grad::GradName("output"), "kept"}, t});
  // d(input) = broadcast_to(reshape(d(output), kept), shape(input))
  std::string d = b.Add({{"grad_broadcast"}, "BroadcastTo", {"grad_kept", "shape"},
                         {{"T", grad::Placeholder("T")}, {"Tidx", DT_INT32}}});
  if (op == "Mean") {
    // / (size(input) // max(size(output), 1)), Python's _safe_shape_div of the element counts
    const grad::NodeAttrs i32 = {{"T", DT_INT32}};
    b.Add({{"input_size"}, "Size", {"input"}, {{"T", b.TypeOf("input")}, {"out_type", DT_INT32}}});
    b.Add({{"output_size"}, "Size", {grad::GradName("output")},
           {{"T", b.TypeOf("output")}, {"out_type", DT_INT32}}});
    b.Add({{"output_size_1"}, "Maximum", {"output_size", "one"}, i32});
    b.Add({{"factor"}, "FloorDiv", {"input_size", "output_size_1"}, i32});
    b.Add({{"factor_t"}, "Cast", {"factor"}, {{"SrcT", DT_INT32}, {"DstT", grad::Placeholder("T")}}});
    d = b.Add({{"grad_mean"}, "Div", {d, "factor_t"}, t});
  }
  b.Return("input", d);
  b.NotDifferentiable("reduction_indices");  // integer axes
  return b.Build(g);
}
absl::Status SumGrad(const AttrSlice& attrs, FunctionDef* g) {
  return SumOrMeanGrad("Sum", attrs, g);
}
absl::Status MeanGrad(const AttrSlice& attrs, FunctionDef* g) {
  return SumOrMeanGrad("Mean", attrs, g);
}

// Max / Min(input, axes): d(input) = d(output) shared equally by the elements equal to their
// output (Python's _MinOrMaxGrad), all in the kept shape.
absl::Status MinOrMaxGrad(const std::string& op, const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(op, attrs);
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  AddKeptShape(b);
  b.Add({{"output_kept"}, "Reshape", {"output", "kept"}, t});
  b.Add({{"grad_kept"}, "Reshape", {grad::GradName("output"), "kept"}, t});
  b.Add({{"selected"}, "Equal", {"input", "output_kept"}, t});
  b.Add({{"indicators"}, "Cast", {"selected"}, {{"SrcT", DT_BOOL}, {"DstT", grad::Placeholder("T")}}});
  b.Add({{"num_selected"}, "Sum", {"indicators", "axes_nonneg"},
         {{"T", grad::Placeholder("T")}, {"Tidx", DT_INT32}, {"keep_dims", true}}});
  b.Add({{"share"}, "Div", {"indicators", "num_selected"}, t});
  // d(input) = indicators / num_selected * d(output)
  b.Return("input", b.Add({{"dinput"}, "Mul", {"share", "grad_kept"}, t}));
  b.NotDifferentiable("reduction_indices");  // integer axes
  return b.Build(g);
}
absl::Status MaxGrad(const AttrSlice& attrs, FunctionDef* g) {
  return MinOrMaxGrad("Max", attrs, g);
}
absl::Status MinGrad(const AttrSlice& attrs, FunctionDef* g) {
  return MinOrMaxGrad("Min", attrs, g);
}

// EuclideanNorm(input, axes) = sqrt(sum(input^2, axes)): d(input) = input * d(output) / output,
// with output and d(output) reshaped to the input's rank (the reduced axes kept as 1).
absl::Status EuclideanNormGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("EuclideanNorm", attrs);
  b.RequireTypes("T", kFloatAndComplexTypes);
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  AddKeptShape(b);
  b.Add({{"output_kept"}, "Reshape", {"output", "kept"}, t});
  b.Add({{"grad_kept"}, "Reshape", {grad::GradName("output"), "kept"}, t});
  b.Add({{"ratio"}, "RealDiv", {"output_kept", "grad_kept"}, t});  // output / d(output)
  // d(input) = input / (output / d(output)), Python's form
  b.Return("input", b.Add({{"dinput"}, "RealDiv", {"input", "ratio"}, t}));
  b.NotDifferentiable("reduction_indices");  // integer axes
  return b.Build(g);
}

// NextAfter(x1, x2): the next representable value after x1 towards x2; Python: d(x1) = d(y)
// (summed over broadcast axes), d(x2) = 0.
absl::Status NextAfterGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("NextAfter", attrs);
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  const std::string d = grad::GradName("output");
  b.Add({{"zeros"}, "ZerosLike", {d}, t});
  const auto [dx1, dx2] = b.ReduceForBroadcast("x1", "x2", d, "zeros");
  b.Return("x1", dx1).Return("x2", dx2);  // d(x1) = d(output), d(x2) = 0
  return b.Build(g);
}

// Cumprod(x, axis) = p: d(x_i) = sum_{j reached from i} d(p_j) p_j / x_i, i.e.
// cumsum(p * d(p), reverse = !reverse) / x (0 where x = 0, as Python's div_no_nan).
absl::Status CumprodGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("Cumprod", attrs);
  const bool reverse = b.GetAttr<bool>("reverse");
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  b.Add({{"prod"}, "Cumprod", {"x", "axis"}, b.PassAttrs({"exclusive", "reverse", "T", "Tidx"})});
  b.Add({{"prod_grad"}, "Mul", {"prod", grad::GradName("out")}, t});  // p * d(p)
  b.Add({{"sum"}, "Cumsum", {"prod_grad", "axis"},
         {{"exclusive", grad::Placeholder("exclusive")}, {"reverse", !reverse},
          {"T", grad::Placeholder("T")}, {"Tidx", grad::Placeholder("Tidx")}}});
  b.Return("x", b.Add({{"dx"}, "DivNoNan", {"sum", "x"}, t}));  // d(x) = sum / x
  b.NotDifferentiable("axis");
  return b.Build(g);
}

// CumulativeLogsumexp(x, axis) = c: d(x_i) = sum_{j reached from i} d(c_j) exp(x_i - c_j),
// computed as Python does, in log space with d(c) split by sign:
// exp(cumlogsumexp(log(+-d(c)) - c, reverse = !reverse) + x), positive part minus negative.
absl::Status CumulativeLogsumexpGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("CumulativeLogsumexp", attrs);
  b.RequireTypes("T", kRealFloatTypes);
  const bool reverse = b.GetAttr<bool>("reverse");
  const DataType type = b.GetAttr<DataType>("T");
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  const std::string d = grad::GradName("out");
  // log(0) stands in as the type's lowest finite value (Python: dtype.min)
  const double lowest = type == DT_DOUBLE  ? -std::numeric_limits<double>::max()
                        : type == DT_FLOAT ? -std::numeric_limits<float>::max()
                        : type == DT_HALF  ? -65504.0
                                           : -3.3895313892515355e38;  // bfloat16
  const std::string min = b.TypedConst("lowest", lowest);
  const std::string zero = b.TypedConst("zero", 0.0);
  b.Add({{"lowest_b"}, "ZerosLike", {d}, t});
  b.Add({{"lowest_full"}, "AddV2", {"lowest_b", min}, t});
  const grad::NodeAttrs scan = {{"exclusive", grad::Placeholder("exclusive")},
                                {"reverse", !reverse},
                                {"T", grad::Placeholder("T")},
                                {"Tidx", grad::Placeholder("Tidx")}};
  b.Add({{"neg_d"}, "Neg", {d}, t});
  for (const std::string part : {"pos", "neg"}) {
    const bool pos = part == "pos";
    const std::string signed_d = pos ? d : "neg_d";
    b.Add({{part + "_mask"}, "Greater", {signed_d, zero}, t});            // +-d(c) > 0
    b.Add({{part + "_log"}, "Log", {signed_d}, t});
    b.Add({{part + "_log_d"}, "Select", {part + "_mask", part + "_log", "lowest_full"}, t});
    b.Add({{part + "_minus_c"}, "Sub", {part + "_log_d", "out"}, t});      // log(+-d(c)) - c
    b.Add({{part + "_scan"}, "CumulativeLogsumexp", {part + "_minus_c", "axis"}, scan});
    b.Add({{part + "_plus_x"}, "AddV2", {part + "_scan", "x"}, t});
    b.Add({{part + "_out"}, "Exp", {part + "_plus_x"}, t});
  }
  b.Return("x", b.Add({{"dx"}, "Sub", {"pos_out", "neg_out"}, t}));     // positive - negative
  b.NotDifferentiable("axis");
  return b.Build(g);
}

// ---------------------------------------------------------------------------------------------
// Segment reductions (segment_ids sorted; Unsorted*: any order, negative ids dropped). The ids
// and sizes are integers (zeros). Real types: the bodies compare and divide.

// Gather(params, ids) along axis 0.
std::string GatherRows(grad::GradBuilder& b, const std::string& name, const std::string& params,
                       const std::string& ids, const grad::FDH::AttrValueWrapper& type) {
  return b.Add({{name}, "GatherV2", {params, ids, "axis0"},
                {{"Tparams", type}, {"Tindices", grad::Placeholder("Tindices")},
                 {"Taxis", DT_INT32}, {"batch_dims", 0}}});
}

// SparseSegment{Sum,Mean,SqrtN}[WithNumSegments](data, indices, segment_ids[, num_segments]):
// d(data) = the dedicated backward op (rows of d(output) scattered back to `indices`, scaled
// by 1 / count or 1 / sqrt(count)); dense even where Python builds IndexedSlices
// (sparse_gradient), with the same values.
absl::Status SparseSegmentGrad(const std::string& op, const std::string& grad_op,
                               const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(op, attrs);
  b.Add(grad::FDH::Const<int32>("zero", 0));
  b.Add({{"data_shape"}, "Shape", {"data"}, b.PassAttrs({"T"})});
  b.Add({{"dim0"}, "GatherV2", {"data_shape", "zero", "zero"},
         {{"Tparams", DT_INT32}, {"Tindices", DT_INT32}, {"Taxis", DT_INT32}}});  // rows of data
  b.Return("data", b.Add({{"ddata"}, grad_op,
                          {grad::GradName("output"), "indices", "segment_ids", "dim0"},
                          b.PassAttrs({"T", "Tidx", "Tsegmentids"})}));
  b.NotDifferentiable("indices");
  b.NotDifferentiable("segment_ids");
  if (absl::EndsWith(op, "WithNumSegments")) b.NotDifferentiable("num_segments");
  return b.Build(g);
}
#define TF_EXT_SPARSE_SEGMENT_GRAD(OP, GRAD_OP)                     \
  absl::Status OP##Grad(const AttrSlice& attrs, FunctionDef* g) {    \
    return SparseSegmentGrad(#OP, GRAD_OP, attrs, g);                \
  }
TF_EXT_SPARSE_SEGMENT_GRAD(SparseSegmentSum, "SparseSegmentSumGrad")
TF_EXT_SPARSE_SEGMENT_GRAD(SparseSegmentSumWithNumSegments, "SparseSegmentSumGrad")
TF_EXT_SPARSE_SEGMENT_GRAD(SparseSegmentMean, "SparseSegmentMeanGrad")
TF_EXT_SPARSE_SEGMENT_GRAD(SparseSegmentMeanWithNumSegments, "SparseSegmentMeanGrad")
TF_EXT_SPARSE_SEGMENT_GRAD(SparseSegmentSqrtN, "SparseSegmentSqrtNGrad")
TF_EXT_SPARSE_SEGMENT_GRAD(SparseSegmentSqrtNWithNumSegments, "SparseSegmentSqrtNGrad")
#undef TF_EXT_SPARSE_SEGMENT_GRAD

// SegmentMean(data, ids): d(data)[i] = d(output)[ids[i]] / count(ids[i]).
absl::Status SegmentMeanGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("SegmentMean", attrs);
  b.RequireTypes("T", kFloatAndComplexTypes);
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  const grad::NodeAttrs i32 = {{"T", DT_INT32}};
  const grad::NodeAttrs seg = b.PassAttrs({"T", "Tindices"});
  b.Add(grad::FDH::Const<int32>("axis0", 0));
  b.Add(grad::FDH::Const<int32>("one_i", 1));
  const std::string one = b.TypedConst("one", 1.0);
  // ones of shape [len(ids), 1, ..., 1] (the rank of data): per-segment counts broadcast
  b.Add({{"rank"}, "Rank", {"data"}, t});
  b.Add({{"rank_minus_1"}, "Sub", {"rank", "one_i"}, i32});
  b.Add({{"rest_len"}, "ExpandDims", {"rank_minus_1", "axis0"},
         {{"T", DT_INT32}, {"Tdim", DT_INT32}}});
  b.Add({{"rest"}, "Fill", {"rest_len", "one_i"}, {{"T", DT_INT32}, {"index_type", DT_INT32}}});
  b.Add({{"ids_shape"}, "Shape", {"segment_ids"}, {{"T", grad::Placeholder("Tindices")}}});
  b.Add({{"ones_shape"}, "ConcatV2", {"ids_shape", "rest", "axis0"},
         {{"N", 2}, {"T", DT_INT32}, {"Tidx", DT_INT32}}});
  b.Add({{"ones"}, "Fill", {"ones_shape", one}, {{"T", grad::Placeholder("T")},
                                                  {"index_type", DT_INT32}}});
  b.Add({{"counts"}, "SegmentSum", {"ones", "segment_ids"}, seg});      // rows per segment
  b.Add({{"scaled"}, "RealDiv", {grad::GradName("output"), "counts"}, t});
  // d(data) = (d(output) / count)[ids]
  b.Return("data", GatherRows(b, "ddata", "scaled", "segment_ids", grad::Placeholder("T")));
  b.NotDifferentiable("segment_ids");
  return b.Build(g);
}

// SegmentMax / SegmentMin(data, ids): d(output) of a segment shared equally among the rows
// equal to its extremum (ties), zeros elsewhere.
absl::Status SegmentMinOrMaxGrad(const std::string& op, const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(op, attrs);
  b.RequireTypes("T", kRealFloatTypes);
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  b.Add(grad::FDH::Const<int32>("axis0", 0));
  GatherRows(b, "gathered_out", "output", "segment_ids", grad::Placeholder("T"));
  b.Add({{"selected"}, "Equal", {"data", "gathered_out"}, t});            // row attains it
  b.Add({{"selected_t"}, "Cast", {"selected"},
         {{"SrcT", DT_BOOL}, {"DstT", grad::Placeholder("T")}}});
  b.Add({{"num_selected"}, "SegmentSum", {"selected_t", "segment_ids"},
         b.PassAttrs({"T", "Tindices"})});
  b.Add({{"weighted"}, "RealDiv", {grad::GradName("output"), "num_selected"}, t});
  GatherRows(b, "gathered_grad", "weighted", "segment_ids", grad::Placeholder("T"));
  b.Add({{"zeros"}, "ZerosLike", {"data"}, t});
  // d(data) = d(output) / ties where selected, 0 elsewhere
  b.Return("data", b.Add({{"ddata"}, "Select", {"selected", "gathered_grad", "zeros"}, t}));
  b.NotDifferentiable("segment_ids");
  return b.Build(g);
}
absl::Status SegmentMaxGrad(const AttrSlice& attrs, FunctionDef* g) {
  return SegmentMinOrMaxGrad("SegmentMax", attrs, g);
}
absl::Status SegmentMinGrad(const AttrSlice& attrs, FunctionDef* g) {
  return SegmentMinOrMaxGrad("SegmentMin", attrs, g);
}

// SegmentProd / UnsortedSegmentProd(data, ids[, num_segments]): d(data)[i] = d(output)[s] *
// prod of the other rows of segment s, computed as Python does: prod / data[i] where the
// segment has no zero, the product of the non-zero rows at a segment's only zero, 0 in a
// segment with two zeros or more (and, unsorted, for negative ids).
absl::Status SegmentProdGradOf(const std::string& op, const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(op, attrs);
  b.RequireTypes("T", kFloatAndComplexTypes);
  const bool unsorted = op == "UnsortedSegmentProd";
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  const grad::FDH::AttrValueWrapper tt = grad::Placeholder("T");
  b.Add(grad::FDH::Const<int32>("axis0", 0));
  const std::string zero = b.TypedConst("zero", 0.0);
  b.Add(grad::FDH::Const<int32>("one_i", 1));
  // segment sums / products (unsorted: with num_segments)
  auto segment = [&](const std::string& name, const std::string& reduction,
                     const std::string& data, const grad::FDH::AttrValueWrapper& type) {
    if (unsorted) {
      return b.Add({{name}, "Unsorted" + reduction, {data, "segment_ids", "num_segments"},
                    {{"T", type}, {"Tindices", grad::Placeholder("Tindices")},
                     {"Tnumsegments", grad::Placeholder("Tnumsegments")}}});
    }
    return b.Add({{name}, reduction, {data, "segment_ids"},
                  {{"T", type}, {"Tindices", grad::Placeholder("Tindices")}}});
  };
  std::string ids = "segment_ids";
  if (unsorted) {  // negative ids are dropped: gather at max(id, 0), then zero those rows
    b.Add({{"zero_ids"}, "ZerosLike", {"segment_ids"}, {{"T", grad::Placeholder("Tindices")}}});
    ids = b.Add({{"clipped_ids"}, "Maximum", {"segment_ids", "zero_ids"},
                 {{"T", grad::Placeholder("Tindices")}}});
  }
  b.Add({{"is_zero"}, "Equal", {"data", zero}, t});
  b.Add({{"is_zero_i"}, "Cast", {"is_zero"}, {{"SrcT", DT_BOOL}, {"DstT", DT_INT32}}});
  segment("num_zeros", "SegmentSum", "is_zero_i", DT_INT32);            // zeros per segment
  b.Add({{"several_zeros"}, "Greater", {"num_zeros", "one_i"}, {{"T", DT_INT32}}});
  b.Add({{"zero_grad"}, "ZerosLike", {grad::GradName("output")}, t});
  b.Add({{"grad"}, "SelectV2", {"several_zeros", "zero_grad", grad::GradName("output")}, t});
  b.Add({{"ones"}, "OnesLike", {"data"}, t});
  b.Add({{"non_zero_data"}, "SelectV2", {"is_zero", "ones", "data"}, t});  // zeros -> 1
  segment("non_zero_prod", "SegmentProd", "non_zero_data", tt);
  GatherRows(b, "gathered_prod", "output", ids, tt);
  GatherRows(b, "gathered_non_zero_prod", "non_zero_prod", ids, tt);
  // prod / data (Python divides by data itself for unsorted, by the non-zero data for sorted;
  // the two differ only where data = 0, which the select below replaces)
  b.Add({{"prod_over_el"}, "RealDiv", {"gathered_prod", unsorted ? "data" : "non_zero_data"}, t});
  b.Add({{"partial"}, "SelectV2", {"is_zero", "gathered_non_zero_prod", "prod_over_el"}, t});
  std::string gathered_grad = GatherRows(b, "gathered_grad", "grad", ids, tt);
  if (unsorted) {
    // rows with a negative id get 0: the condition [ids shape, 1, ...] broadcast over data
    b.Add({{"ids_valid"}, "GreaterEqual", {"segment_ids", "zero_ids"},
           {{"T", grad::Placeholder("Tindices")}}});
    b.Add({{"ids_shape"}, "Shape", {"segment_ids"}, {{"T", grad::Placeholder("Tindices")}}});
    b.Add({{"data_rank"}, "Rank", {"data"}, t});
    b.Add({{"ids_rank"}, "Rank", {"segment_ids"}, {{"T", grad::Placeholder("Tindices")}}});
    b.Add({{"extra"}, "Sub", {"data_rank", "ids_rank"}, {{"T", DT_INT32}}});
    b.Add({{"extra_len"}, "ExpandDims", {"extra", "axis0"}, {{"T", DT_INT32}, {"Tdim", DT_INT32}}});
    b.Add({{"extra_ones"}, "Fill", {"extra_len", "one_i"},
           {{"T", DT_INT32}, {"index_type", DT_INT32}}});
    b.Add({{"valid_shape"}, "ConcatV2", {"ids_shape", "extra_ones", "axis0"},
           {{"N", 2}, {"T", DT_INT32}, {"Tidx", DT_INT32}}});
    b.Add({{"valid"}, "Reshape", {"ids_valid", "valid_shape"},
           {{"T", DT_BOOL}, {"Tshape", DT_INT32}}});
    b.Add({{"zero_rows"}, "ZerosLike", {gathered_grad}, t});
    gathered_grad = b.Add({{"kept_grad"}, "SelectV2", {"valid", gathered_grad, "zero_rows"}, t});
    b.NotDifferentiable("num_segments");
  }
  // d(data) = d(output)[ids] * partial derivative
  b.Return("data", b.Add({{"ddata"}, "Mul", {gathered_grad, "partial"}, t}));
  b.NotDifferentiable("segment_ids");
  return b.Build(g);
}
absl::Status SegmentProdGrad(const AttrSlice& attrs, FunctionDef* g) {
  return SegmentProdGradOf("SegmentProd", attrs, g);
}
absl::Status UnsortedSegmentProdGrad(const AttrSlice& attrs, FunctionDef* g) {
  return SegmentProdGradOf("UnsortedSegmentProd", attrs, g);
}

// AccumulateNV2(inputs: N x T) = their sum (AddN that need not hold every input at once):
// d(inputs_i) = d(sum), as Python (math_ops.py). Concrete for the node's N and T, one argument
// per list element (the flattened convention SymbolicGradient uses).
absl::Status AccumulateNV2Grad(const AttrSlice& attrs, FunctionDef* g) {
  int64_t n = 0;
  DataType t;
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "N", &n));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "T", &t));
  if (n < 1 || n > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("AccumulateNV2: N must be in [1, 4096], got ", n));
  }
  const std::string type = DataTypeString(t);
  std::vector<std::string> in_def, out_def;
  std::vector<FunctionDefHelper::Node> nodes;
  std::vector<std::pair<std::string, std::string>> ret;
  for (int64_t i = 0; i < n; ++i) in_def.push_back(absl::StrCat("inputs_", i, ": ", type));
  in_def.push_back(absl::StrCat("d_sum: ", type));
  for (int64_t i = 0; i < n; ++i) {
    out_def.push_back(absl::StrCat("d_inputs_", i, ": ", type));
    // d(inputs_i) = d(sum)
    nodes.push_back({{absl::StrCat("dx_", i)}, "Identity", {"d_sum"}, {{"T", t}}});
    ret.push_back({absl::StrCat("d_inputs_", i), absl::StrCat("dx_", i, ":output:0")});
  }
  *g = FunctionDefHelper::Create("AccumulateNV2Grad", in_def, out_def, {}, nodes, ret);
  return absl::OkStatus();
}

}  // namespace

// Gradients of TensorFlow's that are wrong: replaced in every registry (docs/registries.md).
// TensorFlow 2.21's reductions (core/ops/math_grad.cc GradForReductionOp, MinMaxGradHelper).
constexpr char kReductionDefect[] =
    "TensorFlow 2.21's function gradient feeds the reduction indices straight into "
    "DynamicStitch (a negative axis, as Keras's LayerNormalization's -1, fails: 'indices[0] is "
    "out of range') and divides the input's shape by the kept shape (an empty input dimension "
    "divides by zero)";
TF_EXT_DECLARE_OP("Sum")
    .Doc("Sum over axes (TensorFlow's op).")
    .Gradient(&SumGrad, "d(input) = broadcast_to(reshape(d(output), kept shape), shape(input))")
    .Overrides(kReductionDefect)
    .Register();
TF_EXT_DECLARE_OP("Mean")
    .Doc("Mean over axes (TensorFlow's op).")
    .Gradient(&MeanGrad, "d(input) = broadcast_to(reshape(d(output), kept shape), shape(input)) "
                         "/ (size(input) // max(size(output), 1))")
    .Overrides(kReductionDefect)
    .Register();
TF_EXT_DECLARE_OP("Max")
    .Doc("Maximum over axes (TensorFlow's op).")
    .Gradient(&MaxGrad, "d(input) = (input == output) / count(input == output) * d(output), in "
                        "the kept shape")
    .Overrides("TensorFlow 2.21's function gradient (MinMaxGradHelper) divides d(output) by "
               "a count of the reduced shape: with keep_dims the two broadcast into the wrong "
               "shape and the gradient fails")
    .Register();
TF_EXT_DECLARE_OP("Min")
    .Doc("Minimum over axes (TensorFlow's op).")
    .Gradient(&MinGrad, "d(input) = (input == output) / count(input == output) * d(output), in "
                        "the kept shape")
    .Overrides("TensorFlow 2.21's function gradient (MinMaxGradHelper) divides d(output) by "
               "a count of the reduced shape: with keep_dims the two broadcast into the wrong "
               "shape and the gradient fails")
    .Register();

TF_EXT_REGISTER_TF_GRADIENT("Erfc", ErfcGrad);
TF_EXT_REGISTER_TF_GRADIENT("TanhGrad", TanhGradGrad);
TF_EXT_REGISTER_TF_GRADIENT("SigmoidGrad", SigmoidGradGrad);
TF_EXT_REGISTER_TF_GRADIENT("SqrtGrad", SqrtGradGrad);
TF_EXT_REGISTER_TF_GRADIENT("RsqrtGrad", RsqrtGradGrad);
TF_EXT_REGISTER_TF_GRADIENT("ReciprocalGrad", ReciprocalGradGrad);
TF_EXT_REGISTER_TF_GRADIENT("InvGrad", InvGradGrad);
TF_EXT_REGISTER_TF_GRADIENT("ArgMax", ArgMaxGrad);
TF_EXT_REGISTER_TF_GRADIENT("ArgMin", ArgMinGrad);
TF_EXT_REGISTER_TF_GRADIENT("Round", RoundGrad);
TF_EXT_REGISTER_TF_GRADIENT("Rint", RintGrad);
TF_EXT_REGISTER_TF_GRADIENT("Ceil", CeilGrad);

TF_EXT_REGISTER_TF_GRADIENT("Digamma", DigammaGrad);
TF_EXT_REGISTER_TF_GRADIENT("Dawsn", DawsnGrad);
TF_EXT_REGISTER_TF_GRADIENT("Expint", ExpintGrad);
TF_EXT_REGISTER_TF_GRADIENT("FresnelCos", FresnelCosGrad);
TF_EXT_REGISTER_TF_GRADIENT("FresnelSin", FresnelSinGrad);
TF_EXT_REGISTER_TF_GRADIENT("Spence", SpenceGrad);
TF_EXT_REGISTER_TF_GRADIENT("BesselI0", BesselI0Grad);
TF_EXT_REGISTER_TF_GRADIENT("BesselI0e", BesselI0eGrad);
TF_EXT_REGISTER_TF_GRADIENT("BesselI1", BesselI1Grad);
TF_EXT_REGISTER_TF_GRADIENT("BesselI1e", BesselI1eGrad);
TF_EXT_REGISTER_TF_GRADIENT("BesselK0", BesselK0Grad);
TF_EXT_REGISTER_TF_GRADIENT("BesselK0e", BesselK0eGrad);
TF_EXT_REGISTER_TF_GRADIENT("BesselK1", BesselK1Grad);
TF_EXT_REGISTER_TF_GRADIENT("BesselK1e", BesselK1eGrad);
TF_EXT_REGISTER_TF_GRADIENT("BesselJ0", BesselJ0Grad);
TF_EXT_REGISTER_TF_GRADIENT("BesselJ1", BesselJ1Grad);
TF_EXT_REGISTER_TF_GRADIENT("BesselY0", BesselY0Grad);
TF_EXT_REGISTER_TF_GRADIENT("BesselY1", BesselY1Grad);
TF_EXT_REGISTER_TF_GRADIENT("Igamma", IgammaGrad);
TF_EXT_REGISTER_TF_GRADIENT("Igammac", IgammacGrad);
TF_EXT_REGISTER_TF_GRADIENT("Betainc", BetaincGrad);
TF_EXT_REGISTER_TF_GRADIENT("Zeta", ZetaGrad);
TF_EXT_REGISTER_TF_GRADIENT("Polygamma", PolygammaGrad);
TF_EXT_REGISTER_TF_GRADIENT("FloorMod", FloorModGrad);
TF_EXT_REGISTER_TF_GRADIENT("Cross", CrossGrad);
TF_EXT_REGISTER_TF_GRADIENT("ComplexAbs", ComplexAbsGrad);
TF_EXT_REGISTER_TF_GRADIENT("SparseMatMul", SparseMatMulGrad);
TF_EXT_REGISTER_TF_GRADIENT("EuclideanNorm", EuclideanNormGrad);
TF_EXT_REGISTER_TF_GRADIENT("NextAfter", NextAfterGrad);
TF_EXT_REGISTER_TF_GRADIENT("Cumprod", CumprodGrad);
TF_EXT_REGISTER_TF_GRADIENT("CumulativeLogsumexp", CumulativeLogsumexpGrad);
TF_EXT_REGISTER_TF_GRADIENT("SparseSegmentSum", SparseSegmentSumGrad);
TF_EXT_REGISTER_TF_GRADIENT("SparseSegmentSumWithNumSegments",
                            SparseSegmentSumWithNumSegmentsGrad);
TF_EXT_REGISTER_TF_GRADIENT("SparseSegmentMean", SparseSegmentMeanGrad);
TF_EXT_REGISTER_TF_GRADIENT("SparseSegmentMeanWithNumSegments",
                            SparseSegmentMeanWithNumSegmentsGrad);
TF_EXT_REGISTER_TF_GRADIENT("SparseSegmentSqrtN", SparseSegmentSqrtNGrad);
TF_EXT_REGISTER_TF_GRADIENT("SparseSegmentSqrtNWithNumSegments",
                            SparseSegmentSqrtNWithNumSegmentsGrad);
TF_EXT_REGISTER_TF_GRADIENT("SegmentMean", SegmentMeanGrad);
TF_EXT_REGISTER_TF_GRADIENT("SegmentMax", SegmentMaxGrad);
TF_EXT_REGISTER_TF_GRADIENT("SegmentMin", SegmentMinGrad);
TF_EXT_REGISTER_TF_GRADIENT("SegmentProd", SegmentProdGrad);
TF_EXT_REGISTER_TF_GRADIENT("UnsortedSegmentProd", UnsortedSegmentProdGrad);
TF_EXT_REGISTER_TF_GRADIENT("AccumulateNV2", AccumulateNV2Grad);

}  // namespace tensorflow::tf_ext
