// functor::RoiPool<GPUDevice, T> / functor::RoiPoolGrad<GPUDevice, T>: the CUDA half of
// TfExt>RoiPool and TfExt>RoiPoolGrad, running the per-thread bodies of
// kernels/gpu/roi_pool_body.h. nvcc only, under --config=cuda.
//
// `rois` (and, for the gradient, `argmax`) are device copies the op kernel made after
// validating the host-memory inputs with the CPU kernel's checks. The backward pass gathers per
// input element (no atomics): deterministic, bit for bit the CPU result.
#if GOOGLE_CUDA
#include "tf_ext/kernels/op_gpu_common.cu.h"

#include "tf_ext/kernels/roi_pool_functor.h"

namespace tensorflow::tf_ext::functor {

template <typename T>
void RoiPool<GPUDevice, T>::operator()(const GPUDevice& d, const RoiPoolShape& s, const T* data,
                                       const float* rois, T* pooled, int32_t* argmax) const {
  const gpu::RoiPoolGeometry g = gpu::ToGeometry(s);
  const int64_t n = s.num_rois * s.pooled_height * s.pooled_width * s.channels;
  CheckLaunch(gpu::LaunchGrid(d.stream(), n, gpu::RoiPoolBody<T>{g, data, rois, pooled, argmax}),
              "TfExt>RoiPool");
}

template <typename T>
void RoiPoolGrad<GPUDevice, T>::operator()(const GPUDevice& d, const RoiPoolShape& s,
                                           const float* rois, const int32_t* argmax,
                                           const T* d_pooled, T* d_data) const {
  const gpu::RoiPoolGeometry g = gpu::ToGeometry(s);
  const int64_t n = s.batch * s.height * s.width * s.channels;
  CheckLaunch(gpu::LaunchGrid(d.stream(), n,
                              gpu::RoiPoolGradGatherBody<T>{g, rois, argmax, d_pooled, d_data}),
              "TfExt>RoiPoolGrad");
}

template struct RoiPool<GPUDevice, float>;
template struct RoiPool<GPUDevice, double>;
template struct RoiPoolGrad<GPUDevice, float>;
template struct RoiPoolGrad<GPUDevice, double>;

}  // namespace tensorflow::tf_ext::functor

#endif  // GOOGLE_CUDA
