// functor::SignSTE: the forward maths of TfExt>SignSTE. Must stay compilable by nvcc (no
// op_kernel.h).
#ifndef TF_EXT_KERNELS_SIGN_STE_FUNCTOR_H_
#define TF_EXT_KERNELS_SIGN_STE_FUNCTOR_H_

#include <cstdint>

#if !defined(__CUDACC__)
#include "tf_ext/kernels/cpu_parallel_for.h"
#endif

namespace tensorflow::tf_ext::functor {

// TensorFlow's sign: 1 for x > 0, -1 for x < 0, and x itself otherwise, i.e. +-0 for +-0 and
// NaN for NaN (a comparison-based (x > 0) - (x < 0) would silently turn NaN into 0).
template <typename T>
inline T SignOf(T x) {
  return x > T(0) ? T(1) : (x < T(0) ? T(-1) : x);
}

// y[i] = SignOf(x[i]) for i in [0, n).
//   d: the device whose memory x and y live in.
//   x, y: n elements each; they may alias (the kernel forwards its input buffer).
template <typename Device, typename T>
struct SignSTE {
  void operator()(const Device& d, const T* x, int64_t n, T* y) const;
};

#if !defined(__CUDACC__)
template <typename T>
struct SignSTE<CPUDevice, T> {
  void operator()(const CPUDevice& d, const T* x, int64_t n, T* y) const {
    ParallelFor(d, n, /*cost_per_unit=*/2, [x, y](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) y[i] = SignOf(x[i]);
    });
  }
};
#endif

}  // namespace tensorflow::tf_ext::functor

#endif  // TF_EXT_KERNELS_SIGN_STE_FUNCTOR_H_
