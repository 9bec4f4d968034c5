// functor::PsRoiAlign / functor::PsRoiAlignGrad: the maths of TfExt>PsRoiAlign and
// TfExt>PsRoiAlignGrad. Must stay compilable by nvcc (no op_kernel.h): the interface is raw
// pointers plus a plain shape struct, and the sampling geometry is host/device code shared by
// both passes, so a GPU specialisation only has to add kernels.
#ifndef TF_EXT_KERNELS_PS_ROI_ALIGN_FUNCTOR_H_
#define TF_EXT_KERNELS_PS_ROI_ALIGN_FUNCTOR_H_

#include "tf_ext/kernels/functor_common.h"

#include "Eigen/Core"

#if !defined(__CUDACC__)
#include <vector>

#include "tf_ext/kernels/roi_util.h"
#endif

namespace tensorflow::tf_ext::functor {

// Sizes of one PsRoiAlign call; plain data so a device kernel can take it by value.
struct PsRoiAlignShape {
  int64_t batch = 0, height = 0, width = 0;  // features [N, H, W, C]
  int64_t channels = 0;                      // C = output_channels * pooled_height * pooled_width
  int64_t output_channels = 0;               // D
  int64_t num_rois = 0;                      // rois [R, 5]
  int64_t pooled_height = 1, pooled_width = 1;
  float spatial_scale = 1;
  int64_t sampling_ratio = 2;  // 0: adaptive, ceil(bin size) per ROI and axis
};

// The sample grid is capped per axis so that the sample count stays representable and the
// grid searches below stay short; only bins over a billion pixels wide reach the cap.
constexpr int64_t kPsRoiAlignMaxGrid = int64_t{1} << 30;

// Sample grid of one bin along one axis: sample k (0 <= k < grid) sits at
// start + (k + 0.5) * bin / grid. Samples in [begin, end) lie in [-1, size] and read the
// image; the others read 0 but still count in the average.
template <typename T>
struct PsRoiAlignAxis {
  T start, bin;
  int64_t grid, begin, end;

  EIGEN_DEVICE_FUNC T Sample(int64_t k) const {
    return start + (static_cast<T>(k) + T(0.5)) * bin / static_cast<T>(grid);
  }
};

// Builds the grid of one axis. Sample(k) is computed with monotone floating-point operations,
// so "reads the image" holds on one contiguous range of k, found by binary search: a huge ROI
// (a bogus detection) then costs O(size) samples instead of O(grid), with results identical to
// visiting every sample.
//   roi_start, roi_end: scaled ROI edges.  index, pooled: the bin's index and the bin count.
//   size: the image's extent along this axis (H or W).
template <typename T>
EIGEN_DEVICE_FUNC PsRoiAlignAxis<T> MakePsRoiAlignAxis(T roi_start, T roi_end, int64_t index,
                                                       int64_t pooled, int64_t size,
                                                       int64_t sampling_ratio) {
  PsRoiAlignAxis<T> a;
  // Like Detectron, a degenerate ROI is widened to one pixel.
  const T roi_size = Eigen::numext::maxi(roi_end - roi_start, T(1));
  a.bin = roi_size / static_cast<T>(pooled);
  a.start = roi_start + static_cast<T>(index) * a.bin;
  // `!(g < cap)` also catches a NaN size (from an overflowing spatial_scale product).
  const T g = sampling_ratio > 0 ? static_cast<T>(sampling_ratio) : Eigen::numext::ceil(a.bin);
  a.grid = !(g < static_cast<T>(kPsRoiAlignMaxGrid)) ? kPsRoiAlignMaxGrid
                                                      : Eigen::numext::maxi(static_cast<int64_t>(g), int64_t{1});
  if (size <= 0) {  // nothing to read from
    a.begin = a.end = 0;
    return a;
  }
  // begin = first k with Sample(k) >= -1; end = first k with Sample(k) > size.
  int64_t lo = 0, hi = a.grid;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (a.Sample(mid) >= T(-1)) hi = mid; else lo = mid + 1;
  }
  a.begin = lo;
  hi = a.grid;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (a.Sample(mid) > static_cast<T>(size)) hi = mid; else lo = mid + 1;
  }
  a.end = lo;
  return a;
}

// Sampling geometry of bin (i, j) of one ROI.
template <typename T>
struct PsRoiAlignBin {
  PsRoiAlignAxis<T> y, x;
  T count;  // grid_h * grid_w, the average's denominator
};

//   roi: the 5 floats (batch_index, x1, y1, x2, y2); scaled without rounding.
template <typename T>
EIGEN_DEVICE_FUNC PsRoiAlignBin<T> MakePsRoiAlignBin(const PsRoiAlignShape& s, const float* roi,
                                                     int64_t i, int64_t j) {
  const T scale = static_cast<T>(s.spatial_scale);
  PsRoiAlignBin<T> bin;
  bin.y = MakePsRoiAlignAxis<T>(static_cast<T>(roi[2]) * scale, static_cast<T>(roi[4]) * scale,
                                i, s.pooled_height, s.height, s.sampling_ratio);
  bin.x = MakePsRoiAlignAxis<T>(static_cast<T>(roi[1]) * scale, static_cast<T>(roi[3]) * scale,
                                j, s.pooled_width, s.width, s.sampling_ratio);
  bin.count = static_cast<T>(bin.y.grid) * static_cast<T>(bin.x.grid);
  return bin;
}

// One bilinear sample: pixel positions (h * W + w) and weights of its four neighbours.
template <typename T>
struct BilinearTaps {
  int64_t pos[4];
  T weight[4];
};

// Detectron's ROIAlign interpolation at (y, x), which must lie in [-1, H] x [-1, W] with
// H, W >= 1 (MakePsRoiAlignAxis only yields such samples): coordinates below 0 are clamped to
// 0, and the last row/column is repeated instead of reading past the edge.
template <typename T>
EIGEN_DEVICE_FUNC BilinearTaps<T> PsRoiAlignBilinear(T y, T x, int64_t H, int64_t W) {
  if (y <= T(0)) y = T(0);
  if (x <= T(0)) x = T(0);
  int64_t y_low = static_cast<int64_t>(y), x_low = static_cast<int64_t>(x);
  int64_t y_high, x_high;
  if (y_low >= H - 1) {
    y_high = y_low = H - 1;
    y = static_cast<T>(y_low);
  } else {
    y_high = y_low + 1;
  }
  if (x_low >= W - 1) {
    x_high = x_low = W - 1;
    x = static_cast<T>(x_low);
  } else {
    x_high = x_low + 1;
  }
  const T ly = y - static_cast<T>(y_low), lx = x - static_cast<T>(x_low);
  const T hy = T(1) - ly, hx = T(1) - lx;
  BilinearTaps<T> t;
  t.pos[0] = y_low * W + x_low;
  t.pos[1] = y_low * W + x_high;
  t.pos[2] = y_high * W + x_low;
  t.pos[3] = y_high * W + x_high;
  t.weight[0] = hy * hx;
  t.weight[1] = hy * lx;
  t.weight[2] = ly * hx;
  t.weight[3] = ly * lx;
  return t;
}

// Forward pass.
//   features: [N, H, W, C], C = D * pooled_height * pooled_width.
//   rois: [R, 5] rows (batch_index, x1, y1, x2, y2); the kernel has validated that every
//     batch_index is an integer in [0, N) and every coordinate finite.
//   output: [R, pooled_height, pooled_width, D]; bin (i, j) of channel d averages input channel
//     (d * pooled_height + i) * pooled_width + j.
template <typename Device, typename T>
struct PsRoiAlign {
  void operator()(const Device& d, const PsRoiAlignShape& s, const T* features,
                  const float* rois, T* output) const;
};

// Backward pass: d_features = the transpose of the forward pass applied to d_output.
//   rois: as in the forward pass.  d_output: [R, pooled_height, pooled_width, D].
//   d_features: [N, H, W, C], fully overwritten.
template <typename Device, typename T>
struct PsRoiAlignGrad {
  void operator()(const Device& d, const PsRoiAlignShape& s, const float* rois,
                  const T* d_output, T* d_features) const;
};

#if !defined(__CUDACC__)

// Rough samples per bin, for the ParallelFor cost model only.
inline int64_t PsRoiAlignSamplesEstimate(const PsRoiAlignShape& s) {
  const int64_t g = s.sampling_ratio > 0 ? std::min<int64_t>(s.sampling_ratio, 64) : 2;
  return g * g;
}

template <typename T>
struct PsRoiAlign<CPUDevice, T> {
  void operator()(const CPUDevice& d, const PsRoiAlignShape& s, const T* features,
                  const float* rois, T* output) const {
    const int64_t D = s.output_channels, C = s.channels, H = s.height, W = s.width;
    const int64_t P = s.pooled_height * s.pooled_width;
    const int64_t cost = PsRoiAlignSamplesEstimate(s) * (8 * D + 40) + 10;
    ParallelFor(d, s.num_rois * P, cost, [&](int64_t begin, int64_t end) {
      // The average's running sums, in double whatever T is: a float32 sum stops growing once
      // it is 2^24 times the sample size (adaptive bins can hold more samples than that).
      std::vector<double> acc(D);
      for (int64_t b = begin; b < end; ++b) {
        const int64_t r = b / P, bin_index = b % P;
        const float* roi = rois + 5 * r;
        const PsRoiAlignBin<T> bin = MakePsRoiAlignBin<T>(
            s, roi, bin_index / s.pooled_width, bin_index % s.pooled_width);
        T* out = output + b * D;
        std::fill(acc.begin(), acc.end(), 0.0);
        // No in-image sample along one axis: the sum is 0. Checked up front, since the other
        // axis alone may have ~2^30 samples to walk (an empty image width, a huge height).
        const bool reads_image = bin.y.begin < bin.y.end && bin.x.begin < bin.x.end;
        // Channel d of this bin is input channel d * P + bin_index.
        const T* image = features + static_cast<int64_t>(roi[0]) * H * W * C + bin_index;
        for (int64_t iy = bin.y.begin; reads_image && iy < bin.y.end; ++iy) {
          const T y = bin.y.Sample(iy);
          for (int64_t ix = bin.x.begin; ix < bin.x.end; ++ix) {
            const BilinearTaps<T> t = PsRoiAlignBilinear<T>(y, bin.x.Sample(ix), H, W);
            const T* p0 = image + t.pos[0] * C;
            const T* p1 = image + t.pos[1] * C;
            const T* p2 = image + t.pos[2] * C;
            const T* p3 = image + t.pos[3] * C;
            for (int64_t c = 0; c < D; ++c) {
              const int64_t k = c * P;
              acc[c] += static_cast<double>(t.weight[0] * p0[k] + t.weight[1] * p1[k] +
                                           t.weight[2] * p2[k] + t.weight[3] * p3[k]);
            }
          }
        }
        const double count = static_cast<double>(bin.y.grid) * static_cast<double>(bin.x.grid);
        for (int64_t c = 0; c < D; ++c) out[c] = static_cast<T>(acc[c] / count);
      }
    });
  }
};

template <typename T>
struct PsRoiAlignGrad<CPUDevice, T> {
  void operator()(const CPUDevice& d, const PsRoiAlignShape& s, const float* rois,
                  const T* d_output, T* d_features) const {
    const int64_t D = s.output_channels, C = s.channels, H = s.height, W = s.width;
    const int64_t P = s.pooled_height * s.pooled_width;
    ParallelFor(d, s.batch * H * W * C, /*cost_per_unit=*/1,
                [d_features](int64_t begin, int64_t end) {
                  std::fill(d_features + begin, d_features + end, T(0));
                });
    if (s.num_rois == 0 || s.batch == 0 || D == 0) return;
    const RoisByImage by_image(rois, s.num_rois, s.batch);

    // Work units are (image, bin, d) triples. Input channel d * P + bin belongs to exactly one
    // (bin, d), so two units never write the same element of d_features and shards need no
    // atomics. A shard's units of one (image, bin) form a range of d, which shares the
    // sampling geometry.
    const int64_t rois_per_image = (s.num_rois + s.batch - 1) / s.batch;
    const int64_t cost = rois_per_image * PsRoiAlignSamplesEstimate(s) * 10 + 10;
    ParallelFor(d, s.batch * P * D, cost, [&](int64_t begin, int64_t end) {
      std::vector<T> scaled;  // d_output / count for the shard's d range
      for (int64_t u = begin; u < end;) {
        const int64_t n = u / (P * D), bin_index = (u / D) % P;
        const int64_t d0 = u % D, d1 = std::min(D, d0 + (end - u));
        T* image = d_features + n * H * W * C + bin_index;
        for (const int64_t* r = by_image.begin(n); r != by_image.end(n); ++r) {
          const PsRoiAlignBin<T> bin = MakePsRoiAlignBin<T>(
              s, rois + 5 * *r, bin_index / s.pooled_width, bin_index % s.pooled_width);
          // No in-image sample along one axis: nothing to scatter (see the forward pass).
          if (bin.y.begin >= bin.y.end || bin.x.begin >= bin.x.end) continue;
          const T* grad = d_output + (*r * P + bin_index) * D;
          scaled.assign(grad + d0, grad + d1);
          for (T& g : scaled) g /= bin.count;
          for (int64_t iy = bin.y.begin; iy < bin.y.end; ++iy) {
            const T y = bin.y.Sample(iy);
            for (int64_t ix = bin.x.begin; ix < bin.x.end; ++ix) {
              const BilinearTaps<T> t = PsRoiAlignBilinear<T>(y, bin.x.Sample(ix), H, W);
              for (int k = 0; k < 4; ++k) {
                T* p = image + t.pos[k] * C;
                const T w = t.weight[k];
                for (int64_t c = d0; c < d1; ++c) p[c * P] += w * scaled[c - d0];
              }
            }
          }
        }
        u += d1 - d0;
      }
    });
  }
};
#endif  // !defined(__CUDACC__)

#if GOOGLE_CUDA
// GPU: defined in ps_roi_align_op_gpu.cu.cc for float and double. Each kernel runs a
// per-thread body of kernels/gpu/ps_roi_align_body.h (TF-free: shared with the CPU grid
// tests and the standalone harness in tests/gpu). Pointers are device memory;
// the op kernel validates the ROI rows on the host before copying them there.
template <typename T>
struct PsRoiAlign<Eigen::GpuDevice, T> {
  void operator()(const Eigen::GpuDevice& d, const PsRoiAlignShape& s, const T* features,
                  const float* rois, T* output) const;
};
template <typename T>
struct PsRoiAlignGrad<Eigen::GpuDevice, T> {
  void operator()(const Eigen::GpuDevice& d, const PsRoiAlignShape& s, const float* rois,
                  const T* d_output, T* d_features) const;
};
#endif  // GOOGLE_CUDA

}  // namespace tensorflow::tf_ext::functor

#endif  // TF_EXT_KERNELS_PS_ROI_ALIGN_FUNCTOR_H_
