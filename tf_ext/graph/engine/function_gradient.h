// A function's gradient built inside the function's own body, for the control-flow pass
// (control_flow.h): the body of a loop or a branch of a conditional is differentiated by tf_ext's
// backward builder (backprop.h) in a graph of its own, and the result split into the body's
// forward nodes and the gradient's nodes, with the forward tensors the gradient reads. A loop
// body's gradient runs every iteration, so DifferentiateFunction also trims it: what no output
// depends on goes, shapes become constants or move forward, recomputed forward nodes are
// reused, static broadcasting arithmetic goes, list updates happen in place.
//
// Also the small GraphDef and library helpers the pass writes its functions with.
#ifndef TF_EXT_GRAPH_ENGINE_FUNCTION_GRADIENT_H_
#define TF_EXT_GRAPH_ENGINE_FUNCTION_GRADIENT_H_

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensorflow/core/common_runtime/function_body.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/graph/graph.h"
#include "tf_ext/graph/engine/function_graph.h"
#include "tf_ext/graph/engine/path_check.h"

namespace tensorflow::tf_ext {

// What a control-flow rewrite did (PrepareControlFlowForGradients, control_flow.h).
struct ControlFlowStats {
  int loops = 0;         // While nodes rewritten, nested ones included
  int conditionals = 0;  // If and Case nodes rewritten, nested ones included
  int accumulators = 0;  // tensors a loop accumulates, or a conditional outputs, for its gradient
};

// A forward tensor a function's gradient reads, and where the gradient gets it.
struct Needed {
  enum Kind { kArg, kConst, kSaved } kind;
  std::string tensor;  // "node:index" in the function body
  DataType dtype;
  int arg = -1;        // kArg: the function input it is (through Identity nodes)
};

// A function differentiated inside its own body: the body's nodes and its gradient's nodes
// (named prefix/...), the gradient d(args) of the differentiable args given one incoming
// gradient (an _Arg node prefix/d_ret_k) per differentiable ret.
struct FunctionGradient {
  GraphDef graph;  // no library: the generated functions are in g's
  std::string prefix;
  int num_args = 0, num_rets = 0;
  std::vector<int> diff_args, diff_rets;
  std::vector<std::string> d_args;  // per diff_args, a tensor
  std::vector<std::string> d_rets;  // per diff_rets, an _Arg node
  std::vector<int> ret_source;      // per ret: the arg it passes through unchanged, or -1
  std::set<std::string> control_rets;
  std::vector<Needed> needed;       // forward tensors the gradient nodes read, in node order
  ControlFlowStats stats;

  std::set<std::string> forward;    // the body's nodes (after nested rewrites); the rest is
                                    // the gradient (inlined gradients are named Func/...)

  std::set<std::string> dead;       // gradient nodes no d(arg) depends on (dropped)

  // A loop body's: (m, element dtype) per TensorList loop variable diff_args[m] whose gradient
  // the body writes once per element rather than adds to: the backward loop must start it
  // from a list of uninitialised elements and add the incoming gradient after it.
  std::vector<std::pair<int, DataType>> fresh_lists;

  bool IsGradient(const std::string& node) const { return forward.count(node) == 0; }
};

// The control-flow pass (PrepareControlFlowForGradients, control_flow.h) over a function
// body's graph, which DifferentiateFunction runs before the body's backward nodes: the pass
// differentiates loop bodies and branches with DifferentiateFunction, and so recurses through
// this parameter into the loops nested in them.
using NestedControlFlowPass = std::function<absl::StatusOr<ControlFlowStats>(
    Graph* body, const std::vector<GraphTensor>& ys, const std::vector<GraphTensor>& xs,
    const std::string& name_prefix)>;

// Differentiates function `f` of g's library (instantiated with its attrs) with respect to its
// differentiable args, given an incoming gradient per differentiable ret; `what` names it in
// errors. Its nested loops and conditionals are rewritten by `prepare_nested` first, then its
// backward nodes added (backward_nodes.h). `arg_shapes` (per arg index; may be empty) are the
// shapes its args have (a loop's shape invariants). `loop_body`: f is a loop's body (its ret k
// is loop variable k's next value), which allows fresh_lists. `wanted_args` (per arg index;
// empty: all): in a loop body, an arg whose gradient nobody needs and that the body passes on
// unchanged (a frozen weight the loop reads) passes its incoming gradient through instead of
// adding the body's uses, so the forward tensors only its gradient reads (an RNN's inputs and
// previous state, for the kernels' gradients) are not saved every iteration. Functions
// generated on the way (nested loops) join g's library.
absl::StatusOr<FunctionGradient> DifferentiateFunction(
    Graph* g, const NameAttrList& f, const std::string& what,
    const NestedControlFlowPass& prepare_nested,
    const std::vector<PartialTensorShape>& arg_shapes = {}, bool loop_body = false,
    const std::vector<bool>& wanted_args = {});

// The body's forward nodes (not the gradient's), for a rewritten forward function.
GraphDef ForwardNodes(const FunctionGradient& fg);
// The gradient's nodes, each forward tensor they read replaced by `replacement[tensor]`
// (constants are copied; control edges from forward nodes are dropped).
GraphDef GradientNodes(const FunctionGradient& fg,
                       const std::map<std::string, std::string>& replacement);
}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_ENGINE_FUNCTION_GRADIENT_H_
