// functor::MedianPool2D / functor::MedianPool2DGrad: the maths of TfExt>MedianPool2D and
// TfExt>MedianPool2DGrad. Must stay compilable by nvcc (no op_kernel.h).
//
// Definition. For output (n, oh, ow, c) the window is rows [oh*sh - pad_top, +kh) and columns
// [ow*sw - pad_left, +kw) of image n, channel c, clipped to the image: padding never counts.
// Its m elements are ordered by the key (value, position), position being the element's
// row-major place in the window (equivalently in the image), i.e. a stable sort by value, and
// the output is the element of rank (m-1)/2: the median for odd m, the LOWER median for even
// m. So the output is always one real input element, and ties are broken by row-major order.
// Note this is the stable sort's rank, not "the first element equal to the median value":
// in [2,1,2,2,9,0,2,7,8] the order is 0 1 2(0) 2(2) [2(3)] 2(6) 7 8 9, so index 3 is chosen.
// NaN: sorts after every number (NaNs among themselves by position), so a window's median is
// NaN only when NaNs fill its upper half. The gradient routes d(y) to that same element.
#ifndef TF_EXT_KERNELS_MEDIAN_POOL_FUNCTOR_H_
#define TF_EXT_KERNELS_MEDIAN_POOL_FUNCTOR_H_

#include <algorithm>
#include <cstdint>
#include <utility>

#if !defined(__CUDACC__)
#include <vector>

#include "tf_ext/kernels/cpu_parallel_for.h"
#endif

namespace tensorflow::tf_ext::functor {

// Output size and leading padding of one spatial dimension, MaxPool's rules:
//   VALID: out = ceil((in - k + 1) / s) windows lying fully inside, or 0 if none fits
//          (k > in): an empty output, not an error; pad_before = 0.
//   SAME:  out = ceil(in / s); pad_before = max((out - 1)*s + k - in, 0) / 2.
// Requires in >= 0, k >= 1, s >= 1. Written so that no intermediate overflows int64.
// With SAME every window holds at least one image element (pad_before <= (k-1)/2).
inline void MedianPoolOutputSize(int64_t in, int64_t k, int64_t s, bool same, int64_t* out,
                                 int64_t* pad_before) {
  *pad_before = 0;
  if (!same) {
    *out = in >= k ? (in - k) / s + 1 : 0;
    return;
  }
  *out = in == 0 ? 0 : (in - 1) / s + 1;
  if (*out > 0) {
    const int64_t covered_by_last = in - (*out - 1) * s;  // in [1, s]
    *pad_before = std::max<int64_t>(k - covered_by_last, 0) / 2;
  }
}

// Geometry of one MedianPool2D call (NHWC). Every count may be 0.
struct MedianPool2DParams {
  int64_t batch = 0, in_height = 0, in_width = 0, channels = 0;
  int64_t out_height = 0, out_width = 0;
  int64_t window_height = 1, window_width = 1;
  int64_t stride_height = 1, stride_width = 1;
  int64_t pad_top = 0, pad_left = 0;

  int64_t InputSize() const { return batch * in_height * in_width * channels; }
  int64_t OutputSize() const { return batch * out_height * out_width * channels; }
};

namespace median_pool_internal {

// The strict total order of window elements: (value, position) with NaN after every number.
// Positions are distinct within a window, so no two elements compare equal and every
// selection method (network, nth_element, full sort) picks the very same element.
template <typename T>
inline bool KeyLess(T a, int64_t pos_a, T b, int64_t pos_b) {
  const bool a_nan = !(a == a), b_nan = !(b == b);
  if (a_nan || b_nan) return a_nan == b_nan ? pos_a < pos_b : b_nan;
  if (a < b) return true;
  if (b < a) return false;
  return pos_a < pos_b;
}

// Lower median of exactly 9 (value, position) pairs by the 19-compare-exchange selection
// network of Paeth (Graphics Gems, "median of 9"), as in Devillard's opt_med9: after it, slot
// 4 holds the element of rank 4. Compare-exchanges act on whole pairs, so the 0-1 principle
// applies to the total order above and ties resolve exactly like the general path.
// Reorders v/pos in place; returns the position of the median.
template <typename T>
inline int64_t LowerMedian9(T v[9], int64_t pos[9]) {
  auto cx = [&](int a, int b) {  // afterwards (v[a], pos[a]) < (v[b], pos[b])
    if (KeyLess(v[b], pos[b], v[a], pos[a])) {
      std::swap(v[a], v[b]);
      std::swap(pos[a], pos[b]);
    }
  };
  cx(1, 2); cx(4, 5); cx(7, 8);
  cx(0, 1); cx(3, 4); cx(6, 7);
  cx(1, 2); cx(4, 5); cx(7, 8);
  cx(0, 3); cx(5, 8); cx(4, 7);
  cx(3, 6); cx(1, 4); cx(2, 5);
  cx(4, 7); cx(4, 2); cx(6, 4);
  cx(4, 2);
  return pos[4];
}

#if !defined(__CUDACC__)
// Lower median of m >= 1 (value, position) pairs by std::nth_element (expected O(m)).
// Reorders `items`; returns the position of the element of rank (m-1)/2.
template <typename T>
inline int64_t LowerMedianSelect(std::pair<T, int64_t>* items, int64_t m) {
  std::pair<T, int64_t>* mid = items + (m - 1) / 2;
  std::nth_element(items, mid, items + m,
                   [](const std::pair<T, int64_t>& a, const std::pair<T, int64_t>& b) {
                     return KeyLess(a.first, a.second, b.first, b.second);
                   });
  return mid->second;
}

// Flat NHWC index into x of the lower median of output element (n, oh, ow, c). Windows of
// 3x3 lying fully inside the image take the selection network; all others gather their
// in-image elements into `scratch` (capacity >= the largest clipped window) and select.
template <typename T>
inline int64_t MedianIndex(const MedianPool2DParams& p, const T* x, int64_t n, int64_t oh,
                           int64_t ow, int64_t c, std::pair<T, int64_t>* scratch) {
  const int64_t h_raw = oh * p.stride_height - p.pad_top;
  const int64_t w_raw = ow * p.stride_width - p.pad_left;
  const int64_t h0 = std::max<int64_t>(h_raw, 0);
  const int64_t w0 = std::max<int64_t>(w_raw, 0);
  // min(raw + k, in) without forming raw + k (k may be huge).
  const int64_t h1 = p.window_height >= p.in_height - h_raw ? p.in_height : h_raw + p.window_height;
  const int64_t w1 = p.window_width >= p.in_width - w_raw ? p.in_width : w_raw + p.window_width;
  const int64_t image = n * p.in_height;
  if (p.window_height == 3 && p.window_width == 3 && h1 - h0 == 3 && w1 - w0 == 3) {
    T v[9];
    int64_t pos[9];
    for (int i = 0; i < 9; ++i) {
      pos[i] = ((image + h0 + i / 3) * p.in_width + w0 + i % 3) * p.channels + c;
      v[i] = x[pos[i]];
    }
    return LowerMedian9(v, pos);
  }
  int64_t m = 0;
  for (int64_t h = h0; h < h1; ++h) {
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t pos = ((image + h) * p.in_width + w) * p.channels + c;
      scratch[m++] = {x[pos], pos};
    }
  }
  // Flat NHWC indices grow in row-major window order, so they are valid tie-breakers.
  return LowerMedianSelect(scratch, m);
}

// The largest number of in-image elements any window can hold.
inline int64_t MaxWindowElements(const MedianPool2DParams& p) {
  return std::min(p.window_height, p.in_height) * std::min(p.window_width, p.in_width);
}
#endif  // !defined(__CUDACC__)

}  // namespace median_pool_internal

// y[n, oh, ow, c] = lower median of the window of (n, oh, ow, c) (see the top of this file).
//   d: the device whose memory x and y live in.
//   p: validated geometry; out sizes from MedianPoolOutputSize.
//   x: [batch, in_height, in_width, channels].  y: [batch, out_height, out_width, channels].
template <typename Device, typename T>
struct MedianPool2D {
  void operator()(const Device& d, const MedianPool2DParams& p, const T* x, T* y) const;
};

// dx = sum over outputs o of dy[o] * onehot(argmedian(o)): the transpose of the forward's
// selection. Design (why a dedicated op): the forward has no argmedian output, so the grad
// op recomputes it. Phase 1 finds argmedian for every output in parallel over output pixels
// (the costly part, no writes shared) into `argmedian`; phase 2 scatter-adds dy into dx in
// parallel over (image, channel block): overlapping windows of one image and channel only ever
// meet inside one work unit, so there are no races and the summation order is fixed
// (deterministic results).
//   x: [batch, in_height, in_width, channels].  dy: [batch, out_height, out_width, channels].
//   argmedian: scratch of p.OutputSize() int64 (flat indices into x).
//   dx: like x; fully overwritten.
template <typename Device, typename T>
struct MedianPool2DGrad {
  void operator()(const Device& d, const MedianPool2DParams& p, const T* x, const T* dy,
                  int64_t* argmedian, T* dx) const;
};

#if !defined(__CUDACC__)
namespace median_pool_internal {

// Cycles per output pixel (all channels): gather plus selection ~ 10 cycles per element.
inline int64_t PixelCost(const MedianPool2DParams& p) {
  return std::max<int64_t>(1, 10 * MaxWindowElements(p) * p.channels);
}

// fn(n, oh, ow, scratch) over every output pixel, in parallel; scratch is per work shard.
template <typename T, typename Fn>
void ForEachOutputPixel(const CPUDevice& d, const MedianPool2DParams& p, const Fn& fn) {
  const int64_t pixels = p.batch * p.out_height * p.out_width;
  if (p.channels == 0) return;
  ParallelFor(d, pixels, PixelCost(p), [&p, &fn](int64_t begin, int64_t end) {
    std::vector<std::pair<T, int64_t>> scratch(MaxWindowElements(p));
    for (int64_t i = begin; i < end; ++i) {
      const int64_t ow = i % p.out_width;
      const int64_t oh = (i / p.out_width) % p.out_height;
      const int64_t n = i / (p.out_width * p.out_height);
      fn(i, n, oh, ow, scratch.data());
    }
  });
}

}  // namespace median_pool_internal

template <typename T>
struct MedianPool2D<CPUDevice, T> {
  void operator()(const CPUDevice& d, const MedianPool2DParams& p, const T* x, T* y) const {
    median_pool_internal::ForEachOutputPixel<T>(
        d, p,
        [&p, x, y](int64_t pixel, int64_t n, int64_t oh, int64_t ow,
                   std::pair<T, int64_t>* scratch) {
          T* out = y + pixel * p.channels;
          for (int64_t c = 0; c < p.channels; ++c) {
            out[c] = x[median_pool_internal::MedianIndex(p, x, n, oh, ow, c, scratch)];
          }
        });
  }
};

template <typename T>
struct MedianPool2DGrad<CPUDevice, T> {
  void operator()(const CPUDevice& d, const MedianPool2DParams& p, const T* x, const T* dy,
                  int64_t* argmedian, T* dx) const {
    ParallelFor(d, p.InputSize(), /*cost_per_unit=*/1,
                [dx](int64_t begin, int64_t end) { std::fill(dx + begin, dx + end, T(0)); });
    median_pool_internal::ForEachOutputPixel<T>(
        d, p,
        [&p, x, argmedian](int64_t pixel, int64_t n, int64_t oh, int64_t ow,
                           std::pair<T, int64_t>* scratch) {
          int64_t* arg = argmedian + pixel * p.channels;
          for (int64_t c = 0; c < p.channels; ++c) {
            arg[c] = median_pool_internal::MedianIndex(p, x, n, oh, ow, c, scratch);
          }
        });
    // Units of (image, block of channels): contiguous channel runs for locality, and units
    // never share a dx element (argmedian of (n, ., ., c) lies in image n, channel c).
    constexpr int64_t kChannelBlock = 16;
    const int64_t blocks = (p.channels + kChannelBlock - 1) / kChannelBlock;
    const int64_t pixels_per_image = p.out_height * p.out_width;
    ParallelFor(d, p.batch * blocks, std::max<int64_t>(1, 4 * pixels_per_image * kChannelBlock),
                [&](int64_t begin, int64_t end) {
                  for (int64_t unit = begin; unit < end; ++unit) {
                    const int64_t n = unit / blocks;
                    const int64_t c0 = (unit % blocks) * kChannelBlock;
                    const int64_t c1 = std::min(c0 + kChannelBlock, p.channels);
                    for (int64_t q = 0; q < pixels_per_image; ++q) {
                      const int64_t o = (n * pixels_per_image + q) * p.channels;
                      for (int64_t c = c0; c < c1; ++c) dx[argmedian[o + c]] += dy[o + c];
                    }
                  }
                });
  }
};
#endif  // !defined(__CUDACC__)

}  // namespace tensorflow::tf_ext::functor

#endif  // TF_EXT_KERNELS_MEDIAN_POOL_FUNCTOR_H_
