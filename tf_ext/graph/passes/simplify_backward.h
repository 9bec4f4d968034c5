// Rewrites of a built forward + backward graph that let TensorFlow's optimizer and executor do
// for it what Python's gradients get from static shapes and forward outputs
// (docs/performance.md). Each computes the same sums of the same products; the weight-layout
// folds (the last two) can change the order a kernel adds them in, so a value can differ in its
// last bit (oneDNN's AVX2 matmul sums W and W^T in different orders).
//
// - Static shapes: a gradient's Shape, Size or Rank of a tensor whose shape shape inference
//   fixes (from the placeholders' shape attrs, which requests must match) becomes a constant.
//   Python's gradients read static shapes instead of emitting these nodes; a Shape node is a
//   second reader of its forward tensor, which keeps Grappler from folding a Mul by a constant
//   into the convolution before it (batch normalisation in inference) and keeps the broadcast
//   reductions (Sum over no axes) in the graph.
// - Forward outputs: ReluGrad and Relu6Grad read their Relu's output instead of its input (the
//   same mask: relu(x) > 0 exactly when x > 0, and relu6(x) is in (0, 6) exactly when x is), as
//   Python's gradients do; the input then has one reader fewer, so the Relu can run in place.
// - Input gradients as forward convolutions: a Conv2DBackpropInput of stride 1 and dilation 1
//   (NHWC) whose filter W [kh, kw, in, out] is a constant (of at most 10 MB, which Grappler
//   folds) becomes Conv2D(dy, W') with W' = transpose(reverse(W, [0, 1]), [0, 1, 3, 2]) (the
//   filter turned half a turn, its channel axes swapped) and padding (kh-1-top, kh-1-bottom,
//   kw-1-left, kw-1-right): the same sums. oneDNN reorders a constant filter of a forward
//   convolution once and caches it, where it reorders the backward-data filter on every call:
//   ResNet50's 7x7x512 3x3 layer took 3.3 ms so against 1.6 ms (batch 1). The folded W' is a
//   second copy of each such filter.
// - Pretransposed weights: a MatMul(a, W, transpose_b) with W a constant of at most 10 MB (a
//   Dense layer's input gradient, dy W^T) becomes MatMul(a, transpose(W)), the transpose
//   folded by Grappler: oneDNN's matmul reads a transposed constant more slowly (BERT's
//   [1024, 3072] x [3072, 768]^T: 15.3 ms against 12.2 ms).
#ifndef TF_EXT_GRAPH_PASSES_SIMPLIFY_BACKWARD_H_
#define TF_EXT_GRAPH_PASSES_SIMPLIFY_BACKWARD_H_

#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "tensorflow/core/graph/graph.h"

namespace tensorflow::tf_ext {

struct BackwardSimplifications {
  int constant_shapes = 0;  // Shape/Size/Rank nodes made constants
  int outputs_read = 0;     // ReluGrad/Relu6Grad nodes reading their Relu's output
  int forward_convolutions = 0;   // Conv2DBackpropInput nodes made Conv2D
  int pretransposed_weights = 0;  // MatMul(a, W, transpose_b) made MatMul(a, transpose(W))
};

struct SimplifyOptions {
  // Input gradients as forward convolutions and pretransposed weights (a second copy of each
  // such weight, folded by Grappler): off without Grappler, or where memory matters more
  // (GradientOptions::optimize_graph, hoist_constants).
  bool fold_weight_layouts = true;
};

// Rewrites the gradient nodes of `g` (those named "<prefix>/..."), not nodes in `keep`.
absl::StatusOr<BackwardSimplifications> SimplifyBackward(Graph* g, const std::string& prefix,
                                                         const std::set<std::string>& keep,
                                                         const SimplifyOptions& options = {});

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_PASSES_SIMPLIFY_BACKWARD_H_
