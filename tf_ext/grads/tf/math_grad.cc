// Gradients of TensorFlow's math ops that no C++ registry has in TensorFlow 2.21, written from
// the formulas of Python's python/ops/math_grad.py. Each is registered in both C++ registries
// when the op library loads, unless TensorFlow has one already (TF_EXT_REGISTER_TF_GRADIENT).
//
// Checked against numeric Jacobians: tf_ext/tools/tf_core_gradcheck_spec.txt (`make gradcheck`).
#include <cmath>
#include <string>
#include <vector>

#include "tensorflow/core/framework/function.h"
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/registry.h"

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
// (Hessian-vector products through tanh, sigmoid, ...). Real types only: Python conjugates y
// for complex types, which these bodies do not.
const std::vector<DataType> kRealFloatTypes = {DT_HALF, DT_BFLOAT16, DT_FLOAT, DT_DOUBLE};

// TanhGrad(y, dy) = dy * (1 - y^2).
absl::Status TanhGradGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("TanhGrad", attrs);
  b.RequireTypes("T", kRealFloatTypes);
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  const std::string dz = grad::GradName("z");
  const std::string minus_two = b.TypedConst("minus_two", -2.0);
  b.Add({{"dz_dy"}, "Mul", {dz, "dy"}, t});                        // d(z) * dy
  b.Add({{"dz_dy_y"}, "Mul", {"dz_dy", "y"}, t});                  // d(z) * dy * y
  // d(y) = d(z) * dy * (-2 y)
  b.Return("y", b.Add({{"y_grad"}, "Mul", {"dz_dy_y", minus_two}, t}));
  // d(dy) = d(z) * (1 - y^2) = TanhGrad(y, d(z))
  b.Return("dy", b.Add({{"dy_grad"}, "TanhGrad", {"y", dz}, t}));
  return b.Build(g);
}

// SigmoidGrad(y, dy) = dy * y * (1 - y).
absl::Status SigmoidGradGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("SigmoidGrad", attrs);
  b.RequireTypes("T", kRealFloatTypes);
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  const std::string dz = grad::GradName("z");
  const std::string two = b.TypedConst("two", 2.0);
  b.Add({{"gb"}, "Mul", {dz, "dy"}, t});                           // d(z) * dy
  b.Add({{"gb_y"}, "Mul", {"gb", "y"}, t});
  b.Add({{"two_gb_y"}, "Mul", {"gb_y", two}, t});                  // 2 d(z) dy y
  // d(y) = d(z) * dy * (1 - 2 y)
  b.Return("y", b.Add({{"y_grad"}, "Sub", {"gb", "two_gb_y"}, t}));
  // d(dy) = d(z) * y * (1 - y) = SigmoidGrad(y, d(z))
  b.Return("dy", b.Add({{"dy_grad"}, "SigmoidGrad", {"y", dz}, t}));
  return b.Build(g);
}

// SqrtGrad(y, dy) = 0.5 * dy / y.
absl::Status SqrtGradGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("SqrtGrad", attrs);
  b.RequireTypes("T", kRealFloatTypes);
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  const std::string half = b.TypedConst("half", 0.5);
  b.Add({{"ga"}, "RealDiv", {grad::GradName("z"), "y"}, t});        // d(z) / y
  b.Add({{"neg_ga"}, "Neg", {"ga"}, t});
  // d(y) = -d(z) / y * z  (z = 0.5 dy / y, the forward output)
  b.Return("y", b.Add({{"y_grad"}, "Mul", {"neg_ga", "z"}, t}));
  // d(dy) = 0.5 d(z) / y
  b.Return("dy", b.Add({{"dy_grad"}, "Mul", {"ga", half}, t}));
  return b.Build(g);
}

// RsqrtGrad(y, dy) = -0.5 * dy * y^3.
absl::Status RsqrtGradGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("RsqrtGrad", attrs);
  b.RequireTypes("T", kRealFloatTypes);
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  const std::string dz = grad::GradName("z");
  const std::string minus_1_5 = b.TypedConst("minus_one_and_half", -1.5);
  b.Add({{"y2"}, "Square", {"y"}, t});                             // y^2
  b.Add({{"dz_dy"}, "Mul", {dz, "dy"}, t});                        // d(z) * dy
  b.Add({{"dz_dy_y2"}, "Mul", {"dz_dy", "y2"}, t});
  // d(y) = -1.5 * d(z) * dy * y^2
  b.Return("y", b.Add({{"y_grad"}, "Mul", {"dz_dy_y2", minus_1_5}, t}));
  // d(dy) = -0.5 d(z) y^3 = RsqrtGrad(y, d(z))
  b.Return("dy", b.Add({{"dy_grad"}, "RsqrtGrad", {"y", dz}, t}));
  return b.Build(g);
}

// ReciprocalGrad(y, dy) = -dy * y^2.
absl::Status ReciprocalGradGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("ReciprocalGrad", attrs);
  b.RequireTypes("T", kRealFloatTypes);
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  const std::string dz = grad::GradName("z");
  const std::string minus_two = b.TypedConst("minus_two", -2.0);
  b.Add({{"dz_dy"}, "Mul", {dz, "dy"}, t});                        // d(z) * dy
  b.Add({{"dz_dy_y"}, "Mul", {"dz_dy", "y"}, t});
  // d(y) = -2 d(z) dy y
  b.Return("y", b.Add({{"y_grad"}, "Mul", {"dz_dy_y", minus_two}, t}));
  // d(dy) = -d(z) y^2 = ReciprocalGrad(y, d(z))
  b.Return("dy", b.Add({{"dy_grad"}, "ReciprocalGrad", {"y", dz}, t}));
  return b.Build(g);
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

}  // namespace

TF_EXT_REGISTER_TF_GRADIENT("Erfc", ErfcGrad);
TF_EXT_REGISTER_TF_GRADIENT("TanhGrad", TanhGradGrad);
TF_EXT_REGISTER_TF_GRADIENT("SigmoidGrad", SigmoidGradGrad);
TF_EXT_REGISTER_TF_GRADIENT("SqrtGrad", SqrtGradGrad);
TF_EXT_REGISTER_TF_GRADIENT("RsqrtGrad", RsqrtGradGrad);
TF_EXT_REGISTER_TF_GRADIENT("ReciprocalGrad", ReciprocalGradGrad);
TF_EXT_REGISTER_TF_GRADIENT("Round", RoundGrad);
TF_EXT_REGISTER_TF_GRADIENT("Rint", RintGrad);
TF_EXT_REGISTER_TF_GRADIENT("Ceil", CeilGrad);

}  // namespace tensorflow::tf_ext
