// A TensorFlow op's C++ client gradient (ops::GradOpRegistry, REGISTER_GRADIENT_OP) as the
// function gradient SymbolicGradient expects: what unify.h's creators and the overrides of
// registry.h build on.
#ifndef TF_EXT_GRADS_CLIENT_GRADIENT_H_
#define TF_EXT_GRADS_CLIENT_GRADIENT_H_

#include <string>

#include "absl/status/status.h"
#include "tensorflow/cc/framework/grad_op_registry.h"
#include "tensorflow/core/framework/function.h"

namespace tensorflow::tf_ext {

// The function gradient of `op_type` made from its client gradient `grad_fn`, for a node with
// `attrs`: signature inputs x_0..x_{n-1} (the forward inputs, flattened) then dy_0..dy_{m-1},
// outputs dx_0..dx_{n-1}; no attr placeholders. Errors name the op. What the creators that
// UnifyGradientRegistries registers call, and FindReplacedTfGradient for a replaced client one.
absl::Status ClientGradientAsFunction(const std::string& op_type, ops::GradFunc grad_fn,
                                      const AttrSlice& attrs, FunctionDef* fdef);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRADS_CLIENT_GRADIENT_H_
