// Gradient of TfExt>ZeroOut.
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/gradients.h"
#include "tf_ext/ops/zero_out_ops.h"

namespace tensorflow::tf_ext {

absl::Status ZeroOutGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("TfExt>ZeroOut", attrs);
  b.RequireTypes("T", {DT_FLOAT, DT_DOUBLE});
  ZeroOutAttrs a;
  TF_RETURN_IF_ERROR(ValidateZeroOutAttrs(b.op_type(), attrs, &a));
  // zeroed = S x with S the 0/1 diagonal selector of preserve_index, so
  // d(to_zero) = S^T d(zeroed) = ZeroOut(d(zeroed), preserve_index).
  b.DedicatedOp("TfExt>ZeroOut", {grad::Grad("zeroed")}, {"T", "preserve_index"}, {"to_zero"});
  return b.Build(g);
}

}  // namespace tensorflow::tf_ext
