// functor::SignSTE<GPUDevice, T>: the CUDA half of TfExt>SignSTE, one thread per element
// running gpu::SignSteBody (kernels/gpu/sign_ste_body.h). nvcc only, under --config=cuda.
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

template struct SignSTE<GPUDevice, Eigen::half>;
template struct SignSTE<GPUDevice, float>;
template struct SignSTE<GPUDevice, double>;

}  // namespace tensorflow::tf_ext::functor

#endif  // GOOGLE_CUDA
