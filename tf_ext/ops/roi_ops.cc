// The ROI family, registration and shape functions:
//   TfExt>RoiPool (Fast R-CNN max ROI pooling) and its backward op TfExt>RoiPoolGrad;
//   TfExt>PsRoiAlign (R-FCN position-sensitive ROI Align) and TfExt>PsRoiAlignGrad.
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tensorflow::tf_ext {

namespace {

using shape_inference::DimensionHandle;
using shape_inference::InferenceContext;
using shape_inference::ShapeHandle;

// Rejects spatial_scale <= 0 (or NaN/inf) when the graph is built, so the error shows up at
// the op's construction site and not only at run time.
absl::Status CheckSpatialScale(InferenceContext* c, const char* op) {
  float spatial_scale = 0;
  TF_RETURN_IF_ERROR(c->GetAttr("spatial_scale", &spatial_scale));
  if (!(spatial_scale > 0) || !std::isfinite(spatial_scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": spatial_scale must be a finite number > 0, got ", spatial_scale));
  }
  return absl::OkStatus();
}

// Checks the attrs and input 0 = [N, H, W, C], input 1 = rois [R, 5]; returns
// [R, pooled_height, pooled_width, channels] where channels is C / (pooled_height *
// pooled_width) when `position_sensitive`, else C.
absl::Status RoiOutputShape(InferenceContext* c, const char* op, bool position_sensitive,
                            ShapeHandle* out) {
  TF_RETURN_IF_ERROR(CheckSpatialScale(c, op));
  int64_t ph = 0, pw = 0;
  TF_RETURN_IF_ERROR(c->GetAttr("pooled_height", &ph));
  TF_RETURN_IF_ERROR(c->GetAttr("pooled_width", &pw));
  ShapeHandle data, rois;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &data));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &rois));
  DimensionHandle unused;
  TF_RETURN_IF_ERROR(c->WithValue(c->Dim(rois, 1), 5, &unused));
  DimensionHandle channels = c->Dim(data, 3);
  if (position_sensitive) {
    if (c->ValueKnown(channels) && c->Value(channels) % (ph * pw) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": the channel count of features (", c->Value(channels),
          ") must be divisible by pooled_height * pooled_width = ", ph * pw));
    }
    TF_RETURN_IF_ERROR(c->Divide(channels, ph * pw, /*evenly_divisible=*/true, &channels));
  }
  *out = c->MakeShape({c->Dim(rois, 0), c->MakeDim(ph), c->MakeDim(pw), channels});
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("TfExt>RoiPool")
    .Input("data: T")
    .Input("rois: float")
    .Output("pooled: T")
    .Output("argmax: int32")
    .Attr("T: {float, double}")
    .Attr("pooled_height: int >= 1")
    .Attr("pooled_width: int >= 1")
    .Attr("spatial_scale: float")
    .SetShapeFn([](InferenceContext* c) -> absl::Status {
      ShapeHandle out;
      TF_RETURN_IF_ERROR(RoiOutputShape(c, "TfExt>RoiPool", /*position_sensitive=*/false, &out));
      c->set_output(0, out);
      c->set_output(1, out);
      return absl::OkStatus();
    })
    .Doc(R"doc(
Fast R-CNN max ROI pooling (NHWC), with the classic Caffe bin rule.

Each ROI is scaled by `spatial_scale` and rounded to whole pixels (half away from zero):
x1' = round(x1 * spatial_scale), ..., roi_w = max(x2' - x1' + 1, 1), roi_h likewise. Bin (i, j)
covers rows [floor(i * roi_h / ph) + y1', ceil((i + 1) * roi_h / ph) + y1') and columns
likewise, clipped to the image; it is pooled by a per-channel max. An empty bin gives 0.

data: [N, H, W, C] feature maps.
rois: [R, 5] float32 rows (batch_index, x1, y1, x2, y2) in input-image coordinates;
  batch_index must be an integer in [0, N), coordinates must be finite.
pooled: [R, pooled_height, pooled_width, C] bin maxima. A NaN in a bin propagates (the first
  NaN in row-major order is taken).
argmax: [R, pooled_height, pooled_width, C] int32 position h * W + w of each maximum in its
  image (the first in row-major order on ties); -1 for an empty bin.
spatial_scale: input-image to feature-map scale, e.g. 1/16; must be > 0.
)doc");

REGISTER_OP("TfExt>RoiPoolGrad")
    .Input("data: T")
    .Input("rois: float")
    .Input("argmax: int32")
    .Input("d_pooled: T")
    .Output("d_data: T")
    .Attr("T: {float, double}")
    .Attr("pooled_height: int >= 1")
    .Attr("pooled_width: int >= 1")
    .Attr("spatial_scale: float")
    .SetShapeFn([](InferenceContext* c) -> absl::Status {
      ShapeHandle pooled, argmax, d_pooled;
      TF_RETURN_IF_ERROR(RoiOutputShape(c, "TfExt>RoiPoolGrad", /*position_sensitive=*/false, &pooled));
      TF_RETURN_IF_ERROR(c->Merge(pooled, c->input(2), &argmax));
      TF_RETURN_IF_ERROR(c->Merge(argmax, c->input(3), &d_pooled));
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    })
    .Doc(R"doc(
Backward pass of TfExt>RoiPool with respect to `data`.

data: [N, H, W, C] the forward input (only its shape is read).
rois: [R, 5] the forward ROIs.
argmax: [R, pooled_height, pooled_width, C] the forward argmax output; values in [-1, H * W).
d_pooled: [R, pooled_height, pooled_width, C] gradient of the forward `pooled` output.
d_data: [N, H, W, C] d_pooled added into the image of each ROI at argmax (-1 adds nothing).
)doc");

REGISTER_OP("TfExt>PsRoiAlign")
    .Input("features: T")
    .Input("rois: float")
    .Output("output: T")
    .Attr("T: {float, double}")
    .Attr("pooled_height: int >= 1")
    .Attr("pooled_width: int >= 1")
    .Attr("spatial_scale: float")
    .Attr("sampling_ratio: int >= 0 = 2")
    .SetShapeFn([](InferenceContext* c) -> absl::Status {
      ShapeHandle out;
      TF_RETURN_IF_ERROR(RoiOutputShape(c, "TfExt>PsRoiAlign", /*position_sensitive=*/true, &out));
      c->set_output(0, out);
      return absl::OkStatus();
    })
    .Doc(R"doc(
R-FCN position-sensitive ROI Align (NHWC), with Detectron's bilinear sampling.

The ROI is scaled by `spatial_scale` without rounding; roi_w = max(x2 - x1, 1), roi_h likewise,
bin_h = roi_h / pooled_height, bin_w = roi_w / pooled_width. Bin (i, j) of output channel d
reads input channel (d * pooled_height + i) * pooled_width + j and averages grid_h x grid_w
bilinear samples at y = y1 + i * bin_h + (iy + 0.5) * bin_h / grid_h (x likewise). Samples
with y < -1, y > H, x < -1 or x > W read 0 but still count in the average.

features: [N, H, W, D * pooled_height * pooled_width] position-sensitive score maps.
rois: [R, 5] float32 rows (batch_index, x1, y1, x2, y2) in input-image coordinates;
  batch_index must be an integer in [0, N), coordinates must be finite.
output: [R, pooled_height, pooled_width, D].
spatial_scale: input-image to feature-map scale, e.g. 1/16; must be > 0.
sampling_ratio: samples per bin and axis; 0 picks ceil(bin size) per ROI and axis (capped
  at 2^30, i.e. only for bins wider than a billion pixels).
)doc");

REGISTER_OP("TfExt>PsRoiAlignGrad")
    .Input("features: T")
    .Input("rois: float")
    .Input("d_output: T")
    .Output("d_features: T")
    .Attr("T: {float, double}")
    .Attr("pooled_height: int >= 1")
    .Attr("pooled_width: int >= 1")
    .Attr("spatial_scale: float")
    .Attr("sampling_ratio: int >= 0 = 2")
    .SetShapeFn([](InferenceContext* c) -> absl::Status {
      ShapeHandle out, d_out;
      TF_RETURN_IF_ERROR(
          RoiOutputShape(c, "TfExt>PsRoiAlignGrad", /*position_sensitive=*/true, &out));
      TF_RETURN_IF_ERROR(c->Merge(out, c->input(2), &d_out));
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    })
    .Doc(R"doc(
Backward pass of TfExt>PsRoiAlign with respect to `features`.

features: [N, H, W, D * pooled_height * pooled_width] the forward input (only its shape is
  read).
rois: [R, 5] the forward ROIs.
d_output: [R, pooled_height, pooled_width, D] gradient of the forward output.
d_features: [N, H, W, D * pooled_height * pooled_width]; each sample adds its bilinear
  weights times d_output / (grid_h * grid_w) into the four pixels it read.
)doc");

}  // namespace tensorflow::tf_ext
