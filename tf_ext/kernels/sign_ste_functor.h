// functor::SignSTE / functor::SignSTEGrad: the maths of TfExt>SignSTE and its backward op
// TfExt>SignSTEGrad. Must stay compilable by nvcc (no op_kernel.h).
#ifndef TF_EXT_KERNELS_SIGN_STE_FUNCTOR_H_
#define TF_EXT_KERNELS_SIGN_STE_FUNCTOR_H_

#include <cmath>
#include <cstring>
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

// The straight-through estimator's band, as the CPU kernels see x: |x| <= clip after the
// denormal flush, compared in T (false at NaN). clip is finite and >= +0.
template <typename T>
inline bool InsideClip(T x, T clip) {
  const T f = FlushDenormal(x);
  return (f < T(0) ? -f : f) <= clip;
}

// The STE's gradient: d_y where InsideClip(x, clip), else +0 (a select, so an inf or NaN d_y
// outside the band still gives an exact 0).
template <typename T>
inline T SteGradOf(T d_y, T x, T clip) {
  return InsideClip(x, clip) ? d_y : T(0);
}

// y[i] = SignOf(x[i]) for i in [0, n).
//   d: the device whose memory x and y live in.
//   x, y: n elements each; they may alias (the kernel forwards its input buffer).
template <typename Device, typename T>
struct SignSTE {
  void operator()(const Device& d, const T* x, int64_t n, T* y) const;
};

// d_x[i] = SteGradOf(d_y[i], x[i], clip) for i in [0, n).
//   d_y, x, d_x: n elements each in d's memory; d_x may alias d_y or x (the kernel forwards
//   d_y's buffer when it can).
//   clip: the forward's clip as T (finite, >= +0).
template <typename Device, typename T>
struct SignSTEGrad {
  void operator()(const Device& d, const T* d_y, const T* x, T clip, int64_t n, T* d_x) const;
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

// d_x = SteGradOf(d_y, x, clip) over [0, n), blocks of kBytes, on bit patterns: for a
// non-negative clip, |x| <= clip is magnitude(x) <= bits(clip) as integers (a NaN's magnitude
// exceeds every finite clip's), and the flush makes a denormal's magnitude 0.
struct SteGradRange {
  template <int kBytes, typename T>
  static void Run(const T* d_y, const T* x, T clip, int64_t n, T* d_x) {
    using B = Bits<T>;
    using M = simd::Mask<T, kBytes>;
    using Int = typename simd::BlockTypes<T, kBytes>::Int;
    constexpr int64_t kLanes = simd::kLanes<T, kBytes>;
    Int clip_bits;
    std::memcpy(&clip_bits, &clip, sizeof(T));
    const M zero = {};
    // Compares feed selects only (see SignOfBits).
    auto block = [&](M dy, M xb) {
      const M magnitude = xb & B::kMagnitude;
      const M flushed = magnitude >= B::kMinNormal ? magnitude : zero;
      return flushed <= clip_bits ? dy : zero;
    };
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      simd::Store(block(simd::Load<M>(d_y + i), simd::Load<M>(x + i)), d_x + i);
    }
    if (i < n) {
      simd::Store(block(simd::Load<M>(d_y + i, n - i), simd::Load<M>(x + i, n - i)), d_x + i,
                  n - i);
    }
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

template <typename T>
struct SignSTEGrad<CPUDevice, T> {
  void operator()(const CPUDevice& d, const T* d_y, const T* x, T clip, int64_t n,
                  T* d_x) const {
    ParallelFor(d, n, /*cost_per_unit=*/2, [=](int64_t begin, int64_t end) {
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        simd::Dispatch<sign_internal::SteGradRange>::Run(d_y + begin, x + begin, clip,
                                                          end - begin, d_x + begin);
      } else {
        for (int64_t i = begin; i < end; ++i) d_x[i] = SteGradOf(d_y[i], x[i], clip);
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
template <typename T>
struct SignSTEGrad<Eigen::GpuDevice, T> {
  void operator()(const Eigen::GpuDevice& d, const T* d_y, const T* x, T clip, int64_t n,
                  T* d_x) const;
};
#endif  // GOOGLE_CUDA

}  // namespace tensorflow::tf_ext::functor
#endif  // TF_EXT_KERNELS_SIGN_STE_FUNCTOR_H_
