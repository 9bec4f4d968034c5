// A memory budget for a graph that runs with TensorFlow's graph optimizations (Grappler):
// the budget is planned on the graph Grappler makes, not on the one the pipeline built
// (docs/memory.md, "With TensorFlow's optimizations").
//
// Planned on the built graph, a recomputed copy reaches the Session's Grappler beside its
// original, with other consumers and neighbours, and Grappler's passes may rewrite the two
// differently, so that the copy computes its original's value in another way (Keras
// transformer encoders' gradients moved by 1e-7 to 6e-7). So the optimizations run in two
// stages around the plan:
//   1. here, Grappler with the Session's configuration less the rewrites that fuse or move
//      nodes by their consumers (the remapper, the layout and the memory optimizers): constant
//      folding, the arithmetic optimizer, common subexpressions, ...;
//   2. the plan on its output (PlanMemory, fused chains as units);
//   3. the Session's Grappler with the remapper alone, which fuses a copy as its original.
// Every other pass has run before the copies exist, so nothing can rewrite a copy otherwise
// than its original: a budgeted gradient is bitwise the unbudgeted one where the kernels are
// deterministic. Stage 1 is what the Session's Grappler does to the unbudgeted graph (its
// feeds, fetches and configuration), so without recomputation the two routes run the same
// kernels.
//
// Layer: runtime (tests/python/test_layering.py). Tests: tests/python/test_memory_budget.py.
#ifndef TF_EXT_GRAPH_RUNTIME_GRAPPLER_STAGES_H_
#define TF_EXT_GRAPH_RUNTIME_GRAPPLER_STAGES_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/protobuf/config.pb.h"
#include "tensorflow/core/public/session_options.h"
#include "tf_ext/graph/passes/rematerialize.h"

namespace tensorflow::tf_ext {

struct OptimizedRunSpec {
  std::string prefix;                  // the gradient nodes' (GradientGraph::prefix)
  std::set<std::string> deferred;      // GradientGraph::deferred_gradient_nodes
  std::set<std::string> keep;          // nodes never recomputed (besides the feeds and fetches)
  std::vector<std::string> fetches;    // every tensor or node a run fetches or targets
  std::vector<std::string> feeds;      // every placeholder node a run may feed
  std::map<std::string, TensorShape> feed_shapes;  // the estimate's sizes (PlanMemory)
  MemoryBudget budget;
};

// Stage 1 on `graph` in place, with `config`'s graph rewrites less the remapper, the layout and
// the memory optimizers, as the Session would run them for `spec`'s feeds and fetches (the
// feeds and fetches keep their names; other nodes may be rewritten, merged or removed).
absl::Status OptimizeBeforePlanning(const OptimizedRunSpec& spec, const ConfigProto& config,
                                    GraphDef* graph);

// `config`'s rewrites for stage 3: Grappler's remapper alone.
void RemapOnly(ConfigProto* config);

// Stages 1 and 2 on `graph`, for a Session configured with `config` (before RemapOnly).
absl::Status PlanAfterOptimization(const OptimizedRunSpec& spec, const ConfigProto& config,
                                   GraphDef* graph, MemoryPlan* plan);

// Adds to `optimized` (stage 1's output for some fetches) the nodes of `original` it lacks, by
// name: a Session that holds both runs those fetches on the optimized nodes and any other run
// on the nodes as they were. A node added reads an optimized node only where that is the
// original node reading the same nodes (Grappler keeps a name on a node it changed where the
// fetches no longer read it: a NoOp of the dependency optimizer); else a copy of the original,
// named "<name>/unoptimized".
void KeepUnoptimizedNodes(const GraphDef& original, GraphDef* optimized);

// Stages 1 and 2 on `graph`, and `session_options` set for stage 3. `plan` holds the built
// graph's estimate (BuildGradientGraph's), of which a fractional budget is a fraction; it
// returns with the plan (optimized_peak_bytes: the estimate after stage 1). A budget it cannot
// meet is refused as PlanMemory refuses it. A plan that recomputes nothing leaves `graph` as
// built and `session_options` as they were: the Session's own Grappler run computes the same
// values.
absl::Status PlanOptimizedRun(const OptimizedRunSpec& spec, GraphDef* graph,
                              SessionOptions* session_options, MemoryPlan* plan);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_RUNTIME_GRAPPLER_STAGES_H_
