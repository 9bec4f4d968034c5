// Graph-level gradients with no Python: what the tf_ext_grad tool does, as a library.
//
// ComputeGraphGradients takes a forward GraphDef, inlines its function calls
// (PartitionedCall, StatefulPartitionedCall, calls of library functions by name), builds the
// backward graph with TensorFlow's graph-level AddSymbolicGradients (one SymbolicGradient node
// per forward op, each resolved by the runtime through that op's function gradient: FDH, or a
// client gradient converted by tf_ext/grads/unify.h) and runs it in a Session.
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
#include "tensorflow/core/graph/graph.h"
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

// Memory: a frozen model's weights are Const nodes, so every copy of the graph is a copy of
// the weights (ConvNeXtXLarge: 1.4 GB each). ComputeGraphGradients holds at most the Graph it
// differentiates and then the Session's copy, never both, and by default keeps no GraphDef.
struct GradientOptions {
  // Fill GradientResult::backward_graph (one more copy of the weights).
  bool keep_backward_graph = false;
  // Clear request->graph once it has been imported (NumericCheck needs it: keep it then).
  bool release_forward_graph = false;
  // Run TensorFlow's graph optimizations (Grappler, constant folding) in the Session. Off by
  // default: on frozen models they copy the weights and slow the run (graph_gradients.cc).
  bool optimize_graph = false;
};

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
struct GradientWorkarounds {
  int negative_axes = 0;
  int grouped_convs = 0;
};
struct GradientResult {
  int inlined_calls = 0;       // function call nodes inlined before differentiating
  GradientWorkarounds workarounds;  // see WorkAroundGradientBugs
  double build_seconds = 0;    // import + inline + AddSymbolicGradients
  double run_seconds = 0;      // Session::Create + Run of the backward graph
  Tensor y;
  std::vector<Tensor> grads;   // one per x, d sum(y) / d x
  std::vector<Tensor> xs;      // the values of the xs in this run
  int backward_nodes = 0;      // nodes of the forward + backward graph
  GraphDef backward_graph;     // forward + backward, as run (GradientOptions::keep_backward_graph)
  std::unique_ptr<Session> session;
};

absl::Status ComputeGraphGradients(GradientRequest* request, GradientResult* result,
                                   const GradientOptions& options = {});

// Every op between the xs and y that lacks a gradient, all in one InvalidArgument: per op
// type its nodes, and whether TensorFlow has a Python-only gradient for it; loops (While,
// Enter/Exit/Switch/Merge/NextIteration, TensorList ops) are named as unsupported control
// flow. `g` must already have its function calls inlined.
absl::Status CheckPathHasGradients(const Graph& g, const Node* y, const std::vector<Node*>& xs);

// Inlines every function call node of `g` (PartitionedCall, StatefulPartitionedCall, nodes
// whose op is a function of g's library), recursively; each leaves an IdentityN with the
// caller's name so its outputs keep their names. Returns how many calls were inlined.
absl::StatusOr<int> InlineFunctionCalls(Graph* g);
absl::StatusOr<GradientWorkarounds> WorkAroundGradientBugs(Graph* g);

struct NumericCheckOptions {
  double delta = 0;        // <= 0: 1e-6 for double xs, else 1e-3
  // Random projections: compare <grad, v> with the central difference of sum(y) along v
  // (v: random +-1 per element), `projections` times per x. -1: elementwise when an x has at
  // most 256 elements, else 16 projections; 0: always elementwise.
  int projections = -1;
  uint64_t seed = 0;
  bool optimize_graph = false;  // as GradientOptions::optimize_graph
};

struct NumericCheckResult {
  double max_abs_error = 0;
  double max_rel_error = 0;   // |sym - num| / max(1, |num|)
  int worst_x = -1;
  int64_t worst_element = -1;
  double worst_symbolic = 0, worst_numeric = 0;
  int64_t elements = 0;      // elements (or projections) compared
  int projections = 0;       // projections per x used for xs checked by projections
  double seconds = 0;
  // Ops whose surrogate forward (see tf_ext/grads/registry.h) was differenced in their place.
  std::vector<std::string> surrogates;
};

// Central differences of sum(y), elementwise or along random projections (see
// NumericCheckOptions), compared with `result.grads`. Ops with a registered surrogate forward
// (straight-through estimators, gradient reversal: their gradient is by design not the
// forward's derivative) are replaced by that surrogate in the differenced graph.
absl::Status NumericCheck(const GradientRequest& request, const GradientResult& result,
                          const NumericCheckOptions& options, NumericCheckResult* check);

// Reads a GraphDef in binary or text format (binary is tried first, so a binary file never
// logs text-format parse errors).
absl::Status LoadGraph(const std::string& path, GraphDef* graph);

// A feed: NAME[:IDX]=VALUE where VALUE is
//   [SHAPE:]V1,V2,...   SHAPE like 2x3 (omitted: 1-D; "scalar": rank 0), e.g. x=2x3:1,2,3,4,5,6
//   @FILE.npy           a NumPy array (its dtype must be the placeholder's)
//   @FILE.npz[:KEY]     the array KEY (default: NAME, or the only array) of an np.savez file
//   [SHAPE:]@FILE       raw little-endian values of the placeholder's dtype; SHAPE defaults to
//                       the placeholder's (fully known) shape
//   random[:SEED]       standard normal values (uniform in [0, 10) for integer dtypes) of the
//                       placeholder's fully known shape
// The dtype is the Placeholder's `dtype` attr (float if none).
absl::StatusOr<std::pair<TensorRef, Tensor>> ParseFeed(const std::string& spec,
                                                       const GraphDef& graph);

// A random feed (as "random:SEED") for every Placeholder of `request.graph` that has no feed
// and a fully known shape; returns the names fed. Placeholders of unknown shape are left.
std::vector<std::string> AddRandomFeeds(GradientRequest* request, uint64_t seed);

// Writes y and every gradient at full precision: an np.savez archive when `path` ends in
// .npz (arrays "y", then "d_<x node>[_<index>]"), else text with 17 significant digits (one
// line per tensor: name dtype shape values).
absl::Status SaveGradients(const std::string& path, const GradientRequest& request,
                           const GradientResult& result);

// "float [2,3] = [1 2 3 4 5 6]" with at most `max_values` values.
std::string FormatTensor(const Tensor& t, int max_values);

// The built-in example: a small graph through the tf_ext ops, with its feeds.
GradientRequest DefaultExample();

}  // namespace tensorflow::tf_ext::tools

#endif  // TF_EXT_TOOLS_GRAPH_GRADIENTS_H_
