// Rewrites that work around bugs of TensorFlow 2.21's C++ gradients, each keeping the forward
// value exactly (both need static shapes, from shape inference; nodes keep their names):
//  * negative_axes: the function gradient of the reductions (Sum, Mean, Prod, Max, Min;
//    core/ops/math_grad.cc GradForReductionOp) feeds the reduction indices straight into
//    DynamicStitch, so a negative axis (Keras LayerNormalization: axis=-1) fails with
//    "indices[0] is out of range": constant negative indices are made non-negative.
//  * grouped_convs: Conv2DBackpropFilter's Eigen kernel (what function bodies run; only the
//    oneDNN rewrite of eager/Python graphs handles groups) rejects grouped convolutions
//    ("filter_size does not have enough elements"). A Conv2D with one input channel per group
//    (Keras ConvNeXt's depthwise layers: filter [kh, kw, 1, C*m] on C channels) becomes
//    DepthwiseConv2dNative with the filter reshaped to [kh, kw, C, m] (same channel order).
//  * max_pool_grads: the function gradient of MaxPoolGrad (core/ops/nn_grad.cc) has the wrong
//    signature (MaxPool's: 2 arguments), so a graph holding MaxPoolGrad (a gradient graph,
//    differentiated again for a second derivative) cannot be differentiated: MaxPoolGrad
//    becomes MaxPoolGradV2 (the same kernel; ksize and strides as Const inputs), whose gradient
//    tf_ext adds (tf_ext/grads/tf/nn_grad.cc).
#ifndef TF_EXT_GRAPH_WORKAROUNDS_H_
#define TF_EXT_GRAPH_WORKAROUNDS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/graph/graph.h"

namespace tensorflow::tf_ext {

// How many nodes each rewrite changed.
struct GradientWorkarounds {
  int negative_axes = 0;
  int grouped_convs = 0;
  int max_pool_grads = 0;
};

// In a function body, `arg_shapes` (per _Arg index) give the shapes its arguments have.
absl::StatusOr<GradientWorkarounds> WorkAroundGradientBugs(
    Graph* g, const std::vector<PartialTensorShape>& arg_shapes = {});

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_WORKAROUNDS_H_
