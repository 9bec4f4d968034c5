// Kernel registration for the op library: TF_EXT_REGISTER_KERNEL_BUILDER is
// REGISTER_KERNEL_BUILDER, except that a second copy of the library registers nothing
// (tf_ext/grads/single_copy.h).
#ifndef TF_EXT_KERNELS_KERNEL_REGISTRATION_H_
#define TF_EXT_KERNELS_KERNEL_REGISTRATION_H_

#include "tensorflow/core/framework/op_kernel.h"
#include "tf_ext/grads/single_copy.h"

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

#endif  // TF_EXT_KERNELS_KERNEL_REGISTRATION_H_
