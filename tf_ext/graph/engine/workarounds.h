// The forward rewrite TensorFlow's kernels need before a gradient can run, keeping the forward
// value exactly (it needs static shapes, from shape inference; the node keeps its name):
//  * grouped_convs: Conv2DBackpropFilter's Eigen kernel (what function bodies run; only the
//    oneDNN rewrite of eager/Python graphs handles groups) rejects grouped convolutions
//    ("filter_size does not have enough elements"). A Conv2D with one input channel per group
//    (Keras ConvNeXt's depthwise layers: filter [kh, kw, 1, C*m] on C channels) becomes
//    DepthwiseConv2dNative with the filter reshaped to [kh, kw, C, m] (same channel order).
// TensorFlow's wrong gradients are not worked around here: tf_ext replaces them where they are
// registered (OpDeclaration::Overrides, tf_ext/grads/manifest.h; docs/registries.md), so every
// entry point gets the corrected gradient.
#ifndef TF_EXT_GRAPH_ENGINE_WORKAROUNDS_H_
#define TF_EXT_GRAPH_ENGINE_WORKAROUNDS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tensorflow/core/framework/function.pb.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/graph/graph.h"

namespace tensorflow::tf_ext {

// How many nodes the rewrite changed.
struct GradientWorkarounds {
  int grouped_convs = 0;
};

// In a function body, `arg_shapes` (per _Arg index) give the shapes its arguments have.
absl::StatusOr<GradientWorkarounds> WorkAroundGradientBugs(
    Graph* g, const std::vector<PartialTensorShape>& arg_shapes = {});

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_ENGINE_WORKAROUNDS_H_
