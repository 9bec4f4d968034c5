// functor::PsRoiAlign<GPUDevice, T> / functor::PsRoiAlignGrad<GPUDevice, T>: the CUDA half of
// TfExt>PsRoiAlign and TfExt>PsRoiAlignGrad, running the per-thread bodies of
// kernels/gpu/ps_roi_align_body.h. nvcc only, under --config=cuda.
//
// `rois` is a device copy the op kernel made after validating the host-memory input with the
// CPU kernel's check. The backward pass gathers per input element over the ROIs of its image in
// ascending order (no atomics): deterministic.
#if GOOGLE_CUDA
#include "tf_ext/kernels/op_gpu_common.cu.h"

#include "tf_ext/kernels/ps_roi_align_functor.h"

namespace tensorflow::tf_ext::functor {

template <typename T>
void PsRoiAlign<GPUDevice, T>::operator()(const GPUDevice& d, const PsRoiAlignShape& s,
                                          const T* features, const float* rois,
                                          T* output) const {
  const gpu::PsRoiAlignGeometry g = gpu::ToGeometry(s);
  const int64_t n = s.num_rois * s.pooled_height * s.pooled_width * s.output_channels;
  CheckLaunch(gpu::LaunchGrid(d.stream(), n, gpu::PsRoiAlignBody<T>{g, features, rois, output}),
              "TfExt>PsRoiAlign");
}

template <typename T>
void PsRoiAlignGrad<GPUDevice, T>::operator()(const GPUDevice& d, const PsRoiAlignShape& s,
                                              const float* rois, const T* d_output,
                                              T* d_features) const {
  const gpu::PsRoiAlignGeometry g = gpu::ToGeometry(s);
  const int64_t n = s.batch * s.height * s.width * s.channels;
  CheckLaunch(gpu::LaunchGrid(d.stream(), n,
                              gpu::PsRoiAlignGradGatherBody<T>{g, rois, d_output, d_features}),
              "TfExt>PsRoiAlignGrad");
}

template struct PsRoiAlign<GPUDevice, float>;
template struct PsRoiAlign<GPUDevice, double>;
template struct PsRoiAlignGrad<GPUDevice, float>;
template struct PsRoiAlignGrad<GPUDevice, double>;

}  // namespace tensorflow::tf_ext::functor

#endif  // GOOGLE_CUDA
