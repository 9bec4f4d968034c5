#include "tf_ext/xla/roi_lowering_util.h"

#include <limits>

#include "tf_ext/xla/lowering_util.h"
#include "xla/hlo/builder/lib/constants.h"

namespace tensorflow::tf_ext::lowering {

xla::XlaOp RoiColumn(xla::XlaOp rois, int64_t num_rois, int64_t k) {
  return xla::Reshape(xla::Slice(rois, {0, k}, {num_rois, k + 1}, {1, 1}), {num_rois});
}

CheckedRois CheckRois(xla::XlaOp rois, int64_t num_rois, int64_t num_images) {
  const int64_t r = num_rois;
  xla::XlaOp index = RoiColumn(rois, r, 0);
  xla::XlaOp valid = xla::And(
      xla::Eq(index, xla::Floor(index)),
      xla::And(xla::Ge(index, xla::ScalarLike(index, 0)),
               xla::Lt(index, xla::ScalarLike(index, static_cast<double>(num_images)))));
  for (int64_t k = 1; k < 5; ++k) valid = xla::And(valid, xla::IsFinite(RoiColumn(rois, r, k)));
  xla::XlaOp image =
      xla::ConvertElementType(xla::Select(valid, index, xla::ZerosLike(index)), xla::S32);
  return {valid, image};
}

xla::PrimitiveType IndexTypeFor(int64_t count) {
  return count <= std::numeric_limits<int32_t>::max() ? xla::S32 : xla::S64;
}

}  // namespace tensorflow::tf_ext::lowering
