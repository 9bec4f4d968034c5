// Gradient of TfExt>SignSTE: the straight-through estimator, composed from stock ops.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/manifest.h"
#include "tf_ext/ops/sign_ste_ops.h"

namespace tensorflow::tf_ext {

namespace {

absl::Status SignSTEGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(*FindOpFacts("TfExt>SignSTE"), attrs);
  TF_ASSIGN_OR_RETURN(const SignSTEAttrs a, b.ValidAttrs(ValidateSignSTEAttrs));
  const float clip = a.clip;  // flushed: the band the forward kernel's world sees
  // The true derivative of sign is 0 almost everywhere; the STE instead differentiates
  // y ~ clamp(x, -clip, clip), whose derivative is the indicator 1[|x| <= clip].
  const std::string clip_t = b.TypedConst("clip", clip);  // clip, as T
  const std::string dy = grad::GradName("y");
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  b.UnaryCwise({
      {{"abs_x"}, "Abs", {"x"}, t},                      // |x|
      {{"inside"}, "LessEqual", {"abs_x", clip_t}, t},   // 1[|x| <= clip] (false at NaN)
      {{"zeros"}, "ZerosLike", {dy}, t},                 // 0
      // d(x) = d(y) * 1[|x| <= clip]; Select, not Mul, so an inf/NaN d(y) outside the band
      // still gives an exact 0.
      {{"dx"}, "Select", {"inside", dy, "zeros"}, t},
  });
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
    .Register();

}  // namespace tensorflow::tf_ext
