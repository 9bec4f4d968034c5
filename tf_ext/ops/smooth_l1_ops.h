// TfExt>SmoothL1 validation, called by its shape function (smooth_l1_ops.cc), kernel and
// gradient creator. Every error is InvalidArgument starting with op_type.
#ifndef TF_EXT_OPS_SMOOTH_L1_OPS_H_
#define TF_EXT_OPS_SMOOTH_L1_OPS_H_

#include <string_view>

#include "absl/status/status.h"
#include "tensorflow/core/framework/node_def_util.h"

namespace tensorflow::tf_ext {

struct SmoothL1Attrs {
  float delta = 1;  // flushed to zero like the kernel sees it; finite and > 0
};

absl::Status ValidateSmoothL1Attrs(std::string_view op_type, const AttrSlice& attrs,
                                   SmoothL1Attrs* out);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_OPS_SMOOTH_L1_OPS_H_
