// TfExt>ZeroOut validation, called by its shape function (zero_out_ops.cc), kernel and gradient creator.
// Every error is InvalidArgument starting with op_type.
#ifndef TF_EXT_OPS_ZERO_OUT_OPS_H_
#define TF_EXT_OPS_ZERO_OUT_OPS_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace tensorflow::tf_ext {

struct ZeroOutAttrs {
  int64_t preserve_index = 0;  // >= 0
};

absl::Status ValidateZeroOutAttrs(std::string_view op_type, const AttrSlice& attrs, ZeroOutAttrs* out);

// to_zero must have more than preserve_index elements once its element count is known.
absl::Status ValidateZeroOutShapes(std::string_view op_type, const ZeroOutAttrs& a,
                                   const PartialTensorShape& to_zero);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_OPS_ZERO_OUT_OPS_H_
