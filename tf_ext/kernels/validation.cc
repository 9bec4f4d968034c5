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

absl::Status ReadRoiGridAttrs(OpKernelConstruction* ctx, int64_t* pooled_height,
                              int64_t* pooled_width, float* spatial_scale) {
  TF_RETURN_IF_ERROR(ctx->GetAttr("pooled_height", pooled_height));
  TF_RETURN_IF_ERROR(ctx->GetAttr("pooled_width", pooled_width));
  TF_RETURN_IF_ERROR(ctx->GetAttr("spatial_scale", spatial_scale));
  constexpr int64_t kMaxPooled = std::numeric_limits<int32_t>::max();
  if (*pooled_height < 1 || *pooled_width < 1 || *pooled_height > kMaxPooled ||
      *pooled_width > kMaxPooled) {
    return OpError(ctx, "pooled_height and pooled_width must be in [1, ", kMaxPooled, "], got ",
                   *pooled_height, " and ", *pooled_width);
  }
  // `!(x > 0)` also rejects NaN.
  if (!(*spatial_scale > 0) || !std::isfinite(*spatial_scale)) {
    return OpError(ctx, "spatial_scale must be a finite number > 0, got ", *spatial_scale);
  }
  return absl::OkStatus();
}

}  // namespace tensorflow::tf_ext
