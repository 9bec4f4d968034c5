// functor::RoiPool / functor::RoiPoolGrad: the maths of TfExt>RoiPool and TfExt>RoiPoolGrad.
// Must stay compilable by nvcc (no op_kernel.h): the interface is raw pointers plus a plain
// shape struct, and the bin geometry is a host/device function, so a GPU specialisation only
// has to add kernels.
#ifndef TF_EXT_KERNELS_ROI_POOL_FUNCTOR_H_
#define TF_EXT_KERNELS_ROI_POOL_FUNCTOR_H_

#include "tf_ext/kernels/functor_common.h"

#include "Eigen/Core"

#if !defined(__CUDACC__)
#include <algorithm>
#include <atomic>

#include "tf_ext/kernels/cpu_simd.h"
#include "tf_ext/kernels/roi_util.h"
#endif

namespace tensorflow::tf_ext::functor {

// Sizes of one RoiPool call; plain data so a device kernel can take it by value.
struct RoiPoolShape {
  int64_t batch = 0, height = 0, width = 0, channels = 0;  // data [N, H, W, C]
  int64_t num_rois = 0;                                    // rois [R, 5]
  int64_t pooled_height = 1, pooled_width = 1;
  float spatial_scale = 1;
};

// The pixel window [hstart, hend) x [wstart, wend) of bin (i, j) of one ROI, clipped to the
// image (empty when hend <= hstart or wend <= wstart).
struct RoiPoolWindow {
  int64_t hstart, hend, wstart, wend;
  EIGEN_DEVICE_FUNC bool empty() const { return hend <= hstart || wend <= wstart; }
};

// `v` clipped to [0, hi], NaN mapped to 0: the float -> int conversion that follows must never
// see an out-of-range value (that would be undefined behaviour).
EIGEN_DEVICE_FUNC inline int64_t RoiPoolClip(float v, int64_t hi) {
  if (!(v >= 0.f)) return 0;
  return v <= static_cast<float>(hi) ? static_cast<int64_t>(v) : hi;
}

// Bin geometry of the Caffe / Fast R-CNN RoIPool layer, in float like the original: corners
// rounded to whole pixels (half away from zero), ROI at least 1x1, bin edges floor/ceil of
// fractional bin boundaries.
//   roi: the 5 floats (batch_index, x1, y1, x2, y2).
EIGEN_DEVICE_FUNC inline RoiPoolWindow RoiPoolBinWindow(const RoiPoolShape& s, const float* roi,
                                                        int64_t i, int64_t j) {
  const float x1 = Eigen::numext::round(roi[1] * s.spatial_scale);
  const float y1 = Eigen::numext::round(roi[2] * s.spatial_scale);
  const float x2 = Eigen::numext::round(roi[3] * s.spatial_scale);
  const float y2 = Eigen::numext::round(roi[4] * s.spatial_scale);
  const float roi_w = Eigen::numext::maxi(x2 - x1 + 1.f, 1.f);
  const float roi_h = Eigen::numext::maxi(y2 - y1 + 1.f, 1.f);
  const float bin_h = roi_h / static_cast<float>(s.pooled_height);
  const float bin_w = roi_w / static_cast<float>(s.pooled_width);
  const float fi = static_cast<float>(i), fj = static_cast<float>(j);
  RoiPoolWindow win;
  win.hstart = RoiPoolClip(Eigen::numext::floor(fi * bin_h) + y1, s.height);
  win.hend = RoiPoolClip(Eigen::numext::ceil((fi + 1.f) * bin_h) + y1, s.height);
  win.wstart = RoiPoolClip(Eigen::numext::floor(fj * bin_w) + x1, s.width);
  win.wend = RoiPoolClip(Eigen::numext::ceil((fj + 1.f) * bin_w) + x1, s.width);
  return win;
}

// Forward pass.
//   data: [N, H, W, C].  rois: [R, 5] rows (batch_index, x1, y1, x2, y2); the kernel has
//     validated that every batch_index is an integer in [0, N) and every coordinate finite.
//   pooled, argmax: [R, pooled_height, pooled_width, C]. argmax = h * W + w of the bin's
//     maximum (first in row-major order on ties), -1 (and pooled = 0) for an empty bin. The
//     kernel has checked that H * W fits in int32.
template <typename Device, typename T>
struct RoiPool {
  void operator()(const Device& d, const RoiPoolShape& s, const T* data, const float* rois,
                  T* pooled, int32_t* argmax) const;
};

// Backward pass: d_data = sum over ROIs and bins of d_pooled scattered to argmax.
//   rois: as in the forward pass.  argmax, d_pooled: [R, pooled_height, pooled_width, C];
//     argmax entries outside [0, H * W) add nothing (the kernel rejects any but -1).
//   d_data: [N, H, W, C], fully overwritten.
template <typename Device, typename T>
struct RoiPoolGrad {
  void operator()(const Device& d, const RoiPoolShape& s, const float* rois,
                  const int32_t* argmax, const T* d_pooled, T* d_data) const;
};

#if !defined(__CUDACC__)

template <typename T>
struct RoiPool<CPUDevice, T> {
  void operator()(const CPUDevice& d, const RoiPoolShape& s, const T* data, const float* rois,
                  T* pooled, int32_t* argmax) const {
    const int64_t C = s.channels;
    const int64_t bins_per_roi = s.pooled_height * s.pooled_width;
    // Work per bin ~ (pixels in the bin) * C; the pixels per bin are estimated from the
    // average clipped ROI area so that large ROIs get small shards.
    double area = 0;
    for (int64_t r = 0; r < s.num_rois; ++r) {
      const RoiPoolWindow top_left = RoiPoolBinWindow(s, rois + 5 * r, 0, 0);
      const RoiPoolWindow bottom_right =
          RoiPoolBinWindow(s, rois + 5 * r, s.pooled_height - 1, s.pooled_width - 1);
      area += static_cast<double>(std::max<int64_t>(bottom_right.hend - top_left.hstart, 0)) *
              static_cast<double>(std::max<int64_t>(bottom_right.wend - top_left.wstart, 0));
    }
    const double pixels_per_bin =
        s.num_rois > 0 ? area / static_cast<double>(s.num_rois * bins_per_roi) : 0;
    const int64_t cost = static_cast<int64_t>((pixels_per_bin + 1) * 3 * static_cast<double>(C)) + 10;

    ParallelFor(d, s.num_rois * bins_per_roi, cost, [&](int64_t begin, int64_t end) {
      simd::Dispatch<MaxBins>::Run(s, data, rois, pooled, argmax, begin, end);
    });
  }

 private:
  // Bins [begin, end) (flat over ROIs and bins), blocks of kBytes.
  struct MaxBins {
    template <int kBytes>
    static void Run(RoiPoolShape s, const T* data, const float* rois, T* pooled,
                    int32_t* argmax, int64_t begin, int64_t end) {
      const int64_t C = s.channels, H = s.height, W = s.width;
      const int64_t bins_per_roi = s.pooled_height * s.pooled_width;
      for (int64_t b = begin; b < end; ++b) {
        const int64_t r = b / bins_per_roi;
        const int64_t i = (b / s.pooled_width) % s.pooled_height;
        const int64_t j = b % s.pooled_width;
        const float* roi = rois + 5 * r;
        T* out = pooled + b * C;
        int32_t* arg = argmax + b * C;
        const RoiPoolWindow win = RoiPoolBinWindow(s, roi, i, j);
        if (win.empty()) {
          std::fill(out, out + C, T(0));
          std::fill(arg, arg + C, int32_t{-1});
          continue;
        }
        const T* image = data + static_cast<int64_t>(roi[0]) * H * W * C;
        MaxBin<kBytes>(image, win, W, C, out, arg);
      }
    }
  };

  template <int kBytes>
  using V = simd::Block<T, kBytes>;
  template <int kBytes>
  using I = simd::Mask<T, kBytes>;
  using Int = typename simd::BlockTypes<T>::Int;

  // One non-empty bin, all C channels, accumulated in its own output rows (`out` holds the
  // running maximum, `arg` its position). The bin is read pixel by pixel, each pixel's C
  // channels as one contiguous run (a stream the prefetcher follows; reading a few channels
  // of every pixel at a time instead strides through memory and waits on it). The first
  // pixel seeds the maximum (rather than -inf), so a bin of -inf values still gets a valid
  // argmax; a later pixel wins only when strictly greater, which resolves ties to the first
  // pixel in row-major order and keeps the first of +0 / -0. Comparisons with NaN are false,
  // so that select never takes a NaN: the loop only records whether a NaN was seen, and if
  // one was, each channel is rescanned for its first NaN, which then wins (NaN propagates).
  template <int kBytes>
  static void MaxBin(const T* image, const RoiPoolWindow& win, int64_t W, int64_t C, T* out,
                     int32_t* arg) {
    using V = RoiPool::V<kBytes>;
    using I = RoiPool::I<kBytes>;
    constexpr int64_t kLanes = simd::kLanes<T, kBytes>;
    const int64_t first = win.hstart * W + win.wstart;
    const T* seed = image + first * C;
    const int64_t full = C - C % kLanes;
    const I first_pos = I{} + static_cast<Int>(first);
    I nan{};
    for (int64_t c = 0; c < full; c += kLanes) {
      const V v = simd::Load<V>(seed + c);
      simd::Store(v, out + c);
      StoreIndex<kBytes>(first_pos, arg + c, kLanes);
      nan |= v != v;
    }
    if (full < C) {
      const V v = simd::Load<V>(seed + full, C - full);
      simd::Store(v, out + full, C - full);
      StoreIndex<kBytes>(first_pos, arg + full, C - full);
      nan |= v != v;
    }
    for (int64_t h = win.hstart; h < win.hend; ++h) {
      for (int64_t w = (h == win.hstart ? win.wstart + 1 : win.wstart); w < win.wend; ++w) {
        const int64_t pos = h * W + w;
        const T* px = image + pos * C;
        const I p = I{} + static_cast<Int>(pos);
        for (int64_t c = 0; c < full; c += kLanes) {
          const V v = simd::Load<V>(px + c);
          const V best = simd::Load<V>(out + c);
          const I take = v > best;
          simd::Store(take ? v : best, out + c);
          StoreIndex<kBytes>(take ? p : LoadIndex<kBytes>(arg + c, kLanes), arg + c, kLanes);
          nan |= v != v;
        }
        if (full < C) {
          const int64_t n = C - full;
          const V v = simd::Load<V>(px + full, n);
          const V best = simd::Load<V>(out + full, n);
          const I take = v > best;
          simd::Store(take ? v : best, out + full, n);
          StoreIndex<kBytes>(take ? p : LoadIndex<kBytes>(arg + full, n), arg + full, n);
          nan |= v != v;
        }
      }
    }
    bool any_nan = false;
    for (int64_t l = 0; l < kLanes; ++l) any_nan |= nan[l] != 0;
    if (any_nan) {
      for (int64_t c = 0; c < C; ++c) FirstNaN(image, win, W, C, c, out + c, arg + c);
    }
  }

  // `n` int32 positions as a Mask<T> block (int32 lanes for float, int64 for double).
  template <int kBytes>
  static I<kBytes> LoadIndex(const int32_t* a, int64_t n) {
    using I = RoiPool::I<kBytes>;
    constexpr int64_t kLanes = simd::kLanes<T, kBytes>;
    if constexpr (sizeof(Int) == sizeof(int32_t)) {
      return n == kLanes ? simd::Load<I>(a) : simd::Load<I>(a, n);
    } else {
      I v{};
      for (int64_t l = 0; l < n; ++l) v[l] = a[l];
      return v;
    }
  }
  template <int kBytes>
  static void StoreIndex(const I<kBytes>& v, int32_t* a, int64_t n) {
    constexpr int64_t kLanes = simd::kLanes<T, kBytes>;
    if constexpr (sizeof(Int) == sizeof(int32_t)) {
      if (n == kLanes) {
        simd::Store(v, a);
      } else {
        simd::Store(v, a, n);
      }
    } else {
      for (int64_t l = 0; l < n; ++l) a[l] = static_cast<int32_t>(v[l]);
    }
  }

  // If channel `ch` of the bin holds a NaN, its first NaN in row-major order is the bin's
  // result.
  static void FirstNaN(const T* image, const RoiPoolWindow& win, int64_t W, int64_t C,
                       int64_t ch, T* out, int32_t* arg) {
    for (int64_t h = win.hstart; h < win.hend; ++h) {
      for (int64_t w = win.wstart; w < win.wend; ++w) {
        const T v = image[(h * W + w) * C + ch];
        if (v != v) {
          *out = v;
          *arg = static_cast<int32_t>(h * W + w);
          return;
        }
      }
    }
  }
};

template <typename T>
struct RoiPoolGrad<CPUDevice, T> {
  void operator()(const CPUDevice& d, const RoiPoolShape& s, const float* rois,
                  const int32_t* argmax, const T* d_pooled, T* d_data) const {
    const int64_t HW = s.height * s.width;
    if (s.batch == 0 || HW == 0 || s.channels == 0) return;
    const RoisByImage by_image(rois, s.num_rois, s.batch);

    // Work units are (image, band of image rows): two units never write the same element of
    // d_data, so shards need no atomics. A unit zeroes its band, then reads the argmax and
    // d(pooled) rows of its image's bins - each bin's C channels one contiguous run, a stream
    // the prefetcher follows - and adds the positions that fall in its band. Each element
    // sums its contributions in ascending ROI and bin order whatever the banding, so the
    // gradient is deterministic and independent of the thread count.
    //
    // The fast pass reads only the bins whose window rows meet the band: RoiPool's argmax
    // lies in its bin's window (-1 for an empty one). The op is public, though, so that pass
    // also checks it; if any position lies outside its bin's rows, the gradient is recomputed
    // by the exact pass, in which every unit reads every bin of its image.
    const int64_t rois_per_image = (s.num_rois + s.batch - 1) / s.batch;
    const int64_t want_units = static_cast<int64_t>(d.numThreads());
    const int64_t bands =
        std::max<int64_t>(1, std::min(s.height, (want_units + s.batch - 1) / s.batch));
    const int64_t band_rows = (s.height + bands - 1) / bands;
    const int64_t cost = (rois_per_image * s.pooled_height * s.pooled_width / bands + band_rows *
                          s.width) * s.channels * 2 + 10;
    std::atomic<bool> outside_rows{false};
    for (const bool exact : {false, true}) {
      ParallelFor(d, s.batch * bands, cost, [&](int64_t begin, int64_t end) {
        for (int64_t u = begin; u < end; ++u) {
          const int64_t n = u / bands, band = u % bands;
          const int64_t r0 = std::min(s.height, band * band_rows);
          const int64_t r1 = std::min(s.height, r0 + band_rows);
          if (!ScatterBand(s, rois, argmax, d_pooled, d_data, by_image, n, r0, r1, exact,
                           band == 0)) {
            outside_rows.store(true, std::memory_order_relaxed);
          }
        }
      });
      if (!outside_rows.load()) return;
    }
  }

 private:
  // Zeroes rows [r0, r1) of image n of d_data and adds into them the d(pooled) of every bin
  // of image n whose argmax falls there. exact = false: only bins whose window rows meet
  // [r0, r1) are read; returns false if one of them has an argmax outside its window rows
  // (or, when check_empty, an empty bin one other than -1). exact = true reads every bin.
  static bool ScatterBand(const RoiPoolShape& s, const float* rois, const int32_t* argmax,
                          const T* d_pooled, T* d_data, const RoisByImage& by_image, int64_t n,
                          int64_t r0, int64_t r1, bool exact, bool check_empty) {
    const int64_t C = s.channels, W = s.width;
    const int64_t bins_per_roi = s.pooled_height * s.pooled_width;
    T* image = d_data + n * s.height * W * C;
    std::fill(image + r0 * W * C, image + r1 * W * C, T(0));
    const uint64_t lo = static_cast<uint64_t>(r0 * W), span = static_cast<uint64_t>((r1 - r0) * W);
    bool inside = true;
    for (const int64_t* r = by_image.begin(n); r != by_image.end(n); ++r) {
      for (int64_t i = 0; i < s.pooled_height; ++i) {
        const RoiPoolWindow rows = RoiPoolBinWindow(s, rois + 5 * *r, i, 0);
        const int64_t first = (*r * bins_per_roi + i * s.pooled_width) * C;
        const int64_t count = s.pooled_width * C;  // this bin row's argmax entries
        if (!exact) {
          if (rows.hend <= rows.hstart) {  // an empty bin row: RoiPool gave -1 throughout
            if (check_empty) {
              for (int64_t k = 0; k < count; ++k) inside &= argmax[first + k] == -1;
            }
            continue;
          }
          if (rows.hend <= r0 || rows.hstart >= r1) continue;
        }
        const uint64_t row_lo = static_cast<uint64_t>(rows.hstart * W);
        const uint64_t row_span = static_cast<uint64_t>(std::max<int64_t>(rows.hend - rows.hstart, 0) * W);
        for (int64_t j = 0; j < s.pooled_width; ++j) {
          const int32_t* arg = argmax + first + j * C;
          const T* grad = d_pooled + first + j * C;
          for (int64_t c = 0; c < C; ++c) {
            const uint64_t pos = static_cast<uint64_t>(static_cast<int64_t>(arg[c]));
            if (pos - lo < span) image[pos * C + c] += grad[c];
            inside &= arg[c] == -1 || pos - row_lo < row_span;
          }
        }
      }
    }
    return exact || inside;
  }
};
#endif  // !defined(__CUDACC__)

#if GOOGLE_CUDA
// GPU: defined in roi_pool_op_gpu.cu.cc for float and double. Each kernel runs a
// per-thread body of kernels/gpu/roi_pool_body.h (TF-free: shared with the CPU grid
// tests and the standalone harness in tests/gpu). Pointers are device memory;
// the op kernel validates the ROI rows on the host before copying them there.
template <typename T>
struct RoiPool<Eigen::GpuDevice, T> {
  void operator()(const Eigen::GpuDevice& d, const RoiPoolShape& s, const T* data,
                  const float* rois, T* pooled, int32_t* argmax) const;
};
template <typename T>
struct RoiPoolGrad<Eigen::GpuDevice, T> {
  void operator()(const Eigen::GpuDevice& d, const RoiPoolShape& s, const float* rois,
                  const int32_t* argmax, const T* d_pooled, T* d_data) const;
};
#endif  // GOOGLE_CUDA

}  // namespace tensorflow::tf_ext::functor

#endif  // TF_EXT_KERNELS_ROI_POOL_FUNCTOR_H_
