#include "tf_ext/graph/engine/control_flow.h"

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/compiler/tf2xla/functionalize_control_flow.h"
#include "tensorflow/core/common_runtime/function_body.h"
#include "tensorflow/core/common_runtime/function_def_utils.h"
#include "tensorflow/core/common_runtime/graph_constructor.h"
#include "tensorflow/core/common_runtime/shape_refiner.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/graph/algorithm.h"
#include "tensorflow/core/framework/attr_value_util.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/graph_to_functiondef.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/graph/node_builder.h"
#include "tensorflow/core/graph/tensor_id.h"
#include "tf_ext/grads/control_flow_attrs.h"
#include "tf_ext/graph/engine/backprop.h"
#include "tf_ext/graph/engine/function_gradient.h"
#include "tf_ext/graph/engine/inline_calls.h"
#include "tf_ext/graph/engine/lowered_case.h"
#include "tf_ext/graph/engine/shape_inference.h"
#include "tf_ext/graph/engine/workarounds.h"

namespace tensorflow::tf_ext {
namespace {

// The attrs of a rewritten node that its gradient reads (tf_ext/grads/control_flow_attrs.h).
using control_flow::kCaptures;
using control_flow::kFreshLists;
using control_flow::kFreshListTypes;
using control_flow::kFunctions;
using control_flow::kInputs;
using control_flow::kNumOutputs;
using control_flow::kNumSaved;
using control_flow::kOutputs;
using control_flow::kPass;

// A copy of `n`'s NodeDef without the attrs an earlier pass recorded (a backward graph
// differentiated again: its rewritten loops are differentiated as the loops they now are).
NodeDef DefWithoutPassAttrs(const Node* n) {
  NodeDef def = n->def();
  std::vector<std::string> old;
  for (const auto& [name, value] : def.attr()) {
    if (absl::StartsWith(name, "_tf_ext_grad_")) old.push_back(name);
  }
  for (const std::string& name : old) def.mutable_attr()->erase(name);
  return def;
}

bool IsWhile(const std::string& op) { return op == "While" || op == "StatelessWhile"; }
bool IsCase(const std::string& op) { return op == "Case" || op == "StatelessCase"; }

// Replaces `n` by a node built from `def` (same name), whose first inputs are n's and whose
// first outputs are n's; `extra` are appended inputs.
absl::StatusOr<Node*> ReplaceNode(Graph* g, Node* n, NodeDef def,
                                  const std::vector<GraphTensor>& extra) {
  std::vector<GraphTensor> inputs(n->num_inputs());
  std::vector<Node*> control_in, control_out;
  std::vector<std::tuple<int, Node*, int>> outputs;  // (output, dst, dst input)
  for (const Edge* e : n->in_edges()) {
    if (e->IsControlEdge()) {
      control_in.push_back(e->src());
    } else {
      inputs[e->dst_input()] = {e->src(), e->src_output()};
    }
  }
  for (const Edge* e : n->out_edges()) {
    if (e->IsControlEdge()) {
      control_out.push_back(e->dst());
    } else {
      outputs.push_back({e->src_output(), e->dst(), e->dst_input()});
    }
  }
  for (const GraphTensor& t : extra) inputs.push_back(t);
  def.set_name(n->name());
  def.clear_input();
  for (const GraphTensor& t : inputs) {
    if (t.node == nullptr) return absl::InternalError(absl::StrCat(n->name(), ": missing input"));
    def.add_input(TensorName(t.node->name(), t.index));
  }
  for (Node* c : control_in) def.add_input(absl::StrCat("^", c->name()));
  g->RemoveNode(n);
  auto added = g->AddNode(std::move(def));
  if (!added.ok()) return added.status();
  Node* m = *added;
  for (size_t i = 0; i < inputs.size(); ++i) g->AddEdge(inputs[i].node, inputs[i].index, m, i);
  for (Node* c : control_in) g->AddControlEdge(c, m);
  for (const auto& [k, dst, in] : outputs) g->AddEdge(m, k, dst, in);
  for (Node* c : control_out) g->AddControlEdge(m, c);
  return m;
}

// A loop body under a memory budget (RewriteWhile's recompute_body): instead of a list per
// forward tensor the gradient reads, the loop saves per iteration only what recomputing
// them needs (the loop variables' values at the iteration's start, and the outputs of nodes
// that cannot be recomputed), and the backward body recomputes the rest from those. A node is
// recomputed when it is stateless (random ops are stateful, or take their seed as an input),
// a registered op (no function call, no nested loop or conditional), without control inputs,
// and every input it reads is recomputed too, a loop invariant (captured), a loop variable
// that is not a variant or resource (a TensorList saved every iteration would be copied once
// the loop updates it), or a tensor the loop saved anyway. So the loop saves at most what it
// saved before plus its carried state.
struct BodyRecomputation {
  std::vector<Needed> leaves;                      // saved per iteration instead
  GraphDef copies;                                 // recomputing nodes for the backward body
  std::map<std::string, std::string> recomputed;   // forward tensor -> its copy
  std::vector<std::pair<std::string, int>> invariant_args;  // (tensor, arg) the copies read
};

absl::StatusOr<BodyRecomputation> PlanBodyRecomputation(const FunctionLibraryDefinition& flib,
                                                        const FunctionGradient& fg,
                                                        const std::vector<const Needed*>& saved) {
  std::map<std::string, const NodeDef*> forward;
  for (const NodeDef& nd : fg.graph.node()) {
    if (!fg.IsGradient(nd.name())) forward[nd.name()] = &nd;
  }
  const std::string copy_prefix = fg.prefix + "/bwd/recompute/";
  // The dtype of output `index` of forward node `nd`.
  auto output_type = [&flib](const NodeDef& nd, int index) -> DataType {
    if (nd.op() == "_Arg") {
      DataType t = DT_INVALID;
      (void)GetNodeAttr(AttrSlice(nd), "T", &t);
      return t;
    }
    const OpDef* op_def = nullptr;
    DataTypeVector types;
    if (!flib.LookUpOpDef(nd.op(), &op_def).ok() ||
        !OutputTypesForNode(nd, *op_def, &types).ok() || index >= static_cast<int>(types.size())) {
      return DT_INVALID;
    }
    return types[index];
  };
  auto arg_index = [](const NodeDef& nd) {
    int index = -1;
    (void)GetNodeAttr(AttrSlice(nd), "index", &index);
    return index;
  };
  auto invariant_arg = [&](const NodeDef& nd) {
    const int a = arg_index(nd);
    return a >= 0 && a < static_cast<int>(fg.ret_source.size()) && fg.ret_source[a] == a;
  };
  auto savable = [](DataType t) { return t != DT_INVALID && t != DT_VARIANT && t != DT_RESOURCE; };
  std::set<std::string> saved_anyway;
  for (const Needed* need : saved) saved_anyway.insert(need->tensor);
  std::map<std::string, bool> memo;
  std::function<bool(const std::string&)> recomputable = [&](const std::string& name) -> bool {
    auto m = memo.find(name);
    if (m != memo.end()) return m->second;
    memo[name] = false;  // a cycle (none in a body) stays unrecomputed
    auto it = forward.find(name);
    if (it == forward.end()) return false;
    const NodeDef& nd = *it->second;
    bool ok = true;
    const OpDef* op_def = nullptr;
    if (nd.op() == "_Arg" || nd.op() == "_Retval" || flib.Find(nd.op()) != nullptr ||
        IsFunctionalControlFlow(nd.op()) || IsV1ControlFlow(nd.op()) ||
        !OpRegistry::Global()->LookUpOpDef(nd.op(), &op_def).ok() || op_def->is_stateful()) {
      ok = false;
    }
    const bool is_const = ok && nd.op() == "Const";
    for (int i = 0; ok && !is_const && i < nd.input_size(); ++i) {
      const TensorId id = ParseTensorName(nd.input(i));
      if (id.second < 0) {
        ok = false;  // a control input: keep the order it asks for by not recomputing
        break;
      }
      const std::string src(id.first);
      auto s = forward.find(src);
      if (s == forward.end()) {
        ok = false;
        break;
      }
      if (s->second->op() == "_Arg") {
        ok = invariant_arg(*s->second) || savable(output_type(*s->second, id.second));
      } else if (!recomputable(src)) {
        // Only what the loop saved anyway: a stateful node's output no gradient read (a
        // variable read inside the body) must not become a list of weights.
        ok = saved_anyway.count(TensorName(src, id.second)) > 0;
      }
    }
    memo[name] = ok;
    return ok;
  };
  BodyRecomputation plan;
  std::set<std::string> leaf_seen, copied, invariant_seen;
  auto add_leaf = [&](const std::string& tensor, DataType dtype, int arg) {
    if (!leaf_seen.insert(tensor).second) return;
    Needed need{Needed::kSaved, tensor, dtype};
    need.arg = arg;
    plan.leaves.push_back(need);
  };
  std::function<void(const std::string&)> copy = [&](const std::string& name) {
    if (!copied.insert(name).second) return;
    const NodeDef& nd = *forward.at(name);
    NodeDef c = nd;
    c.set_name(copy_prefix + name);
    c.clear_input();
    if (nd.op() != "Const") {
      for (const std::string& in : nd.input()) {
        const TensorId id = ParseTensorName(in);
        const std::string src(id.first);
        const std::string t = TensorName(src, id.second);
        const NodeDef& s = *forward.at(src);
        if (s.op() == "_Arg" && invariant_arg(s)) {
          if (invariant_seen.insert(t).second) plan.invariant_args.push_back({t, arg_index(s)});
          c.add_input(t);
        } else if (s.op() == "_Arg") {
          add_leaf(t, output_type(s, id.second), arg_index(s));
          c.add_input(t);
        } else if (recomputable(src)) {
          copy(src);
          c.add_input(TensorName(copy_prefix + src, id.second));
        } else {
          add_leaf(t, output_type(s, id.second), -1);
          c.add_input(t);
        }
      }
    }
    *plan.copies.add_node() = std::move(c);
  };
  for (const Needed* need : saved) {
    const TensorId id = ParseTensorName(need->tensor);
    const std::string src(id.first);
    if (need->kind == Needed::kSaved && recomputable(src)) {
      copy(src);
      plan.recomputed[need->tensor] = TensorName(copy_prefix + src, id.second);
    } else {
      add_leaf(need->tensor, need->dtype, need->arg);
    }
  }
  for (const Needed& leaf : plan.leaves) {
    if (leaf.dtype == DT_INVALID) {
      return absl::InternalError(absl::StrCat("no dtype for the saved tensor ", leaf.tensor));
    }
  }
  return plan;
}

// `wanted` (per loop variable; empty: all): whether its gradient is needed, i.e. its initial
// value carries one (DifferentiateFunction's wanted_args).
absl::Status RewriteWhile(Graph* g, Node* n, const std::string& prefix, ControlFlowStats* stats,
                          const std::vector<bool>& wanted, bool recompute_body) {
  NameAttrList body, cond;
  DataTypeVector types;
  TF_RETURN_IF_ERROR(GetNodeAttr(n->attrs(), "body", &body));
  TF_RETURN_IF_ERROR(GetNodeAttr(n->attrs(), "cond", &cond));
  TF_RETURN_IF_ERROR(GetNodeAttr(n->attrs(), "T", &types));
  const int num_vars = types.size();
  const std::string what = absl::StrCat("the body of ", n->type_string(), " '", n->name(), "'");
  // The loop variables' shapes (shape invariants), for the body's static shapes.
  std::vector<PartialTensorShape> shapes;
  std::vector<TensorShapeProto> shape_protos;
  if (GetNodeAttr(n->attrs(), "output_shapes", &shape_protos).ok() &&
      static_cast<int>(shape_protos.size()) == num_vars) {
    for (const TensorShapeProto& p : shape_protos) shapes.emplace_back(p);
  }
  auto grad = DifferentiateFunction(g, body, what, shapes, /*loop_body=*/true, wanted);
  if (!grad.ok()) return grad.status();
  FunctionGradient& fg = *grad;
  if (fg.diff_args != fg.diff_rets) {
    return absl::InternalError(absl::StrCat(what, ": loop variable types differ"));
  }
  const std::string& bp = fg.prefix;
  // Saved (accumulated) tensors and captured invariants.
  std::vector<const Needed*> saved;
  std::vector<int> captures;
  std::map<std::string, int> capture_of;  // tensor -> position in captures
  for (const Needed& need : fg.needed) {
    if (need.kind == Needed::kArg && fg.ret_source[need.arg] == need.arg) {
      if (!capture_of.count(need.tensor)) {
        int pos = -1;
        for (size_t c = 0; c < captures.size(); ++c) {
          if (captures[c] == need.arg) pos = c;
        }
        if (pos < 0) {
          pos = captures.size();
          captures.push_back(need.arg);
        }
        capture_of[need.tensor] = pos;
      }
    } else if (need.kind != Needed::kConst) {
      if (need.dtype == DT_RESOURCE) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": its gradient reads the resource '", need.tensor,
            "', which changes between iterations (only loop-invariant resources are supported)"));
      }
      saved.push_back(&need);
    }
  }
  BodyRecomputation recompute;
  if (recompute_body) {
    auto plan = PlanBodyRecomputation(g->flib_def(), fg, saved);
    if (!plan.ok()) return plan.status();
    recompute = std::move(*plan);
    saved.clear();
    for (const Needed& leaf : recompute.leaves) saved.push_back(&leaf);
    for (const auto& [tensor, arg] : recompute.invariant_args) {
      if (capture_of.count(tensor)) continue;
      int pos = -1;
      for (size_t c = 0; c < captures.size(); ++c) {
        if (captures[c] == arg) pos = c;
      }
      if (pos < 0) {
        pos = captures.size();
        captures.push_back(arg);
      }
      capture_of[tensor] = pos;
    }
  }
  const int num_saved = saved.size();
  const int num_diff = fg.diff_args.size();

  // Forward body: the body, an iteration counter, and a TensorListPushBack per saved tensor.
  GraphDef fwd = ForwardNodes(fg);
  *fwd.add_node() = ArgNode(bp + "_acc/counter", DT_INT32, num_vars);
  *fwd.add_node() = ScalarConst(bp + "_acc/one", 1);
  *fwd.add_node() = MakeNode(bp + "_acc/next", "AddV2", {bp + "_acc/counter", bp + "_acc/one"});
  AddNodeAttr("T", DT_INT32, fwd.mutable_node(fwd.node_size() - 1));
  *fwd.add_node() = RetNode(bp + "_acc/counter_out", bp + "_acc/next", DT_INT32, num_vars);
  for (int j = 0; j < num_saved; ++j) {
    const std::string list = absl::StrCat(bp, "_acc/list_", j);
    *fwd.add_node() = ArgNode(list, DT_VARIANT, num_vars + 1 + j);
    NodeDef push = MakeNode(list + "/push", "TensorListPushBack", {list, saved[j]->tensor});
    AddNodeAttr("element_dtype", saved[j]->dtype, &push);
    *fwd.add_node() = push;
    *fwd.add_node() = RetNode(list + "/out", list + "/push", DT_VARIANT, num_vars + 1 + j);
  }
  auto fwd_name = AddFunction(g, fwd, body.name() + "_tf_ext_fwd", fg.control_rets);
  if (!fwd_name.ok()) return fwd_name.status();

  // Forward cond: the same, ignoring the new loop variables.
  auto cond_body = Instantiate(g->flib_def(), cond);
  if (!cond_body.ok()) return cond_body.status();
  GraphDef cond_def;
  (*cond_body)->graph->ToGraphDef(&cond_def);
  cond_def.clear_library();
  const std::string cp = UnusedPrefix(*(*cond_body)->graph, "tf_ext_cond");
  *cond_def.add_node() = ArgNode(cp + "/counter", DT_INT32, num_vars);
  for (int j = 0; j < num_saved; ++j) {
    *cond_def.add_node() = ArgNode(absl::StrCat(cp, "/list_", j), DT_VARIANT, num_vars + 1 + j);
  }
  std::set<std::string> cond_control;
  for (const Node* c : (*cond_body)->control_ret_nodes) cond_control.insert(c->name());
  auto cond_name = AddFunction(g, cond_def, cond.name() + "_tf_ext_fwd", cond_control);
  if (!cond_name.ok()) return cond_name.status();

  // Backward body. Loop variables: counter, d(loop variable) per differentiable one, the
  // lists, the captured invariants.
  std::map<std::string, std::string> replacement;
  GraphDef extra;
  *extra.add_node() = ArgNode(bp + "/bwd/counter", DT_INT32, 0);
  *extra.add_node() = ScalarConst(bp + "/bwd/one", 1);
  *extra.add_node() = MakeNode(bp + "/bwd/next", "Sub", {bp + "/bwd/counter", bp + "/bwd/one"});
  AddNodeAttr("T", DT_INT32, extra.mutable_node(extra.node_size() - 1));
  *extra.add_node() = RetNode(bp + "/bwd/counter_out", bp + "/bwd/next", DT_INT32, 0);
  NodeDef unknown = MakeNode(bp + "/bwd/unknown_shape", "Const", {});
  {
    Tensor minus_one(DT_INT32, TensorShape({}));
    minus_one.scalar<int32_t>()() = -1;
    AddNodeAttr("dtype", DT_INT32, &unknown);
    AddNodeAttr("value", minus_one, &unknown);
  }
  *extra.add_node() = unknown;
  std::vector<DataType> bwd_types = {DT_INT32};
  for (int m = 0; m < num_diff; ++m) {
    const DataType t = types[fg.diff_args[m]];
    bwd_types.push_back(t);
    *extra.add_node() = RetNode(absl::StrCat(bp, "/bwd/d_out_", m), fg.d_args[m], t, 1 + m);
  }
  for (int j = 0; j < num_saved; ++j) {
    const std::string list = absl::StrCat(bp, "/bwd/list_", j);
    const int index = 1 + num_diff + j;
    *extra.add_node() = ArgNode(list, DT_VARIANT, index);
    NodeDef pop = MakeNode(list + "/pop", "TensorListPopBack", {list, bp + "/bwd/unknown_shape"});
    AddNodeAttr("element_dtype", saved[j]->dtype, &pop);
    *extra.add_node() = pop;
    *extra.add_node() = RetNode(list + "/out", list + "/pop:0", DT_VARIANT, index);
    replacement[saved[j]->tensor] = list + "/pop:1";
    bwd_types.push_back(DT_VARIANT);
  }
  for (size_t c = 0; c < captures.size(); ++c) {
    const std::string arg = absl::StrCat(bp, "/bwd/capture_", c);
    const int index = 1 + num_diff + num_saved + c;
    const DataType t = types[captures[c]];
    *extra.add_node() = ArgNode(arg, t, index);
    *extra.add_node() = RetNode(arg + "/out", arg, t, index);
    bwd_types.push_back(t);
  }
  for (const auto& [tensor, pos] : capture_of) {
    replacement[tensor] = absl::StrCat(bp, "/bwd/capture_", pos, ":0");
  }
  // The recomputing copies read the popped and captured values; the gradient reads the copies.
  for (const NodeDef& node : recompute.copies.node()) {
    NodeDef c = node;
    for (std::string& in : *c.mutable_input()) {
      auto it = replacement.find(in);
      if (it != replacement.end()) in = it->second;
    }
    *extra.add_node() = std::move(c);
  }
  for (const auto& [tensor, copy] : recompute.recomputed) replacement[tensor] = copy;
  GraphDef bwd = GradientNodes(fg, replacement);
  for (const NodeDef& node : extra.node()) *bwd.add_node() = node;
  for (int m = 0; m < num_diff; ++m) SetIndex(&bwd, fg.d_rets[m], 1 + m);
  BypassIdentities(&bwd);
  auto bwd_name = AddFunction(g, bwd, body.name() + "_tf_ext_grad");
  if (!bwd_name.ok()) return bwd_name.status();

  // Backward cond: counter > 0.
  GraphDef bcond;
  for (size_t i = 0; i < bwd_types.size(); ++i) {
    *bcond.add_node() = ArgNode(absl::StrCat("arg_", i), bwd_types[i], i);
  }
  *bcond.add_node() = ScalarConst("zero", 0);
  NodeDef greater = MakeNode("more", "Greater", {"arg_0", "zero"});
  AddNodeAttr("T", DT_INT32, &greater);
  *bcond.add_node() = greater;
  *bcond.add_node() = RetNode("out", "more", DT_BOOL, 0);
  auto bcond_name = AddFunction(g, bcond, cond.name() + "_tf_ext_grad");
  if (!bcond_name.ok()) return bcond_name.status();

  // The forward node: counter from 0, an empty list per saved tensor.
  std::vector<GraphTensor> extra_inputs;
  Node* zero = nullptr;
  Tensor zero_value(DT_INT32, TensorShape({}));
  zero_value.scalar<int32_t>()() = 0;
  Tensor minus_one(DT_INT32, TensorShape({}));
  minus_one.scalar<int32_t>()() = -1;
  TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(prefix + "/counter"), "Const")
                         .Attr("dtype", DT_INT32)
                         .Attr("value", zero_value)
                         .Finalize(g, &zero));
  extra_inputs.push_back({zero, 0});
  Node* unknown_shape = nullptr;
  TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(prefix + "/unknown_shape"), "Const")
                         .Attr("dtype", DT_INT32)
                         .Attr("value", minus_one)
                         .Finalize(g, &unknown_shape));
  for (int j = 0; j < num_saved; ++j) {
    Node* list = nullptr;
    TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(prefix + "/accumulator"), "EmptyTensorList")
                           .Input(unknown_shape, 0)
                           .Input(unknown_shape, 0)
                           .Attr("element_dtype", saved[j]->dtype)
                           .Finalize(g, &list));
    extra_inputs.push_back({list, 0});
  }
  NodeDef def = DefWithoutPassAttrs(n);
  DataTypeVector new_types = types;
  new_types.push_back(DT_INT32);
  for (int j = 0; j < num_saved; ++j) new_types.push_back(DT_VARIANT);
  SetAttrValue(new_types, &(*def.mutable_attr())["T"]);
  NameAttrList body_attr, cond_attr, bwd_attr, bcond_attr;
  body_attr.set_name(*fwd_name);
  cond_attr.set_name(*cond_name);
  (*def.mutable_attr())["body"].mutable_func()->Swap(&body_attr);
  (*def.mutable_attr())["cond"].mutable_func()->Swap(&cond_attr);
  if (def.attr().contains("output_shapes") && def.attr().at("output_shapes").list().shape_size() > 0) {
    auto* shapes = (*def.mutable_attr())["output_shapes"].mutable_list();
    for (int j = 0; j <= num_saved; ++j) shapes->add_shape();  // scalars
  }
  def.mutable_attr()->erase("_num_original_outputs");
  // The loop keeps its own _lower_using_switch_merge, as Python's while_v2 gradient keeps the
  // forward loop's: a frozen loop often says false, and then runs its body as a function per
  // iteration. Lowered, it ran about 10% slower (a Keras LSTM over 1000 steps: its accumulators
  // are loop variables, each a Switch/Merge/NextIteration chain per iteration). The gradient
  // loop is lowered (AddControlFlowGradient): it must be, for the executor to prune the
  // gradients nobody fetches.
  AddNodeAttr(kPass, prefix, &def);
  AddNodeAttr(kFunctions, std::vector<std::string>{*bwd_name, *bcond_name}, &def);
  AddNodeAttr(kInputs, fg.diff_args, &def);
  AddNodeAttr(kCaptures, captures, &def);
  AddNodeAttr(kNumOutputs, num_vars, &def);
  AddNodeAttr(kNumSaved, num_saved, &def);
  std::vector<int> fresh;
  DataTypeVector fresh_types;
  for (const auto& [m, element] : fg.fresh_lists) {
    fresh.push_back(m);
    fresh_types.push_back(element);
  }
  AddNodeAttr(kFreshLists, fresh, &def);
  AddNodeAttr(kFreshListTypes, fresh_types, &def);
  auto replaced = ReplaceNode(g, n, std::move(def), extra_inputs);
  if (!replaced.ok()) return replaced.status();
  stats->loops += 1 + fg.stats.loops;
  stats->conditionals += fg.stats.conditionals;
  stats->accumulators += num_saved + fg.stats.accumulators;
  return absl::OkStatus();
}

absl::Status RewriteConditional(Graph* g, Node* n, const std::string& prefix,
                                ControlFlowStats* stats) {
  std::vector<NameAttrList> branches;
  if (IsCase(n->type_string())) {
    TF_RETURN_IF_ERROR(GetNodeAttr(n->attrs(), "branches", &branches));
  } else {
    branches.resize(2);
    TF_RETURN_IF_ERROR(GetNodeAttr(n->attrs(), "then_branch", &branches[0]));
    TF_RETURN_IF_ERROR(GetNodeAttr(n->attrs(), "else_branch", &branches[1]));
  }
  DataTypeVector tin, tout;
  TF_RETURN_IF_ERROR(GetNodeAttr(n->attrs(), "Tin", &tin));
  TF_RETURN_IF_ERROR(GetNodeAttr(n->attrs(), "Tout", &tout));
  std::vector<FunctionGradient> grads;
  for (size_t b = 0; b < branches.size(); ++b) {
    const std::string what =
        absl::StrCat("branch ", b, " of ", n->type_string(), " '", n->name(), "'");
    auto grad = DifferentiateFunction(g, branches[b], what);
    if (!grad.ok()) return grad.status();
    grads.push_back(std::move(*grad));
  }
  // Slots: the saved tensors of every branch, each an Optional output.
  struct Slot {
    size_t branch;
    const Needed* need;
  };
  std::vector<Slot> slots;
  for (size_t b = 0; b < grads.size(); ++b) {
    for (const Needed& need : grads[b].needed) {
      if (need.kind == Needed::kSaved) slots.push_back({b, &need});
    }
  }
  const int num_out = tout.size(), num_in = tin.size(), num_slots = slots.size();
  const std::vector<int>& diff_rets = grads[0].diff_rets;
  const std::vector<int>& diff_args = grads[0].diff_args;
  const int num_d = diff_rets.size();
  std::vector<std::string> fwd_names, bwd_names;
  for (size_t b = 0; b < grads.size(); ++b) {
    const FunctionGradient& fg = grads[b];
    const std::string& bp = fg.prefix;
    GraphDef fwd = ForwardNodes(fg);
    for (int s = 0; s < num_slots; ++s) {
      const std::string slot = absl::StrCat(bp, "_slot/", s);
      if (slots[s].branch == b) {
        NodeDef opt = MakeNode(slot, "OptionalFromValue", {slots[s].need->tensor});
        AddNodeAttr("Toutput_types", DataTypeVector{slots[s].need->dtype}, &opt);
        *fwd.add_node() = opt;
      } else {
        *fwd.add_node() = MakeNode(slot, "OptionalNone", {});
      }
      *fwd.add_node() = RetNode(slot + "/out", slot, DT_VARIANT, num_out + s);
    }
    auto fwd_name = AddFunction(g, fwd, branches[b].name() + "_tf_ext_fwd", fg.control_rets);
    if (!fwd_name.ok()) return fwd_name.status();
    fwd_names.push_back(*fwd_name);
    // Gradient branch: args d(outputs), slots, the forward inputs; rets d(inputs).
    std::map<std::string, std::string> replacement;
    GraphDef extra;
    for (int s = 0; s < num_slots; ++s) {
      const std::string slot = absl::StrCat(bp, "/bwd/slot_", s);
      *extra.add_node() = ArgNode(slot, DT_VARIANT, num_d + s);
      if (slots[s].branch != b) continue;
      NodeDef get = MakeNode(slot + "/value", "OptionalGetValue", {slot});
      AddNodeAttr("output_types", DataTypeVector{slots[s].need->dtype}, &get);
      AddNodeAttr("output_shapes", std::vector<TensorShapeProto>{UnknownShape()}, &get);
      *extra.add_node() = get;
      replacement[slots[s].need->tensor] = slot + "/value:0";
    }
    for (int i = 0; i < num_in; ++i) {
      *extra.add_node() = ArgNode(absl::StrCat(bp, "/bwd/input_", i), tin[i], num_d + num_slots + i);
    }
    for (const Needed& need : fg.needed) {
      if (need.kind == Needed::kArg) {
        replacement[need.tensor] = absl::StrCat(bp, "/bwd/input_", need.arg, ":0");
      }
    }
    for (size_t m = 0; m < diff_args.size(); ++m) {
      *extra.add_node() = RetNode(absl::StrCat(bp, "/bwd/d_input_", m), fg.d_args[m],
                                  tin[diff_args[m]], m);
    }
    GraphDef bwd = GradientNodes(fg, replacement);
    for (const NodeDef& node : extra.node()) *bwd.add_node() = node;
    for (int m = 0; m < num_d; ++m) SetIndex(&bwd, fg.d_rets[m], m);
    BypassIdentities(&bwd);
    auto bwd_name = AddFunction(g, bwd, branches[b].name() + "_tf_ext_grad");
    if (!bwd_name.ok()) return bwd_name.status();
    bwd_names.push_back(*bwd_name);
  }
  NodeDef def = DefWithoutPassAttrs(n);
  DataTypeVector new_tout = tout;
  for (int s = 0; s < num_slots; ++s) new_tout.push_back(DT_VARIANT);
  SetAttrValue(new_tout, &(*def.mutable_attr())["Tout"]);
  auto func = [](const std::string& name) {
    NameAttrList f;
    f.set_name(name);
    return f;
  };
  if (IsCase(n->type_string())) {
    auto* list = (*def.mutable_attr())["branches"].mutable_list();
    list->clear_func();
    for (const std::string& name : fwd_names) *list->add_func() = func(name);
  } else {
    *(*def.mutable_attr())["then_branch"].mutable_func() = func(fwd_names[0]);
    *(*def.mutable_attr())["else_branch"].mutable_func() = func(fwd_names[1]);
  }
  if (def.attr().contains("output_shapes") && def.attr().at("output_shapes").list().shape_size() > 0) {
    auto* shapes = (*def.mutable_attr())["output_shapes"].mutable_list();
    for (int s = 0; s < num_slots; ++s) shapes->add_shape();
  }
  SetAttrValue(true, &(*def.mutable_attr())["_lower_using_switch_merge"]);  // as cond_v2
  AddNodeAttr(kPass, prefix, &def);
  AddNodeAttr(kFunctions, bwd_names, &def);
  AddNodeAttr(kInputs, diff_args, &def);
  AddNodeAttr(kOutputs, diff_rets, &def);
  AddNodeAttr(kNumOutputs, num_out, &def);
  AddNodeAttr(kNumSaved, num_slots, &def);
  auto replaced = ReplaceNode(g, n, std::move(def), {});
  if (!replaced.ok()) return replaced.status();
  stats->conditionals += 1;
  stats->accumulators += num_slots;
  for (const FunctionGradient& fg : grads) {
    stats->loops += fg.stats.loops;
    stats->conditionals += fg.stats.conditionals;
    stats->accumulators += fg.stats.accumulators;
  }
  return absl::OkStatus();
}

absl::StatusOr<GraphTensor> InputOf(const Node* n, int index) {
  const Edge* e = nullptr;
  TF_RETURN_IF_ERROR(n->input_edge(index, &e));
  return GraphTensor{e->src(), e->src_output()};
}

}  // namespace

bool IsV1ControlFlow(const std::string& op) {
  static const auto* v1_ops = new std::set<std::string>{
      "Enter", "RefEnter", "Exit", "RefExit", "Switch", "RefSwitch", "Merge", "RefMerge",
      "NextIteration", "RefNextIteration", "LoopCond"};
  return v1_ops->count(op) > 0;
}

absl::StatusOr<bool> FunctionalizeV1ControlFlow(GraphDef* graph) {
  std::map<std::string, std::string> v1_nodes;  // op -> first node
  for (const NodeDef& n : graph->node()) {
    if (IsV1ControlFlow(n.op())) v1_nodes.emplace(n.op(), n.name());
  }
  for (const FunctionDef& f : graph->library().function()) {
    for (const NodeDef& n : f.node_def()) {
      if (IsV1ControlFlow(n.op())) v1_nodes.emplace(n.op(), f.signature().name() + "/" + n.name());
    }
  }
  if (v1_nodes.empty()) return false;
  // TensorFlow's functionalization knows two-way conditionals only: lowered Cases first become
  // nested ones (lowered_case.h).
  TF_RETURN_IF_ERROR(LoweredCasesToSwitches(graph).status());
  FunctionLibraryDefinition library(OpRegistry::Global(), graph->library());
  absl::Status s = FunctionalizeControlFlowForGraphDef(graph, &library, /*node_filter=*/{},
                                                       /*include_functions=*/true);
  if (!s.ok()) {
    std::string found;
    for (const auto& [op, node] : v1_nodes) {
      absl::StrAppend(&found, found.empty() ? "" : ", ", op, " '", node, "'");
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "the graph's lowered (v1) control flow (", found,
        ") does not form while-loop frames and conditionals TensorFlow can convert back to While "
        "and If: ", s.message()));
  }
  *graph->mutable_library() = library.ToProto();
  return true;
}

bool IsV1Conditional(const std::string& op) {
  return op == "Switch" || op == "_SwitchN" || op == "Merge";
}

absl::StatusOr<std::vector<GraphTensor>> AddV1ConditionalGradient(
    Graph* g, Node* n, const std::function<absl::StatusOr<GraphTensor>(int)>& dy,
    const std::string& name_prefix) {
  std::vector<GraphTensor> result(n->num_inputs());
  const DataType type = n->output_type(0);
  if (!Flows(type)) return result;
  const std::string name = g->NewName(absl::StrCat(name_prefix, "/", n->name(), "/grad"));
  Node* grad = nullptr;
  if (n->type_string() == "Merge") {
    // The gradient goes to the input that was taken (Merge's value_index): a _SwitchN on it
    // sends dy there and a dead tensor to the other inputs.
    auto d = dy(0);
    if (!d.ok()) return d.status();
    TF_RETURN_IF_ERROR(NodeBuilder(name, "_SwitchN")
                           .Input(d->node, d->index)
                           .Input(n, 1)
                           .Attr("num_outs", n->num_inputs())
                           .Attr("T", type)
                           .Finalize(g, &grad));
    for (int k = 0; k < n->num_inputs(); ++k) result[k] = {grad, k};
    return result;
  }
  // Switch / _SwitchN: only the taken output is live; Merge forwards its gradient to the data.
  std::vector<NodeBuilder::NodeOut> ds;
  for (int k = 0; k < n->num_outputs(); ++k) {
    auto d = dy(k);
    if (!d.ok()) return d.status();
    ds.push_back({d->node, d->index});
  }
  TF_RETURN_IF_ERROR(NodeBuilder(name, "Merge").Input(ds).Finalize(g, &grad));
  result[0] = {grad, 0};
  return result;
}

bool IsFunctionalControlFlow(const std::string& op) {
  return IsWhile(op) || IsCase(op) || op == "If" || op == "StatelessIf";
}

bool IsPreparedControlFlow(const Node& n) {
  return IsFunctionalControlFlow(n.type_string()) && n.attrs().Find(kFunctions) != nullptr;
}

bool IsPreparedControlFlow(const Node& n, const std::string& pass) {
  std::string by;
  return IsPreparedControlFlow(n) && GetNodeAttr(n.attrs(), kPass, &by).ok() && by == pass;
}

absl::StatusOr<ControlFlowStats> PrepareControlFlowForGradients(
    Graph* g, const std::vector<GraphTensor>& ys, const std::vector<GraphTensor>& xs,
    const std::string& name_prefix, bool recompute_loop_bodies) {
  ControlFlowStats stats;
  const DifferentiablePath path = FindDifferentiablePath(*g, ys, xs);
  std::vector<std::string> todo;
  for (const Node* n : g->op_nodes()) {
    if (IsFunctionalControlFlow(n->type_string()) && path.OnPath(n) &&
        !IsPreparedControlFlow(*n, name_prefix)) {
      todo.push_back(n->name());
    }
  }
  for (const std::string& name : todo) {
    Node* n = nullptr;
    for (Node* m : g->op_nodes()) {
      if (m->name() == name) n = m;
    }
    if (n == nullptr) return absl::InternalError(absl::StrCat("lost node ", name));
    // Which loop variables' gradients are needed: those whose initial value carries one (a
    // node the path was found on; one made by an earlier rewrite is taken as carrying).
    std::vector<bool> wanted;
    if (IsWhile(n->type_string())) {
      for (const Edge* e : n->in_edges()) {
        if (e->IsControlEdge()) continue;
        if (wanted.size() <= static_cast<size_t>(e->dst_input())) wanted.resize(e->dst_input() + 1, true);
        const Node* src = e->src();
        wanted[e->dst_input()] = src->id() >= static_cast<int>(path.carries.size()) ||
                                 e->src_output() >= static_cast<int>(path.carries[src->id()].size()) ||
                                 path.Carries(src, e->src_output());
      }
    }
    absl::Status s = IsWhile(n->type_string()) ? RewriteWhile(g, n, name_prefix, &stats, wanted, recompute_loop_bodies)
                                               : RewriteConditional(g, n, name_prefix, &stats);
    if (!s.ok()) return s;
  }
  return stats;
}

absl::StatusOr<int> PrepareFunctionLibraryForGradients(Graph* g, const std::string& name_prefix) {
  int rewritten = 0;
  const std::vector<std::string> names = g->flib_def().ListFunctionNames();
  for (const std::string& name : names) {
    const FunctionDef* fdef = g->flib_def().Find(name);
    if (fdef == nullptr || absl::StrContains(name, "_tf_ext_") ||
        fdef->signature().attr_size() > 0) {
      continue;  // generated by the pass, or polymorphic (instantiated per call)
    }
    bool holds = false;
    for (const NodeDef& n : fdef->node_def()) holds |= IsFunctionalControlFlow(n.op());
    if (!holds) continue;
    NameAttrList f;
    f.set_name(name);
    auto body = Instantiate(g->flib_def(), f);
    if (!body.ok()) return body.status();
    GraphDef body_def;
    (*body)->graph->ToGraphDef(&body_def);
    body_def.clear_library();
    Graph bg(g->flib_def());
    GraphConstructorOptions opts;
    opts.allow_internal_ops = true;
    TF_RETURN_IF_ERROR(ConvertGraphDefToGraph(opts, body_def, &bg));
    std::map<std::string, Node*> by_name;
    for (Node* n : bg.op_nodes()) by_name[n->name()] = n;
    std::vector<GraphTensor> ys, xs;
    for (size_t k = 0; k < (*body)->ret_nodes.size(); ++k) {
      Node* ret = by_name.at((*body)->ret_nodes[k]->name());
      if (!Flows((*body)->ret_types[k])) continue;
      const Edge* e = nullptr;
      TF_RETURN_IF_ERROR(ret->input_edge(0, &e));
      Node* y = nullptr;  // a ret that is a loop's output stays valid when the loop is replaced
      TF_RETURN_IF_ERROR(NodeBuilder(bg.NewName(name_prefix + "_y/ret"), "Identity")
                             .Input(e->src(), e->src_output())
                             .Finalize(&bg, &y));
      TF_RETURN_IF_ERROR(bg.UpdateEdge(y, 0, ret, 0));
      ys.push_back({y, 0});
    }
    for (size_t k = 0; k < (*body)->arg_nodes.size(); ++k) {
      if (Flows((*body)->arg_types[k])) xs.push_back({by_name.at((*body)->arg_nodes[k]->name()), 0});
    }
    auto stats = PrepareControlFlowForGradients(&bg, ys, xs, name_prefix);
    if (!stats.ok()) {
      const absl::Status& s = stats.status();
      return absl::Status(s.code(), absl::StrCat("in function '", name, "': ", s.message()));
    }
    if (stats->loops + stats->conditionals == 0) continue;
    TF_RETURN_IF_ERROR(MergeLibrary(bg.flib_def(), g));
    // The same name and signature: callers keep calling it.
    std::vector<std::string> outputs;
    for (const OpDef::ArgDef& arg : fdef->signature().output_arg()) outputs.push_back(arg.name());
    FunctionDef rewritten_fdef;
    TF_RETURN_IF_ERROR(GraphToFunctionDef(bg, name, outputs, &rewritten_fdef));
    for (int i = 0; i < rewritten_fdef.signature().input_arg_size() &&
                    i < fdef->signature().input_arg_size();
         ++i) {
      // Input arg names as they were (the body refers to them by these names).
      const std::string old_name = fdef->signature().input_arg(i).name();
      const std::string new_name = rewritten_fdef.signature().input_arg(i).name();
      if (old_name == new_name) continue;
      rewritten_fdef.mutable_signature()->mutable_input_arg(i)->set_name(old_name);
      for (NodeDef& n : *rewritten_fdef.mutable_node_def()) {
        for (std::string& in : *n.mutable_input()) {
          if (in == new_name) in = old_name;
          if (in == "^" + new_name) in = "^" + old_name;
        }
      }
      for (auto& [out, value] : *rewritten_fdef.mutable_ret()) {
        if (value == new_name) value = old_name;
      }
    }
    *rewritten_fdef.mutable_attr() = fdef->attr();
    TF_RETURN_IF_ERROR(g->mutable_flib_def()->ReplaceFunction(name, rewritten_fdef));
    ++rewritten;
  }
  return rewritten;
}

absl::StatusOr<std::vector<GraphTensor>> AddControlFlowGradient(
    Graph* g, Node* n, const std::function<absl::StatusOr<GraphTensor>(int)>& dy,
    const std::string& name_prefix) {
  std::vector<std::string> functions;
  std::vector<int> inputs, outputs, captures;
  int num_outputs = 0, num_saved = 0;
  TF_RETURN_IF_ERROR(GetNodeAttr(n->attrs(), kFunctions, &functions));
  TF_RETURN_IF_ERROR(GetNodeAttr(n->attrs(), kInputs, &inputs));
  TF_RETURN_IF_ERROR(GetNodeAttr(n->attrs(), kNumOutputs, &num_outputs));
  TF_RETURN_IF_ERROR(GetNodeAttr(n->attrs(), kNumSaved, &num_saved));
  std::vector<GraphTensor> result(n->num_inputs());
  auto func = [](const std::string& name) {
    NameAttrList f;
    f.set_name(name);
    return f;
  };
  std::vector<NodeBuilder::NodeOut> in;
  DataTypeVector types;
  auto add = [&](const GraphTensor& t) {
    in.push_back({t.node, t.index});
    types.push_back(t.node->output_type(t.index));
  };
  const std::string name = g->NewName(absl::StrCat(name_prefix, "/", n->name(), "/grad"));
  Node* grad = nullptr;
  if (IsWhile(n->type_string())) {
    TF_RETURN_IF_ERROR(GetNodeAttr(n->attrs(), kCaptures, &captures));
    auto fresh_type = control_flow::FreshLists(n->attrs(), n->name(), inputs.size());
    if (!fresh_type.ok()) return fresh_type.status();
    std::vector<GraphTensor> incoming;
    add({n, num_outputs});  // the iteration count
    for (size_t m = 0; m < inputs.size(); ++m) {
      auto d = dy(inputs[m]);
      if (!d.ok()) return d.status();
      incoming.push_back(*d);
      auto it = fresh_type->find(m);
      if (it == fresh_type->end()) {
        add(*d);
        continue;
      }
      // A list of uninitialised elements, as long as the incoming gradient and with its
      // element shape, which the backward loop writes once per element.
      Node *shape = nullptr, *length = nullptr, *list = nullptr;
      const std::string base = g->NewName(absl::StrCat(name, "/fresh_list"));
      TF_RETURN_IF_ERROR(NodeBuilder(base + "/element_shape", "TensorListElementShape")
                             .Input(d->node, d->index)
                             .Attr("shape_type", DT_INT32)
                             .Finalize(g, &shape));
      TF_RETURN_IF_ERROR(NodeBuilder(base + "/length", "TensorListLength")
                             .Input(d->node, d->index)
                             .Finalize(g, &length));
      TF_RETURN_IF_ERROR(NodeBuilder(base, "TensorListReserve")
                             .Input(shape, 0)
                             .Input(length, 0)
                             .Attr("element_dtype", it->second)
                             .Attr("shape_type", DT_INT32)
                             .Finalize(g, &list));
      add({list, 0});
    }
    for (int j = 0; j < num_saved; ++j) add({n, num_outputs + 1 + j});
    for (int k : captures) {
      auto t = InputOf(n, k);
      if (!t.ok()) return t.status();
      add(*t);
    }
    std::vector<TensorShapeProto> shapes(types.size(), UnknownShape());
    int parallel = 10;
    (void)GetNodeAttr(n->attrs(), "parallel_iterations", &parallel);
    NodeBuilder builder(name, "While");
    builder.Input(in)
        .Attr("T", types)
        .Attr("body", func(functions[0]))
        .Attr("cond", func(functions[1]))
        .Attr("output_shapes", shapes)
        .Attr("parallel_iterations", parallel);
    // Lowered, as Python's while_v2 lowers gradient loops: the executor then prunes the loop
    // variables whose gradients nobody fetches (a frozen weight's, every iteration).
    builder.Attr("_lower_using_switch_merge", true);
    TF_RETURN_IF_ERROR(builder.Finalize(g, &grad));
    for (size_t m = 0; m < inputs.size(); ++m) {
      result[inputs[m]] = {grad, 1 + static_cast<int>(m)};
      if (!fresh_type->count(m)) continue;
      // The incoming gradient plus what the loop wrote (an uninitialised element adds as
      // zeros): one pass over the list, once.
      Node* sum = nullptr;
      TF_RETURN_IF_ERROR(
          NodeBuilder(g->NewName(absl::StrCat(name, "/fresh_list_sum")), "AddN")
              .Input(std::vector<NodeBuilder::NodeOut>{{incoming[m].node, incoming[m].index},
                                                       {grad, 1 + static_cast<int>(m)}})
              .Finalize(g, &sum));
      result[inputs[m]] = {sum, 0};
    }
    return result;
  }
  TF_RETURN_IF_ERROR(GetNodeAttr(n->attrs(), kOutputs, &outputs));
  auto pred = InputOf(n, 0);
  if (!pred.ok()) return pred.status();
  for (int k : outputs) {
    auto d = dy(k);
    if (!d.ok()) return d.status();
    add(*d);
  }
  for (int s = 0; s < num_saved; ++s) add({n, num_outputs + s});
  for (int i = 1; i < n->num_inputs(); ++i) {
    auto t = InputOf(n, i);
    if (!t.ok()) return t.status();
    add(*t);
  }
  DataTypeVector tout;
  DataTypeVector tin;
  TF_RETURN_IF_ERROR(GetNodeAttr(n->attrs(), "Tin", &tin));
  for (int k : inputs) tout.push_back(tin[k]);
  NodeBuilder builder(name, n->type_string());
  builder.Input(pred->node, pred->index).Input(in).Attr("Tin", types).Attr("Tout", tout);
  builder.Attr("output_shapes", std::vector<TensorShapeProto>());
  if (IsCase(n->type_string())) {
    std::vector<NameAttrList> fs;
    for (const std::string& f : functions) fs.push_back(func(f));
    builder.Attr("branches", fs);
  } else {
    DataType tcond;
    TF_RETURN_IF_ERROR(GetNodeAttr(n->attrs(), "Tcond", &tcond));
    builder.Attr("Tcond", tcond)
        .Attr("then_branch", func(functions[0]))
        .Attr("else_branch", func(functions[1]));
  }
  builder.Attr("_lower_using_switch_merge", true);
  TF_RETURN_IF_ERROR(builder.Finalize(g, &grad));
  // Branch input i is input i + 1 of the If/Case (input 0 is the predicate or index).
  for (size_t m = 0; m < inputs.size(); ++m) result[inputs[m] + 1] = {grad, static_cast<int>(m)};
  return result;
}

}  // namespace tensorflow::tf_ext
