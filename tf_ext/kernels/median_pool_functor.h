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
// NaN only when at least m - (m-1)/2 of its m elements are NaN (5 of 9, 2 of 4). The gradient
// routes d(y) to that same element.
#ifndef TF_EXT_KERNELS_MEDIAN_POOL_FUNCTOR_H_
#define TF_EXT_KERNELS_MEDIAN_POOL_FUNCTOR_H_

#include <cstring>

#include "tf_ext/kernels/functor_common.h"
#include "tf_ext/ops/median_pool_geometry.h"

#if !defined(__CUDACC__)
#include <limits>
#include <utility>
#include <vector>

#include "tf_ext/kernels/cpu_simd.h"
#endif

namespace tensorflow::tf_ext::functor {

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

// The geometry of x [N, H, W, C] (dims) pooled by validated attrs (ksize, strides: [height,
// width]; same: SAME padding), for the kernels and the XLA lowering alike.
inline MedianPool2DParams MedianPool2DGeometry(const int64_t dims[4], const int64_t ksize[2],
                                               const int64_t strides[2], bool same) {
  MedianPool2DParams p;
  p.batch = dims[0];
  p.in_height = dims[1];
  p.in_width = dims[2];
  p.channels = dims[3];
  p.window_height = ksize[0];
  p.window_width = ksize[1];
  p.stride_height = strides[0];
  p.stride_width = strides[1];
  MedianPoolOutputSize(p.in_height, ksize[0], strides[0], same, &p.out_height, &p.pad_top);
  MedianPoolOutputSize(p.in_width, ksize[1], strides[1], same, &p.out_width, &p.pad_left);
  return p;
}

namespace median_pool_internal {

// An unsigned integer whose order is the value order used here: -0 and +0 map alike, NaN (any
// payload or sign) maps above +inf. The IEEE order-preserving bit trick: positive numbers get
// the sign bit set, negative ones have every bit complemented (reversing their order).
inline uint32_t OrderedBits(float v) {
  if (!(v == v)) return 0xFFFFFFFFu;
  v = v + 0.0f;  // -0 + +0 == +0
  uint32_t b;
  std::memcpy(&b, &v, sizeof(b));
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
inline uint64_t OrderedBits(double v) {
  if (!(v == v)) return ~uint64_t{0};
  v = v + 0.0;
  uint64_t b;
  std::memcpy(&b, &v, sizeof(b));
  return (b >> 63) ? ~b : (b | (uint64_t{1} << 63));
}

// The key of a window element as one unsigned integer: the value's OrderedBits in the high
// half, the element's row-major index in the window in the low half. Indices are distinct, so
// this is a strict total order (value, then row-major position) and every selection method -
// network, nth_element, full sort - picks the very same element. Comparisons are plain integer
// min/max: branch-free in the network (whose comparison outcomes are unpredictable, so
// branches would mostly mispredict) and cheap in nth_element.
template <typename T>
struct WindowKey;
template <>
struct WindowKey<float> {
  using type = uint64_t;
  static type Make(float v, int64_t index) {
    return (type{OrderedBits(v)} << 32) | static_cast<uint32_t>(index);
  }
  static int64_t Index(type k) { return static_cast<int64_t>(k & 0xFFFFFFFFu); }
};
template <>
struct WindowKey<double> {
  using type = unsigned __int128;
  static type Make(double v, int64_t index) {
    return (static_cast<type>(OrderedBits(v)) << 64) | static_cast<uint64_t>(index);
  }
  static int64_t Index(type k) { return static_cast<int64_t>(static_cast<uint64_t>(k)); }
};

// Window indices must fit the float key's low 32 bits (median_pool_geometry.h).
constexpr int64_t kMaxWindowElements = kMaxMedianPoolWindowElements;

// The largest number of in-image elements any window can hold.
inline int64_t MaxWindowElements(const MedianPool2DParams& p) {
  return std::min(p.window_height, p.in_height) * std::min(p.window_width, p.in_width);
}

// Window index (0..8, row-major) of the lower median of 9 values given in row-major window
// order, by the 19-compare-exchange selection network of Paeth (Graphics Gems, "median of
// 9"), as in Devillard's opt_med9: afterwards slot 4 holds the element of rank 4. It works on
// whole keys, so by the 0-1 principle ties resolve exactly as in LowerMedianSelect.
template <typename T>
inline int64_t LowerMedian9(const T v[9]) {
  using Key = WindowKey<T>;
  typename Key::type k[9];
  for (int i = 0; i < 9; ++i) k[i] = Key::Make(v[i], i);
  auto cx = [&k](int a, int b) {  // afterwards k[a] < k[b]
    const typename Key::type lo = k[a] < k[b] ? k[a] : k[b];
    const typename Key::type hi = k[a] < k[b] ? k[b] : k[a];
    k[a] = lo;
    k[b] = hi;
  };
  cx(1, 2); cx(4, 5); cx(7, 8);
  cx(0, 1); cx(3, 4); cx(6, 7);
  cx(1, 2); cx(4, 5); cx(7, 8);
  cx(0, 3); cx(5, 8); cx(4, 7);
  cx(3, 6); cx(1, 4); cx(2, 5);
  cx(4, 7); cx(4, 2); cx(6, 4);
  cx(4, 2);
  return Key::Index(k[4]);
}

#if !defined(__CUDACC__)
// Window index of the lower median (rank (m-1)/2) of m >= 1 keys made by WindowKey<T>::Make.
// Small windows count ranks: O(m^2) compares, but branch-free and vectorisable, measured 2-3x
// faster than std::nth_element (whose partitioning branches mispredict) up to ~32 elements;
// larger ones use std::nth_element (expected O(m)), which reorders `keys`.
template <typename T>
inline int64_t LowerMedianSelect(typename WindowKey<T>::type* keys, int64_t m) {
  const int64_t target = (m - 1) / 2;
  if (m <= 32) {
    for (int64_t i = 0; i < m; ++i) {
      int64_t rank = 0;
      for (int64_t j = 0; j < m; ++j) rank += keys[j] < keys[i];
      // Keys are distinct, so exactly one has the target rank.
      if (rank == target) return WindowKey<T>::Index(keys[i]);
    }
  }
  typename WindowKey<T>::type* mid = keys + target;
  std::nth_element(keys, mid, keys + m);
  return WindowKey<T>::Index(*mid);
}

// Flat NHWC index into x of the lower median of output element (n, oh, ow, c). Windows of
// 3x3 lying fully inside the image take the selection network; all others gather their
// in-image elements into `scratch` (capacity >= MaxWindowElements) and select.
template <typename T>
inline int64_t MedianIndex(const MedianPool2DParams& p, const T* x, int64_t n, int64_t oh,
                           int64_t ow, int64_t c, typename WindowKey<T>::type* scratch) {
  const int64_t h_raw = oh * p.stride_height - p.pad_top;
  const int64_t w_raw = ow * p.stride_width - p.pad_left;
  const int64_t h0 = std::max<int64_t>(h_raw, 0);
  const int64_t w0 = std::max<int64_t>(w_raw, 0);
  // min(raw + k, in) without forming raw + k (k may be huge).
  const int64_t h1 = p.window_height >= p.in_height - h_raw ? p.in_height : h_raw + p.window_height;
  const int64_t w1 = p.window_width >= p.in_width - w_raw ? p.in_width : w_raw + p.window_width;
  const int64_t width = w1 - w0;
  const int64_t image = n * p.in_height;
  auto flat = [&](int64_t h, int64_t w) { return ((image + h) * p.in_width + w) * p.channels + c; };
  if (p.window_height == 3 && p.window_width == 3 && h1 - h0 == 3 && width == 3) {
    T v[9];
    for (int i = 0; i < 9; ++i) v[i] = x[flat(h0 + i / 3, w0 + i % 3)];
    const int64_t i = LowerMedian9(v);
    return flat(h0 + i / 3, w0 + i % 3);
  }
  int64_t m = 0;
  for (int64_t h = h0; h < h1; ++h) {
    for (int64_t w = w0; w < w1; ++w, ++m) scratch[m] = WindowKey<T>::Make(x[flat(h, w)], m);
  }
  const int64_t i = LowerMedianSelect<T>(scratch, m);
  return flat(h0 + i / width, w0 + i % width);
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

// ---- Channel-parallel selection (the CPU path) ----
//
// NHWC keeps a pixel's channels contiguous, so one output pixel's windows - one per channel,
// all with the same geometry - are processed together, a block of simd::kLanes<T> channels at
// a time: every window element becomes a block of order-preserving integer keys (OrderedKey),
// a min/max selection network over those blocks leaves the key of rank (m-1)/2 in every lane,
// and a scan of the window in row-major order picks, per lane, the element with that key and
// the right rank among equal keys. That is exactly the stable sort's element (the keys order
// values as the definition does: -0 == +0, NaN above everything, NaNs equal), so values, -0/+0
// and NaN payloads and the gradient's routing are those of the scalar definition.

// A value's order as a signed integer of T's width: the IEEE bits, negative numbers with their
// magnitude bits flipped; -0 becomes +0 (adding +0, which also flushes a denormal when the
// kernel runs with denormals flushed, as in the scalar OrderedBits), every NaN one key above
// +inf. Padding keys kLow/kHigh lie outside every value's range.
template <typename T>
struct OrderedKeys;
template <>
struct OrderedKeys<float> {
  using Int = int32_t;
  static constexpr Int kMagnitude = 0x7fffffff, kNaN = 0x7f800001;
  static constexpr Int kLow = std::numeric_limits<Int>::min();
  static constexpr Int kHigh = std::numeric_limits<Int>::max();
  static constexpr int kSignShift = 31;
};
template <>
struct OrderedKeys<double> {
  using Int = int64_t;
  static constexpr Int kMagnitude = 0x7fffffffffffffff, kNaN = 0x7ff0000000000001;
  static constexpr Int kLow = std::numeric_limits<Int>::min();
  static constexpr Int kHigh = std::numeric_limits<Int>::max();
  static constexpr int kSignShift = 63;
};

template <typename T, int kBytes>
TF_EXT_SIMD_INLINE simd::Mask<T, kBytes> OrderedKey(simd::Block<T, kBytes> v) {
  using K = OrderedKeys<T>;
  using Key = simd::Mask<T, kBytes>;
  const Key b = simd::BitCast<Key>(v + T(0));
  const Key key = b ^ ((b >> K::kSignShift) & K::kMagnitude);
  return v != v ? Key{} + K::kNaN : key;
}

// A comparator network leaving, for any n keys (a multiset), the one of rank `target` in slot
// `target`.
struct SelectionNetwork {
  int n = 0, target = 0;
  std::vector<std::pair<int, int>> pairs;  // (a, b): afterwards slot a <= slot b
};

// Networks up to this many slots (7x7 windows); larger windows take the scalar selection.
// (In Paeth's network below some pairs have a > b: the minimum still goes to slot a.)
constexpr int kMaxNetworkSlots = 49;

// The lower-median network of n slots: Paeth's 19 comparators for 9; otherwise Batcher's
// odd-even merge sort on the next power of two (comparators touching the absent slots >= n,
// which would hold +inf, change nothing and are dropped), pruned to the comparators the
// target slot depends on.
inline SelectionNetwork MedianNetwork(int n) {
  SelectionNetwork net;
  net.n = n;
  net.target = (n - 1) / 2;
  if (n == 9) {
    net.pairs = {{1, 2}, {4, 5}, {7, 8}, {0, 1}, {3, 4}, {6, 7}, {1, 2}, {4, 5}, {7, 8}, {0, 3},
                 {5, 8}, {4, 7}, {3, 6}, {1, 4}, {2, 5}, {4, 7}, {4, 2}, {6, 4}, {4, 2}};
    return net;
  }
  int size = 1;
  while (size < n) size *= 2;
  std::vector<std::pair<int, int>> all;
  for (int p = 1; p < size; p *= 2) {
    for (int k = p; k >= 1; k /= 2) {
      for (int j = k % p; j + k < size; j += 2 * k) {
        for (int i = 0; i < k && i + j + k < size; ++i) {
          const int a = i + j, b = i + j + k;
          if (a / (2 * p) == b / (2 * p) && b < n) all.push_back({a, b});
        }
      }
    }
  }
  std::vector<bool> needed(n, false);
  needed[net.target] = true;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (needed[it->first] || needed[it->second]) {
      needed[it->first] = needed[it->second] = true;
      net.pairs.push_back(*it);
    }
  }
  std::reverse(net.pairs.begin(), net.pairs.end());
  return net;
}

// One output pixel's window: the flat offsets (channel 0) of its in-image elements in
// row-major order.
struct PixelWindow {
  int64_t offset[kMaxNetworkSlots];
  int m = 0;
};

inline void WindowOf(const MedianPool2DParams& p, int64_t n, int64_t oh, int64_t ow,
                     PixelWindow* win) {
  const int64_t h_raw = oh * p.stride_height - p.pad_top;
  const int64_t w_raw = ow * p.stride_width - p.pad_left;
  const int64_t h0 = std::max<int64_t>(h_raw, 0), w0 = std::max<int64_t>(w_raw, 0);
  const int64_t h1 = std::min(h_raw + p.window_height, p.in_height);
  const int64_t w1 = std::min(w_raw + p.window_width, p.in_width);
  win->m = 0;
  for (int64_t h = h0; h < h1; ++h) {
    for (int64_t w = w0; w < w1; ++w) {
      win->offset[win->m++] = ((n * p.in_height + h) * p.in_width + w) * p.channels;
    }
  }
}

// Afterwards a <= b in every lane.
template <typename Key>
TF_EXT_SIMD_INLINE void CompareExchange(Key& a, Key& b) {
  const Key lt = a < b;
  const Key lo = lt ? a : b;
  b = lt ? b : a;
  a = lo;
}

// Paeth's median-of-9 network (LowerMedian9's) on blocks held in registers: afterwards k[4]
// holds the key of rank 4 in every lane.
template <typename Key>
TF_EXT_SIMD_INLINE Key Median9(Key k0, Key k1, Key k2, Key k3, Key k4, Key k5, Key k6, Key k7, Key k8) {
  CompareExchange(k1, k2); CompareExchange(k4, k5); CompareExchange(k7, k8);
  CompareExchange(k0, k1); CompareExchange(k3, k4); CompareExchange(k6, k7);
  CompareExchange(k1, k2); CompareExchange(k4, k5); CompareExchange(k7, k8);
  CompareExchange(k0, k3); CompareExchange(k5, k8); CompareExchange(k4, k7);
  CompareExchange(k3, k6); CompareExchange(k1, k4); CompareExchange(k2, k5);
  CompareExchange(k4, k7); CompareExchange(k4, k2); CompareExchange(k6, k4);
  CompareExchange(k4, k2);
  return k4;
}

// For channels [c, c + count) (count <= kLanes) of one pixel's window: the bits of each
// lane's median element (`value`) and its row-major index in the window (`index`), blocks of
// kBytes. Written as compares feeding selects, min/max and subtractions only: GCC 12 turns
// those into AVX-512 mask instructions, but scalarises AND/OR-ed 64-byte integer masks.
template <typename T, int kBytes>
TF_EXT_SIMD_INLINE void SelectBlock(const SelectionNetwork& net, const PixelWindow& win,
                                    const T* x, int64_t c, int64_t count,
                                    simd::Mask<T, kBytes>* value, simd::Mask<T, kBytes>* index) {
  using Key = simd::Mask<T, kBytes>;
  using K = OrderedKeys<T>;
  const int m = win.m;
  Key bits[kMaxNetworkSlots];  // the window's elements, row-major
  Key real[kMaxNetworkSlots];  // their keys
  if (count == simd::kLanes<T, kBytes>) {
    for (int i = 0; i < m; ++i) bits[i] = simd::Load<Key>(x + win.offset[i] + c);
  } else {
    for (int i = 0; i < m; ++i) bits[i] = simd::Load<Key>(x + win.offset[i] + c, count);
  }
  for (int i = 0; i < m; ++i) {
    real[i] = OrderedKey<T, kBytes>(simd::BitCast<simd::Block<T, kBytes>>(bits[i]));
  }
  // Padding: low keys below and high keys above every value, so many that the network's
  // target rank (n-1)/2 is the window's rank (m-1)/2.
  const int low = net.target - (m - 1) / 2;
  auto slot = [&](int i) { return i < m ? real[i] : Key{} + (i < m + low ? K::kLow : K::kHigh); };
  Key median;
  if (net.n == 9) {
    median = Median9(slot(0), slot(1), slot(2), slot(3), slot(4), slot(5), slot(6), slot(7),
                     slot(8));
  } else {
    Key keys[kMaxNetworkSlots];
    for (int i = 0; i < net.n; ++i) keys[i] = slot(i);
    for (const auto& [a, b] : net.pairs) CompareExchange(keys[a], keys[b]);
    median = keys[net.target];
  }
  // Rank among equal keys: the stable sort's element of rank (m-1)/2 is the
  // ((m-1)/2 - #smaller)-th (from 0) element with the median key in row-major order.
  Key smaller{};
  for (int i = 0; i < m; ++i) smaller -= real[i] < median;  // a true lane is -1
  const Key wanted = (Key{} + static_cast<typename K::Int>((m - 1) / 2)) - smaller;
  const Key none = Key{} - 1;  // never equal to `wanted` (>= 0)
  Key seen{}, out{}, at{};
  for (int i = 0; i < m; ++i) {
    // The number of equal keys before element i where it has the median key, else -1.
    const Key rank = real[i] == median ? seen : none;
    out = rank == wanted ? bits[i] : out;
    at = rank == wanted ? Key{} + static_cast<typename K::Int>(i) : at;
    seen -= real[i] == median;
  }
  *value = out;
  *index = at;
}

// Cycles per output pixel (all channels), for the ParallelFor cost model.
inline int64_t PixelCost(const MedianPool2DParams& p, int64_t network_size) {
  return std::max<int64_t>(1, (3 * network_size + 8 * MaxWindowElements(p)) * p.channels / 4 + 20);
}

// fn(pixel, n, oh, ow, scratch) over every output pixel (pixel = flat (n, oh, ow) index), in
// parallel; scratch holds MaxWindowElements keys and belongs to one work shard. The scalar
// path, for windows beyond kMaxNetworkSlots.
template <typename T, typename Fn>
void ForEachOutputPixel(const CPUDevice& d, const MedianPool2DParams& p, const Fn& fn) {
  const int64_t pixels = p.batch * p.out_height * p.out_width;
  if (p.channels == 0) return;
  ParallelFor(d, pixels, std::max<int64_t>(1, 20 * MaxWindowElements(p) * p.channels),
              [&p, &fn](int64_t begin, int64_t end) {
    std::vector<typename WindowKey<T>::type> scratch(MaxWindowElements(p));
    for (int64_t i = begin; i < end; ++i) {
      const int64_t ow = i % p.out_width;
      const int64_t oh = (i / p.out_width) % p.out_height;
      const int64_t n = i / (p.out_width * p.out_height);
      fn(i, n, oh, ow, scratch.data());
    }
  });
}

// Whether the channel-parallel path handles p (window small enough for a network).
inline bool UseNetwork(const MedianPool2DParams& p) {
  return p.window_height <= kMaxNetworkSlots && p.window_width <= kMaxNetworkSlots &&
         p.window_height * p.window_width <= kMaxNetworkSlots;
}

// Output pixels [begin, end) of ForEachSelectedBlock, blocks of kBytes.
template <typename T, typename Fn>
struct SelectShard {
  template <int kBytes>
  static void Run(const SelectionNetwork* net, const MedianPool2DParams* params, const T* x,
                  const Fn* fn, int64_t begin, int64_t end) {
    const MedianPool2DParams& p = *params;
    constexpr int64_t kLanes = simd::kLanes<T, kBytes>;
    PixelWindow win;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t ow = i % p.out_width;
      const int64_t oh = (i / p.out_width) % p.out_height;
      const int64_t n = i / (p.out_width * p.out_height);
      WindowOf(p, n, oh, ow, &win);
      for (int64_t c = 0; c < p.channels; c += kLanes) {
        const int64_t count = std::min<int64_t>(kLanes, p.channels - c);
        simd::Mask<T, kBytes> value, index;
        SelectBlock<T, kBytes>(*net, win, x, c, count, &value, &index);
        (*fn)(i, win, c, count, value, index);
      }
    }
  }
};

// fn(pixel, win, c, count, value, index) for every output pixel and block of channels, in
// parallel over pixels (the channel-parallel path). value and index are blocks of the width
// simd::Dispatch picked, so fn takes them as `auto`.
template <typename T, typename Fn>
void ForEachSelectedBlock(const CPUDevice& d, const MedianPool2DParams& p, const T* x,
                          const Fn& fn) {
  const int64_t pixels = p.batch * p.out_height * p.out_width;
  if (p.channels == 0 || pixels == 0) return;
  const SelectionNetwork net =
      MedianNetwork(static_cast<int>(p.window_height * p.window_width));
  ParallelFor(d, pixels, PixelCost(p, static_cast<int64_t>(net.pairs.size())),
              [&](int64_t begin, int64_t end) {
    simd::Dispatch<SelectShard<T, Fn>>::Run(&net, &p, x, &fn, begin, end);
  });
}

}  // namespace median_pool_internal

template <typename T>
struct MedianPool2D<CPUDevice, T> {
  void operator()(const CPUDevice& d, const MedianPool2DParams& p, const T* x, T* y) const {
    namespace mpi = median_pool_internal;
    if (mpi::UseNetwork(p)) {
      mpi::ForEachSelectedBlock<T>(
          d, p, x,
          [y, &p](int64_t pixel, const mpi::PixelWindow&, int64_t c, int64_t count,
                  const auto& value, const auto&) {
            simd::Store(value, y + pixel * p.channels + c, count);
          });
      return;
    }
    mpi::ForEachOutputPixel<T>(
        d, p,
        [&p, x, y](int64_t pixel, int64_t n, int64_t oh, int64_t ow,
                   typename mpi::WindowKey<T>::type* scratch) {
          T* out = y + pixel * p.channels;
          for (int64_t c = 0; c < p.channels; ++c) {
            out[c] = x[mpi::MedianIndex(p, x, n, oh, ow, c, scratch)];
          }
        });
  }
};

template <typename T>
struct MedianPool2DGrad<CPUDevice, T> {
  void operator()(const CPUDevice& d, const MedianPool2DParams& p, const T* x, const T* dy,
                  int64_t* argmedian, T* dx) const {
    namespace mpi = median_pool_internal;
    ParallelFor(d, p.InputSize(), /*cost_per_unit=*/1,
                [dx](int64_t begin, int64_t end) { std::fill(dx + begin, dx + end, T(0)); });
    if (mpi::UseNetwork(p)) {
      mpi::ForEachSelectedBlock<T>(
          d, p, x,
          [argmedian, &p](int64_t pixel, const mpi::PixelWindow& win, int64_t c, int64_t count,
                          const auto&, const auto& index) {
            int64_t* arg = argmedian + pixel * p.channels + c;
            for (int64_t l = 0; l < count; ++l) arg[l] = win.offset[index[l]] + c + l;
          });
    } else {
      mpi::ForEachOutputPixel<T>(
          d, p,
          [&p, x, argmedian](int64_t pixel, int64_t n, int64_t oh, int64_t ow,
                             typename mpi::WindowKey<T>::type* scratch) {
            int64_t* arg = argmedian + pixel * p.channels;
            for (int64_t c = 0; c < p.channels; ++c) {
              arg[c] = mpi::MedianIndex(p, x, n, oh, ow, c, scratch);
            }
          });
    }
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

#if GOOGLE_CUDA
// GPU: defined in median_pool_op_gpu.cu.cc for float and double. Each kernel runs a
// per-thread body of kernels/gpu/median_pool_body.h (TF-free: shared with the CPU grid
// tests and the standalone harness in tests/gpu). Pointers are device memory.
template <typename T>
struct MedianPool2D<Eigen::GpuDevice, T> {
  void operator()(const Eigen::GpuDevice& d, const MedianPool2DParams& p, const T* x, T* y) const;
};
template <typename T>
struct MedianPool2DGrad<Eigen::GpuDevice, T> {
  void operator()(const Eigen::GpuDevice& d, const MedianPool2DParams& p, const T* x, const T* dy,
                  int64_t* argmedian, T* dx) const;
};
#endif  // GOOGLE_CUDA

}  // namespace tensorflow::tf_ext::functor

#endif  // TF_EXT_KERNELS_MEDIAN_POOL_FUNCTOR_H_
