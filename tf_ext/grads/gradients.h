// Declarations of tf_ext's FDH gradient functions (one per differentiable op). They are
// registered from the manifest (tf_ext/grads/manifest.cc), never individually.
#ifndef TF_EXT_GRADS_GRADIENTS_H_
#define TF_EXT_GRADS_GRADIENTS_H_

#include "absl/status/status.h"
#include "tensorflow/core/framework/function.h"

namespace tensorflow::tf_ext {

absl::Status ZeroOutGrad(const AttrSlice& attrs, FunctionDef* g);
absl::Status RoiPoolGrad(const AttrSlice& attrs, FunctionDef* g);
absl::Status PsRoiAlignGrad(const AttrSlice& attrs, FunctionDef* g);
absl::Status MedianPool2DGrad(const AttrSlice& attrs, FunctionDef* g);
absl::Status SignSTEGrad(const AttrSlice& attrs, FunctionDef* g);
absl::Status SignSTESurrogate(const AttrSlice& attrs, FunctionDef* g);
absl::Status GradientReversalGrad(const AttrSlice& attrs, FunctionDef* g);
absl::Status GradientReversalSurrogate(const AttrSlice& attrs, FunctionDef* g);

// TensorFlow core ops with no C++ gradient in either registry (core_grads.cc).
absl::Status IdentityNGrad(const AttrSlice& attrs, FunctionDef* g);
absl::Status ErfcGrad(const AttrSlice& attrs, FunctionDef* g);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRADS_GRADIENTS_H_
