#include "tf_ext/graph/engine/backward_nodes.h"

#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/common_runtime/function_body.h"
#include "tensorflow/core/common_runtime/function_def_utils.h"
#include "tensorflow/core/common_runtime/inline_function_utils.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/graph/algorithm.h"
#include "tensorflow/core/graph/node_builder.h"
#include "tf_ext/grads/registry.h"
#include "tf_ext/graph/engine/control_flow_gradient.h"
#include "tf_ext/graph/engine/control_flow_ops.h"

namespace tensorflow::tf_ext {
namespace {

// The gradients sent to one tensor so far.
using Pending = std::map<std::pair<int, int>, std::vector<GraphTensor>>;  // (id, output)

absl::StatusOr<GraphTensor> Zeros(Graph* g, const std::string& prefix, const GraphTensor& t) {
  if (t.node->output_type(t.index) == DT_RESOURCE) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node '", t.node->name(), "' (", t.node->type_string(), "): output ", t.index,
        " is a resource handle that gets no gradient, and zeros of a resource's value cannot be "
        "formed here"));
  }
  Node* zeros = nullptr;
  TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(prefix + "/zeros"), "ZerosLike")
                         .Input(t.node, t.index)
                         .Finalize(g, &zeros));
  return GraphTensor{zeros, 0};
}

// The sum of the gradients sent to `t` (zeros if none).
absl::StatusOr<GraphTensor> Sum(Graph* g, const std::string& prefix, Pending* pending,
                                const GraphTensor& t) {
  auto it = pending->find({t.node->id(), t.index});
  if (it == pending->end() || it->second.empty()) return Zeros(g, prefix, t);
  const std::vector<GraphTensor>& grads = it->second;
  if (grads.size() == 1) return grads[0];
  if (t.node->output_type(t.index) == DT_VARIANT && grads.size() > 2) {
    // TensorLists: a chain of two-input sums. TensorFlow's AddN shape function aborts the
    // process (std::out_of_range) on three or more lists when the last has no element-shape
    // handle data and two others have; and a two-input sum of a list gradient and a GetItem's
    // is what SumListsInPlace makes O(1) per loop iteration.
    GraphTensor sum = grads[0];
    for (size_t i = 1; i < grads.size(); ++i) {
      Node* add = nullptr;
      const std::vector<NodeBuilder::NodeOut> pair = {{sum.node, sum.index},
                                                      {grads[i].node, grads[i].index}};
      TF_RETURN_IF_ERROR(
          NodeBuilder(g->NewName(prefix + "/sum"), "AddN").Input(pair).Finalize(g, &add));
      sum = {add, 0};
    }
    return sum;
  }
  std::vector<NodeBuilder::NodeOut> inputs;
  for (const GraphTensor& gr : grads) inputs.push_back({gr.node, gr.index});
  Node* add = nullptr;
  // d t = sum of the gradients of t's consumers (AddN also sums TensorList variants).
  TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(prefix + "/sum"), "AddN")
                         .Input(inputs)
                         .Finalize(g, &add));
  return GraphTensor{add, 0};
}

// One SymbolicGradient node for `n`: inputs n's inputs and one incoming gradient per output,
// outputs one gradient per input.
absl::StatusOr<Node*> AddSymbolicGradient(Graph* g, const std::string& prefix, const Node* n,
                                          const std::vector<GraphTensor>& dys) {
  std::vector<NodeBuilder::NodeOut> inputs(n->num_inputs());
  for (const Edge* e : n->in_edges()) {
    if (!e->IsControlEdge()) inputs[e->dst_input()] = {e->src(), e->src_output()};
  }
  for (const GraphTensor& dy : dys) inputs.push_back({dy.node, dy.index});
  NameAttrList f;
  f.set_name(n->type_string());
  for (const auto& [name, value] : n->attrs()) (*f.mutable_attr())[name] = value;
  Node* grad = nullptr;
  TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(absl::StrCat(prefix, "/", n->name())),
                                 "SymbolicGradient")
                         .Input(inputs)
                         .Attr("Tout", GradientTypes(*n))
                         .Attr("f", f)
                         .Finalize(g, &grad));
  return grad;
}

// For an op whose gradient reads its forward outputs (registry.h, DeclareReadsForwardOutputs):
// a call of the gradient function that takes them, instead of a SymbolicGradient that would
// recompute them (another draw of a random op; TensorArrayConcatV3's lengths).
absl::StatusOr<Node*> AddForwardOutputsGradient(Graph* g, const std::string& prefix, const Node* n,
                                                const std::vector<GraphTensor>& dys) {
  FunctionDef fdef;
  TF_RETURN_IF_ERROR(ForwardOutputsGradient(*n, &fdef));
  if (g->flib_def().Find(fdef.signature().name()) == nullptr) {
    FunctionDefLibrary library;
    *library.add_function() = fdef;
    TF_RETURN_IF_ERROR(g->AddFunctionLibrary(library));
  }
  std::vector<NodeBuilder::NodeOut> inputs(n->num_inputs());
  for (const Edge* e : n->in_edges()) {
    if (!e->IsControlEdge()) inputs[e->dst_input()] = {e->src(), e->src_output()};
  }
  for (int k = 0; k < n->num_outputs(); ++k) {
    inputs.push_back({const_cast<Node*>(n), k});
  }
  for (const GraphTensor& dy : dys) inputs.push_back({dy.node, dy.index});
  NameAttrList f;
  f.set_name(fdef.signature().name());
  Node* grad = nullptr;
  TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(absl::StrCat(prefix, "/", n->name())),
                                 "PartitionedCall")
                         .Input(inputs)
                         .Attr("Tout", GradientTypes(*n))
                         .Attr("f", f)
                         .Finalize(g, &grad));
  return grad;
}

// For an elementwise op whose gradient is a function of its output (Sigmoid, Tanh, Sqrt,
// Rsqrt, Reciprocal) on a real type: the fused gradient op on the forward output, as Python's
// gradients are. TensorFlow's function gradients recompute the op and spell the derivative
// out in 4-5 elementwise ops (dy * y * (1 - y)); in a loop body each costs every iteration.
absl::StatusOr<Node*> AddFusedOutputGradient(Graph* g, const std::string& prefix, Node* n,
                                             const GraphTensor& dy) {
  static const auto* fused = new std::map<std::string, std::string>{
      {"Sigmoid", "SigmoidGrad"}, {"Tanh", "TanhGrad"}, {"Sqrt", "SqrtGrad"},
      {"Rsqrt", "RsqrtGrad"}, {"Reciprocal", "ReciprocalGrad"}, {"Inv", "InvGrad"}};
  auto it = fused->find(n->type_string());
  if (it == fused->end() || n->num_outputs() != 1) return nullptr;
  const DataType t = n->output_type(0);
  if (t != DT_FLOAT && t != DT_DOUBLE && t != DT_HALF && t != DT_BFLOAT16) return nullptr;
  Node* grad = nullptr;
  // d x = XGrad(y, dy): Sigmoid y(1-y)dy, Tanh (1-y^2)dy, Sqrt dy/(2y), Rsqrt -y^3 dy/2,
  // Reciprocal -y^2 dy.
  TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(absl::StrCat(prefix, "/", n->name())), it->second)
                         .Input(n, 0)
                         .Input(dy.node, dy.index)
                         .Attr("T", t)
                         .Finalize(g, &grad));
  return grad;
}

// Replaces the gradient node `grad` (a SymbolicGradient of an op, or a call of a specialised
// gradient function) by the nodes of the gradient FunctionDef, specialised to the op's attrs.
// Its consumers then read the body's outputs directly, so each input's gradient is its own
// subgraph, pruned when unused.
absl::Status InlineGradient(Graph* g, Node* grad) {
  NameAttrList f;
  TF_RETURN_IF_ERROR(GetNodeAttr(grad->attrs(), "f", &f));
  FunctionDef fdef;
  if (grad->IsPartitionedCall()) {
    const FunctionDef* found = g->flib_def().Find(f.name());
    if (found == nullptr) return absl::NotFoundError(absl::StrCat("no function ", f.name()));
    fdef = *found;
  } else {
    gradient::Creator creator;
    TF_RETURN_IF_ERROR(gradient::GetOpGradientCreator(f.name(), &creator));
    TF_RETURN_IF_ERROR(creator(AttrSlice(&f.attr()), &fdef));
  }
  std::unique_ptr<FunctionBody> body;
  TF_RETURN_IF_ERROR(
      FunctionDefToBodyHelper(fdef, AttrSlice(&f.attr()), &g->flib_def(), &body));
  InlineFunctionBodyOptions options;
  options.keep_caller_node = InlineFunctionBodyOptions::KeepCallerNode::kDoNotKeep;
  return InlineFunctionBody(g->flib_def(), g, grad, body.get(), options);
}

}  // namespace

absl::Status AddBackwardNodes(Graph* g, const std::vector<GraphTensor>& ys,
                              const std::vector<GraphTensor>& dys,
                              const std::vector<GraphTensor>& xs, std::vector<GraphTensor>* dxs,
                              const BackpropOptions& options, BackpropStats* stats) {
  BackpropStats local_stats;
  if (stats == nullptr) stats = &local_stats;
  *stats = BackpropStats();
  if (ys.size() != dys.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(ys.size(), " ys but ", dys.size(), " incoming gradients"));
  }
  const DifferentiablePath path = FindDifferentiablePath(*g, ys, xs);
  TF_RETURN_IF_ERROR(CheckPathHasGradients(*g, path));
  Pending pending;
  std::vector<Node*> grads;  // the SymbolicGradient nodes added
  for (size_t i = 0; i < ys.size(); ++i) {
    pending[{ys[i].node->id(), ys[i].index}].push_back(dys[i]);
  }
  // Consumers before producers: reverse topological order (of the forward graph only: the
  // nodes added below are never visited). Ties go by node id, the order the graph was built
  // in, the same in every process: without a comparator they went by the edge sets' order,
  // their pointers', and each tensor's gradient contributions were summed in another order
  // from one process to the next. (By name instead, the Keras LSTM(128)'s budgeted loop
  // gradient ran 1.14x slower: its gradient nodes are created, and run, in that order.)
  std::vector<Node*> order;
  GetReversePostOrder(*g, &order, NodeComparatorID());
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* n = *it;
    if (!n->IsOp() || !path.OnPath(n)) continue;
    if (IsPreparedControlFlow(*n, options.name_prefix + "_cf") ||
        IsV1Conditional(n->type_string())) {
      // A loop or conditional: its gradient is a loop or conditional (control_flow.h).
      auto dy = [&](int k) { return Sum(g, options.name_prefix, &pending, {n, k}); };
      auto d_inputs = IsV1Conditional(n->type_string())
                          ? AddV1ConditionalGradient(g, n, dy, options.name_prefix)
                          : AddControlFlowGradient(g, n, dy, options.name_prefix);
      if (!d_inputs.ok()) return d_inputs.status();
      ++stats->gradient_nodes;
      for (const Edge* e : n->in_edges()) {
        if (e->IsControlEdge() || !path.Carries(e->src(), e->src_output())) continue;
        const GraphTensor& d = (*d_inputs)[e->dst_input()];
        if (d.node != nullptr) pending[{e->src()->id(), e->src_output()}].push_back(d);
      }
      continue;
    }
    gradient::Creator creator;
    if (!gradient::GetOpGradientCreator(n->type_string(), &creator).ok() || creator == nullptr) {
      continue;  // not differentiable: nothing flows to its inputs
    }
    bool any = false;
    for (int k = 0; k < n->num_outputs(); ++k) any |= path.Carries(n, k);
    if (!any) continue;
    std::vector<GraphTensor> n_dys;
    for (int k = 0; k < n->num_outputs(); ++k) {
      auto dy = Sum(g, options.name_prefix, &pending, {n, k});
      if (!dy.ok()) return dy.status();
      n_dys.push_back(*dy);
    }
    if (options.inline_gradients) {
      auto fused = AddFusedOutputGradient(g, options.name_prefix, n, n_dys[0]);
      if (!fused.ok()) return fused.status();
      if (*fused != nullptr) {
        ++stats->gradient_nodes;
        ++stats->inlined;
        const Edge* in = nullptr;
        TF_RETURN_IF_ERROR(n->input_edge(0, &in));
        if (path.Carries(in->src(), in->src_output())) {
          pending[{in->src()->id(), in->src_output()}].push_back({*fused, 0});
        }
        continue;
      }
    }
    // The call that takes forward outputs only where it is inlined: run as a function, a
    // stateful body (TensorArray ops) would not find the step's resources.
    auto grad = options.inline_gradients && ReadsForwardOutputs(n->type_string())
                    ? AddForwardOutputsGradient(g, options.name_prefix, n, n_dys)
                    : AddSymbolicGradient(g, options.name_prefix, n, n_dys);
    if (!grad.ok()) return grad.status();
    grads.push_back(*grad);
    for (const Edge* e : n->in_edges()) {
      if (e->IsControlEdge() || !path.Carries(e->src(), e->src_output())) continue;
      pending[{e->src()->id(), e->src_output()}].push_back({*grad, e->dst_input()});
    }
  }
  // Each dx through an Identity: its input edge follows an inlined gradient's output.
  dxs->clear();
  for (const GraphTensor& x : xs) {
    auto dx = Sum(g, options.name_prefix, &pending, x);
    if (!dx.ok()) return dx.status();
    Node* out = nullptr;
    TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(options.name_prefix + "/dx"), "Identity")
                           .Input(dx->node, dx->index)
                           .Finalize(g, &out));
    dxs->push_back({out, 0});
  }
  stats->gradient_nodes += grads.size();
  if (!options.inline_gradients) return absl::OkStatus();
  for (Node* grad : grads) {
    const std::string name = grad->name();
    if (absl::Status s = InlineGradient(g, grad); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("cannot inline the gradient node '", name,
                                                 "': ", s.message()));
    }
    ++stats->inlined;
  }
  return absl::OkStatus();
}

}  // namespace tensorflow::tf_ext
