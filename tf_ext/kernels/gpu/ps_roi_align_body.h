// The per-thread bodies of TfExt>PsRoiAlign's and TfExt>PsRoiAlignGrad's CUDA kernels
// (TF-free; see gpu_common.h). Same sampling geometry as the CPU functor
// (ps_roi_align_functor.h: Detectron's ROIAlign, a sample grid per bin, samples outside
// [-1, size] count as 0); sums are accumulated in double. Results agree with the CPU functor
// within floating-point tolerance (summation order differs in the backward pass;
// tests/gpu_body_test.cc).
//
// ROI rows must have been validated (CheckRois) before any kernel runs; see roi_pool_body.h.
#ifndef TF_EXT_KERNELS_GPU_PS_ROI_ALIGN_BODY_H_
#define TF_EXT_KERNELS_GPU_PS_ROI_ALIGN_BODY_H_

#include <cstdint>

#include "tf_ext/kernels/gpu/gpu_common.h"

namespace tensorflow::tf_ext::gpu {

// Mirrors functor::PsRoiAlignShape.
struct PsRoiAlignGeometry {
  int64_t batch = 0, height = 0, width = 0;  // features [N, H, W, C]
  int64_t channels = 0;                      // C = D * pooled_height * pooled_width
  int64_t output_channels = 0;               // D
  int64_t num_rois = 0;
  int64_t pooled_height = 1, pooled_width = 1;
  float spatial_scale = 1;
  int64_t sampling_ratio = 2;  // 0: adaptive
};

// functor::kPsRoiAlignMaxGrid.
constexpr int64_t kPsMaxGrid = int64_t{1} << 30;

// One axis of one bin's sample grid (functor::PsRoiAlignAxis / MakePsRoiAlignAxis): sample k
// sits at start + (k + 0.5) * bin / grid; samples in [begin, end) lie in [-1, size].
template <typename T>
struct PsAxis {
  T start, bin;
  int64_t grid, begin, end;

  TF_EXT_HOST_DEVICE T Sample(int64_t k) const {
    return start + MulRn(static_cast<T>(k) + T(0.5), bin) / static_cast<T>(grid);
  }

  TF_EXT_HOST_DEVICE PsAxis(T roi_start, T roi_end, int64_t index, int64_t pooled, int64_t size,
                            int64_t sampling_ratio) {
    const T roi_size = MaxOf(roi_end - roi_start, T(1));
    bin = roi_size / static_cast<T>(pooled);
    start = roi_start + MulRn(static_cast<T>(index), bin);
    const T g = sampling_ratio > 0 ? static_cast<T>(sampling_ratio) : Ceil(bin);
    grid = !(g < static_cast<T>(kPsMaxGrid)) ? kPsMaxGrid
                                             : MaxOf(static_cast<int64_t>(g), int64_t{1});
    begin = end = 0;
    if (size <= 0) return;
    begin = FirstAtLeast(T(-1));
    int64_t lo = begin, hi = grid;  // end = first k with Sample(k) > size
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (Sample(mid) > static_cast<T>(size)) hi = mid; else lo = mid + 1;
    }
    end = lo;
  }

  // The first k in [0, grid) with Sample(k) >= v (grid if none); Sample is monotone in k.
  TF_EXT_HOST_DEVICE int64_t FirstAtLeast(T v) const {
    int64_t lo = 0, hi = grid;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (Sample(mid) >= v) hi = mid; else lo = mid + 1;
    }
    return lo;
  }

  // Total bilinear weight that this axis' in-image samples give to pixel row/column p (the
  // 1-D factor of functor::PsRoiAlignBilinear's four weights: sample y puts 1 - (y - low) on
  // `low` and y - low on `high`, clamped at the edges). Only samples within [p - 1, p + 1] can
  // give p a non-zero weight, so a binary search skips the rest.
  TF_EXT_HOST_DEVICE T WeightOf(int64_t p, int64_t size) const {
    T sum = T(0);
    int64_t k = FirstAtLeast(static_cast<T>(p - 1));
    if (k < begin) k = begin;
    for (; k < end; ++k) {
      T y = Sample(k);
      if (y > static_cast<T>(p + 1)) break;
      if (y <= T(0)) y = T(0);
      int64_t low = static_cast<int64_t>(y), high;
      if (low >= size - 1) {
        high = low = size - 1;
        y = static_cast<T>(low);
      } else {
        high = low + 1;
      }
      const T l = y - static_cast<T>(low);
      if (low == p) sum += T(1) - l;
      if (high == p) sum += l;
    }
    return sum;
  }
};

template <typename T>
struct PsBin {
  PsAxis<T> y, x;
  TF_EXT_HOST_DEVICE PsBin(const PsRoiAlignGeometry& g, const float* roi, int64_t i, int64_t j)
      : y(MulRn(static_cast<T>(roi[2]), static_cast<T>(g.spatial_scale)),
          MulRn(static_cast<T>(roi[4]), static_cast<T>(g.spatial_scale)), i, g.pooled_height,
          g.height, g.sampling_ratio),
        x(MulRn(static_cast<T>(roi[1]), static_cast<T>(g.spatial_scale)),
          MulRn(static_cast<T>(roi[3]), static_cast<T>(g.spatial_scale)), j, g.pooled_width,
          g.width, g.sampling_ratio) {}
  TF_EXT_HOST_DEVICE bool ReadsImage() const { return y.begin < y.end && x.begin < x.end; }
  TF_EXT_HOST_DEVICE T Count() const { return static_cast<T>(y.grid) * static_cast<T>(x.grid); }
};

// Thread o (flat index into output [R, PH, PW, D]): the average over bin (i, j) of ROI r of
// input channel (d * PH + i) * PW + j, bilinear samples summed in double as on the CPU.
template <typename T>
struct PsRoiAlignBody {
  PsRoiAlignGeometry g;
  const T* features;
  const float* rois;  // on the device, validated
  T* output;
  TF_EXT_HOST_DEVICE void operator()(int64_t o) const {
    const int64_t D = g.output_channels, C = g.channels, H = g.height, W = g.width;
    const int64_t P = g.pooled_height * g.pooled_width;
    const int64_t d = o % D;
    const int64_t bin_index = (o / D) % P;
    const int64_t r = o / (D * P);
    const float* roi = rois + 5 * r;
    const PsBin<T> bin(g, roi, bin_index / g.pooled_width, bin_index % g.pooled_width);
    double acc = 0;
    if (bin.ReadsImage()) {
      const T* image = features + static_cast<int64_t>(roi[0]) * H * W * C + d * P + bin_index;
      for (int64_t iy = bin.y.begin; iy < bin.y.end; ++iy) {
        T y = bin.y.Sample(iy);
        if (y <= T(0)) y = T(0);
        int64_t y_low = static_cast<int64_t>(y), y_high;
        if (y_low >= H - 1) {
          y_high = y_low = H - 1;
          y = static_cast<T>(y_low);
        } else {
          y_high = y_low + 1;
        }
        const T ly = y - static_cast<T>(y_low), hy = T(1) - ly;
        for (int64_t ix = bin.x.begin; ix < bin.x.end; ++ix) {
          T x = bin.x.Sample(ix);
          if (x <= T(0)) x = T(0);
          int64_t x_low = static_cast<int64_t>(x), x_high;
          if (x_low >= W - 1) {
            x_high = x_low = W - 1;
            x = static_cast<T>(x_low);
          } else {
            x_high = x_low + 1;
          }
          const T lx = x - static_cast<T>(x_low), hx = T(1) - lx;
          acc += static_cast<double>(hy * hx * image[(y_low * W + x_low) * C] +
                                     hy * lx * image[(y_low * W + x_high) * C] +
                                     ly * hx * image[(y_high * W + x_low) * C] +
                                     ly * lx * image[(y_high * W + x_high) * C]);
        }
      }
    }
    const double count = static_cast<double>(bin.y.grid) * static_cast<double>(bin.x.grid);
    output[o] = static_cast<T>(acc / count);
  }
};

// Thread e (flat index into d_features [N, H, W, C]): a gather, so no atomics and a fixed
// order (deterministic). Input channel ch = d * P + bin belongs to one (bin, d); its element
// at pixel (h, w) receives, from each ROI of its image in ascending order,
// d_output / count * (row weight of h) * (column weight of w): the bilinear weights factor
// per axis, so the sum over the bin's sample grid is a product of two 1-D sums. Summed in
// double, rounded once. Writes every element of d_features.
template <typename T>
struct PsRoiAlignGradGatherBody {
  PsRoiAlignGeometry g;
  const float* rois;  // on the device, validated
  const T* d_output;
  T* d_features;
  TF_EXT_HOST_DEVICE void operator()(int64_t e) const {
    const int64_t D = g.output_channels, C = g.channels, H = g.height, W = g.width;
    const int64_t P = g.pooled_height * g.pooled_width;
    const int64_t ch = e % C;
    const int64_t w = (e / C) % W;
    const int64_t h = (e / (C * W)) % H;
    const int64_t n = e / (C * W * H);
    const int64_t bin_index = ch % P, d = ch / P;
    double acc = 0;
    if (d < D) {  // channels beyond D * P (none after validation) get no gradient
      for (int64_t r = 0; r < g.num_rois; ++r) {
        const float* roi = rois + 5 * r;
        if (static_cast<int64_t>(roi[0]) != n) continue;
        const PsBin<T> bin(g, roi, bin_index / g.pooled_width, bin_index % g.pooled_width);
        if (!bin.ReadsImage()) continue;
        const T wy = bin.y.WeightOf(h, H);
        if (wy == T(0)) continue;
        const T wx = bin.x.WeightOf(w, W);
        if (wx == T(0)) continue;
        const T scaled = d_output[(r * P + bin_index) * D + d] / bin.Count();
        acc += static_cast<double>(scaled) * static_cast<double>(wy) * static_cast<double>(wx);
      }
    }
    d_features[e] = static_cast<T>(acc);
  }
};

}  // namespace tensorflow::tf_ext::gpu

#endif  // TF_EXT_KERNELS_GPU_PS_ROI_ALIGN_BODY_H_
