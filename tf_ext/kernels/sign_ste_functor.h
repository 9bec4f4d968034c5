// functor::SignSTE: the forward maths of TfExt>SignSTE. Must stay compilable by nvcc (no
// op_kernel.h).
#ifndef TF_EXT_KERNELS_SIGN_STE_FUNCTOR_H_
#define TF_EXT_KERNELS_SIGN_STE_FUNCTOR_H_

#include <cmath>
#include <limits>

#include "tf_ext/kernels/functor_common.h"

#if !defined(__CUDACC__)
#include <type_traits>

#include "tf_ext/kernels/cpu_simd.h"
#endif

namespace tensorflow::tf_ext::functor {

// The value a CPU kernel sees: TensorFlow runs them with denormals flushed to zero, so a
// float/double denormal becomes a zero of its sign. Made explicit, so that every device and
// thread (with or without FTZ/DAZ) agrees. Half has no such flush: kernels widen it to float,
// where its denormals are normal numbers.
template <typename T>
inline T FlushDenormal(T x) {
  return x;
}
template <>
inline float FlushDenormal(float x) {
  return std::fabs(x) < std::numeric_limits<float>::min() ? std::copysign(0.0f, x) : x;
}
template <>
inline double FlushDenormal(double x) {
  return std::fabs(x) < std::numeric_limits<double>::min() ? std::copysign(0.0, x) : x;
}

// TensorFlow's sign: 1 for x > 0, -1 for x < 0, and x itself otherwise, i.e. +-0 for +-0 and
// NaN for NaN (a comparison-based (x > 0) - (x < 0) would silently turn NaN into 0). A
// denormal counts as the zero it flushes to (tf.sign gives 0 after the flush too), where a
// plain `x` would hand the denormal back unchanged.
template <typename T>
inline T SignOf(T x) {
  x = FlushDenormal(x);
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
namespace sign_internal {

// IEEE bit patterns of T as its same-width signed integer.
template <typename T>
struct Bits;
template <>
struct Bits<float> {
  static constexpr int32_t kMagnitude = 0x7fffffff, kMinNormal = 0x00800000;
  static constexpr int32_t kInf = 0x7f800000, kOne = 0x3f800000;
};
template <>
struct Bits<double> {
  static constexpr int64_t kMagnitude = 0x7fffffffffffffff, kMinNormal = 0x0010000000000000;
  static constexpr int64_t kInf = 0x7ff0000000000000, kOne = 0x3ff0000000000000;
};

// SignOf on a block of bit patterns, branch-free: a normal number or infinity becomes +-1 (its
// sign bit kept), a zero or denormal the zero of its sign (the flush), NaN itself.
template <typename T, int kBytes>
TF_EXT_SIMD_INLINE simd::Mask<T, kBytes> SignOfBits(simd::Mask<T, kBytes> b) {
  using B = Bits<T>;
  using M = simd::Mask<T, kBytes>;
  const M magnitude = b & B::kMagnitude;
  const M sign = b ^ magnitude;
  // Compares feed selects only: GCC 12 scalarises 64-byte integer comparison masks that are
  // combined bitwise. Zero and denormals keep their sign (+-0), normal numbers and infinities
  // become +-1, NaN stays itself.
  const M signed_one = sign | B::kOne;
  const M r = magnitude >= B::kMinNormal ? signed_one : sign;
  return magnitude > B::kInf ? b : r;
}

// y = sign(x) over [0, n), blocks of kBytes.
struct SignRange {
  template <int kBytes, typename T>
  static void Run(const T* x, int64_t n, T* y) {
    using M = simd::Mask<T, kBytes>;
    constexpr int64_t kLanes = simd::kLanes<T, kBytes>;
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      simd::Store(SignOfBits<T, kBytes>(simd::Load<M>(x + i)), y + i);
    }
    if (i < n) simd::Store(SignOfBits<T, kBytes>(simd::Load<M>(x + i, n - i)), y + i, n - i);
  }
};

}  // namespace sign_internal

template <typename T>
struct SignSTE<CPUDevice, T> {
  void operator()(const CPUDevice& d, const T* x, int64_t n, T* y) const {
    ParallelFor(d, n, /*cost_per_unit=*/1, [x, y](int64_t begin, int64_t end) {
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        simd::Dispatch<sign_internal::SignRange>::Run(x + begin, end - begin, y + begin);
      } else {
        for (int64_t i = begin; i < end; ++i) y[i] = SignOf(x[i]);
      }
    });
  }
};
#endif

#if GOOGLE_CUDA
// GPU: defined in sign_ste_op_gpu.cu.cc for half, float and double. Each kernel runs a
// per-thread body of kernels/gpu/sign_ste_body.h (TF-free: shared with the CPU grid
// tests and the standalone harness in tests/gpu). Pointers are device memory.
template <typename T>
struct SignSTE<Eigen::GpuDevice, T> {
  void operator()(const Eigen::GpuDevice& d, const T* x, int64_t n, T* y) const;
};
#endif  // GOOGLE_CUDA

}  // namespace tensorflow::tf_ext::functor
#endif  // TF_EXT_KERNELS_SIGN_STE_FUNCTOR_H_
