// Gradient of TfExt>RoiPool.
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/manifest.h"
#include "tf_ext/ops/roi_ops.h"

namespace tensorflow::tf_ext {

namespace {

absl::Status RoiPoolGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(*FindOpFacts("TfExt>RoiPool"), attrs);
  TF_RETURN_IF_ERROR(b.ValidAttrs(ValidateRoiPoolAttrs).status());
  // pooled[r, i, j, c] = data[n(r), argmax[r, i, j, c], c], a selection, so
  // d(data)[n, p, c] = sum of d(pooled)[r, i, j, c] over the bins of image n whose argmax is p.
  // argmax is the forward's output: passed in where the front end has it, recomputed for
  // SymbolicGradient (GradBuilder, "Forward outputs").
  b.DedicatedOp("TfExt>RoiPoolGrad", {"data", "rois", "argmax", grad::GradName("pooled")},
                {"T", "pooled_height", "pooled_width", "spatial_scale"}, {"data"});
  // d(rois) = 0 (declared below): bin edges are rounded ROI coordinates, piecewise constant.
  // d(argmax) is ignored: argmax is an integer output.
  return b.Build(g);
}

}  // namespace

TF_EXT_DECLARE_OP("TfExt>RoiPool")
    .Doc("Max-pools each region of interest into a fixed pooled_height x pooled_width grid "
         "(Fast R-CNN / Caffe RoI pooling).")
    .Python("roi_pool")
    .Gradient(&RoiPoolGrad,
              "d(data) = RoiPoolGrad(data, rois, argmax, d(pooled)): d(pooled) added into each "
              "ROI's image at argmax (the forward's argmax output)")
    .Types({DT_HALF, DT_FLOAT, DT_DOUBLE})
    .NotDifferentiable({"rois"})
    .Reads({"data", "rois", "argmax"})
    .IgnoresGradientOf({"argmax"})
    .GradCheck("data=2x6x7x2@-1:1 rois=rois:3 attr.pooled_height=2 attr.pooled_width=3 "
               "attr.spatial_scale=1.0")
    .Xla("a ROI whose batch index is not an integer in [0, N) or whose coordinates are not "
         "finite gives empty bins (0, argmax -1)")
    .Register();

TF_EXT_DECLARE_OP("TfExt>RoiPoolGrad")
    .Doc("Backward pass of TfExt>RoiPool: d(pooled) scatter-added into data's shape at argmax.")
    .BackwardOf("TfExt>RoiPool")
    .Xla("such a ROI's bins, and argmax values outside [0, H * W), add nothing")
    .Register();

}  // namespace tensorflow::tf_ext
