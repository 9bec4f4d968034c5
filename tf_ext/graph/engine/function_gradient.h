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
#include "tf_ext/graph/engine/control_flow.h"

namespace tensorflow::tf_ext {

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

// Differentiates function `f` of g's library (instantiated with its attrs) with respect to its
// differentiable args, given an incoming gradient per differentiable ret; `what` names it in
// errors. `arg_shapes` (per arg index; may be empty) are the shapes its args have (a loop's
// shape invariants). `loop_body`: f is a loop's body (its ret k is loop variable k's next
// value), which allows fresh_lists. `wanted_args` (per arg index; empty: all): in a loop body,
// an arg whose gradient nobody needs and that the body passes on unchanged (a frozen weight
// the loop reads) passes its incoming gradient through instead of adding the body's uses, so
// the forward tensors only its gradient reads (an RNN's inputs and previous state, for the
// kernels' gradients) are not saved every iteration. Functions generated on the way (nested
// loops) join g's library.
absl::StatusOr<FunctionGradient> DifferentiateFunction(
    Graph* g, const NameAttrList& f, const std::string& what,
    const std::vector<PartialTensorShape>& arg_shapes = {}, bool loop_body = false,
    const std::vector<bool>& wanted_args = {});

// The body's forward nodes (not the gradient's), for a rewritten forward function.
GraphDef ForwardNodes(const FunctionGradient& fg);
// The gradient's nodes, each forward tensor they read replaced by `replacement[tensor]`
// (constants are copied; control edges from forward nodes are dropped).
GraphDef GradientNodes(const FunctionGradient& fg,
                       const std::map<std::string, std::string>& replacement);
// Identity nodes with one data input and no control edges, bypassed.
void BypassIdentities(GraphDef* def);
// Sets the "index" attr of node `node` (an _Arg or _Retval).
void SetIndex(GraphDef* def, const std::string& node, int index);

// Loop variables and branch inputs whose gradient is computed (a resource handle's is not).
bool Flows(DataType t);
// "node:index".
std::string TensorName(const std::string& node, int index);
// `base`, or `base`_2, ...: the first that no node name of g starts with.
std::string UnusedPrefix(const Graph& g, const std::string& base);
// NodeDefs of a function graph.
NodeDef MakeNode(const std::string& name, const std::string& op,
                 const std::vector<std::string>& inputs);
NodeDef ArgNode(const std::string& name, DataType type, int index);
NodeDef RetNode(const std::string& name, const std::string& input, DataType type, int index);
NodeDef ScalarConst(const std::string& name, int32_t value);
TensorShapeProto UnknownShape();
// A function of the library, instantiated with its attrs.
absl::StatusOr<std::unique_ptr<FunctionBody>> Instantiate(const FunctionLibraryDefinition& flib,
                                                          const NameAttrList& f);
// Adds the function `def` (a graph of _Arg, _Retval and body nodes) to g's library under a new
// name built from `base`; nodes named in `control_rets` stay control outputs.
absl::StatusOr<std::string> AddFunction(Graph* g, const GraphDef& def, const std::string& base,
                                        const std::set<std::string>& control_rets = {});
// Adds to g's library the functions `from` has and g lacks.
absl::Status MergeLibrary(const FunctionLibraryDefinition& from, Graph* g);
// The arg index output `index` of `n` passes on unchanged (through Identity nodes), or -1.
int SourceArg(const Node* n, int index);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_ENGINE_FUNCTION_GRADIENT_H_
