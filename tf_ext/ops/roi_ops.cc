// The ROI family, registration and shape functions:
//   TfExt>RoiPool (Fast R-CNN max ROI pooling) and its backward op TfExt>RoiPoolGrad;
//   TfExt>PsRoiAlign (R-FCN position-sensitive ROI Align) and TfExt>PsRoiAlignGrad.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tf_ext/ops/op_checks.h"
#include "tf_ext/ops/roi_ops.h"

namespace tensorflow::tf_ext {

namespace {

// pooled_height, pooled_width and spatial_scale, shared by every ROI op.
absl::Status ReadRoiGrid(std::string_view op, const AttrSlice& attrs, int64_t* ph,
                         int64_t* pw, float* spatial_scale) {
  TF_RETURN_IF_ERROR(ReadAttr(op, attrs, "pooled_height", ph));
  TF_RETURN_IF_ERROR(ReadAttr(op, attrs, "pooled_width", pw));
  TF_RETURN_IF_ERROR(ReadAttr(op, attrs, "spatial_scale", spatial_scale));
  if (*ph < 1 || *pw < 1 || *ph > kMaxPooledSize || *pw > kMaxPooledSize) {
    return OpInvalid(op, "pooled_height and pooled_width must be in [1, ", kMaxPooledSize,
                     "], got ", *ph, " and ", *pw);
  }
  // `!(x > 0)` also rejects NaN; a denormal was flushed to 0 by ReadAttr, as the kernel sees it.
  if (!(*spatial_scale > 0) || !std::isfinite(*spatial_scale)) {
    return OpInvalid(op, "spatial_scale must be a finite number > 0 (denormals count as 0), got ",
                     *spatial_scale);
  }
  return absl::OkStatus();
}

// image [N, H, W, C] (named `name`) and rois [R, 5].
absl::Status CheckRoiInputs(std::string_view op, std::string_view name,
                            const PartialTensorShape& image, const PartialTensorShape& rois) {
  TF_RETURN_IF_ERROR(CheckRank(op, name, image, 4, "NHWC"));
  if (!rois.unknown_rank() && (rois.dims() != 2 || (rois.dim_size(1) >= 0 && rois.dim_size(1) != 5))) {
    return OpInvalid(op, "rois must have shape [num_rois, 5] (batch_index, x1, y1, x2, y2), got ",
                     rois.DebugString());
  }
  return absl::OkStatus();
}

int64_t NumRois(const PartialTensorShape& rois) { return DimOf(rois, 0); }

}  // namespace

absl::Status ValidateRoiPoolAttrs(std::string_view op_type, const AttrSlice& attrs,
                                  RoiPoolAttrs* out) {
  return ReadRoiGrid(op_type, attrs, &out->pooled_height, &out->pooled_width,
                     &out->spatial_scale);
}

absl::Status ValidateRoiPoolShapes(std::string_view op, const RoiPoolAttrs& a,
                                   const PartialTensorShape& data,
                                   const PartialTensorShape& rois, PartialTensorShape* pooled) {
  TF_RETURN_IF_ERROR(CheckRoiInputs(op, "data", data, rois));
  const int64_t H = DimOf(data, 1), W = DimOf(data, 2);
  // argmax stores h * W + w as int32. Division, so H * W itself cannot overflow.
  if (H > 0 && W > std::numeric_limits<int32_t>::max() / H) {
    return OpInvalid(op, "H * W must fit argmax's int32, but data has shape ", data.DebugString());
  }
  return MakeShape(op, "pooled", {NumRois(rois), a.pooled_height, a.pooled_width, DimOf(data, 3)},
                   pooled);
}

absl::Status ValidateRoiPoolGradShapes(std::string_view op, const RoiPoolAttrs& a,
                                       const PartialTensorShape& data,
                                       const PartialTensorShape& rois,
                                       const PartialTensorShape& argmax,
                                       const PartialTensorShape& d_pooled) {
  PartialTensorShape pooled;
  TF_RETURN_IF_ERROR(ValidateRoiPoolShapes(op, a, data, rois, &pooled));
  TF_RETURN_IF_ERROR(CheckCompatible(op, "argmax", argmax, pooled,
                                     "[num_rois, pooled_height, pooled_width, C]"));
  return CheckCompatible(op, "d_pooled", d_pooled, pooled,
                         "[num_rois, pooled_height, pooled_width, C]");
}

absl::Status ValidatePsRoiAlignAttrs(std::string_view op_type, const AttrSlice& attrs,
                                     PsRoiAlignAttrs* out) {
  TF_RETURN_IF_ERROR(ReadRoiGrid(op_type, attrs, &out->pooled_height, &out->pooled_width,
                                 &out->spatial_scale));
  TF_RETURN_IF_ERROR(ReadAttr(op_type, attrs, "sampling_ratio", &out->sampling_ratio));
  if (out->sampling_ratio < 0 || out->sampling_ratio > kMaxSamplingRatio) {
    return OpInvalid(op_type, "sampling_ratio must be in [0, ", kMaxSamplingRatio,
                     "] (0: adaptive), got ", out->sampling_ratio);
  }
  return absl::OkStatus();
}

absl::Status ValidatePsRoiAlignShapes(std::string_view op, const PsRoiAlignAttrs& a,
                                      const PartialTensorShape& features,
                                      const PartialTensorShape& rois,
                                      PartialTensorShape* output) {
  TF_RETURN_IF_ERROR(CheckRoiInputs(op, "features", features, rois));
  int64_t bins = 0;
  TF_RETURN_IF_ERROR(
      CheckedMul(op, "pooled_height * pooled_width", a.pooled_height, a.pooled_width, &bins));
  int64_t channels = DimOf(features, 3);
  if (channels >= 0) {
    if (channels % bins != 0) {
      return OpInvalid(op, "the channel count of features (", channels,
                       ") must be divisible by pooled_height * pooled_width = ", bins,
                       "; features has shape ", features.DebugString());
    }
    channels /= bins;
  }
  return MakeShape(op, "output", {NumRois(rois), a.pooled_height, a.pooled_width, channels},
                   output);
}

absl::Status ValidatePsRoiAlignGradShapes(std::string_view op, const PsRoiAlignAttrs& a,
                                          const PartialTensorShape& features,
                                          const PartialTensorShape& rois,
                                          const PartialTensorShape& d_output) {
  PartialTensorShape output;
  TF_RETURN_IF_ERROR(ValidatePsRoiAlignShapes(op, a, features, rois, &output));
  return CheckCompatible(op, "d_output", d_output, output,
                         "[num_rois, pooled_height, pooled_width, D]");
}

namespace {

using shape_inference::InferenceContext;

constexpr char kRoiPool[] = "TfExt>RoiPool";
constexpr char kRoiPoolGrad[] = "TfExt>RoiPoolGrad";
constexpr char kPsRoiAlign[] = "TfExt>PsRoiAlign";
constexpr char kPsRoiAlignGrad[] = "TfExt>PsRoiAlignGrad";

absl::Status RoiPoolShapeFn(InferenceContext* c) {
  TF_ASSIGN_OR_RETURN(const RoiPoolAttrs a, ShapeFnValidAttrs(c, kRoiPool, ValidateRoiPoolAttrs));
  PartialTensorShape pooled;
  TF_RETURN_IF_ERROR(ValidateRoiPoolShapes(kRoiPool, a, InputShape(c, 0), InputShape(c, 1), &pooled));
  TF_RETURN_IF_ERROR(SetOutputShape(c, 0, pooled));
  return SetOutputShape(c, 1, pooled);
}

absl::Status RoiPoolGradShapeFn(InferenceContext* c) {
  TF_ASSIGN_OR_RETURN(const RoiPoolAttrs a,
                      ShapeFnValidAttrs(c, kRoiPoolGrad, ValidateRoiPoolAttrs));
  TF_RETURN_IF_ERROR(ValidateRoiPoolGradShapes(kRoiPoolGrad, a, InputShape(c, 0), InputShape(c, 1),
                                               InputShape(c, 2), InputShape(c, 3)));
  c->set_output(0, c->input(0));
  return absl::OkStatus();
}

absl::Status PsRoiAlignShapeFn(InferenceContext* c) {
  TF_ASSIGN_OR_RETURN(const PsRoiAlignAttrs a,
                      ShapeFnValidAttrs(c, kPsRoiAlign, ValidatePsRoiAlignAttrs));
  PartialTensorShape output;
  TF_RETURN_IF_ERROR(
      ValidatePsRoiAlignShapes(kPsRoiAlign, a, InputShape(c, 0), InputShape(c, 1), &output));
  return SetOutputShape(c, 0, output);
}

absl::Status PsRoiAlignGradShapeFn(InferenceContext* c) {
  TF_ASSIGN_OR_RETURN(const PsRoiAlignAttrs a,
                      ShapeFnValidAttrs(c, kPsRoiAlignGrad, ValidatePsRoiAlignAttrs));
  TF_RETURN_IF_ERROR(ValidatePsRoiAlignGradShapes(kPsRoiAlignGrad, a, InputShape(c, 0),
                                                  InputShape(c, 1), InputShape(c, 2)));
  c->set_output(0, c->input(0));
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("TfExt>RoiPool")
    .Input("data: T")
    .Input("rois: float")
    .Output("pooled: T")
    .Output("argmax: int32")
    .Attr("T: {half, float, double}")
    .Attr("pooled_height: int >= 1")
    .Attr("pooled_width: int >= 1")
    .Attr("spatial_scale: float")
    .SetShapeFn(RoiPoolShapeFn)
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
spatial_scale: input-image to feature-map scale, e.g. 1/16; must be finite and > 0 after
  flushing denormals to zero (as the kernel sees it).
pooled_height, pooled_width: bins per ROI axis, each in [1, 1024] (kMaxPooledSize).
)doc");

REGISTER_OP("TfExt>RoiPoolGrad")
    .Input("data: T")
    .Input("rois: float")
    .Input("argmax: int32")
    .Input("d_pooled: T")
    .Output("d_data: T")
    .Attr("T: {half, float, double}")
    .Attr("pooled_height: int >= 1")
    .Attr("pooled_width: int >= 1")
    .Attr("spatial_scale: float")
    .SetShapeFn(RoiPoolGradShapeFn)
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
    .Attr("T: {half, float, double}")
    .Attr("pooled_height: int >= 1")
    .Attr("pooled_width: int >= 1")
    .Attr("spatial_scale: float")
    .Attr("sampling_ratio: int >= 0 = 2")
    .SetShapeFn(PsRoiAlignShapeFn)
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
sampling_ratio: samples per bin and axis, in [0, 64] (kMaxSamplingRatio); 0 picks ceil(bin size)
  per ROI and axis (only the samples that fall in [-1, size] are visited, so the adaptive
  mode's work per ROI is bounded by the image size, not by the ROI's). Averages are
  accumulated in double for float32 too.
spatial_scale, pooled_height, pooled_width: as TfExt>RoiPool (finite > 0 after flushing
  denormals; each pooled size in [1, 1024]).
)doc");

REGISTER_OP("TfExt>PsRoiAlignGrad")
    .Input("features: T")
    .Input("rois: float")
    .Input("d_output: T")
    .Output("d_features: T")
    .Attr("T: {half, float, double}")
    .Attr("pooled_height: int >= 1")
    .Attr("pooled_width: int >= 1")
    .Attr("spatial_scale: float")
    .Attr("sampling_ratio: int >= 0 = 2")
    .SetShapeFn(PsRoiAlignGradShapeFn)
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
