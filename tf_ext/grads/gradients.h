// FDH gradients of TensorFlow core ops that no C++ registry has (core_grads.cc; registered by
// UnifyGradientRegistries when absent). tf_ext's own ops' gradients are private to their
// files and reached through their declarations (manifest.h: FindOpFacts(op)->gradient).
#ifndef TF_EXT_GRADS_GRADIENTS_H_
#define TF_EXT_GRADS_GRADIENTS_H_

#include "absl/status/status.h"
#include "tensorflow/core/framework/function.h"

namespace tensorflow::tf_ext {

absl::Status IdentityNGrad(const AttrSlice& attrs, FunctionDef* g);
absl::Status ErfcGrad(const AttrSlice& attrs, FunctionDef* g);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRADS_GRADIENTS_H_
