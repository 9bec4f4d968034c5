// functor::SmoothL1<GPUDevice, T>: the CUDA half of TfExt>SmoothL1. Compiled by nvcc only with
// `--config=cuda` (see tf_ext_cuda_library in tf_ext/build_defs.bzl); never includes op_kernel.h.
#if GOOGLE_CUDA
#include "tf_ext/kernels/op_gpu_common.cu.h"

#include <algorithm>

#include "tf_ext/kernels/smooth_l1_functor.h"

namespace tensorflow::tf_ext::functor {

namespace {

// One thread per element (grid-stride), each running the shared body SmoothL1Of on element i
// only, so x and y may alias.
template <typename T>
__global__ void SmoothL1Kernel(const T* x, int64_t n, float delta, T* y) {
  for (int64_t i : GpuGridRangeX<int64_t>(n)) y[i] = SmoothL1Of(x[i], delta);
}

}  // namespace

template <typename T>
void SmoothL1<GPUDevice, T>::operator()(const GPUDevice& d, const T* x, int64_t n, float delta,
                                        T* y) const {
  if (n == 0) return;
  // The launch config takes an int; the grid-stride loop covers any larger n.
  const int work = static_cast<int>(std::min<int64_t>(n, 1 << 30));
  GpuLaunchConfig config = GetGpuLaunchConfig(work, d);
  TF_CHECK_OK(GpuLaunchKernel(SmoothL1Kernel<T>, config.block_count, config.thread_per_block, 0,
                              d.stream(), x, n, delta, y));
}

template struct SmoothL1<GPUDevice, Eigen::half>;
template struct SmoothL1<GPUDevice, float>;
template struct SmoothL1<GPUDevice, double>;

}  // namespace tensorflow::tf_ext::functor

#endif  // GOOGLE_CUDA
