// The start of every OpKernel file (kernels/*_op.cc); include it before anything else. Eigen's
// thread-pool device (and, in CUDA builds, its GPU device) must be enabled before the first
// Eigen header; then the OpKernel API, the registration type lists and
// TF_EXT_REGISTER_KERNEL_BUILDER (kernel_registration.h).
#ifndef TF_EXT_KERNELS_OP_KERNEL_COMMON_H_
#define TF_EXT_KERNELS_OP_KERNEL_COMMON_H_

#define EIGEN_USE_THREADS
#if GOOGLE_CUDA
#define EIGEN_USE_GPU
#endif

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/register_types.h"
#include "tensorflow/core/framework/tensor.h"
#include "tf_ext/kernels/kernel_registration.h"

// KERNEL<CPUDevice, T> for op OP (type attr "T") on the CPU and, in CUDA builds,
// KERNEL<Eigen::GpuDevice, T> on the GPU: every type gets both devices. _WITH appends
// GPU_SUFFIX to the GPU builder, e.g. .HostMemory("rois") for inputs validated on the host.
#define TF_EXT_REGISTER_CPU_GPU_KERNEL(OP, KERNEL, T) \
  TF_EXT_REGISTER_CPU_GPU_KERNEL_WITH(OP, KERNEL, T, /* no GPU suffix */)
#define TF_EXT_REGISTER_CPU_GPU_KERNEL_WITH(OP, KERNEL, T, GPU_SUFFIX)                         \
  TF_EXT_REGISTER_KERNEL_BUILDER(Name(OP).Device(DEVICE_CPU).TypeConstraint<T>("T"),          \
                                 KERNEL<CPUDevice, T>);                                        \
  TF_EXT_REGISTER_GPU_KERNEL_(Name(OP).Device(DEVICE_GPU).TypeConstraint<T>("T") GPU_SUFFIX, \
                              KERNEL<Eigen::GpuDevice, T>)
#if GOOGLE_CUDA
#define TF_EXT_REGISTER_GPU_KERNEL_(builder, ...) \
  TF_EXT_REGISTER_KERNEL_BUILDER(builder, __VA_ARGS__)
#else
#define TF_EXT_REGISTER_GPU_KERNEL_(builder, ...)
#endif

#endif  // TF_EXT_KERNELS_OP_KERNEL_COMMON_H_
