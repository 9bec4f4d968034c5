// Gradient of TfExt>MedianPool2D.
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/manifest.h"
#include "tf_ext/ops/median_pool_ops.h"

namespace tensorflow::tf_ext {

namespace {

absl::Status MedianPool2DGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(*FindOpFacts("TfExt>MedianPool2D"), attrs);
  TF_RETURN_IF_ERROR(b.ValidAttrs(ValidateMedianPool2DAttrs).status());
  // y = S(x) x with S(x) the 0/1 matrix picking each window's median; S is piecewise constant
  // in x, so d(x) = S^T d(y): the dedicated op recomputes S and scatter-adds d(y).
  b.DedicatedOp("TfExt>MedianPool2DGrad", {"x", grad::GradName("y")},
                {"T", "ksize", "strides", "padding"}, {"x"});
  return b.Build(g);
}

}  // namespace

TF_EXT_DECLARE_OP("TfExt>MedianPool2D")
    .Doc("2-D median pooling over each channel.")
    .Python("median_pool2d")
    .Gradient(&MedianPool2DGrad,
              "d(x) = MedianPool2DGrad(x, d(y)): d(y) scatter-added onto each window's median "
              "element (rank (m-1)/2 of a stable sort by value; argmedian recomputed by the grad "
              "op)")
    .Types({DT_HALF, DT_FLOAT, DT_DOUBLE})
    .Reads({"x"})
    .GradCheck("x=2x6x7x3@-1:1 attr.ksize=[3,3] attr.strides=[2,2] attr.padding=SAME")
    .Xla()
    .Register();

TF_EXT_DECLARE_OP("TfExt>MedianPool2DGrad")
    .Doc("Backward pass of TfExt>MedianPool2D: d(y) scatter-added onto each window's median "
         "element.")
    .BackwardOf("TfExt>MedianPool2D")
    .Xla()
    .Register();

}  // namespace tensorflow::tf_ext
