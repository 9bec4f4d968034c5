// functor::ZeroOut: the maths of TfExt>ZeroOut. Must stay compilable by nvcc (no op_kernel.h).
#ifndef TF_EXT_KERNELS_ZERO_OUT_FUNCTOR_H_
#define TF_EXT_KERNELS_ZERO_OUT_FUNCTOR_H_

#include "tf_ext/kernels/functor_common.h"

namespace tensorflow::tf_ext::functor {

// out[i] = (i == preserve_index) ? in[i] : 0, for i in [0, n).
//   d: the device whose memory `in` and `out` live in.
//   in, out: n elements each; they may alias (the kernel forwards its input buffer).
//   preserve_index: in [0, n); the kernel validates it before calling.
template <typename Device, typename T>
struct ZeroOut {
  void operator()(const Device& d, const T* in, int64_t n, int64_t preserve_index, T* out) const;
};

#if !defined(__CUDACC__)
template <typename T>
struct ZeroOut<CPUDevice, T> {
  void operator()(const CPUDevice& d, const T* in, int64_t n, int64_t preserve_index,
                  T* out) const {
    const T kept = in[preserve_index];  // read before zeroing: in and out may alias
    ParallelFor(d, n, /*cost_per_unit=*/1,
                [out](int64_t begin, int64_t end) { std::fill(out + begin, out + end, T(0)); });
    out[preserve_index] = kept;
  }
};
#endif

#if GOOGLE_CUDA
// Defined in zero_out_op_gpu.cu.cc for float, double and int32 (one grid-stride kernel on d's
// stream); callable from a standalone harness with an Eigen::GpuDevice on any cudaStream_t.
template <typename T>
struct ZeroOut<Eigen::GpuDevice, T> {
  void operator()(const Eigen::GpuDevice& d, const T* in, int64_t n, int64_t preserve_index,
                  T* out) const;
};
#endif

}  // namespace tensorflow::tf_ext::functor
#endif  // TF_EXT_KERNELS_ZERO_OUT_FUNCTOR_H_
