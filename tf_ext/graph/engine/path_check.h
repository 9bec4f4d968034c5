// Which part of a graph a gradient flows through, and whether every op there has a C++
// gradient.
//
// Gradients flow where Python's tf.gradients lets them: along data edges whose tensors are
// differentiable (floating point, complex, variant lists, resources; never integers, strings
// or booleans), and never past an op registered as not differentiable (StopGradient, Shape,
// ...). An op whose only connection to x is an integer output (TopKV2's indices) or a
// StopGradient is therefore not on the path, and needs no gradient.
#ifndef TF_EXT_GRAPH_ENGINE_PATH_CHECK_H_
#define TF_EXT_GRAPH_ENGINE_PATH_CHECK_H_

#include <vector>

#include "absl/status/status.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/graph/graph.h"

namespace tensorflow::tf_ext {

// Whether a gradient may flow through a tensor of this type (Python: _IsBackpropagatable).
bool IsDifferentiableType(DataType dtype);
// Loop variables and branch inputs whose gradient is computed (a resource handle's is not).
bool Flows(DataType t);

// A tensor of the graph: (node, output index).
struct GraphTensor {
  Node* node = nullptr;
  int index = 0;
};

// Where a gradient of the ys with respect to the xs flows, indexed by node id.
struct DifferentiablePath {
  // carries[id][k]: output k of the node carries a gradient. It depends differentiably on an x
  // (or is one) and some y depends differentiably on it (or it is one).
  std::vector<std::vector<bool>> carries;
  // on_path[id]: the node reads a tensor that depends on an x and one of its outputs reaches a
  // y, so its gradient is needed (unless it is registered as not differentiable).
  std::vector<bool> on_path;

  bool Carries(const Node* n, int output) const { return carries[n->id()][output]; }
  bool OnPath(const Node* n) const { return on_path[n->id()]; }
};

DifferentiablePath FindDifferentiablePath(const Graph& g, const std::vector<GraphTensor>& ys,
                                          const std::vector<GraphTensor>& xs);

// Every op on the path that lacks a gradient, all in one InvalidArgument: per op type its
// nodes, and whether TensorFlow has a Python-only gradient for it; lowered (v1) control-flow
// ops are named as such (convert them first: control_flow.h). `g` must already have its function calls inlined.
absl::Status CheckPathHasGradients(const Graph& g, const DifferentiablePath& path);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_ENGINE_PATH_CHECK_H_
