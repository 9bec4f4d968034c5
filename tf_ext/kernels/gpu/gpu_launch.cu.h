// LaunchGrid: runs a body of tf_ext/kernels/gpu/*_body.h over a grid-stride loop on a CUDA
// stream. CUDA runtime only (no TensorFlow): included by the op library's *_op_gpu.cu.cc and by
// the standalone harness (tests/gpu/gpu_harness.cu). nvcc only.
#ifndef TF_EXT_KERNELS_GPU_GPU_LAUNCH_CU_H_
#define TF_EXT_KERNELS_GPU_GPU_LAUNCH_CU_H_

#if !defined(__CUDACC__)
#error "gpu_launch.cu.h is for nvcc only"
#endif

#include <cuda_runtime.h>

#include <cstdint>

namespace tensorflow::tf_ext::gpu {

constexpr int kThreadsPerBlock = 256;
// The grid-stride loop covers any n; more blocks than this only add scheduling overhead.
constexpr int64_t kMaxBlocks = int64_t{1} << 20;

// Thread t of the grid runs body(i) for i = t, t + grid size, ... < n: one thread per element
// and every element written by exactly one thread (no atomics; deterministic).
template <typename Body>
__global__ void __launch_bounds__(kThreadsPerBlock) GridStrideKernel(int64_t n, Body body) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    body(i);
  }
}

// Enqueues GridStrideKernel on `stream`; n == 0 launches nothing. Returns the launch error.
template <typename Body>
inline cudaError_t LaunchGrid(cudaStream_t stream, int64_t n, const Body& body) {
  if (n <= 0) return cudaSuccess;
  int64_t blocks = (n + kThreadsPerBlock - 1) / kThreadsPerBlock;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  GridStrideKernel<Body><<<static_cast<unsigned>(blocks), kThreadsPerBlock, 0, stream>>>(n, body);
  return cudaGetLastError();
}

}  // namespace tensorflow::tf_ext::gpu

#endif  // TF_EXT_KERNELS_GPU_GPU_LAUNCH_CU_H_
