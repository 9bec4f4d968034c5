// functor::ZeroOut<GPUDevice, T>: the CUDA half of TfExt>ZeroOut. Compiled by nvcc only with
// `--config=cuda` (see tf_ext_cuda_library in tf_ext/build_defs.bzl); never includes op_kernel.h.
#if GOOGLE_CUDA
#include "tf_ext/kernels/op_gpu_common.cu.h"

#include "tf_ext/kernels/zero_out_functor.h"

namespace tensorflow::tf_ext::functor {

namespace {

// One thread per element (grid-stride): out[i] = i == p ? in[i] : 0. Each thread reads and
// writes only element i, so in and out may alias.
template <typename T>
__global__ void ZeroOutKernel(const T* in, int64_t n, int64_t preserve_index, T* out) {
  for (int64_t i : GpuGridRangeX<int64_t>(n)) out[i] = i == preserve_index ? in[i] : T(0);
}

}  // namespace

template <typename T>
void ZeroOut<GPUDevice, T>::operator()(const GPUDevice& d, const T* in, int64_t n,
                                       int64_t preserve_index, T* out) const {
  if (n == 0) return;
  // The launch config takes an int; the grid-stride loop covers any larger n.
  const int work = static_cast<int>(std::min<int64_t>(n, 1 << 30));
  GpuLaunchConfig config = GetGpuLaunchConfig(work, d);
  TF_CHECK_OK(GpuLaunchKernel(ZeroOutKernel<T>, config.block_count, config.thread_per_block, 0,
                              d.stream(), in, n, preserve_index, out));
}

template struct ZeroOut<GPUDevice, float>;
template struct ZeroOut<GPUDevice, double>;
template struct ZeroOut<GPUDevice, int32_t>;

}  // namespace tensorflow::tf_ext::functor

#endif  // GOOGLE_CUDA
