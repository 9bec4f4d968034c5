// Gradient of TfExt>GradientReversal, composed from stock ops.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/manifest.h"
#include "tf_ext/ops/gradient_reversal_ops.h"

namespace tensorflow::tf_ext {
namespace {

absl::Status GradientReversalGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(*FindOpFacts("TfExt>GradientReversal"), attrs);
  TF_ASSIGN_OR_RETURN(const GradientReversalAttrs a, b.ValidAttrs(ValidateGradientReversalAttrs));
  const float scale = a.scale;
  // -scale, as T: a constant of the function, since scale is an attr value, not a tensor.
  const std::string neg_scale = b.TypedConst("neg_scale", -static_cast<double>(scale));
  b.UnaryCwise({
      // y = x, but the gradient is reversed by definition: d(x) = -scale * d(y).
      {{"dx"}, "Mul", {grad::GradName("y"), neg_scale}, b.PassAttrs({"T"})},
  });
  return b.Build(g);
}

absl::Status GradientReversalSurrogate(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(*FindOpFacts("TfExt>GradientReversal"), attrs,
                      grad::GradBuilder::Kind::kSurrogateForward);
  TF_ASSIGN_OR_RETURN(const GradientReversalAttrs a, b.ValidAttrs(ValidateGradientReversalAttrs));
  // y ~ -scale * x: its derivative is the reversal's gradient.
  const std::string neg_scale = b.TypedConst("neg_scale", -static_cast<double>(a.scale));
  b.Return("y", b.Add({{"reversed"}, "Mul", {"x", neg_scale}, b.PassAttrs({"T"})}));
  return b.Build(g);
}

}  // namespace

TF_EXT_DECLARE_OP("TfExt>GradientReversal")
    .Doc("Identity forward, scaled and negated gradient backward (domain-adversarial training).")
    .Python("gradient_reversal")
    .Gradient(&GradientReversalGrad, "d(x) = -scale * d(y) (surrogate forward -scale * x)")
    .Types({DT_HALF, DT_FLOAT, DT_DOUBLE})
    .Reads({})
    .Surrogate(&GradientReversalSurrogate)
    .GradCheck("x=3x4@-1:1 attr.scale=0.5")
    .Xla()
    .Register();

}  // namespace tensorflow::tf_ext
