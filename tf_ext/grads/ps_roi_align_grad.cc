// Gradient of TfExt>PsRoiAlign.
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/manifest.h"
#include "tf_ext/ops/roi_ops.h"

namespace tensorflow::tf_ext {

namespace {

absl::Status PsRoiAlignGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(*FindOpFacts("TfExt>PsRoiAlign"), attrs);
  TF_RETURN_IF_ERROR(b.ValidAttrs(ValidatePsRoiAlignAttrs).status());
  // output = A(rois) features with A the (sparse) bilinear sampling-and-averaging matrix, so
  // d(features) = A^T d(output): each sample scatters weight * d(output) / count.
  b.DedicatedOp("TfExt>PsRoiAlignGrad", {"features", "rois", grad::GradName("output")},
                {"T", "pooled_height", "pooled_width", "spatial_scale", "sampling_ratio"},
                {"features"});
  // d(rois) = 0 (declared below): the ROI is treated as given, as in R-FCN.
  return b.Build(g);
}

}  // namespace

TF_EXT_DECLARE_OP("TfExt>PsRoiAlign")
    .Doc("Position-sensitive RoI Align (R-FCN, with Detectron's bilinear sampling): bin (i, j) "
         "of output channel d averages bilinear samples of input channel "
         "(d * pooled_height + i) * pooled_width + j.")
    .Python("ps_roi_align")
    .Gradient(&PsRoiAlignGrad,
              "d(features) = PsRoiAlignGrad(features, rois, d(output)): each bilinear sample adds "
              "weight * d(output) / (grid_h * grid_w) into the pixels it read")
    .Types({DT_HALF, DT_FLOAT, DT_DOUBLE})
    .NotDifferentiable({"rois"})
    .Reads({"features", "rois"})
    .GradCheck("features=2x5x6x8@-1:1 rois=rois:3 attr.pooled_height=2 attr.pooled_width=2 "
               "attr.spatial_scale=1.0 attr.sampling_ratio=2")
    .Xla("a ROI whose batch index is not an integer in [0, N) or whose coordinates are not "
         "finite gives 0")
    .Register();

TF_EXT_DECLARE_OP("TfExt>PsRoiAlignGrad")
    .Doc("Backward pass of TfExt>PsRoiAlign: each bilinear sample scatters its share of "
         "d(output) into the pixels it read.")
    .BackwardOf("TfExt>PsRoiAlign")
    .Xla("a ROI whose batch index is not an integer in [0, N) or whose coordinates are not "
         "finite adds nothing")
    .Register();

}  // namespace tensorflow::tf_ext
