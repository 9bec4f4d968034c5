// Gradient of TfExt>PsRoiAlign.
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/gradients.h"
#include "tf_ext/ops/roi_ops.h"

namespace tensorflow::tf_ext {

absl::Status PsRoiAlignGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("TfExt>PsRoiAlign", attrs);
  b.RequireTypes("T", {DT_FLOAT, DT_DOUBLE});
  PsRoiAlignAttrs a;
  TF_RETURN_IF_ERROR(ValidatePsRoiAlignAttrs(b.op_type(), attrs, &a));
  // output = A(rois) features with A the (sparse) bilinear sampling-and-averaging matrix, so
  // d(features) = A^T d(output): each sample scatters weight * d(output) / count.
  b.DedicatedOp("TfExt>PsRoiAlignGrad", {"features", "rois", grad::Grad("output")},
                {"T", "pooled_height", "pooled_width", "spatial_scale", "sampling_ratio"},
                {"features"});
  // The ROI is treated as given (as in R-FCN): no gradient flows into the boxes.
  b.NotDifferentiable("rois");
  return b.Build(g);
}

}  // namespace tensorflow::tf_ext
