// What the ROI ops' XLA lowerings share (roi_pool_lowering.cc, ps_roi_align_lowering.cc): the
// ROI rows the CPU kernels would accept, and the sizes that pick an index type.
#ifndef TF_EXT_XLA_ROI_LOWERING_UTIL_H_
#define TF_EXT_XLA_ROI_LOWERING_UTIL_H_

#include <cstdint>

#include "xla/hlo/builder/xla_builder.h"

namespace tensorflow::tf_ext::lowering {

// The rows of rois [R, 5] (F32) that kernels/validation.h's CheckRois accepts: batch index an
// integer in [0, num_images), coordinates finite. `valid`: PRED [R]; `image`: S32 [R], the
// batch index where valid, else 0 (always a usable index when num_images > 0).
struct CheckedRois {
  xla::XlaOp valid, image;
};
CheckedRois CheckRois(xla::XlaOp rois, int64_t num_rois, int64_t num_images);

// Column `k` of rois as [R].
xla::XlaOp RoiColumn(xla::XlaOp rois, int64_t num_rois, int64_t k);

// S32 when every value of [0, count) fits, else S64.
xla::PrimitiveType IndexTypeFor(int64_t count);

}  // namespace tensorflow::tf_ext::lowering

#endif  // TF_EXT_XLA_ROI_LOWERING_UTIL_H_
