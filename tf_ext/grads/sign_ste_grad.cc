// Gradients of TfExt>SignSTE (the straight-through estimator, one TfExt>SignSTEGrad node) and
// of TfExt>SignSTEGrad itself (so second derivatives through sign_ste keep working).

#include <string>

#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/manifest.h"
#include "tf_ext/ops/sign_ste_ops.h"

namespace tensorflow::tf_ext {

namespace {

absl::Status SignSTEGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(*FindOpFacts("TfExt>SignSTE"), attrs);
  TF_RETURN_IF_ERROR(b.ValidAttrs(ValidateSignSTEAttrs).status());
  // The true derivative of sign is 0 almost everywhere; the STE instead differentiates
  // y ~ clamp(x, -clip, clip), whose derivative is the indicator 1[|x| <= clip]:
  // d(x) = d(y) * 1[|x| <= clip], as a select (an inf/NaN d(y) outside the band gives an exact
  // 0), in one dedicated op.
  b.DedicatedOp("TfExt>SignSTEGrad", {grad::GradName("y"), "x"}, {"T", "clip"}, {"x"});
  return b.Build(g);
}

absl::Status SignSTEGradGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(*FindOpFacts("TfExt>SignSTEGrad"), attrs);
  TF_RETURN_IF_ERROR(b.ValidAttrs(ValidateSignSTEAttrs).status());
  const grad::NodeAttrs t = b.PassAttrs({"T", "clip"});
  const std::string dd_x = grad::GradName("d_x");
  // d_x = m(x) * d_y with m = 1[|x| <= clip]: linear in d_y, so d(d_y) = m(x) * d(d_x), the
  // same op applied to the incoming gradient.
  b.Return("d_y", b.Add({{"dd_y"}, "TfExt>SignSTEGrad", {dd_x, "x"}, t}));
  // m is piecewise constant in x: d(x) = 0 (almost everywhere; the STE's own convention).
  b.Return("x", b.Add({{"zeros_x"}, "ZerosLike", {"x"}, b.PassAttrs({"T"})}));
  return b.Build(g);
}

absl::Status SignSTESurrogate(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(*FindOpFacts("TfExt>SignSTE"), attrs,
                      grad::GradBuilder::Kind::kSurrogateForward);
  TF_ASSIGN_OR_RETURN(const SignSTEAttrs a, b.ValidAttrs(ValidateSignSTEAttrs));
  const float clip = a.clip;
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  // y ~ clamp(x, -clip, clip): derivative 1[|x| < clip], the STE's gradient (the two differ
  // only on |x| == clip, a null set a finite-difference check avoids).
  const std::string lo = b.TypedConst("lo", -static_cast<double>(clip));
  const std::string hi = b.TypedConst("hi", static_cast<double>(clip));
  b.Add({{"above_lo"}, "Maximum", {"x", lo}, t});
  b.Return("y", b.Add({{"clamped"}, "Minimum", {"above_lo", hi}, t}));
  return b.Build(g);
}

}  // namespace

TF_EXT_DECLARE_OP("TfExt>SignSTE")
    .Doc("sign(x) with a straight-through gradient estimator.")
    .Python("sign_ste")
    .Gradient(&SignSTEGrad,
              "d(x) = d(y) where |x| <= clip, else 0 (straight-through estimator; surrogate "
              "forward clamp(x, -clip, clip))")
    .Types({DT_HALF, DT_FLOAT, DT_DOUBLE})
    .Reads({"x"})
    .Surrogate(&SignSTESurrogate)
    // The STE's gradient is by design not sign's derivative: the checker differences the
    // surrogate forward clamp(x, -clip, clip) instead.
    .GradCheck("x=3x4@-2:2 attr.clip=1.0")
    .Xla()
    .Register();

TF_EXT_DECLARE_OP("TfExt>SignSTEGrad")
    .Doc("Backward pass of TfExt>SignSTE: d_y where |x| <= clip, else 0, in one kernel.")
    .Python("sign_ste_grad")
    .Gradient(&SignSTEGradGrad,
              "d(d_y) = SignSTEGrad(d(d_x), x) (linear in d_y with the same mask); d(x) = 0 "
              "(the mask is piecewise constant in x)")
    .Types({DT_HALF, DT_FLOAT, DT_DOUBLE})
    .Reads({"x"})
    // d(x) = 0 is differenced too: the seeded x lie away from |x| = clip, where a step would
    // cross the band's edge and the check would fail rather than pass.
    .GradCheck("d_y=3x4@-2:2 x=3x4@-2:2 attr.clip=1.0")
    .Xla()
    .Register();

}  // namespace tensorflow::tf_ext
