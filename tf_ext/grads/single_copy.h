// One copy of the op library per process. Loading the library a second time from another
// path would register every kernel twice, and TensorFlow then refuses to run any of the ops
// ("Multiple OpKernel registrations"). So a second copy registers no kernel, no XLA kernel and
// no gradient, and its load fails (TfExt>GradientFunctionDef's op registration returns the
// error below), naming both paths; the first copy stays fully usable. The kernels register
// through TF_EXT_REGISTER_KERNEL_BUILDER (tf_ext/kernels/kernel_registration.h), which asks
// here.
#ifndef TF_EXT_GRADS_SINGLE_COPY_H_
#define TF_EXT_GRADS_SINGLE_COPY_H_

#include "absl/status/status.h"

namespace tensorflow::tf_ext {

// OK in the first copy of the op library loaded into the process (or linked into it);
// FailedPrecondition naming both paths in any later copy. Decided once per copy.
absl::Status CheckSingleCopy();
inline bool IsFirstCopy() { return CheckSingleCopy().ok(); }

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRADS_SINGLE_COPY_H_
