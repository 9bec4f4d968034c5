// TfExt>MedianPool2D / TfExt>MedianPool2DGrad validation, one function each for attrs and
// shapes, called by the shape functions (median_pool_ops.cc), the kernels and the gradient
// creator. Every error is InvalidArgument starting with op_type.
#ifndef TF_EXT_OPS_MEDIAN_POOL_OPS_H_
#define TF_EXT_OPS_MEDIAN_POOL_OPS_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace tensorflow::tf_ext {

// Each ksize / strides entry is in [1, 2^31-1]; windows are clipped to the image, so a large
// ksize costs no more than the image. The total work, output elements times the largest
// clipped window, is capped (a cost check, made whenever the shapes are known).
inline constexpr int64_t kMaxMedianPoolWindowVisits = int64_t{1} << 36;

struct MedianPool2DAttrs {
  int64_t ksize[2] = {1, 1};    // window height, width
  int64_t strides[2] = {1, 1};  // stride height, width
  bool same = false;            // padding == "SAME"
};

// Both TfExt>MedianPool2D and TfExt>MedianPool2DGrad.
absl::Status ValidateMedianPool2DAttrs(std::string_view op_type, const AttrSlice& attrs,
                                       MedianPool2DAttrs* out);
// x [N, H, W, C]; *y = [N, out_h, out_w, C] (MaxPool's size rules), within the cost cap.
absl::Status ValidateMedianPool2DShapes(std::string_view op_type, const MedianPool2DAttrs& a,
                                        const PartialTensorShape& x, PartialTensorShape* y);
// MedianPool2DGrad: the forward's check plus d_y shaped like y.
absl::Status ValidateMedianPool2DGradShapes(std::string_view op_type,
                                            const MedianPool2DAttrs& a,
                                            const PartialTensorShape& x,
                                            const PartialTensorShape& dy);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_OPS_MEDIAN_POOL_OPS_H_
