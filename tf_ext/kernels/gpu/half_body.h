// IEEE binary16 <-> binary32 on raw bits, in integer arithmetic only, and the bodies that
// convert whole buffers. The half kernels of MedianPool2D, RoiPool and PsRoiAlign (and their
// gradients) widen their half inputs to float, run the float functor and round the results
// back (kernels/compute_buffers.h); the CPU and the GPU use these same functions, so a half
// result is bit for bit the same on both devices. Integer arithmetic makes them independent of
// the FPU's rounding mode and of flush-to-zero (TensorFlow's CPU threads run with FTZ/DAZ).
#ifndef TF_EXT_KERNELS_GPU_HALF_BODY_H_
#define TF_EXT_KERNELS_GPU_HALF_BODY_H_

#include <cstdint>
#include <cstring>

#include "tf_ext/kernels/gpu/gpu_common.h"

namespace tensorflow::tf_ext::gpu {

// Exact: every binary16 value (subnormals included) is a normal binary32 value; infinities
// keep their sign, NaNs their sign and payload.
TF_EXT_HOST_DEVICE inline float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  uint32_t mantissa = h & 0x3FFu;
  uint32_t bits;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000u | (mantissa << 13);  // inf, NaN
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);  // rebias 15 -> 127
  } else if (mantissa == 0) {
    bits = sign;  // +-0
  } else {
    // Subnormal, mantissa * 2^-24: shift the leading 1 up to the implicit bit.
    uint32_t e = 113;
    while (!(mantissa & 0x400u)) {
      mantissa <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((mantissa & 0x3FFu) << 13);
  }
  float f;
  memcpy(&f, &bits, sizeof(f));
  return f;
}

// Rounded to nearest, ties to even (like Eigen::half(float) and __float2half_rn): overflow to
// +-inf, underflow through the subnormals to +-0; float denormals give +-0. NaN gives the sign
// with 0x7E00 (Eigen's quiet NaN).
TF_EXT_HOST_DEVICE inline uint16_t FloatToHalfBits(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof(x));
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00u;   // NaN
  if (a >= 0x477FF000u) return sign | 0x7C00u;  // >= 65520 (inf included): rounds to inf
  if (a >= 0x38800000u) {                       // >= 2^-14: a normal half
    const uint32_t rounded = a + 0xFFFu + ((a >> 13) & 1u);
    return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
  }
  if (a < 0x33000000u) return sign;  // < 2^-25: rounds to zero
  // A half subnormal, in units of 2^-24: (1.m * 2^(e-127)) / 2^-24 = m24 >> (126 - e).
  const uint32_t e = a >> 23;
  const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14..24
  const uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
  return sign | static_cast<uint16_t>(q + ((rem > halfway || (rem == halfway && (q & 1u))) ? 1 : 0));
}

// Thread i: out[i] = in[i] widened.
struct HalfToFloatBody {
  const uint16_t* in;
  float* out;
  TF_EXT_HOST_DEVICE void operator()(int64_t i) const { out[i] = HalfBitsToFloat(in[i]); }
};

// Thread i: out[i] = in[i] rounded.
struct FloatToHalfBody {
  const float* in;
  uint16_t* out;
  TF_EXT_HOST_DEVICE void operator()(int64_t i) const { out[i] = FloatToHalfBits(in[i]); }
};

}  // namespace tensorflow::tf_ext::gpu

#endif  // TF_EXT_KERNELS_GPU_HALF_BODY_H_
