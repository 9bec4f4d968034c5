// Input validation shared by tf_ext kernels: every failure is InvalidArgument and names the op.
#ifndef TF_EXT_KERNELS_VALIDATION_H_
#define TF_EXT_KERNELS_VALIDATION_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace tensorflow::tf_ext {

// InvalidArgument("<op type>: <message pieces...>") for the kernel's node.
template <typename... Args>
absl::Status OpError(OpKernelConstruction* ctx, const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat(ctx->def().op(), ": ", args...));
}
template <typename... Args>
absl::Status OpError(OpKernelContext* ctx, const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat(ctx->op_kernel().type_string(), ": ", args...));
}

// Fails unless `t` has rank `rank`.
absl::Status CheckRank(OpKernelContext* ctx, const char* name, const Tensor& t, int rank);

// Fails unless `rois` is a float [R, 5] tensor of rows (batch_index, x1, y1, x2, y2) whose
// batch_index is an integer value in [0, num_images) and whose coordinates are finite. Kernels
// then index images with (int64_t)batch_index and compute bins without overflow or NaN.
absl::Status CheckRois(OpKernelContext* ctx, const Tensor& rois, int64_t num_images);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_KERNELS_VALIDATION_H_
