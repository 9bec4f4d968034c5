// Graph-level gradients with no Python: what the tf_ext_grad tool does, as a library.
//
// ComputeGraphGradients takes a forward GraphDef, builds the backward graph with TensorFlow's
// graph-level AddSymbolicGradients (one SymbolicGradient node per forward op, each resolved by
// the runtime through that op's FDH gradient function) and runs it in a Session.
#ifndef TF_EXT_TOOLS_GRAPH_GRADIENTS_H_
#define TF_EXT_TOOLS_GRAPH_GRADIENTS_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/public/session.h"

namespace tensorflow::tf_ext::tools {

// "node" or "node:index".
struct TensorRef {
  std::string node;
  int index = 0;
  std::string ToString() const;
  static absl::StatusOr<TensorRef> Parse(const std::string& s);
};

struct GradientRequest {
  GraphDef graph;
  TensorRef y;                                        // differentiated: d sum(y) / d x
  std::vector<TensorRef> xs;                          // with respect to
  std::vector<std::pair<TensorRef, Tensor>> feeds;    // placeholder (or any tensor) values
};

struct GradientResult {
  Tensor y;
  std::vector<Tensor> grads;   // one per x, d sum(y) / d x
  std::vector<Tensor> xs;      // the values of the xs in this run
  GraphDef backward_graph;     // forward + backward, as run
  std::unique_ptr<Session> session;
};

absl::Status ComputeGraphGradients(const GradientRequest& request, GradientResult* result);

struct NumericCheckResult {
  double max_abs_error = 0;
  double max_rel_error = 0;   // |sym - num| / max(1, |num|)
  int worst_x = -1;
  int64_t worst_element = -1;
  double worst_symbolic = 0, worst_numeric = 0;
  int64_t elements = 0;
};

// Central differences of sum(y) with respect to every element of every x (fed through the same
// Session), compared with `result.grads`. delta <= 0 picks 1e-6 for double xs, 1e-3 otherwise.
absl::Status NumericCheck(const GradientRequest& request, const GradientResult& result,
                          double delta, NumericCheckResult* check);

// Reads a GraphDef in binary or text format.
absl::Status LoadGraph(const std::string& path, GraphDef* graph);

// NAME[:IDX]=[SHAPE:]VALUES with SHAPE like 2x3 (omitted: 1-D; "scalar": rank 0), e.g.
// "x=2x3:1,2,3,4,5,6". The dtype is the Placeholder's `dtype` attr (float if none).
absl::StatusOr<std::pair<TensorRef, Tensor>> ParseFeed(const std::string& spec,
                                                       const GraphDef& graph);

// "float [2,3] = [1 2 3 4 5 6]" with at most `max_values` values.
std::string FormatTensor(const Tensor& t, int max_values);

// The built-in example: a small graph through the tf_ext ops, with its feeds.
GradientRequest DefaultExample();

}  // namespace tensorflow::tf_ext::tools

#endif  // TF_EXT_TOOLS_GRAPH_GRADIENTS_H_
