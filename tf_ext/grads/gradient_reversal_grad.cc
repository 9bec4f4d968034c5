// Gradient of TfExt>GradientReversal, composed from stock ops.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/gradients.h"
#include "tf_ext/ops/gradient_reversal_ops.h"

namespace tensorflow::tf_ext {

absl::Status GradientReversalGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("TfExt>GradientReversal", attrs);
  b.RequireTypes("T", {DT_HALF, DT_FLOAT, DT_DOUBLE});
  GradientReversalAttrs a;
  TF_RETURN_IF_ERROR(ValidateGradientReversalAttrs(b.op_type(), attrs, &a));
  const float scale = a.scale;
  // -scale, as T: a constant of the function, since scale is an attr value, not a tensor.
  const std::string neg_scale = b.TypedConst("neg_scale", -static_cast<double>(scale));
  b.UnaryCwise({
      // y = x, but the gradient is reversed by definition: d(x) = -scale * d(y).
      {{"dx"}, "Mul", {grad::Grad("y"), neg_scale}, b.Forward({"T"})},
  });
  return b.Build(g);
}

absl::Status GradientReversalSurrogate(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("TfExt>GradientReversal", attrs,
                      grad::GradBuilder::Kind::kSurrogateForward);
  GradientReversalAttrs a;
  TF_RETURN_IF_ERROR(ValidateGradientReversalAttrs(b.op_type(), attrs, &a));
  // y ~ -scale * x: its derivative is the reversal's gradient.
  const std::string neg_scale = b.TypedConst("neg_scale", -static_cast<double>(a.scale));
  b.Return("y", b.Add({{"reversed"}, "Mul", {"x", neg_scale}, b.Forward({"T"})}));
  return b.Build(g);
}

}  // namespace tensorflow::tf_ext
