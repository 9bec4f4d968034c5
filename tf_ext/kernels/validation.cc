#include "tf_ext/kernels/validation.h"

namespace tensorflow::tf_ext {

absl::Status CheckRank(OpKernelContext* ctx, const char* name, const Tensor& t, int rank) {
  if (t.dims() == rank) return absl::OkStatus();
  return OpError(ctx, name, " must have rank ", rank, ", got shape ", t.shape().DebugString());
}

}  // namespace tensorflow::tf_ext
