// Helpers shared by tf_ext's CUDA per-thread bodies (tf_ext/kernels/gpu/*_body.h).
//
// Everything under tf_ext/kernels/gpu/ is plain C++ plus TF_EXT_HOST_DEVICE: no TensorFlow and
// no Eigen header. The same bodies therefore compile in three places:
//   - the op library's *_op_gpu.cu.cc (nvcc, --config=cuda), which launch them;
//   - CPU gtests (tests/gpu_body_test.cc, g++), which run each body over its whole grid on the
//     host and compare with the CPU functor;
//   - the standalone CUDA harness (tests/gpu/, plain nvcc), for machines with CUDA but no
//     TensorFlow.
// A body is a small struct holding the kernel's arguments whose `operator()(int64_t i)` is
// the work of thread i; LaunchGrid (gpu_launch.cu.h) runs it over a grid-stride loop.
#ifndef TF_EXT_KERNELS_GPU_GPU_COMMON_H_
#define TF_EXT_KERNELS_GPU_GPU_COMMON_H_

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "tf_ext/kernels/host_device.h"

namespace tensorflow::tf_ext::gpu {

// TensorFlow runs CPU kernels with denormals flushed to zero (FTZ/DAZ), so a CPU kernel
// compares a float/double denormal as a zero of its sign. GPU code runs without flushing
// (nvcc's default -ftz=false), so bodies flush explicitly wherever a value is compared, to
// select the same element as the CPU kernel. Values that are only copied keep their bits.
TF_EXT_HOST_DEVICE inline float FlushDenormal(float x) {
  return fabsf(x) < FLT_MIN ? copysignf(0.0f, x) : x;
}
TF_EXT_HOST_DEVICE inline double FlushDenormal(double x) {
  return fabs(x) < DBL_MIN ? copysign(0.0, x) : x;
}

// a * b rounded once, never fused with a following add: nvcc contracts a * b + c into an FMA
// by default, which would move ROI bin edges by an ulp against the CPU kernel (g++ without
// -mfma never fuses). __fmul_rn is never contracted.
TF_EXT_HOST_DEVICE inline float MulRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
TF_EXT_HOST_DEVICE inline double MulRn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

TF_EXT_HOST_DEVICE inline float Floor(float v) { return floorf(v); }
TF_EXT_HOST_DEVICE inline double Floor(double v) { return floor(v); }
TF_EXT_HOST_DEVICE inline float Ceil(float v) { return ceilf(v); }
TF_EXT_HOST_DEVICE inline double Ceil(double v) { return ceil(v); }
// Half away from zero, like std::round (and Eigen::numext::round on the host).
TF_EXT_HOST_DEVICE inline float Round(float v) { return roundf(v); }

// std::max's exact rule (b only when a < b), including for NaN: the CPU code uses std::max
// (through Eigen::numext::maxi on the host), whereas fmaxf would drop a NaN.
template <typename T>
TF_EXT_HOST_DEVICE inline T MaxOf(T a, T b) {
  return a < b ? b : a;
}
template <typename T>
TF_EXT_HOST_DEVICE inline T MinOf(T a, T b) {
  return b < a ? b : a;
}

// An unsigned integer whose order is the value order of the median's key (as
// median_pool_internal::OrderedBits under TensorFlow's DAZ): -0, +0 and denormals map alike,
// NaN (any payload or sign) maps above +inf.
TF_EXT_HOST_DEVICE inline uint32_t OrderedBits(float v) {
  if (!(v == v)) return 0xFFFFFFFFu;
  v = FlushDenormal(v) + 0.0f;  // -0 + +0 == +0
  uint32_t b;
  memcpy(&b, &v, sizeof(b));
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
TF_EXT_HOST_DEVICE inline uint64_t OrderedBits(double v) {
  if (!(v == v)) return ~uint64_t{0};
  v = FlushDenormal(v) + 0.0;
  uint64_t b;
  memcpy(&b, &v, sizeof(b));
  return (b >> 63) ? ~b : (b | (uint64_t{1} << 63));
}

// The storage type a body works on: IEEE binary16 is carried as its raw bits (uint16_t), so
// that no half type (Eigen::half, __half) is needed here; the op library and the harness
// reinterpret their half buffers.
template <typename T>
struct Storage {
  using type = T;
};

}  // namespace tensorflow::tf_ext::gpu

#endif  // TF_EXT_KERNELS_GPU_GPU_COMMON_H_
