// The per-thread bodies of TfExt>SignSTE's and TfExt>SignSTEGrad's CUDA kernels (TF-free; see
// gpu_common.h). Same values as functor::SignOf and functor::SteGradOf in sign_ste_functor.h,
// bit for bit (tests/gpu_body_test.cc).
#ifndef TF_EXT_KERNELS_GPU_SIGN_STE_BODY_H_
#define TF_EXT_KERNELS_GPU_SIGN_STE_BODY_H_

#include <cstdint>

#include "tf_ext/kernels/gpu/gpu_common.h"

namespace tensorflow::tf_ext::gpu {

// TensorFlow's sign after the CPU kernel's denormal flush: 1 for x > 0, -1 for x < 0, x itself
// for +-0 and NaN (NaN propagates), a denormal counts as its signed zero.
TF_EXT_HOST_DEVICE inline float SignValue(float x) {
  x = FlushDenormal(x);
  return x > 0.f ? 1.f : (x < 0.f ? -1.f : x);
}
TF_EXT_HOST_DEVICE inline double SignValue(double x) {
  x = FlushDenormal(x);
  return x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : x);
}
// Half as raw binary16 bits. The CPU kernel compares Eigen::half as float, where every half
// denormal is a normal number (no flush): so only +-0 and NaN come back unchanged.
TF_EXT_HOST_DEVICE inline uint16_t SignValue(uint16_t h) {
  const uint16_t magnitude = h & 0x7FFFu;
  if (magnitude == 0 || magnitude > 0x7C00u) return h;  // +-0, NaN
  return (h & 0x8000u) ? uint16_t{0xBC00u} : uint16_t{0x3C00u};  // -1, +1
}

// Thread i: y[i] = SignValue(x[i]). Reads and writes element i only, so x and y may alias.
template <typename S>
struct SignSteBody {
  const S* x;
  S* y;
  TF_EXT_HOST_DEVICE void operator()(int64_t i) const { y[i] = SignValue(x[i]); }
};

// The straight-through estimator's gradient: d_y where |x| <= clip (x after the CPU kernel's
// denormal flush; false at NaN), else +0. clip is finite and >= +0, in x's type.
TF_EXT_HOST_DEVICE inline float SteGradValue(float d_y, float x, float clip) {
  return fabsf(FlushDenormal(x)) <= clip ? d_y : 0.f;
}
TF_EXT_HOST_DEVICE inline double SteGradValue(double d_y, double x, double clip) {
  return fabs(FlushDenormal(x)) <= clip ? d_y : 0.0;
}
// Half as raw binary16 bits: for a finite clip >= +0, |x| <= clip is magnitude(x) <= clip's
// bits (NaN and inf magnitudes exceed every finite clip's); half denormals are not flushed.
TF_EXT_HOST_DEVICE inline uint16_t SteGradValue(uint16_t d_y, uint16_t x, uint16_t clip) {
  return (x & 0x7FFFu) <= clip ? d_y : uint16_t{0};
}

// Thread i: d_x[i] = SteGradValue(d_y[i], x[i], clip). Element i only, so d_x may alias.
template <typename S>
struct SignSteGradBody {
  const S* d_y;
  const S* x;
  S clip;
  S* d_x;
  TF_EXT_HOST_DEVICE void operator()(int64_t i) const { d_x[i] = SteGradValue(d_y[i], x[i], clip); }
};

}  // namespace tensorflow::tf_ext::gpu

#endif  // TF_EXT_KERNELS_GPU_SIGN_STE_BODY_H_
