// What every functor header (kernels/*_functor.h) needs, in one place. A functor is compiled by
// the C++ compiler (its CPU specialisation, through ParallelFor) and by nvcc (its GPU
// specialisation, declared by name only: Eigen::GpuDevice without Eigen's GPU headers), so the
// CPU half must stay invisible to nvcc.
#ifndef TF_EXT_KERNELS_FUNCTOR_COMMON_H_
#define TF_EXT_KERNELS_FUNCTOR_COMMON_H_

#include <algorithm>
#include <cstdint>

#include "tf_ext/kernels/host_device.h"

#if !defined(__CUDACC__)
#include "tf_ext/kernels/cpu_parallel_for.h"
#endif

#if GOOGLE_CUDA
namespace Eigen {
struct GpuDevice;
}  // namespace Eigen
#endif

#endif  // TF_EXT_KERNELS_FUNCTOR_COMMON_H_
