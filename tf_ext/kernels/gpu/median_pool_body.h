// The per-thread bodies of TfExt>MedianPool2D's and TfExt>MedianPool2DGrad's CUDA kernels
// (TF-free; see gpu_common.h). They select the very element the CPU functor selects
// (median_pool_functor.h: rank (m-1)/2 under the key (value, row-major position), NaN above
// every number, -0 == +0, denormals as zero like TensorFlow's DAZ CPU kernels), so outputs and
// gradients are bit for bit the CPU kernel's (tests/gpu_body_test.cc).
#ifndef TF_EXT_KERNELS_GPU_MEDIAN_POOL_BODY_H_
#define TF_EXT_KERNELS_GPU_MEDIAN_POOL_BODY_H_

#include <cstdint>

#include "tf_ext/kernels/gpu/gpu_common.h"

namespace tensorflow::tf_ext::gpu {

// Mirrors functor::MedianPool2DParams (NHWC geometry, validated by the op kernel).
struct MedianPoolGeometry {
  int64_t batch = 0, in_height = 0, in_width = 0, channels = 0;
  int64_t out_height = 0, out_width = 0;
  int64_t window_height = 1, window_width = 1;
  int64_t stride_height = 1, stride_width = 1;
  int64_t pad_top = 0, pad_left = 0;

  TF_EXT_HOST_DEVICE int64_t InputSize() const { return batch * in_height * in_width * channels; }
  TF_EXT_HOST_DEVICE int64_t OutputSize() const {
    return batch * out_height * out_width * channels;
  }
};

template <typename T>
struct MedianBits;
template <>
struct MedianBits<float> {
  using type = uint32_t;
  static constexpr int kBits = 32;
};
template <>
struct MedianBits<double> {
  using type = uint64_t;
  static constexpr int kBits = 64;
};

// Windows up to this many elements rank-count keys held in registers (O(m^2) compares, no
// memory traffic beyond m loads); larger ones use a radix select over the key bits.
constexpr int64_t kMedianSmallWindow = 25;

// Flat NHWC index into x of the lower median of output element o (flat NHWC index into y).
template <typename T>
TF_EXT_HOST_DEVICE inline int64_t MedianFlatIndex(const MedianPoolGeometry& g, const T* x,
                                                  int64_t o) {
  using Bits = typename MedianBits<T>::type;
  const int64_t c = o % g.channels;
  const int64_t ow = (o / g.channels) % g.out_width;
  const int64_t oh = (o / (g.channels * g.out_width)) % g.out_height;
  const int64_t n = o / (g.channels * g.out_width * g.out_height);
  // The window clipped to the image, exactly as median_pool_internal::MedianIndex.
  const int64_t h_raw = oh * g.stride_height - g.pad_top;
  const int64_t w_raw = ow * g.stride_width - g.pad_left;
  const int64_t h0 = MaxOf<int64_t>(h_raw, 0);
  const int64_t w0 = MaxOf<int64_t>(w_raw, 0);
  const int64_t h1 = g.window_height >= g.in_height - h_raw ? g.in_height : h_raw + g.window_height;
  const int64_t w1 = g.window_width >= g.in_width - w_raw ? g.in_width : w_raw + g.window_width;
  const int64_t width = w1 - w0;
  const int64_t m = (h1 - h0) * width;
  const int64_t target = (m - 1) / 2;
  const int64_t base = n * g.in_height;
  // Element e of the window (row-major) -> flat index into x.
  auto flat = [&](int64_t e) {
    return ((base + h0 + e / width) * g.in_width + w0 + e % width) * g.channels + c;
  };
  if (m <= kMedianSmallWindow) {
    Bits key[kMedianSmallWindow];
    for (int64_t e = 0; e < m; ++e) key[e] = OrderedBits(x[flat(e)]);
    for (int64_t e = 0; e < m; ++e) {
      int64_t rank = 0;
      for (int64_t f = 0; f < m; ++f) rank += key[f] < key[e] || (key[f] == key[e] && f < e);
      if (rank == target) return flat(e);  // keys (bits, position) are distinct: one match
    }
    return flat(0);  // unreachable for m >= 1
  }
  // Radix select: fix the target's value bits from the top, counting the elements that share
  // the bits fixed so far and have a 0 next; then the target is the `rank`-th (row-major)
  // element with exactly those bits, i.e. ties resolve by position as in the CPU key.
  Bits prefix = 0, mask = 0;
  int64_t rank = target;
  for (int b = MedianBits<T>::kBits - 1; b >= 0; --b) {
    const Bits bit = Bits{1} << b;
    int64_t zeros = 0;
    for (int64_t e = 0; e < m; ++e) {
      const Bits k = OrderedBits(x[flat(e)]);
      zeros += (k & mask) == prefix && (k & bit) == 0;
    }
    if (rank >= zeros) {
      rank -= zeros;
      prefix |= bit;
    }
    mask |= bit;
  }
  for (int64_t e = 0; e < m; ++e) {
    if (OrderedBits(x[flat(e)]) == prefix && rank-- == 0) return flat(e);
  }
  return flat(0);  // unreachable
}

// Thread o of MedianPool2D: y[o] = x[argmedian of o] (a copy: the element's bits, NaN payload
// included). Needs g.channels, out sizes > 0 (the kernel skips empty outputs).
template <typename T>
struct MedianPoolBody {
  MedianPoolGeometry g;
  const T* x;
  T* y;
  TF_EXT_HOST_DEVICE void operator()(int64_t o) const { y[o] = x[MedianFlatIndex(g, x, o)]; }
};

// Phase 1 of MedianPool2DGrad, thread o: argmedian[o] = flat index into x of o's median.
template <typename T>
struct MedianArgBody {
  MedianPoolGeometry g;
  const T* x;
  int64_t* argmedian;
  TF_EXT_HOST_DEVICE void operator()(int64_t o) const { argmedian[o] = MedianFlatIndex(g, x, o); }
};

// Phase 2 of MedianPool2DGrad, thread e (flat NHWC index into x): a gather instead of a
// scatter, so no atomics and a fixed order. dx[e] = sum of dy[o] over the outputs o whose
// window contains e's pixel and whose argmedian is e, in ascending o: exactly the CPU
// functor's summation order (it adds dy into dx in ascending output pixel order per image and
// channel), so the gradient is bit for bit the CPU one. Writes every element of dx.
template <typename T>
struct MedianGradGatherBody {
  MedianPoolGeometry g;
  const int64_t* argmedian;
  const T* dy;
  T* dx;
  TF_EXT_HOST_DEVICE void operator()(int64_t e) const {
    const int64_t c = e % g.channels;
    const int64_t w = (e / g.channels) % g.in_width;
    const int64_t h = (e / (g.channels * g.in_width)) % g.in_height;
    const int64_t n = e / (g.channels * g.in_width * g.in_height);
    // Window rows [oh*s - pad, +k) contain h iff ceil((h + pad - k + 1) / s) <= oh <=
    // floor((h + pad) / s).
    const int64_t hy = h + g.pad_top - g.window_height + 1;
    const int64_t wx = w + g.pad_left - g.window_width + 1;
    const int64_t oh0 = hy <= 0 ? 0 : (hy + g.stride_height - 1) / g.stride_height;
    const int64_t ow0 = wx <= 0 ? 0 : (wx + g.stride_width - 1) / g.stride_width;
    const int64_t oh1 = MinOf<int64_t>((h + g.pad_top) / g.stride_height, g.out_height - 1);
    const int64_t ow1 = MinOf<int64_t>((w + g.pad_left) / g.stride_width, g.out_width - 1);
    T acc = T(0);
    for (int64_t oh = oh0; oh <= oh1; ++oh) {
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const int64_t o = ((n * g.out_height + oh) * g.out_width + ow) * g.channels + c;
        if (argmedian[o] == e) acc += dy[o];
      }
    }
    dx[e] = acc;
  }
};

}  // namespace tensorflow::tf_ext::gpu

#endif  // TF_EXT_KERNELS_GPU_MEDIAN_POOL_BODY_H_
