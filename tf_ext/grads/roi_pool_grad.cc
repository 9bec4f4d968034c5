// Gradient of TfExt>RoiPool.
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/gradients.h"
#include "tf_ext/ops/roi_ops.h"

namespace tensorflow::tf_ext {

absl::Status RoiPoolGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("TfExt>RoiPool", attrs);
  b.RequireTypes("T", {DT_FLOAT, DT_DOUBLE});
  RoiPoolAttrs a;
  TF_RETURN_IF_ERROR(ValidateRoiPoolAttrs(b.op_type(), attrs, &a));
  // A gradient function receives only the forward inputs, so argmax is recomputed (the
  // runtime's common-subexpression elimination can merge this node with the forward one).
  b.Add({{"fwd_pooled", "fwd_argmax"},
         "TfExt>RoiPool",
         {"data", "rois"},
         b.Forward({"T", "pooled_height", "pooled_width", "spatial_scale"})});
  // pooled[r, i, j, c] = data[n(r), argmax[r, i, j, c], c], a selection, so
  // d(data)[n, p, c] = sum of d(pooled)[r, i, j, c] over the bins of image n whose argmax is p.
  b.DedicatedOp("TfExt>RoiPoolGrad", {"data", "rois", "fwd_argmax", grad::Grad("pooled")},
                {"T", "pooled_height", "pooled_width", "spatial_scale"}, {"data"});
  // Bin edges are rounded ROI coordinates: piecewise constant, so zero almost everywhere.
  b.NotDifferentiable("rois");
  // d(argmax) is ignored: argmax is an integer output.
  return b.Build(g);
}

}  // namespace tensorflow::tf_ext
