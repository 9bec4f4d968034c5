// What the gradients of TensorFlow's own ops (tf_ext/grads/tf/, one file per op family) are
// written with: the FDH helpers (grad_builder.h), the registration macro TF_EXT_REGISTER_TF_GRADIENT
// (registry.h), and the helper names they use unqualified.
#ifndef TF_EXT_GRADS_TF_TF_GRADIENT_H_
#define TF_EXT_GRADS_TF_TF_GRADIENT_H_

#include "tensorflow/core/framework/function.h"
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/registry.h"

namespace tensorflow::tf_ext {

using grad::FDH;
using grad::GradName;
using grad::NodeAttrs;
using grad::Placeholder;

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRADS_TF_TF_GRADIENT_H_
