// One copy of the op library per process. Loading the library a second time from another
// path would register every kernel twice, and TensorFlow then refuses to run any of the ops
// ("Multiple OpKernel registrations"). So a second copy registers no kernel and no gradient,
// and its load fails (TfExt>GradientFunctionDef's op registration returns the error below),
// naming both paths; the first copy stays fully usable.
#ifndef TF_EXT_KERNELS_SINGLE_COPY_H_
#define TF_EXT_KERNELS_SINGLE_COPY_H_

#include "absl/status/status.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace tensorflow::tf_ext {

// OK in the first copy of the op library loaded into the process (or linked into it);
// FailedPrecondition naming both paths in any later copy. Decided once per copy.
absl::Status CheckSingleCopy();
inline bool IsFirstCopy() { return CheckSingleCopy().ok(); }

}  // namespace tensorflow::tf_ext

// REGISTER_KERNEL_BUILDER, except that a second copy of the library registers nothing.
#define TF_EXT_REGISTER_KERNEL_BUILDER(kernel_builder, ...) \
  TF_EXT_REGISTER_KERNEL_UNIQ_HELPER(__COUNTER__, kernel_builder, __VA_ARGS__)
#define TF_EXT_REGISTER_KERNEL_UNIQ_HELPER(ctr, kernel_builder, ...) \
  TF_EXT_REGISTER_KERNEL_UNIQ(ctr, kernel_builder, __VA_ARGS__)
#define TF_EXT_REGISTER_KERNEL_UNIQ(ctr, kernel_builder, ...)                               \
  static const bool tf_ext_kernel_registered_##ctr [[maybe_unused]] = [] {                  \
    if (!::tensorflow::tf_ext::IsFirstCopy()) return false;                                 \
    static ::tensorflow::kernel_factory::OpKernelRegistrar registrar(                       \
        ::tensorflow::register_kernel::kernel_builder.Build(), #__VA_ARGS__,                \
        [](::tensorflow::OpKernelConstruction* c) -> ::tensorflow::OpKernel* {              \
          return new __VA_ARGS__(c);                                                        \
        });                                                                                 \
    return true;                                                                            \
  }()

#endif  // TF_EXT_KERNELS_SINGLE_COPY_H_
