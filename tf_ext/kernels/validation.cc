#include "tf_ext/kernels/validation.h"

#include <cmath>

namespace tensorflow::tf_ext {

absl::Status CheckRank(OpKernelContext* ctx, const char* name, const Tensor& t, int rank) {
  if (t.dims() == rank) return absl::OkStatus();
  return OpError(ctx, name, " must have rank ", rank, ", got shape ", t.shape().DebugString());
}

absl::Status CheckRois(OpKernelContext* ctx, const Tensor& rois, int64_t num_images) {
  if (rois.dims() != 2 || rois.dim_size(1) != 5) {
    return OpError(ctx, "rois must have shape [num_rois, 5] (batch_index, x1, y1, x2, y2), got ",
                   rois.shape().DebugString());
  }
  if (rois.dtype() != DT_FLOAT) {
    return OpError(ctx, "rois must be float32, got ", DataTypeString(rois.dtype()));
  }
  const auto r = rois.matrix<float>();
  for (int64_t i = 0; i < r.dimension(0); ++i) {
    const float b = r(i, 0);
    // `!(b >= 0)` also rejects NaN; the floor test rejects 2.5, which would otherwise be
    // truncated silently to image 2.
    if (!(b >= 0) || b >= static_cast<float>(num_images) || std::floor(b) != b) {
      return OpError(ctx, "rois[", i, "] has batch_index ", b,
                     ", which must be an integer in [0, ", num_images, ")");
    }
    for (int k = 1; k < 5; ++k) {
      if (!std::isfinite(r(i, k))) {
        return OpError(ctx, "rois[", i, "] has a non-finite coordinate ", r(i, k),
                       " in column ", k);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace tensorflow::tf_ext
