// The per-thread bodies of TfExt>RoiPool's and TfExt>RoiPoolGrad's CUDA kernels (TF-free; see
// gpu_common.h). Bit for bit the CPU functor's results (roi_pool_functor.h): the same float bin
// geometry (multiplications kept unfused), the same max rule (first maximum in row-major order
// wins, the first NaN wins and propagates, comparisons see denormals as zero like TensorFlow's
// DAZ CPU kernels) and, in the backward pass, the same summation order
// (tests/gpu_body_test.cc).
//
// ROI rows must have been validated (CheckRois: integer batch index in [0, batch), finite
// coordinates) before any kernel runs: the GPU kernels take `rois` in host memory, validate it
// there with the CPU kernel's function, and only then copy it to the device.
#ifndef TF_EXT_KERNELS_GPU_ROI_POOL_BODY_H_
#define TF_EXT_KERNELS_GPU_ROI_POOL_BODY_H_

#include <cstdint>

#include "tf_ext/kernels/gpu/gpu_common.h"

namespace tensorflow::tf_ext::gpu {

// Mirrors functor::RoiPoolShape.
struct RoiPoolGeometry {
  int64_t batch = 0, height = 0, width = 0, channels = 0;  // data [N, H, W, C]
  int64_t num_rois = 0;                                    // rois [R, 5]
  int64_t pooled_height = 1, pooled_width = 1;
  float spatial_scale = 1;
};

// `v` clipped to [0, hi], NaN mapped to 0 (functor::RoiPoolClip).
TF_EXT_HOST_DEVICE inline int64_t RoiPoolClipValue(float v, int64_t hi) {
  if (!(v >= 0.f)) return 0;
  return v <= static_cast<float>(hi) ? static_cast<int64_t>(v) : hi;
}

// One axis of an ROI's bin grid (functor::RoiPoolBinWindow, split per axis): bin k covers
// [floor(k * bin) + lo, ceil((k + 1) * bin) + lo) clipped to [0, size].
struct RoiPoolAxis {
  float lo, bin;
  int64_t size;
  TF_EXT_HOST_DEVICE RoiPoolAxis(float c1, float c2, float scale, int64_t pooled, int64_t size_)
      : size(size_) {
    lo = Round(MulRn(c1, scale));
    const float hi = Round(MulRn(c2, scale));
    bin = MaxOf(hi - lo + 1.f, 1.f) / static_cast<float>(pooled);
  }
  TF_EXT_HOST_DEVICE int64_t Start(int64_t k) const {
    return RoiPoolClipValue(Floor(MulRn(static_cast<float>(k), bin)) + lo, size);
  }
  TF_EXT_HOST_DEVICE int64_t End(int64_t k) const {
    return RoiPoolClipValue(Ceil(MulRn(static_cast<float>(k) + 1.f, bin)) + lo, size);
  }
};

// ROI r's axes: x (columns, roi[1], roi[3]) and y (rows, roi[2], roi[4]).
TF_EXT_HOST_DEVICE inline RoiPoolAxis RoiPoolRows(const RoiPoolGeometry& g, const float* roi) {
  return RoiPoolAxis(roi[2], roi[4], g.spatial_scale, g.pooled_height, g.height);
}
TF_EXT_HOST_DEVICE inline RoiPoolAxis RoiPoolCols(const RoiPoolGeometry& g, const float* roi) {
  return RoiPoolAxis(roi[1], roi[3], g.spatial_scale, g.pooled_width, g.width);
}

template <typename T>
TF_EXT_HOST_DEVICE inline bool RoiPoolGreater(T a, T b) {
  return FlushDenormal(a) > FlushDenormal(b);
}

// Thread o (flat index into pooled/argmax [R, PH, PW, C]): the max of channel c over bin
// (i, j) of ROI r, and its position h * W + w; an empty bin gives 0 and -1.
template <typename T>
struct RoiPoolBody {
  RoiPoolGeometry g;
  const T* data;
  const float* rois;  // on the device, validated
  T* pooled;
  int32_t* argmax;
  TF_EXT_HOST_DEVICE void operator()(int64_t o) const {
    const int64_t C = g.channels, W = g.width;
    const int64_t c = o % C;
    const int64_t j = (o / C) % g.pooled_width;
    const int64_t i = (o / (C * g.pooled_width)) % g.pooled_height;
    const int64_t r = o / (C * g.pooled_width * g.pooled_height);
    const float* roi = rois + 5 * r;
    const RoiPoolAxis ys = RoiPoolRows(g, roi), xs = RoiPoolCols(g, roi);
    const int64_t hstart = ys.Start(i), hend = ys.End(i);
    const int64_t wstart = xs.Start(j), wend = xs.End(j);
    if (hend <= hstart || wend <= wstart) {
      pooled[o] = T(0);
      argmax[o] = -1;
      return;
    }
    const T* image = data + static_cast<int64_t>(roi[0]) * g.height * W * C + c;
    // The first pixel seeds the maximum; later ones win only when strictly greater, or when
    // the first NaN meets a number (as in the CPU functor).
    int32_t best_pos = static_cast<int32_t>(hstart * W + wstart);
    T best = image[static_cast<int64_t>(best_pos) * C];
    for (int64_t h = hstart; h < hend; ++h) {
      for (int64_t w = (h == hstart ? wstart + 1 : wstart); w < wend; ++w) {
        const int32_t pos = static_cast<int32_t>(h * W + w);
        const T v = image[static_cast<int64_t>(pos) * C];
        if (RoiPoolGreater(v, best) || (v != v && best == best)) {
          best = v;
          best_pos = pos;
        }
      }
    }
    pooled[o] = best;
    argmax[o] = best_pos;
  }
};

// Thread e (flat index into d_data [N, H, W, C]): a gather, so no atomics and a fixed order.
// d_data[e] = sum of d_pooled over the ROIs of e's image (ascending r) and their bins whose
// window contains e's pixel (ascending bin), where argmax names that pixel: the CPU functor's
// summation order, so the result is bit for bit the CPU one. An argmax entry only ever meets
// an equality test here, never an address computation, so no argmax value can make a thread
// read or write out of bounds. Entries that RoiPool cannot produce (a position outside the
// entry's own bin window) add nothing here, while the CPU functor adds them wherever they
// point; for RoiPool's own argmax the two agree exactly. Writes every element of d_data.
template <typename T>
struct RoiPoolGradGatherBody {
  RoiPoolGeometry g;
  const float* rois;  // on the device, validated
  const int32_t* argmax;
  const T* d_pooled;
  T* d_data;
  TF_EXT_HOST_DEVICE void operator()(int64_t e) const {
    const int64_t C = g.channels, W = g.width;
    const int64_t c = e % C;
    const int64_t pix = (e / C) % (g.height * W);
    const int64_t n = e / (C * g.height * W);
    const int64_t h = pix / W, w = pix % W;
    T acc = T(0);
    for (int64_t r = 0; r < g.num_rois; ++r) {
      const float* roi = rois + 5 * r;
      if (static_cast<int64_t>(roi[0]) != n) continue;
      const RoiPoolAxis ys = RoiPoolRows(g, roi), xs = RoiPoolCols(g, roi);
      // Bin edges are monotone in the bin index: stop once a bin starts past the pixel.
      for (int64_t i = 0; i < g.pooled_height; ++i) {
        const int64_t hstart = ys.Start(i);
        if (hstart > h) break;
        if (h >= ys.End(i)) continue;
        for (int64_t j = 0; j < g.pooled_width; ++j) {
          const int64_t wstart = xs.Start(j);
          if (wstart > w) break;
          if (w >= xs.End(j)) continue;
          const int64_t o = ((r * g.pooled_height + i) * g.pooled_width + j) * C + c;
          if (argmax[o] == pix) acc += d_pooled[o];
        }
      }
    }
    d_data[e] = acc;
  }
};

}  // namespace tensorflow::tf_ext::gpu

#endif  // TF_EXT_KERNELS_GPU_ROI_POOL_BODY_H_
