// Gradients of TensorFlow's math ops that no C++ registry has in TensorFlow 2.21, written from
// the formulas of Python's python/ops/math_grad.py. Each is registered in both C++ registries
// when the op library loads, unless TensorFlow has one already (TF_EXT_REGISTER_TF_GRADIENT).
//
// Checked against numeric Jacobians: tf_ext/tools/tf_core_gradcheck_spec.txt (`make gradcheck`).
#include <cmath>
#include <string>

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

}  // namespace

TF_EXT_REGISTER_TF_GRADIENT("Erfc", ErfcGrad);

}  // namespace tensorflow::tf_ext
