// functor::MedianPool2D<GPUDevice, T> / functor::MedianPool2DGrad<GPUDevice, T>: the CUDA half
// of TfExt>MedianPool2D and TfExt>MedianPool2DGrad, running the per-thread bodies of
// kernels/gpu/median_pool_body.h. nvcc only, under --config=cuda.
//
// The backward pass is deterministic: phase 1 writes argmedian per output (one thread per
// output), phase 2 gathers per input element over the windows containing it, in ascending
// output order; no atomics, and the same order as the CPU functor.
#if GOOGLE_CUDA
#include "tf_ext/kernels/op_gpu_common.cu.h"

#include "tf_ext/kernels/median_pool_functor.h"

namespace tensorflow::tf_ext::functor {

template <typename T>
void MedianPool2D<GPUDevice, T>::operator()(const GPUDevice& d, const MedianPool2DParams& p,
                                            const T* x, T* y) const {
  const gpu::MedianPoolGeometry g = gpu::ToGeometry(p);
  CheckLaunch(gpu::LaunchGrid(d.stream(), g.OutputSize(), gpu::MedianPoolBody<T>{g, x, y}),
              "TfExt>MedianPool2D");
}

template <typename T>
void MedianPool2DGrad<GPUDevice, T>::operator()(const GPUDevice& d, const MedianPool2DParams& p,
                                                const T* x, const T* dy, int64_t* argmedian,
                                                T* dx) const {
  const gpu::MedianPoolGeometry g = gpu::ToGeometry(p);
  CheckLaunch(gpu::LaunchGrid(d.stream(), g.OutputSize(), gpu::MedianArgBody<T>{g, x, argmedian}),
              "TfExt>MedianPool2DGrad (argmedian)");
  CheckLaunch(gpu::LaunchGrid(d.stream(), g.InputSize(),
                              gpu::MedianGradGatherBody<T>{g, argmedian, dy, dx}),
              "TfExt>MedianPool2DGrad (gather)");
}

template struct MedianPool2D<GPUDevice, float>;
template struct MedianPool2D<GPUDevice, double>;
template struct MedianPool2DGrad<GPUDevice, float>;
template struct MedianPool2DGrad<GPUDevice, double>;

}  // namespace tensorflow::tf_ext::functor

#endif  // GOOGLE_CUDA
