// The start of every CUDA kernel file (kernels/*_op_gpu.cu.cc), inside its `#if GOOGLE_CUDA`:
// Eigen's GPU device, TensorFlow's launch helpers, the TF-free per-thread bodies with the
// functors' geometry (gpu_bodies.h) and LaunchGrid, GPUDevice, and CheckLaunch. nvcc only.
#ifndef TF_EXT_KERNELS_OP_GPU_COMMON_CU_H_
#define TF_EXT_KERNELS_OP_GPU_COMMON_CU_H_

#define EIGEN_USE_GPU

#include <cstdint>

#include "tensorflow/core/platform/logging.h"
#include "tensorflow/core/util/gpu_kernel_helper.h"
#include "tf_ext/kernels/gpu/gpu_launch.cu.h"
#include "tf_ext/kernels/gpu_bodies.h"

namespace tensorflow::tf_ext::functor {

using GPUDevice = Eigen::GpuDevice;

// A launch that fails (no device, bad configuration) is a bug or a broken installation, never
// bad input: the inputs were validated before the functor ran.
inline void CheckLaunch(cudaError_t err, const char* what) {
  if (err != cudaSuccess) LOG(FATAL) << what << ": kernel launch: " << cudaGetErrorString(err);
}

}  // namespace tensorflow::tf_ext::functor

#endif  // TF_EXT_KERNELS_OP_GPU_COMMON_CU_H_
