// What ComputeGraphGradients (graph_gradients.h) takes and returns.
#ifndef TF_EXT_GRAPH_PIPELINE_GRADIENT_REQUEST_H_
#define TF_EXT_GRAPH_PIPELINE_GRADIENT_REQUEST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/public/session.h"
#include "tf_ext/graph/passes/rematerialize.h"
#include "tf_ext/graph/passes/simplify_backward.h"
#include "tf_ext/graph/io/tensor_ref.h"
#include "tf_ext/graph/engine/workarounds.h"

namespace tensorflow::tf_ext {

struct GradientRequest {
  GraphDef graph;
  TensorRef y;                                        // differentiated: d sum(y) / d x
  std::vector<TensorRef> xs;                          // with respect to
  std::vector<std::pair<TensorRef, Tensor>> feeds;    // placeholder (or any tensor) values
  // A budget for the memory the backward run allocates above the loaded graph and feeds: the
  // builder recomputes forward tensors rather than keep them (passes/rematerialize.h).
  MemoryBudget backward_memory_budget;
};

// Memory: a frozen model's weights are Const nodes, so every copy of the graph is a copy of
// the weights (ConvNeXtXLarge: 1.4 GB each). ComputeGraphGradients holds at most the Graph it
// differentiates and then the Session's copy, never both, and by default keeps no GraphDef.
struct GradientOptions {
  // Fill GradientResult::backward_graph (one more copy of the weights).
  bool keep_backward_graph = false;
  // Clear request->graph once it has been imported (NumericCheck needs it: keep it then).
  bool release_forward_graph = false;
  // Run TensorFlow's graph optimizations (Grappler) in the Session, as a Python tf.function
  // does: on the plain-op backward graphs they save time (session_options.h).
  bool optimize_graph = true;
  // With optimize_graph: feed the frozen weights (floating-point constants of 4096 elements or
  // more) rather than hold them in Const nodes, so that no optimization pass copies them. It
  // saves memory (Keras ResNet50, batch 1: 0.2 GB above the loaded size instead of about 1.2 GB;
  // Python's tf.function gradient: 1.7 GB) and costs time: Grappler folds only constants, so a
  // batch normalisation's multiply is no longer folded into the convolution before it
  // (ResNet50 at batch 1 ran 1.25x slower so). Off by default (docs/performance.md); a
  // backward memory budget turns it on (HoistsConstants, gradient_pipeline.h).
  bool hoist_constants = false;
  // Inline each op's gradient FunctionDef as plain ops (backprop.h); off: one SymbolicGradient
  // node per op, resolved at run time.
  bool inline_gradients = true;
  // Run the forward and backward graph as one must-compile XLA cluster, as a Python
  // tf.function(jit_compile=True) does (passes/xla_cluster.h): a graph with a node XLA cannot
  // compile is refused before it runs, naming it. Not with a memory budget (XLA plans the
  // cluster's memory itself).
  bool jit_compile = false;
};

struct GradientResult {
  int inlined_calls = 0;       // function call nodes inlined before differentiating
  int gradient_nodes = 0;      // ops on the path whose gradient was added
  int inlined_gradients = 0;   // of those, inlined as plain ops
  // Control flow (control_flow.h): v1 frames converted back to While/If, and the loops and
  // conditionals rewritten for their gradients, nested ones included.
  bool converted_v1_control_flow = false;
  int loops = 0;
  int conditionals = 0;
  int accumulators = 0;  // tensors they save for their gradients
  GradientWorkarounds workarounds;  // see WorkAroundGradientBugs
  BackwardSimplifications simplifications;  // see SimplifyBackward
  MemoryPlan memory;           // estimated peak, and what a budget recomputes (PlanMemory)
  double build_seconds = 0;    // import + inline + backward graph
  double run_seconds = 0;      // Session::Create + Run of the backward graph
  // With jit_compile: the nodes of the XLA cluster, and the time XLA took to compile it (part
  // of run_seconds).
  int xla_cluster_nodes = 0;
  double xla_compile_seconds = 0;
  Tensor y;
  std::vector<Tensor> grads;   // one per x, d sum(y) / d x
  std::vector<Tensor> xs;      // the values of the xs in this run
  int backward_nodes = 0;      // nodes of the forward + backward graph
  // Forward + backward, as run (GradientOptions::keep_backward_graph): with a memory budget and
  // optimize_graph, as Grappler's first stage made it, with the recomputation planned on it
  // (runtime/grappler_stages.h); else as built, before the Session's optimizations.
  GraphDef backward_graph;
  std::unique_ptr<Session> session;
  // What the run fetched from `session`, to run it again: y, then d sum(y) / d x per x.
  std::vector<std::string> fetches;
  // Large constants the Session gets as feeds instead of Const nodes (with optimize_graph:
  // runtime/graph_gradients.cc). Every run of `session` feeds them (SessionFeeds(request, &result)).
  std::vector<std::pair<std::string, Tensor>> constant_feeds;
};

// The request's feeds as Session::Run takes them ("node:index", value), and, for a run of
// result->session, the constants it takes as feeds (GradientResult::constant_feeds).
inline std::vector<std::pair<std::string, Tensor>> SessionFeeds(
    const GradientRequest& request, const GradientResult* result = nullptr) {
  std::vector<std::pair<std::string, Tensor>> feeds;
  for (const auto& [ref, t] : request.feeds) feeds.push_back({ref.ToString(), t});
  if (result != nullptr) {
    feeds.insert(feeds.end(), result->constant_feeds.begin(), result->constant_feeds.end());
  }
  return feeds;
}

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_PIPELINE_GRADIENT_REQUEST_H_
