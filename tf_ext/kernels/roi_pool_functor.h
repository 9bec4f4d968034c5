// functor::RoiPool / functor::RoiPoolGrad: the maths of TfExt>RoiPool and TfExt>RoiPoolGrad.
// Must stay compilable by nvcc (no op_kernel.h): the interface is raw pointers plus a plain
// shape struct, and the bin geometry is a host/device function, so a GPU specialisation only
// has to add kernels.
#ifndef TF_EXT_KERNELS_ROI_POOL_FUNCTOR_H_
#define TF_EXT_KERNELS_ROI_POOL_FUNCTOR_H_

#include "tf_ext/kernels/functor_common.h"

#include "Eigen/Core"

#if !defined(__CUDACC__)
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
    const int64_t C = s.channels, H = s.height, W = s.width;
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
        for (int64_t c = 0; c < C; c += simd::kLanes<T>) {
          RoiPoolMaxBlock(image, win, W, C, c, std::min<int64_t>(simd::kLanes<T>, C - c), out,
                          arg);
        }
      }
    });
  }

 private:
  // Channels [c, c + count) of one non-empty bin, as SIMD blocks over the contiguous channel
  // axis. The first pixel seeds the maximum (rather than -inf), so a bin of -inf values still
  // gets a valid argmax; later pixels win only when strictly greater, which makes ties resolve
  // to the first pixel in row-major order, or when they are NaN over a number, so the first
  // NaN wins and NaNs propagate instead of being skipped by `>`.
  static void RoiPoolMaxBlock(const T* image, const RoiPoolWindow& win, int64_t W, int64_t C,
                              int64_t c, int64_t count, T* out, int32_t* arg) {
    using V = simd::Block<T>;
    using I = simd::Mask<T>;
    const bool full = count == simd::kLanes<T>;
    auto load = [&](int64_t pos) {
      const T* p = image + pos * C + c;
      return full ? simd::Load<V>(p) : simd::Load<V>(p, count);
    };
    const int64_t first = win.hstart * W + win.wstart;
    V best = load(first);
    I at = I{} + static_cast<typename simd::BlockTypes<T>::Int>(first);
    for (int64_t h = win.hstart; h < win.hend; ++h) {
      for (int64_t w = (h == win.hstart ? win.wstart + 1 : win.wstart); w < win.wend; ++w) {
        const int64_t pos = h * W + w;
        const V v = load(pos);
        const I take = (v > best) | ((v != v) & (best == best));
        best = take ? v : best;
        at = take ? I{} + static_cast<typename simd::BlockTypes<T>::Int>(pos) : at;
      }
    }
    simd::Store(best, out + c, count);
    for (int64_t l = 0; l < count; ++l) arg[c + l] = static_cast<int32_t>(at[l]);
  }
};

template <typename T>
struct RoiPoolGrad<CPUDevice, T> {
  void operator()(const CPUDevice& d, const RoiPoolShape& s, const float* rois,
                  const int32_t* argmax, const T* d_pooled, T* d_data) const {
    const int64_t C = s.channels, HW = s.height * s.width;
    const int64_t bins_per_roi = s.pooled_height * s.pooled_width;
    ParallelFor(d, s.batch * HW * C, /*cost_per_unit=*/1,
                [d_data](int64_t begin, int64_t end) {
                  std::fill(d_data + begin, d_data + end, T(0));
                });
    if (s.num_rois == 0 || s.batch == 0 || C == 0) return;
    const RoisByImage by_image(rois, s.num_rois, s.batch);

    // Work units are (image, block of kChannelBlock channels): two units never write the same
    // element of d_data, so shards need no atomics, and every bin's argmax and d(pooled) rows
    // are read as contiguous runs of the block (one unit per channel read one cache line per
    // element). Each element sums its contributions in ascending ROI and bin order, so the
    // gradient is deterministic.
    constexpr int64_t kChannelBlock = 16;
    const int64_t blocks = (C + kChannelBlock - 1) / kChannelBlock;
    const int64_t rois_per_image = (s.num_rois + s.batch - 1) / s.batch;
    const int64_t cost = rois_per_image * bins_per_roi * kChannelBlock * 2 + 10;
    ParallelFor(d, s.batch * blocks, cost, [&](int64_t begin, int64_t end) {
      for (int64_t u = begin; u < end; ++u) {
        const int64_t n = u / blocks;
        const int64_t c0 = (u % blocks) * kChannelBlock;
        const int64_t c1 = std::min(C, c0 + kChannelBlock);
        T* image = d_data + n * HW * C;
        for (const int64_t* r = by_image.begin(n); r != by_image.end(n); ++r) {
          const int64_t base = *r * bins_per_roi * C;
          for (int64_t b = 0; b < bins_per_roi; ++b) {
            const int32_t* arg = argmax + base + b * C;
            const T* grad = d_pooled + base + b * C;
            for (int64_t c = c0; c < c1; ++c) {
              const int64_t pos = arg[c];
              if (pos >= 0 && pos < HW) image[pos * C + c] += grad[c];
            }
          }
        }
      }
    });
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
