// functor::SignSTE<GPUDevice, T> / functor::SignSTEGrad<GPUDevice, T>: the CUDA half of
// TfExt>SignSTE and TfExt>SignSTEGrad, one thread per element running gpu::SignSteBody /
// gpu::SignSteGradBody (kernels/gpu/sign_ste_body.h). nvcc only, under --config=cuda.
#if GOOGLE_CUDA
#include "tf_ext/kernels/op_gpu_common.cu.h"

#include "tf_ext/kernels/sign_ste_functor.h"

namespace tensorflow::tf_ext::functor {

template <typename T>
void SignSTE<GPUDevice, T>::operator()(const GPUDevice& d, const T* x, int64_t n, T* y) const {
  using S = typename gpu::Storage<T>::type;
  const cudaError_t err = gpu::LaunchGrid(
      d.stream(), n, gpu::SignSteBody<S>{reinterpret_cast<const S*>(x), reinterpret_cast<S*>(y)});
  if (err != cudaSuccess) LOG(FATAL) << "TfExt>SignSTE: kernel launch: " << cudaGetErrorString(err);
}

template <typename T>
void SignSTEGrad<GPUDevice, T>::operator()(const GPUDevice& d, const T* d_y, const T* x, T clip,
                                           int64_t n, T* d_x) const {
  using S = typename gpu::Storage<T>::type;
  S clip_s;
  static_assert(sizeof(S) == sizeof(T));
  memcpy(&clip_s, &clip, sizeof(S));
  const cudaError_t err = gpu::LaunchGrid(
      d.stream(), n,
      gpu::SignSteGradBody<S>{reinterpret_cast<const S*>(d_y), reinterpret_cast<const S*>(x),
                              clip_s, reinterpret_cast<S*>(d_x)});
  if (err != cudaSuccess) {
    LOG(FATAL) << "TfExt>SignSTEGrad: kernel launch: " << cudaGetErrorString(err);
  }
}

template struct SignSTE<GPUDevice, Eigen::half>;
template struct SignSTE<GPUDevice, float>;
template struct SignSTE<GPUDevice, double>;
template struct SignSTEGrad<GPUDevice, Eigen::half>;
template struct SignSTEGrad<GPUDevice, float>;
template struct SignSTEGrad<GPUDevice, double>;

}  // namespace tensorflow::tf_ext::functor

#endif  // GOOGLE_CUDA
