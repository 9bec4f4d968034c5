// Gradient and declaration of TfExt>SmoothL1.
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/manifest.h"
#include "tf_ext/ops/smooth_l1_ops.h"

namespace tensorflow::tf_ext {
namespace {

absl::Status SmoothL1Grad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(*FindOpFacts("TfExt>SmoothL1"), attrs);
  TF_ASSIGN_OR_RETURN(const SmoothL1Attrs a, b.ValidAttrs(ValidateSmoothL1Attrs));
  // The slope is computed in the forward's accumulation type (double for double, float for
  // float and half), so a tiny or huge delta cannot overflow a half constant.
  const bool is_double = b.GetAttr<DataType>("T") == DT_DOUBLE;
  const DataType acc = is_double ? DT_DOUBLE : DT_FLOAT;
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  const grad::NodeAttrs t_acc = {{"T", acc}};
  if (is_double) {
    b.Add(grad::FDH::Const<double>("inv_delta", 1.0 / a.delta));
    b.Add(grad::FDH::Const<double>("one", 1.0));
    b.Add(grad::FDH::Const<double>("minus_one", -1.0));
  } else {
    b.Add(grad::FDH::Const<float>("inv_delta", 1.0f / a.delta));
    b.Add(grad::FDH::Const<float>("one", 1.0f));
    b.Add(grad::FDH::Const<float>("minus_one", -1.0f));
  }
  // y = x^2 / (2 delta) for |x| < delta, |x| - delta / 2 otherwise: y is C^1 and
  // dy/dx = x / delta inside, sign(x) outside, i.e. clip(x / delta, -1, 1) everywhere.
  b.UnaryCwise({
      {{"x_acc"}, "Cast", {"x"}, {{"SrcT", grad::Placeholder("T")}, {"DstT", acc}}},  // x
      {{"x_over_delta"}, "Mul", {"x_acc", "inv_delta"}, t_acc},                      // x / delta
      {{"slope_acc"}, "ClipByValue", {"x_over_delta", "minus_one", "one"}, t_acc},   // clip(., -1, 1)
      {{"slope"}, "Cast", {"slope_acc"}, {{"SrcT", acc}, {"DstT", grad::Placeholder("T")}}},
      {{"dx"}, "Mul", {grad::GradName("y"), "slope"}, t},  // d(x) = d(y) * clip(x / delta, -1, 1)
  });
  return b.Build(g);
}

}  // namespace

TF_EXT_DECLARE_OP("TfExt>SmoothL1")
    .Doc("Elementwise smooth L1 (Huber) penalty, as in Fast R-CNN's box regression loss.")
    .Python("smooth_l1")
    .Gradient(&SmoothL1Grad, "d(x) = d(y) * clip(x / delta, -1, 1)")
    .Types({DT_HALF, DT_FLOAT, DT_DOUBLE})
    .Reads({"x"})
    // Values on a grid in [-2, 2] that keeps a finite-difference step clear of the kinks of
    // the second derivative at |x| = delta.
    .GradCheck("x=3x4@-2:2 attr.delta=1.0")
    .Xla()
    .Register();

}  // namespace tensorflow::tf_ext
