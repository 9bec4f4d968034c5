// Gradient of TfExt>SignSTE: the straight-through estimator, composed from stock ops.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/gradients.h"
#include "tf_ext/ops/sign_ste_ops.h"

namespace tensorflow::tf_ext {

absl::Status SignSTEGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("TfExt>SignSTE", attrs);
  b.RequireTypes("T", {DT_HALF, DT_FLOAT, DT_DOUBLE});
  SignSTEAttrs a;
  TF_RETURN_IF_ERROR(ValidateSignSTEAttrs(b.op_type(), attrs, &a));
  const float clip = a.clip;  // flushed: the band the forward kernel's world sees
  // The true derivative of sign is 0 almost everywhere; the STE instead differentiates
  // y ~ clamp(x, -clip, clip), whose derivative is the indicator 1[|x| <= clip].
  const std::string clip_t = b.TypedConst("clip", clip);  // clip, as T
  const std::string dy = grad::Grad("y");
  const grad::NodeAttrs t = b.Forward({"T"});
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
  grad::GradBuilder b("TfExt>SignSTE", attrs, grad::GradBuilder::Kind::kSurrogateForward);
  SignSTEAttrs a;
  TF_RETURN_IF_ERROR(ValidateSignSTEAttrs(b.op_type(), attrs, &a));
  const float clip = a.clip;
  const grad::NodeAttrs t = b.Forward({"T"});
  // y ~ clamp(x, -clip, clip): derivative 1[|x| < clip], the STE's gradient (the two differ
  // only on |x| == clip, a null set a finite-difference check avoids).
  const std::string lo = b.TypedConst("lo", -static_cast<double>(clip));
  const std::string hi = b.TypedConst("hi", static_cast<double>(clip));
  b.Add({{"above_lo"}, "Maximum", {"x", lo}, t});
  b.Return("y", b.Add({{"clamped"}, "Minimum", {"above_lo", hi}, t}));
  return b.Build(g);
}

}  // namespace tensorflow::tf_ext
