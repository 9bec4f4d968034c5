// TfExt>SignSTE / TfExt>SignSTEGrad validation, called by their shape functions
// (sign_ste_ops.cc), kernels and gradient creators.
// Every error is InvalidArgument starting with op_type.
#ifndef TF_EXT_OPS_SIGN_STE_OPS_H_
#define TF_EXT_OPS_SIGN_STE_OPS_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace tensorflow::tf_ext {

struct SignSTEAttrs {
  float clip = 1;  // flushed to zero like the kernel sees it; finite and >= 0
};

absl::Status ValidateSignSTEAttrs(std::string_view op_type, const AttrSlice& attrs, SignSTEAttrs* out);
// TfExt>SignSTEGrad: d_y and x have the same shape (no broadcasting).
absl::Status ValidateSignSTEGradShapes(std::string_view op_type, const PartialTensorShape& d_y,
                                       const PartialTensorShape& x);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_OPS_SIGN_STE_OPS_H_
