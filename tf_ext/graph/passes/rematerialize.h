// The backward graph's memory: a static estimate of its peak, and rematerialisation to fit a
// budget (docs/memory.md).
//
// Estimate. The graph (forward + backward) is scheduled as TensorFlow's executor is likely to
// run it: a topological order that takes ready nodes first in, first out. Every output is
// allocated when its node runs and freed after its last consumer ran; Identity, Reshape,
// Squeeze, ExpandDims and StopGradient share their input's buffer. Constants and placeholders
// are counted as loaded (they are in memory before the run), outputs no node reads (the
// fetched gradients) stay until the end. Sizes come from shape inference with the fed
// placeholders' shapes (the batch known); a tensor whose shape stays unknown counts 0 bytes
// and is reported (MemoryPlan::unknown_tensors). Memory inside a loop's or conditional's body
// is not seen: only its outputs are.
//
// Budget. The forward nodes the backward reads (and the ones between them) are taken in the
// schedule's order; every k-th recomputable one is a checkpoint, kept, and the others are
// recomputed for their backward readers from the checkpoint before them: one copy per node
// and segment (the nodes between two checkpoints). A segment's copies wait, through control
// edges, for the backward tensors their readers take (the gradient arriving at the segment),
// so they run when the backward pass reaches the segment, not during the forward pass; those
// control inputs also keep TensorFlow's common-subexpression passes from merging a copy back
// into its original. Two families of plans are tried: every k-th recomputable node a
// checkpoint, and the same with every matrix product and convolution a checkpoint too (only
// the cheap nodes between them recomputed: a batch norm and its ReLU from the convolution's
// output). The plan of the fewest recomputed FLOPs whose estimate meets the budget wins.
// Where TensorFlow's graph optimizations will run (`fused_kernels`), a chain that Grappler's
// remapper fuses into one kernel (a matrix product or convolution; its BiasAdd, inference-mode
// batch norm or Add of a smaller constant, variable or placeholder; its activation) is kept or
// recomputed whole, and a segment's first copy waits through an EnsureShape of its input
// rather than through control edges of its own: the remapper fuses neither a node with two
// consumers nor a contraction with control inputs, and a copy computes its original's values
// only if it is fused as the original is.
// Stateful ops (random ones among them), constants, placeholders, control flow, the nodes of
// a lowered loop's frame and the nodes named in `keep` are never recomputed. With TensorFlow's
// optimizations the plan is made on the graph Grappler made of the built one
// (runtime/grappler_stages.h). Loops and conditionals are kept whole here;
// under a budget the control-flow pass has already made each loop save only its carried state
// (engine/control_flow.h, PrepareControlFlowForGradients' recompute_loop_bodies), memory the
// estimate does not see.
//
// Tests: tests/python/test_memory_budget.py.
#ifndef TF_EXT_GRAPH_PASSES_REMATERIALIZE_H_
#define TF_EXT_GRAPH_PASSES_REMATERIALIZE_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/graph/graph.h"

namespace tensorflow::tf_ext {

// A budget for the memory the run allocates above the loaded graph and feeds: bytes, or a
// fraction of the estimated peak without a budget. Neither set: no budget.
struct MemoryBudget {
  int64_t bytes = 0;
  double fraction = 0;
  // The estimate a fraction is of; 0: the planned graph's own. Set where the plan is made on
  // the graph TensorFlow's optimizations made of the built one (runtime/grappler_stages.h): a
  // fraction stays one of the built graph's estimate.
  int64_t fraction_of = 0;
  bool set() const { return bytes > 0 || fraction > 0; }
  std::string ToString() const;
};

// "0.5" (a number with a decimal point, in (0, 1]: a fraction) or "512M" (an integer with an
// optional K, M or G suffix, powers of 1024: bytes). Errors name `text`.
absl::StatusOr<MemoryBudget> ParseMemoryBudget(absl::string_view text);

struct MemoryPlan {
  int64_t estimated_peak_bytes = 0;   // of the graph as built (after recomputation)
  int64_t unbudgeted_peak_bytes = 0;  // of the graph before recomputation
  // Planned after TensorFlow's optimizations (runtime/grappler_stages.h): the estimate of the
  // graph they made, before recomputation; unbudgeted_peak_bytes stays the built graph's.
  int64_t optimized_peak_bytes = 0;
  int64_t budget_bytes = 0;           // the budget resolved to bytes; 0: none
  int unknown_tensors = 0;            // outputs of unknown size, counted as 0 bytes
  int recomputed_nodes = 0;           // copies added
  int64_t recomputed_flops = 0;       // their cost
  int checkpoint_interval = 0;        // k (0: nothing recomputed)
  bool keeps_contractions = false;    // every matrix product and convolution kept too
};

// "memory budget X MB (unbudgeted estimate Y MB): " and what meets it, the line tf_ext_grad
// and tf_ext_train print (no newline); empty without a budget.
std::string DescribeBudget(const MemoryPlan& plan);

// Fills plan->estimated_peak_bytes (and unbudgeted_peak_bytes, equal) and unknown_tensors.
// `feed_shapes`: placeholder node name -> the shape of its feed.
void EstimateMemory(const Graph& g, const std::map<std::string, TensorShape>& feed_shapes,
                    MemoryPlan* plan);

// EstimateMemory, then, with a budget, the recomputation that meets it (above). Backward
// nodes are the ones named "<prefix>/..." (or "<pass>/<prefix>/...", as Grappler names what it
// makes of one) that the incoming gradients (the nodes named in `seeds`; none given: every
// such node) reach; a gradient body's node computed from forward tensors alone is planned as
// a forward node (deferred), and one that a forward node reads is forward. A budget it cannot
// meet is refused (ResourceExhausted naming the smallest estimate it reaches), and so is one
// where a forward tensor's size stays unknown (InvalidArgument). `fused_kernels`: the graph
// will run with TensorFlow's graph optimizations (Grappler's remapper), so fused chains are
// planned as units (above).
// `deferred` (given): the gradient nodes to plan as computed from forward tensors alone, by
// name, in place of those the seeds do not reach (DeferredGradientNodes of the graph before
// TensorFlow's optimizations, which fold the incoming gradients' ones into constants that no
// seed reaches); every other "<prefix>/..." node is backward.
absl::Status PlanMemory(Graph* g, const std::string& prefix, const std::set<std::string>& keep,
                        const std::set<std::string>& seeds,
                        const std::map<std::string, TensorShape>& feed_shapes,
                        const MemoryBudget& budget, bool fused_kernels, MemoryPlan* plan,
                        const std::set<std::string>* deferred = nullptr);

// The "<prefix>/..." nodes of `g` that no node named in `seeds` reaches (PlanMemory's deferred
// nodes).
std::set<std::string> DeferredGradientNodes(const Graph& g, const std::string& prefix,
                                            const std::set<std::string>& seeds);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_PASSES_REMATERIALIZE_H_
