// Gradient and surrogate FunctionDefs specialised to one node's attrs: what the Python bridge,
// the TfExt>GradientFunctionDef op, the C entry points (c_api.h) and the numeric checkers use.
// SpecializedGradient validates the NodeDef against its OpDef first (node_validation.h): no
// gradient creator, TensorFlow's own included, sees unchecked attrs.
#ifndef TF_EXT_GRADS_SPECIALIZE_H_
#define TF_EXT_GRADS_SPECIALIZE_H_

#include "absl/status/status.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/node_def.pb.h"

namespace tensorflow::tf_ext {

// The gradient FunctionDef of `node`'s op, specialised to node's attrs: no attr placeholders
// left, named uniquely per (op, attrs). Fails with NotFound if the op has no gradient creator
// and InvalidArgument if it is registered as non-differentiable. Works for any op whose
// gradient is in the function registry (tf_ext's, TensorFlow's or a third party's).
absl::Status SpecializedGradient(const NodeDef& node, FunctionDef* fdef);

// The surrogate forward of `node`'s op specialised to its attrs (NotFound if it has none).
absl::Status SpecializedSurrogateForward(const NodeDef& node, FunctionDef* fdef);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRADS_SPECIALIZE_H_
