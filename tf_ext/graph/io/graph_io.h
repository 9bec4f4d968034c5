// Reading forward graphs and keeping the part that is needed; writing and printing gradients.
#ifndef TF_EXT_GRAPH_IO_GRAPH_IO_H_
#define TF_EXT_GRAPH_IO_GRAPH_IO_H_

#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/tensor.h"
#include "tf_ext/graph/io/tensor_ref.h"

namespace tensorflow::tf_ext {

// Reads a GraphDef in binary or text format (binary is tried first, so a binary file never
// logs text-format parse errors).
absl::Status LoadGraph(const std::string& path, GraphDef* graph);

// The node a NodeDef input names ("^ctrl", "node:1" -> "ctrl", "node").
std::string InputNodeName(const std::string& input);

// The nodes `roots` need: themselves and their data and control inputs, transitively.
std::set<std::string> NeededNodes(const GraphDef& graph, const std::set<std::string>& roots);

// Keeps only the nodes `roots` need (and the library and versions).
void PruneGraphDef(const std::set<std::string>& roots, GraphDef* graph);

// Writes y and every gradient at full precision: an np.savez archive when `path` ends in
// .npz (arrays "y", then "d_<x node>[_<index>]"), else text with 17 significant digits (one
// line per tensor: name dtype shape values).
// `grads` holds one gradient per x of `xs`.
absl::Status SaveGradients(const std::string& path, const std::vector<TensorRef>& xs,
                           const Tensor& y, const std::vector<Tensor>& grads);

// "float [2,3] = [1 2 3 4 5 6]" with at most `max_values` values.
std::string FormatTensor(const Tensor& t, int max_values);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_IO_GRAPH_IO_H_
