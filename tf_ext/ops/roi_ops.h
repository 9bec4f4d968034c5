// The ROI family's validation, one function per op (pair): the shape functions in
// roi_ops.cc, the kernels and the gradient creators all call these, so graph mode and eager
// mode accept exactly the same calls. Every error is InvalidArgument starting with op_type.
#ifndef TF_EXT_OPS_ROI_OPS_H_
#define TF_EXT_OPS_ROI_OPS_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace tensorflow::tf_ext {

// Documented bounds that keep every ROI op's work proportional to its input and output:
// pooled sizes (bins per ROI axis) and samples per bin axis of PsRoiAlign's fixed mode.
inline constexpr int64_t kMaxPooledSize = 1024;
inline constexpr int64_t kMaxSamplingRatio = 64;

struct RoiPoolAttrs {
  int64_t pooled_height = 1, pooled_width = 1;
  float spatial_scale = 1;  // flushed to zero like the kernel sees it, then required > 0
};

struct PsRoiAlignAttrs {
  int64_t pooled_height = 1, pooled_width = 1;
  float spatial_scale = 1;
  int64_t sampling_ratio = 2;  // 0: adaptive
};

// TfExt>RoiPool and TfExt>RoiPoolGrad (op_type says which, for the messages).
//   pooled_height, pooled_width in [1, kMaxPooledSize]; spatial_scale finite and > 0.
absl::Status ValidateRoiPoolAttrs(std::string_view op_type, const AttrSlice& attrs,
                                  RoiPoolAttrs* out);
// data [N, H, W, C] with H * W < 2^31 (argmax is int32), rois [R, 5]; *pooled = [R, ph, pw, C].
absl::Status ValidateRoiPoolShapes(std::string_view op_type, const RoiPoolAttrs& a,
                                   const PartialTensorShape& data,
                                   const PartialTensorShape& rois, PartialTensorShape* pooled);
// RoiPoolGrad: the forward's shapes plus argmax and d_pooled shaped like pooled.
absl::Status ValidateRoiPoolGradShapes(std::string_view op_type, const RoiPoolAttrs& a,
                                       const PartialTensorShape& data,
                                       const PartialTensorShape& rois,
                                       const PartialTensorShape& argmax,
                                       const PartialTensorShape& d_pooled);

// TfExt>PsRoiAlign and TfExt>PsRoiAlignGrad.
//   as RoiPool, plus sampling_ratio in [0, kMaxSamplingRatio].
absl::Status ValidatePsRoiAlignAttrs(std::string_view op_type, const AttrSlice& attrs,
                                     PsRoiAlignAttrs* out);
// features [N, H, W, D * ph * pw], rois [R, 5]; *output = [R, ph, pw, D].
absl::Status ValidatePsRoiAlignShapes(std::string_view op_type, const PsRoiAlignAttrs& a,
                                      const PartialTensorShape& features,
                                      const PartialTensorShape& rois,
                                      PartialTensorShape* output);
// PsRoiAlignGrad: the forward's shapes plus d_output shaped like output.
absl::Status ValidatePsRoiAlignGradShapes(std::string_view op_type, const PsRoiAlignAttrs& a,
                                          const PartialTensorShape& features,
                                          const PartialTensorShape& rois,
                                          const PartialTensorShape& d_output);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_OPS_ROI_OPS_H_
