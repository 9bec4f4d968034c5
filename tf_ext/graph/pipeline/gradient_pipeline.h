// The one gradient pipeline. Every front end (tf_ext_grad, GradientSession, tf_ext_grad
// --export, the C API's TfExtAddGradients and the Trainer) builds its backward graph with
// DifferentiateGraph; what differs between them is a PipelineOptions field, not a copy:
//
//   1. lowered (v1) loops and conditionals back to While/If (engine/control_flow.h);
//   2. function calls inlined (engine/inline_calls.h; off for a caller who holds the nodes);
//   3. the forward rewrites TensorFlow's kernels need for a gradient (engine/workarounds.h);
//   4. the backward nodes along the differentiable path (engine/backprop.h): each op's gradient
//      from TensorFlow's registries, where tf_ext's overrides of TensorFlow's defective
//      gradients already stand (docs/registries.md), so a SymbolicGradient resolved at run
//      time gets the same gradient as an inlined one;
//   5. with inlined gradients: equal nodes merged and the backward graph simplified
//      (passes/simplify_backward.h);
//   6. the estimate of the peak memory, and with a memory budget the forward nodes the
//      backward pass recomputes rather than keeps (passes/rematerialize.h). A graph that runs
//      with TensorFlow's optimizations is planned once they have run (plan_budget_after_
//      optimization; runtime/grappler_stages.h).
//
// BuildGradientGraph is the GraphDef front of it for the tools and runtimes: import, y and x
// lookup by name, incoming gradients, then DifferentiateGraph.
//
// Layer: pipeline (above engine and passes, below runtime; tests/python/test_layering.py).
#ifndef TF_EXT_GRAPH_PIPELINE_GRADIENT_PIPELINE_H_
#define TF_EXT_GRAPH_PIPELINE_GRADIENT_PIPELINE_H_

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/graph/graph.h"
#include "tf_ext/graph/engine/backprop.h"
#include "tf_ext/graph/engine/workarounds.h"
#include "tf_ext/graph/passes/rematerialize.h"
#include "tf_ext/graph/passes/simplify_backward.h"
#include "tf_ext/graph/pipeline/gradient_request.h"
#include "tf_ext/graph/io/tensor_ref.h"

namespace tensorflow::tf_ext {

// What differs between front ends.
struct PipelineOptions {
  // Every node the pipeline adds is "<name_prefix>/..." (one no node of the graph uses).
  std::string name_prefix = "tf_ext_grad";
  // Inline function-call nodes (PartitionedCall, ...) before differentiating. Off where the
  // caller holds the graph's nodes (the C API edits its caller's TF_Graph in place).
  bool inline_calls = true;
  // Inline each op's gradient as plain ops; off: one SymbolicGradient node per op, resolved
  // at run time (tf_ext_grad --symbolic_gradients).
  bool inline_gradients = true;
  // With inline_gradients: merge equal non-constant nodes outside `keep` (an inlined gradient
  // body that recomputes its op's forward holds a copy of a forward node). Off where the
  // caller refers to forward nodes by pointer.
  bool merge_equal_nodes = true;
  // With inline_gradients: static shapes and forward outputs where Python's gradients use them
  // (passes/simplify_backward.h).
  bool simplify = true;
  bool fold_weight_layouts = false;  // SimplifyOptions::fold_weight_layouts
  // Step 3 (forward rewrites that replace nodes). Off where the caller holds the nodes.
  bool rewrite_forward = true;
  // Nodes fed or fetched by name: never merged (nor recomputed).
  std::set<std::string> keep;
  // Step 6: the estimate of the backward graph's peak memory (passes/rematerialize.h), sized
  // with these feed shapes (placeholder -> shape); with a budget, the recomputation that
  // meets it.
  bool plan_memory = false;
  std::map<std::string, TensorShape> feed_shapes;
  MemoryBudget backward_memory_budget;
  // The graph runs with TensorFlow's graph optimizations (GradientOptions::optimize_graph):
  // recomputed copies are planned to be fused as their originals (PlanMemory's fused_kernels).
  bool optimized_run = true;
  // With a budget: step 6 only estimates; the caller plans the recomputation on the graph
  // TensorFlow's optimizations make of this one (runtime/grappler_stages.h), so that no
  // optimization rewrites a recomputed copy otherwise than its original.
  bool plan_budget_after_optimization = false;
};

struct PipelineStats {
  bool converted_v1_control_flow = false;
  int inlined_calls = 0;
  GradientWorkarounds workarounds;
  BackpropStats backprop;
  BackwardSimplifications simplifications;
  MemoryPlan memory;
};

// The pipeline, in two calls: PrepareForward (steps 1-3) before the caller picks its ys and
// xs (a name may only exist once calls are inlined), then AddBackward (steps 4-5).
class GradientPipeline {
 public:
  explicit GradientPipeline(PipelineOptions options) : options_(std::move(options)) {}

  absl::Status PrepareForward(Graph* g);
  // For each x, sum_i <dys[i], d ys[i] / d x> into `dxs`, built in `g` in place. Read an
  // output of a loop or conditional through an Identity (the control-flow pass replaces those
  // nodes).
  absl::Status AddBackward(Graph* g, const std::vector<GraphTensor>& ys,
                           const std::vector<GraphTensor>& dys, const std::vector<GraphTensor>& xs,
                           std::vector<GraphTensor>* dxs);

  const PipelineOptions& options() const { return options_; }
  const PipelineStats& stats() const { return stats_; }

 private:
  // Step 5.
  absl::Status SimplifyInlined(Graph* g);

  PipelineOptions options_;
  PipelineStats stats_;
};

struct GradientGraphSpec {
  std::vector<TensorRef> ys;  // floating-point tensors differentiated
  std::vector<TensorRef> xs;  // with respect to
  // The placeholders' feed shapes (sizes for the memory estimate) and the memory budget of
  // the backward graph (passes/rematerialize.h; none by default).
  std::map<std::string, TensorShape> feed_shapes;
  MemoryBudget backward_memory_budget;
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
  // With a budget planned after TensorFlow's optimizations: the gradient nodes computed from
  // forward tensors alone (DeferredGradientNodes; runtime/grappler_stages.h).
  std::set<std::string> deferred_gradient_nodes;
};

// Builds `out` from `*forward` (moved from when options.release_forward_graph; converted in
// place when it holds lowered control flow). Fills result's build statistics (inlined calls,
// gradient nodes, loops, workarounds, ...), not its tensors. With a budget and
// options.optimize_graph, the caller meets the budget with PlanOptimizedRun
// (runtime/grappler_stages.h) before it runs the graph.
absl::Status BuildGradientGraph(GraphDef* forward, const GradientGraphSpec& spec,
                                const GradientOptions& options, GradientResult* result,
                                GradientGraph* out);

// Whether the backward graph's Session is fed the frozen weights (HoistConstants below):
// with optimize_graph, when asked (options.hoist_constants) or under a memory budget. Under a
// budget Grappler would otherwise fold and copy the weights (ResNet50 at 224x224, batch 8: 1.7
// GB above the loaded graph instead of 0.5 GB, which no recomputation can win back), and fold
// them into an original convolution but not into its recomputed copy, whose output then
// differs by round-off (a max pool's choice among near-equal inputs with it).
bool HoistsConstants(const GradientOptions& options, const MemoryBudget& budget);

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

#endif  // TF_EXT_GRAPH_PIPELINE_GRADIENT_PIPELINE_H_
