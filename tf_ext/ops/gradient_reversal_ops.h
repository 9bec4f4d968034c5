// TfExt>GradientReversal validation, called by its shape function (gradient_reversal_ops.cc), kernel and gradient creator.
// Every error is InvalidArgument starting with op_type.
#ifndef TF_EXT_OPS_GRADIENT_REVERSAL_OPS_H_
#define TF_EXT_OPS_GRADIENT_REVERSAL_OPS_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace tensorflow::tf_ext {

struct GradientReversalAttrs {
  float scale = 1;  // flushed to zero like the kernel sees it; finite
};

absl::Status ValidateGradientReversalAttrs(std::string_view op_type, const AttrSlice& attrs, GradientReversalAttrs* out);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_OPS_GRADIENT_REVERSAL_OPS_H_
