// The XLA lowering of every tf_ext op: HLO built from the op's (validated) attrs and static
// shapes, with the results of its CPU kernel (docs/xla.md has the semantics table). The
// XlaOpKernels in tf_ext/xla/xla_kernels.cc validate the attrs and shapes with the ops' own
// validation functions and call these; each family lives in its own *_lowering.cc.
//
// Inputs are the ops' own (half, float, double; int32 for ZeroOut). What a compiled kernel
// cannot check (ROI rows' values, RoiPoolGrad's argmax) follows the rules documented per
// function, identical on every backend.
#ifndef TF_EXT_XLA_LOWERINGS_H_
#define TF_EXT_XLA_LOWERINGS_H_

#include <cstdint>
#include <utility>

#include "absl/status/statusor.h"
#include "tf_ext/kernels/median_pool_functor.h"
#include "tf_ext/kernels/ps_roi_align_functor.h"
#include "tf_ext/kernels/roi_pool_functor.h"
#include "xla/hlo/builder/xla_builder.h"

namespace tensorflow::tf_ext::lowering {

// ZeroOut: every element but flat index preserve_index (validated: < the element count) is 0.
absl::StatusOr<xla::XlaOp> ZeroOut(xla::XlaOp to_zero, int64_t preserve_index);

// SmoothL1 with the kernel's operations: 0.5 * x * x / delta or |x| - 0.5 * delta, in float for
// half (rounded once) and in T otherwise.
absl::StatusOr<xla::XlaOp> SmoothL1(xla::XlaOp x, float delta);

// sign(x) on the bits: +-1, a zero or (float, double) denormal keeps its sign as a zero, NaN
// keeps its bits.
absl::StatusOr<xla::XlaOp> SignSTE(xla::XlaOp x);

// d_y where |x| <= clip (x's magnitude after the denormal flush, clip rounded to T), else +0.
absl::StatusOr<xla::XlaOp> SignSTEGrad(xla::XlaOp d_y, xla::XlaOp x, float clip);

// MedianPool2D and its gradient over x [N, H, W, C] (p: the validated geometry). The median is
// selected with the CPU kernel's comparator network and tie rule, so y is the very element the
// CPU kernel picks; the gradient adds d_y into the chosen elements in the CPU kernel's order
// (output pixels ascending), so both are bitwise the CPU kernels' results.
absl::StatusOr<xla::XlaOp> MedianPool2D(xla::XlaOp x, const functor::MedianPool2DParams& p);
absl::StatusOr<xla::XlaOp> MedianPool2DGrad(xla::XlaOp x, xla::XlaOp d_y,
                                            const functor::MedianPool2DParams& p);

// RoiPool: (pooled, argmax), the CPU kernel's bins, first maximum in row-major order and NaN
// rule. A ROI whose batch index is not an integer in [0, N) or whose coordinates are not all
// finite (rows the CPU kernel rejects) gives empty bins: 0 and argmax -1.
absl::StatusOr<std::pair<xla::XlaOp, xla::XlaOp>> RoiPool(xla::XlaOp data, xla::XlaOp rois,
                                                          const functor::RoiPoolShape& s);
// RoiPoolGrad: d_pooled added into d_data [N, H, W, C] at each bin's argmax, as the CPU kernel
// adds it. Entries whose argmax is outside [0, H * W) (-1: an empty bin; the CPU kernel rejects
// any other) and the bins of rejected ROI rows add nothing. The sums are exact
// (DeterministicScatterSum), rounded once.
absl::StatusOr<xla::XlaOp> RoiPoolGrad(xla::XlaOp rois, xla::XlaOp argmax, xla::XlaOp d_pooled,
                                       const functor::RoiPoolShape& s);

// PsRoiAlign: the CPU kernel's samples, taps and weights, each bin's sum taken in the kernel's
// order and in double, then divided by the sample count. Rejected ROI rows give 0. XLA fuses
// products into the additions they feed (fused multiply-adds, as the GPU kernels' compiler
// does), so the results are within the GPU kernels' tolerance of the CPU kernel's, not its
// bits.
absl::StatusOr<xla::XlaOp> PsRoiAlign(xla::XlaOp features, xla::XlaOp rois,
                                      const functor::PsRoiAlignShape& s);
// PsRoiAlignGrad: the transpose, summed exactly (DeterministicScatterSum) and rounded once.
// Rejected ROI rows add nothing.
absl::StatusOr<xla::XlaOp> PsRoiAlignGrad(xla::XlaOp rois, xla::XlaOp d_output,
                                          const functor::PsRoiAlignShape& s);

}  // namespace tensorflow::tf_ext::lowering

#endif  // TF_EXT_XLA_LOWERINGS_H_
