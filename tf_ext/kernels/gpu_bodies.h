// The bridge between the functors' shape structs (TensorFlow side) and the TF-free CUDA
// per-thread bodies of kernels/gpu/: geometry conversions and the half storage type. Included
// by the *_op_gpu.cu.cc files (nvcc) and by the CPU grid tests (g++), so both run the bodies on
// exactly the same geometry.
#ifndef TF_EXT_KERNELS_GPU_BODIES_H_
#define TF_EXT_KERNELS_GPU_BODIES_H_

#include <cstdint>

#include "Eigen/Core"
#include "tf_ext/kernels/gpu/gpu_common.h"
#include "tf_ext/kernels/gpu/half_body.h"
#include "tf_ext/kernels/gpu/median_pool_body.h"
#include "tf_ext/kernels/gpu/ps_roi_align_body.h"
#include "tf_ext/kernels/gpu/roi_pool_body.h"
#include "tf_ext/kernels/gpu/sign_ste_body.h"
#include "tf_ext/kernels/median_pool_functor.h"
#include "tf_ext/kernels/ps_roi_align_functor.h"
#include "tf_ext/kernels/roi_pool_functor.h"

namespace tensorflow::tf_ext::gpu {

// Eigen::half is IEEE binary16 (one uint16_t): bodies see its bits.
template <>
struct Storage<Eigen::half> {
  using type = uint16_t;
};
static_assert(sizeof(Eigen::half) == sizeof(uint16_t), "Eigen::half is not 16 bits");

inline MedianPoolGeometry ToGeometry(const functor::MedianPool2DParams& p) {
  MedianPoolGeometry g;
  g.batch = p.batch;
  g.in_height = p.in_height;
  g.in_width = p.in_width;
  g.channels = p.channels;
  g.out_height = p.out_height;
  g.out_width = p.out_width;
  g.window_height = p.window_height;
  g.window_width = p.window_width;
  g.stride_height = p.stride_height;
  g.stride_width = p.stride_width;
  g.pad_top = p.pad_top;
  g.pad_left = p.pad_left;
  return g;
}

inline RoiPoolGeometry ToGeometry(const functor::RoiPoolShape& s) {
  RoiPoolGeometry g;
  g.batch = s.batch;
  g.height = s.height;
  g.width = s.width;
  g.channels = s.channels;
  g.num_rois = s.num_rois;
  g.pooled_height = s.pooled_height;
  g.pooled_width = s.pooled_width;
  g.spatial_scale = s.spatial_scale;
  return g;
}

inline PsRoiAlignGeometry ToGeometry(const functor::PsRoiAlignShape& s) {
  PsRoiAlignGeometry g;
  g.batch = s.batch;
  g.height = s.height;
  g.width = s.width;
  g.channels = s.channels;
  g.output_channels = s.output_channels;
  g.num_rois = s.num_rois;
  g.pooled_height = s.pooled_height;
  g.pooled_width = s.pooled_width;
  g.spatial_scale = s.spatial_scale;
  g.sampling_ratio = s.sampling_ratio;
  return g;
}

}  // namespace tensorflow::tf_ext::gpu

#endif  // TF_EXT_KERNELS_GPU_BODIES_H_
