// Validation of a NodeDef handed to the gradient registry from outside (the
// TfExt>GradientFunctionDef op, the C entry points): TensorFlow's gradient creators trust
// their attrs (a missing or negative N aborts the process, a huge N runs for minutes), so no
// creator may see a NodeDef that has not passed this.
#ifndef TF_EXT_GRADS_NODE_VALIDATION_H_
#define TF_EXT_GRADS_NODE_VALIDATION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "tensorflow/core/framework/node_def.pb.h"

namespace tensorflow::tf_ext {

// Largest accepted value of a number attr (e.g. N of ConcatV2) and length of a list attr.
// Far above any op a gradient is asked for, far below what makes a creator run for minutes.
inline constexpr int64_t kMaxGradientListLength = 4096;

// *full = node with the OpDef's defaults added and its inputs replaced by placeholders, after
// checking: the op is registered (NotFound otherwise); every attr is declared by the OpDef
// (internal "_" attrs are dropped), present or defaulted, and valid for it (type, minimum,
// allowed values); number and list attrs are at most kMaxGradientListLength; and the
// result passes ValidateNodeDef. Errors are InvalidArgument and start with the op type.
absl::Status ValidateNodeForGradient(const NodeDef& node, NodeDef* full);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRADS_NODE_VALIDATION_H_
