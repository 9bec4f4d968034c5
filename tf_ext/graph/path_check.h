// Before differentiating: does every op between the xs and y have a C++ gradient?
#ifndef TF_EXT_GRAPH_PATH_CHECK_H_
#define TF_EXT_GRAPH_PATH_CHECK_H_

#include <vector>

#include "absl/status/status.h"
#include "tensorflow/core/graph/graph.h"

namespace tensorflow::tf_ext {

// Every op between the xs and y that lacks a gradient, all in one InvalidArgument: per op
// type its nodes, and whether TensorFlow has a Python-only gradient for it; loops (While,
// Enter/Exit/Switch/Merge/NextIteration, TensorList ops) are named as unsupported control
// flow. `g` must already have its function calls inlined.
absl::Status CheckPathHasGradients(const Graph& g, const Node* y, const std::vector<Node*>& xs);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_PATH_CHECK_H_
