// functor::HalfToFloat and functor::FloatToHalf: whole buffers of IEEE binary16 (raw bits)
// widened to float and rounded back, with the integer-only conversions of
// kernels/gpu/half_body.h on both devices, so that half results agree bit for bit between the
// CPU and the GPU. Used by kernels/compute_buffers.h. Must stay compilable by nvcc.
#ifndef TF_EXT_KERNELS_HALF_FLOAT_FUNCTOR_H_
#define TF_EXT_KERNELS_HALF_FLOAT_FUNCTOR_H_

#include "tf_ext/kernels/functor_common.h"
#include "tf_ext/kernels/gpu/half_body.h"

namespace tensorflow::tf_ext::functor {

// out[i] = in[i] widened (exact), for i in [0, n); in and out live in d's memory.
template <typename Device>
struct HalfToFloat {
  void operator()(const Device& d, const uint16_t* in, int64_t n, float* out) const;
};

// out[i] = in[i] rounded to nearest even, for i in [0, n); in and out live in d's memory.
template <typename Device>
struct FloatToHalf {
  void operator()(const Device& d, const float* in, int64_t n, uint16_t* out) const;
};

#if !defined(__CUDACC__)
template <>
struct HalfToFloat<CPUDevice> {
  void operator()(const CPUDevice& d, const uint16_t* in, int64_t n, float* out) const {
    ParallelFor(d, n, /*cost_per_unit=*/4, [in, out](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) gpu::HalfToFloatBody{in, out}(i);
    });
  }
};
template <>
struct FloatToHalf<CPUDevice> {
  void operator()(const CPUDevice& d, const float* in, int64_t n, uint16_t* out) const {
    ParallelFor(d, n, /*cost_per_unit=*/4, [in, out](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) gpu::FloatToHalfBody{in, out}(i);
    });
  }
};
#endif

#if GOOGLE_CUDA
// Defined in half_float_gpu.cu.cc: one grid-stride kernel on d's stream.
template <>
struct HalfToFloat<Eigen::GpuDevice> {
  void operator()(const Eigen::GpuDevice& d, const uint16_t* in, int64_t n, float* out) const;
};
template <>
struct FloatToHalf<Eigen::GpuDevice> {
  void operator()(const Eigen::GpuDevice& d, const float* in, int64_t n, uint16_t* out) const;
};
#endif

}  // namespace tensorflow::tf_ext::functor
#endif  // TF_EXT_KERNELS_HALF_FLOAT_FUNCTOR_H_
