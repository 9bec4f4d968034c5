// Functional control flow made differentiable: While / StatelessWhile, If / StatelessIf and
// Case / StatelessCase. Design and limits: docs/control_flow.md.
//
// A gradient creator sees only an op's attrs, but the gradient of a loop needs the values each
// iteration computed, and the gradient of a conditional needs the values the taken branch
// computed. So, before the backward graph is built, one pass (PrepareControlFlowForGradients)
// rewrites every control-flow node on the differentiable path, keeping its name:
//
// - While: the body's gradient is built (backprop.h, on the body's own graph, recursively:
//   a loop in a loop body is rewritten first). Every forward tensor that gradient reads is
//   either a loop invariant (taken from the While's input), a constant (copied), or
//   accumulated: the rewritten body pushes it onto a TensorList each iteration, and the While
//   gains an iteration counter and one list output per accumulated tensor. The gradient
//   (AddControlFlowGradient) is a While that runs the counted number of iterations backwards,
//   popping the accumulated values; invariants' gradients are loop variables, so they sum over
//   the iterations. Nothing is recomputed: stateful and random ops run once.
// - If / Case: each branch's gradient is built the same way; the tensors it reads are either
//   branch inputs (taken from the If's inputs), constants, or new outputs of the If: each
//   branch returns its own as an Optional (OptionalFromValue) and OptionalNone for the other
//   branches'. The gradient is an If / Case on the same predicate or index over the branches'
//   gradient functions, which unwrap them (OptionalGetValue).
//
// The generated functions are added to the graph's library. The attrs the gradient needs
// (the backward functions, which inputs are differentiated) are "_tf_ext_grad_*" attrs of the
// rewritten node.
#ifndef TF_EXT_GRAPH_ENGINE_CONTROL_FLOW_H_
#define TF_EXT_GRAPH_ENGINE_CONTROL_FLOW_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/graph/graph.h"
#include "tf_ext/graph/engine/control_flow_ops.h"
#include "tf_ext/graph/engine/function_gradient.h"
#include "tf_ext/graph/engine/path_check.h"

namespace tensorflow::tf_ext {

// Lowered (v1) control flow, what a default freeze (convert_variables_to_constants_v2 with
// lower_control_flow=True) and TF1 graphs hold: frames of Enter / Exit / Switch / Merge /
// NextIteration / LoopCond. Converts them back to functional While and If nodes (TensorFlow's
// own functionalization, tf2xla/functionalize_control_flow.h; the new functions join the
// GraphDef's library), so that the rest of the pipeline sees one form. Returns whether the graph
// held v1 control flow; a malformed frame is an InvalidArgument naming it.
absl::StatusOr<bool> FunctionalizeV1ControlFlow(GraphDef* graph);

// Rewrites every functional control-flow node on the differentiable path from the xs to the
// ys (path_check.h), and the control flow inside their functions, as described above. The
// rewritten nodes keep their names and their original outputs (first, in order), so fetches
// and feeds by name still work; the ys and xs must not be outputs of control-flow nodes
// (read them through an Identity), as the nodes they point at are replaced. `name_prefix`
// names the nodes added to `g` (pick one no node of g uses).
//
// `recompute_loop_bodies` (a memory budget, docs/memory.md): each While on the path saves
// only what recomputing its body's tensors needs (the loop variables at the iteration's start
// and the outputs of nodes it cannot recompute: stateful ones, nested control flow, function
// calls), and its gradient loop recomputes the rest, one more forward body per iteration. The
// loop variables (the carried state) are checkpointed: kept at iterations of a stride that
// grows as sqrt(iteration), so about 3 sqrt(T) of T iterations, and the gradient loop
// recomputes a segment's state from its checkpoint before it differentiates the segment (one
// more step of the state per iteration). Where the state's next value depends on anything else
// than the state and loop invariants (a random op, a nested loop, a call, a variant loop
// variable), or with TF_EXT_LOOP_CHECKPOINTS=0, the state is saved every iteration instead.
// Nested loops inside a body keep saving what they read.
absl::StatusOr<ControlFlowStats> PrepareControlFlowForGradients(
    Graph* g, const std::vector<GraphTensor>& ys, const std::vector<GraphTensor>& xs,
    const std::string& name_prefix, bool recompute_loop_bodies = false);

// The pass over a graph's functions: every (monomorphic) function of g's library that holds a
// loop or conditional is rewritten in place (same name and signature), as the pass rewrites a
// graph, so that a SymbolicGradient of it (TensorFlow's runtime, TF_AddGradients on a call
// node) finds the rewritten nodes, whose registered gradients (tf_ext/grads/tf/
// control_flow_grad.cc) read the pass's attrs. Returns how many functions it rewrote.
absl::StatusOr<int> PrepareFunctionLibraryForGradients(Graph* g,
                                                       const std::string& name_prefix = "tf_ext_fn_cf");

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_ENGINE_CONTROL_FLOW_H_
