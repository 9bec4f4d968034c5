// Gradient of TfExt>ZeroOut.
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/manifest.h"
#include "tf_ext/ops/zero_out_ops.h"

namespace tensorflow::tf_ext {

namespace {

absl::Status ZeroOutGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(*FindOpFacts("TfExt>ZeroOut"), attrs);
  TF_RETURN_IF_ERROR(b.ValidAttrs(ValidateZeroOutAttrs).status());
  // zeroed = S x with S the 0/1 diagonal selector of preserve_index, so
  // d(to_zero) = S^T d(zeroed) = ZeroOut(d(zeroed), preserve_index).
  b.DedicatedOp("TfExt>ZeroOut", {grad::GradName("zeroed")}, {"T", "preserve_index"}, {"to_zero"});
  return b.Build(g);
}

}  // namespace

TF_EXT_DECLARE_OP("TfExt>ZeroOut")
    .Doc("Zeroes every element except the one at flat (row-major) index `preserve_index`.")
    .Python("zero_out")
    .Gradient(&ZeroOutGrad,
              "d(to_zero) = ZeroOut(d(zeroed), preserve_index): dy routed to preserve_index only")
    .Types({DT_FLOAT, DT_DOUBLE})
    .Reads({})
    .GradCheck("to_zero=3x4@-1:1 attr.preserve_index=7")
    .Xla()
    .Register();

}  // namespace tensorflow::tf_ext
