// The build step every front end shares: a forward GraphDef in, one GraphDef out that computes
// the ys and the gradients of the xs (vector-Jacobian products when the ys take incoming
// gradients). ComputeGraphGradients (graph_gradients.h, tf_ext_grad) builds and runs it once;
// GradientSession (gradient_session.h) builds it once and runs it per request.
//
// Steps: lowered (v1) control flow converted back to While/If (control_flow.h), import,
// function calls inlined (inline_calls.h), TensorFlow's gradient bugs worked around
// (workarounds.h), the backward nodes added along the differentiable path (backprop.h), and
// equal nodes merged where inlined gradient bodies recomputed forward nodes.
#ifndef TF_EXT_GRAPH_GRADIENT_GRAPH_H_
#define TF_EXT_GRAPH_GRADIENT_GRAPH_H_

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/tensor.h"
#include "tf_ext/graph/gradient_request.h"
#include "tf_ext/graph/tensor_ref.h"

namespace tensorflow::tf_ext {

struct GradientGraphSpec {
  std::vector<TensorRef> ys;  // floating-point tensors differentiated
  std::vector<TensorRef> xs;  // with respect to
  // Per y (empty: none): whether its incoming gradient is fed (a Placeholder the build adds,
  // GradientGraph::dy_names) rather than ones. A fed one must have y's shape; the graph checks
  // that on every run (InvalidArgument naming it), since a smaller one would broadcast.
  std::vector<bool> incoming_gradients;
  // Nodes fed or fetched by name besides the ys and xs (kept as they are: not merged, not
  // hoisted).
  std::set<std::string> named_nodes;
  // Errors name the ys and xs as "<role_prefix>y '...'": "--" for a command line.
  std::string role_prefix = "--";
};

struct GradientGraph {
  GraphDef graph;                       // forward + backward
  std::vector<std::string> y_names;     // tensors to fetch: the ys as given
  std::vector<std::string> dx_names;    // per x: sum_i <dy_i, d y_i / d x>
  std::vector<std::string> dy_names;    // per y with a fed incoming gradient, else ""
  std::string prefix;                   // every node the build added is "<prefix>/..."
};

// Builds `out` from `*forward` (moved from when options.release_forward_graph; converted in
// place when it holds lowered control flow). Fills result's build statistics (inlined calls,
// gradient nodes, loops, workarounds, ...), not its tensors.
absl::Status BuildGradientGraph(GraphDef* forward, const GradientGraphSpec& spec,
                                const GradientOptions& options, GradientResult* result,
                                GradientGraph* out);

// Floating-point Const nodes of at least 4096 elements become Placeholders, their values
// returned as feeds ("node:0", value): Grappler (GradientOptions::optimize_graph) copies the
// GraphDef it optimizes, constants included, and folds and reorders constants into new ones; a
// fed tensor it never sees. Nodes in `keep` keep their Consts.
std::vector<std::pair<std::string, Tensor>> HoistConstants(const std::set<std::string>& keep,
                                                           GraphDef* graph);

// A copy of `graph` whose constants HoistConstants would hoist are placeholders of their dtype
// and shape, their values not copied (for shape inference).
GraphDef ShapeOnlyCopy(const GraphDef& graph, const std::set<std::string>& keep);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_GRADIENT_GRAPH_H_
