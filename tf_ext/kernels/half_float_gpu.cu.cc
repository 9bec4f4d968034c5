// functor::HalfToFloat / FloatToHalf on the GPU: one thread per element running the bodies of
// kernels/gpu/half_body.h. nvcc only, under --config=cuda.
#if GOOGLE_CUDA
#include "tf_ext/kernels/op_gpu_common.cu.h"

#include "tf_ext/kernels/half_float_functor.h"

namespace tensorflow::tf_ext::functor {

void HalfToFloat<GPUDevice>::operator()(const GPUDevice& d, const uint16_t* in, int64_t n,
                                        float* out) const {
  CheckLaunch(gpu::LaunchGrid(d.stream(), n, gpu::HalfToFloatBody{in, out}), "half to float");
}

void FloatToHalf<GPUDevice>::operator()(const GPUDevice& d, const float* in, int64_t n,
                                        uint16_t* out) const {
  CheckLaunch(gpu::LaunchGrid(d.stream(), n, gpu::FloatToHalfBody{in, out}), "float to half");
}

}  // namespace tensorflow::tf_ext::functor

#endif  // GOOGLE_CUDA
