// Gradient of TfExt>MedianPool2D.
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/gradients.h"
#include "tf_ext/ops/median_pool_ops.h"

namespace tensorflow::tf_ext {

absl::Status MedianPool2DGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("TfExt>MedianPool2D", attrs);
  b.RequireTypes("T", {DT_FLOAT, DT_DOUBLE});
  MedianPool2DAttrs a;
  TF_RETURN_IF_ERROR(ValidateMedianPool2DAttrs(b.op_type(), attrs, &a));
  // y = S(x) x with S(x) the 0/1 matrix picking each window's median; S is piecewise constant
  // in x, so d(x) = S^T d(y): the dedicated op recomputes S and scatter-adds d(y).
  b.DedicatedOp("TfExt>MedianPool2DGrad", {"x", grad::Grad("y")},
                {"T", "ksize", "strides", "padding"}, {"x"});
  return b.Build(g);
}

}  // namespace tensorflow::tf_ext
