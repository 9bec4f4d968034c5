#include "tf_ext/graph/engine/control_flow.h"

#include <atomic>
#include <cstdlib>
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
#include "tf_ext/graph/engine/control_flow_ops.h"
#include "tf_ext/graph/engine/function_gradient.h"
#include "tf_ext/graph/engine/function_graph.h"
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

// The pass over a loop body's or branch's own control flow, which DifferentiateFunction runs
// first: this pass, recursively.
NestedControlFlowPass Nested() {
  return [](Graph* body, const std::vector<GraphTensor>& ys, const std::vector<GraphTensor>& xs,
            const std::string& name_prefix) {
    return PrepareControlFlowForGradients(body, ys, xs, name_prefix);
  };
}

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

// Checkpoints of the carried state (RewriteWhile under a memory budget; docs/memory.md, Loops).
// Instead of the loop variables' values at every iteration's start, the forward loop keeps them
// at the iterations of a stride that grows as the square root of the iteration. The backward
// loop takes a segment (the iterations between two checkpoints) at a time: a step loop runs the
// segment forward from its checkpoint, pushing what each iteration's gradient reads, and the
// iterations' gradients then run backwards over it, popping. That needs the state's next value,
// and every tensor the gradient reads but the loop does not save, to be computable from the
// state and the loop invariants alone: `step` is that part of the body, and `state` grows with
// every loop variable it reads; what the gradient reads and the step cannot compute (a
// stateful node's output) is saved every iteration. Where the state's next value has no such
// part (a random op, a nested loop or a function call on the way, a variant or resource loop
// variable that changes) there is no plan, and the loop saves its carried state every
// iteration.
struct SegmentList {
  DataType dtype;
  std::string value;               // the step's tensor, pushed every iteration
  std::vector<std::string> reads;  // the forward tensors the gradient reads, it holds
};
struct SegmentPlan {
  std::vector<int> state;           // the checkpointed loop variables
  std::vector<int> invariants;      // the loop invariants the step reads
  GraphDef step;                    // copies of body nodes reading the args below
  std::vector<std::string> next;    // per state: the step's tensor of its next value
  std::vector<SegmentList> lists;   // what the step loop pushes for the gradient
  std::set<std::string> covered;    // the reads the lists hold
};

// The step's args: a checkpointed loop variable (by position in SegmentPlan::state) and a loop
// invariant (by loop variable).
std::string StepStateArg(const std::string& bp, int position) {
  return absl::StrCat(bp, "/step/state_", position);
}
std::string StepInvariantArg(const std::string& bp, int arg) {
  return absl::StrCat(bp, "/step/invariant_", arg);
}

// TF_EXT_LOOP_CHECKPOINTS=0 turns the checkpoints off: a loop under a budget then saves its
// carried state every iteration (the comparison test_memory_budget_loops.py measures against).
bool LoopCheckpointsEnabled() {
  const char* value = std::getenv("TF_EXT_LOOP_CHECKPOINTS");
  return value == nullptr || std::string(value) != "0";
}

// `reads`: the forward tensors the body's gradient reads that are neither constants nor loop
// invariants.
std::optional<SegmentPlan> PlanSegments(const FunctionLibraryDefinition& flib,
                                        const FunctionGradient& fg,
                                        const std::vector<const Needed*>& reads,
                                        const DataTypeVector& types) {
  auto index_of = [](const NodeDef& nd) {
    int index = -1;
    (void)GetNodeAttr(AttrSlice(nd), "index", &index);
    return index;
  };
  std::map<std::string, const NodeDef*> forward;
  std::map<int, const NodeDef*> rets;
  for (const NodeDef& nd : fg.graph.node()) {
    if (fg.IsGradient(nd.name())) continue;
    forward[nd.name()] = &nd;
    if (nd.op() == "_Retval") rets[index_of(nd)] = &nd;
  }
  const int num_vars = types.size();
  auto invariant = [&fg](int a) {
    return a >= 0 && a < static_cast<int>(fg.ret_source.size()) && fg.ret_source[a] == a;
  };
  SegmentPlan plan;
  std::map<int, int> position;  // loop variable -> position in plan.state
  auto add_state = [&](int a) {
    if (position.count(a)) return true;
    if (a < 0 || a >= num_vars || invariant(a) || types[a] == DT_VARIANT ||
        types[a] == DT_RESOURCE) {
      return false;
    }
    position[a] = plan.state.size();
    plan.state.push_back(a);
    return true;
  };
  const std::string copy_prefix = fg.prefix + "/step/node/";
  std::map<std::string, bool> copied;
  std::set<int> invariant_seen;
  std::function<bool(const std::string&)> copy;
  // The step's tensor for forward tensor `t`, copying the nodes it needs; "" where it cannot.
  std::function<std::string(const std::string&)> step_tensor =
      [&](const std::string& t) -> std::string {
    const TensorId id = ParseTensorName(t);
    const std::string src(id.first);
    auto it = forward.find(src);
    if (id.second < 0 || it == forward.end()) return "";  // a control input keeps its order
    const NodeDef& nd = *it->second;
    if (nd.op() == "_Arg") {
      const int a = index_of(nd);
      if (invariant(a)) {
        if (invariant_seen.insert(a).second) plan.invariants.push_back(a);
        return StepInvariantArg(fg.prefix, a) + ":0";
      }
      if (!add_state(a)) return "";
      return StepStateArg(fg.prefix, position.at(a)) + ":0";
    }
    if (!copy(src)) return "";
    return TensorName(copy_prefix + src, id.second);
  };
  copy = [&](const std::string& name) -> bool {
    auto m = copied.find(name);
    if (m != copied.end()) return m->second;
    copied[name] = false;
    const NodeDef& nd = *forward.at(name);
    const OpDef* op_def = nullptr;
    if (nd.op() == "_Retval" || flib.Find(nd.op()) != nullptr || IsFunctionalControlFlow(nd.op()) ||
        IsV1ControlFlow(nd.op()) || !OpRegistry::Global()->LookUpOpDef(nd.op(), &op_def).ok() ||
        op_def->is_stateful()) {
      return false;  // random ops among the stateful: their draws are the forward's
    }
    NodeDef c = nd;
    c.set_name(copy_prefix + name);
    c.clear_input();
    if (nd.op() != "Const") {
      for (const std::string& in : nd.input()) {
        // A control input only orders: a stateless node's value does not depend on it (a
        // frozen Keras body passes its loop variables on through Identity nodes that wait for
        // its weights' reads; an inlined body's inputs wait for the call's input node).
        if (absl::StartsWith(in, "^")) continue;
        const std::string t = step_tensor(in);
        if (t.empty()) return false;
        c.add_input(t);
      }
    }
    *plan.step.add_node() = std::move(c);
    copied[name] = true;
    return true;
  };
  std::map<std::string, int> list_of;  // step tensor -> position in plan.lists
  for (const Needed* read : reads) {
    std::string value;
    if (read->arg >= 0) {
      if (!add_state(read->arg)) continue;  // a list the loop writes: saved every iteration
      value = StepStateArg(fg.prefix, position.at(read->arg)) + ":0";
    } else {
      // What the step cannot compute (a stateful node's output, or what reads one) is saved
      // every iteration.
      value = step_tensor(read->tensor);
      if (value.empty()) continue;
    }
    auto [it, added] = list_of.emplace(value, plan.lists.size());
    if (added) plan.lists.push_back({read->dtype, value, {}});
    plan.lists[it->second].reads.push_back(read->tensor);
    plan.covered.insert(read->tensor);
  }
  if (plan.state.empty()) return std::nullopt;  // nothing carried: nothing to checkpoint
  for (size_t i = 0; i < plan.state.size(); ++i) {  // step_tensor may grow plan.state
    auto r = rets.find(plan.state[i]);
    if (r == rets.end() || r->second->input_size() < 1) return std::nullopt;
    const std::string t = step_tensor(r->second->input(0));
    if (t.empty()) return std::nullopt;
    plan.next.push_back(t);
  }
  return plan;
}

// The positions of `dtypes` grouped by dtype, groups in the order of their first position.
std::vector<std::vector<int>> ByDtype(const DataTypeVector& dtypes) {
  std::vector<std::vector<int>> groups;
  for (size_t k = 0; k < dtypes.size(); ++k) {
    size_t at = 0;
    while (at < groups.size() && dtypes[groups[at][0]] != dtypes[k]) ++at;
    if (at == groups.size()) groups.emplace_back();
    groups[at].push_back(static_cast<int>(k));
  }
  return groups;
}

// Adds to `def` a TensorListPushBack of each of `values` onto `list`, in order; returns the
// list after the last.
std::string PushAll(GraphDef* def, const std::string& list, const std::vector<std::string>& values,
                    DataType dtype) {
  std::string pushed = list;
  for (size_t k = 0; k < values.size(); ++k) {
    const std::string name = absl::StrCat(list, "/push_", k);
    NodeDef push = MakeNode(name, "TensorListPushBack", {pushed, values[k]});
    AddNodeAttr("element_dtype", dtype, &push);
    *def->add_node() = std::move(push);
    pushed = name;
  }
  return pushed;
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
  auto grad = DifferentiateFunction(g, body, what, Nested(), shapes, /*loop_body=*/true, wanted);
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
  auto capture_position = [&captures](int arg) {
    for (size_t c = 0; c < captures.size(); ++c) {
      if (captures[c] == arg) return static_cast<int>(c);
    }
    captures.push_back(arg);
    return static_cast<int>(captures.size()) - 1;
  };
  for (const Needed& need : fg.needed) {
    if (need.kind == Needed::kArg && fg.ret_source[need.arg] == need.arg) {
      if (!capture_of.count(need.tensor)) capture_of[need.tensor] = capture_position(need.arg);
    } else if (need.kind != Needed::kConst) {
      if (need.dtype == DT_RESOURCE) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": its gradient reads the resource '", need.tensor,
            "', which changes between iterations (only loop-invariant resources are supported)"));
      }
      saved.push_back(&need);
    }
  }
  const std::vector<const Needed*> reads = saved;  // what the gradient reads
  BodyRecomputation recompute;
  if (recompute_body) {
    auto plan = PlanBodyRecomputation(g->flib_def(), fg, saved);
    if (!plan.ok()) return plan.status();
    recompute = std::move(*plan);
    saved.clear();
    for (const Needed& leaf : recompute.leaves) saved.push_back(&leaf);
    for (const auto& [tensor, arg] : recompute.invariant_args) {
      if (!capture_of.count(tensor)) capture_of[tensor] = capture_position(arg);
    }
  }
  // Under a budget the carried state is checkpointed where the body allows (PlanSegments).
  std::optional<SegmentPlan> segments;
  if (recompute_body && LoopCheckpointsEnabled()) {
    segments = PlanSegments(g->flib_def(), fg, reads, types);
  }
  // What the loop saves every iteration: with checkpoints, what the gradient reads and the
  // step cannot compute; without, the recomputation's leaves.
  std::vector<const Needed*> per_iteration;
  if (segments) {
    for (int a : segments->invariants) capture_position(a);
    for (const Needed* r : reads) {
      if (!segments->covered.count(r->tensor)) per_iteration.push_back(r);
    }
  } else {
    per_iteration = saved;
  }
  // One list per dtype: each iteration pushes its tensors of that dtype in order, and the
  // backward pops them in reverse. A list element's shape is its own, so one list holds
  // tensors of any shapes; a loop variable per saved tensor would cost the lowered loops a
  // Merge, Switch, Identity and NextIteration per iteration, in the forward and the backward
  // loop alike (a Keras LSTM saves 7 tensors a step, all float).
  DataTypeVector per_iteration_types;
  for (const Needed* s : per_iteration) per_iteration_types.push_back(s->dtype);
  const std::vector<std::vector<int>> groups = ByDtype(per_iteration_types);
  const int num_lists = groups.size();
  const int num_state = segments ? segments->state.size() : 0;
  // The loop's new outputs after its iteration count: a list per dtype saved every iteration
  // and, with checkpoints, the checkpoints' iterations and a list per checkpointed loop
  // variable. All are variants, so the registered gradient (tf_ext/grads/tf/
  // control_flow_grad.cc) passes them to the backward loop as it passes the lists.
  DataTypeVector saved_types;  // element dtypes
  for (const std::vector<int>& group : groups) {
    saved_types.push_back(per_iteration_types[group[0]]);
  }
  if (segments) {
    saved_types.push_back(DT_INT32);
    for (int a : segments->state) saved_types.push_back(types[a]);
  }
  const int num_saved = saved_types.size();
  const int num_diff = fg.diff_args.size();

  // Forward body: the body, an iteration counter, and a TensorListPushBack per saved tensor.
  GraphDef fwd = ForwardNodes(fg);
  std::map<int, std::string> arg_names;  // the body's loop variables
  for (const NodeDef& nd : fwd.node()) {
    int index = -1;
    if (nd.op() == "_Arg" && GetNodeAttr(AttrSlice(nd), "index", &index).ok()) {
      arg_names[index] = nd.name();
    }
  }
  *fwd.add_node() = ArgNode(bp + "_acc/counter", DT_INT32, num_vars);
  *fwd.add_node() = ScalarConst(bp + "_acc/one", 1);
  *fwd.add_node() = MakeNode(bp + "_acc/next", "AddV2", {bp + "_acc/counter", bp + "_acc/one"});
  AddNodeAttr("T", DT_INT32, fwd.mutable_node(fwd.node_size() - 1));
  *fwd.add_node() = RetNode(bp + "_acc/counter_out", bp + "_acc/next", DT_INT32, num_vars);
  for (int j = 0; j < num_lists; ++j) {
    const std::string list = absl::StrCat(bp, "_acc/list_", j);
    *fwd.add_node() = ArgNode(list, DT_VARIANT, num_vars + 1 + j);
    std::vector<std::string> values;
    for (int k : groups[j]) values.push_back(per_iteration[k]->tensor);
    const std::string pushed = PushAll(&fwd, list, values, saved_types[j]);
    *fwd.add_node() = RetNode(list + "/out", pushed, DT_VARIANT, num_vars + 1 + j);
  }
  if (segments) {
    // Iteration t appends its carried state, first dropping the previous iteration's unless
    // t - 1 is a checkpoint: a multiple of its stride max(1, floor(sqrt(t - 1))) (0 is one; so
    // is "-1", which has no entry). The last entry (iteration T - 1) thus stays too: the
    // backward loop's first segment. No loop variable counts: it must not depend on the trip
    // count, which only the loop's end knows.
    const std::string ck = bp + "_ckpt/";
    auto scalar_op = [&](const std::string& name, const std::string& op,
                         const std::vector<std::string>& in, DataType t) {
      NodeDef nd = MakeNode(ck + name, op, in);
      AddNodeAttr("T", t, &nd);
      *fwd.add_node() = std::move(nd);
    };
    auto cast = [&](const std::string& name, const std::string& in, DataType from, DataType to) {
      NodeDef nd = MakeNode(ck + name, "Cast", {in});
      AddNodeAttr("SrcT", from, &nd);
      AddNodeAttr("DstT", to, &nd);
      *fwd.add_node() = std::move(nd);
    };
    *fwd.add_node() = ScalarConst(ck + "zero", 0);
    scalar_op("previous", "Sub", {bp + "_acc/counter", bp + "_acc/one"}, DT_INT32);
    scalar_op("nonnegative", "Maximum", {ck + "previous", ck + "zero"}, DT_INT32);
    cast("as_double", ck + "nonnegative", DT_INT32, DT_DOUBLE);
    scalar_op("sqrt", "Sqrt", {ck + "as_double"}, DT_DOUBLE);
    scalar_op("floor", "Floor", {ck + "sqrt"}, DT_DOUBLE);
    cast("root", ck + "floor", DT_DOUBLE, DT_INT32);
    scalar_op("stride", "Maximum", {ck + "root", bp + "_acc/one"}, DT_INT32);
    scalar_op("remainder", "FloorMod", {ck + "previous", ck + "stride"}, DT_INT32);
    scalar_op("is_checkpoint", "Equal", {ck + "remainder", ck + "zero"}, DT_INT32);
    cast("keep", ck + "is_checkpoint", DT_BOOL, DT_INT32);
    const int first = num_vars + 1 + num_lists;
    const std::string positions = ck + "positions";
    *fwd.add_node() = ArgNode(positions, DT_VARIANT, first);
    *fwd.add_node() = MakeNode(ck + "length", "TensorListLength", {positions});
    scalar_op("last", "Sub", {ck + "length", bp + "_acc/one"}, DT_INT32);
    scalar_op("kept", "AddV2", {ck + "last", ck + "keep"}, DT_INT32);
    // Resize to `kept` entries, then append `value`.
    auto append = [&](const std::string& list, const std::string& value, DataType dtype,
                      int index) {
      *fwd.add_node() = MakeNode(list + "/kept", "TensorListResize", {list, ck + "kept"});
      NodeDef push = MakeNode(list + "/push", "TensorListPushBack", {list + "/kept", value});
      AddNodeAttr("element_dtype", dtype, &push);
      *fwd.add_node() = std::move(push);
      *fwd.add_node() = RetNode(list + "/out", list + "/push", DT_VARIANT, index);
    };
    append(positions, bp + "_acc/counter", DT_INT32, first);
    for (int i = 0; i < num_state; ++i) {
      const int a = segments->state[i];
      auto name = arg_names.find(a);
      if (name == arg_names.end()) {
        return absl::InternalError(absl::StrCat(what, ": no arg ", a));
      }
      const std::string list = absl::StrCat(ck, "state_", i);
      *fwd.add_node() = ArgNode(list, DT_VARIANT, first + 1 + i);
      append(list, name->second, types[a], first + 1 + i);
    }
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

  // The backward body of one iteration. Its loop variables: the counter, with checkpoints the
  // segment's first iteration (where it stops), d(loop variable) per differentiable one, the
  // lists it pops (each value replaces the forward tensors named with it) and the captured
  // invariants. Without checkpoints it recomputes what the gradient reads from the popped
  // values (`recompute`); with them, it pops it.
  struct PoppedList {
    DataType dtype;
    std::vector<std::vector<std::string>> items;  // in push order: the tensors each replaces
  };
  std::vector<PoppedList> per_iteration_lists;  // the forward's, as `groups`
  for (int j = 0; j < num_lists; ++j) {
    PoppedList popped{saved_types[j], {}};
    for (int k : groups[j]) popped.items.push_back({per_iteration[k]->tensor});
    per_iteration_lists.push_back(std::move(popped));
  }
  auto iteration_body = [&](int base, const std::vector<PoppedList>& lists,
                            DataTypeVector* arg_types) {
    const bool with_copies = base == 1;
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
    *arg_types = {DT_INT32};
    if (base == 2) {
      *extra.add_node() = ArgNode(bp + "/bwd/stop", DT_INT32, 1);
      *extra.add_node() = RetNode(bp + "/bwd/stop_out", bp + "/bwd/stop", DT_INT32, 1);
      arg_types->push_back(DT_INT32);
    }
    for (int m = 0; m < num_diff; ++m) {
      const DataType t = types[fg.diff_args[m]];
      arg_types->push_back(t);
      *extra.add_node() = RetNode(absl::StrCat(bp, "/bwd/d_out_", m), fg.d_args[m], t, base + m);
    }
    const int num_popped = lists.size();
    for (int j = 0; j < num_popped; ++j) {
      const std::string list = absl::StrCat(bp, "/bwd/list_", j);
      const int index = base + num_diff + j;
      *extra.add_node() = ArgNode(list, DT_VARIANT, index);
      std::string rest = list;  // the list less what was popped
      for (int k = static_cast<int>(lists[j].items.size()) - 1; k >= 0; --k) {
        const std::string pop = absl::StrCat(list, "/pop_", k);
        NodeDef nd = MakeNode(pop, "TensorListPopBack", {rest, bp + "/bwd/unknown_shape"});
        AddNodeAttr("element_dtype", lists[j].dtype, &nd);
        *extra.add_node() = std::move(nd);
        for (const std::string& tensor : lists[j].items[k]) replacement[tensor] = pop + ":1";
        rest = pop + ":0";
      }
      *extra.add_node() = RetNode(list + "/out", rest, DT_VARIANT, index);
      arg_types->push_back(DT_VARIANT);
    }
    for (size_t c = 0; c < captures.size(); ++c) {
      const std::string arg = absl::StrCat(bp, "/bwd/capture_", c);
      const int index = base + num_diff + num_popped + c;
      const DataType t = types[captures[c]];
      *extra.add_node() = ArgNode(arg, t, index);
      *extra.add_node() = RetNode(arg + "/out", arg, t, index);
      arg_types->push_back(t);
    }
    for (const auto& [tensor, pos] : capture_of) {
      replacement[tensor] = absl::StrCat(bp, "/bwd/capture_", pos, ":0");
    }
    // The recomputing copies read the popped and captured values; the gradient reads the copies.
    for (const NodeDef& node : recompute.copies.node()) {
      if (!with_copies) break;
      NodeDef c = node;
      for (std::string& in : *c.mutable_input()) {
        auto it = replacement.find(in);
        if (it != replacement.end()) in = it->second;
      }
      *extra.add_node() = std::move(c);
    }
    if (with_copies) {
      for (const auto& [tensor, copy] : recompute.recomputed) replacement[tensor] = copy;
    }
    GraphDef bwd = GradientNodes(fg, replacement);
    for (const NodeDef& node : extra.node()) *bwd.add_node() = node;
    for (int m = 0; m < num_diff; ++m) SetIndex(&bwd, fg.d_rets[m], base + m);
    BypassIdentities(&bwd);
    return bwd;
  };
  // A loop's cond over `arg_types`: arg 0 `op` (Greater, Less) arg 1, or 0 when `zero`.
  auto compare_cond = [](const DataTypeVector& arg_types, const std::string& op, bool zero) {
    GraphDef def;
    for (size_t i = 0; i < arg_types.size(); ++i) {
      *def.add_node() = ArgNode(absl::StrCat("arg_", i), arg_types[i], i);
    }
    if (zero) *def.add_node() = ScalarConst("zero", 0);
    NodeDef compare = MakeNode("compare", op, {"arg_0", zero ? "zero" : "arg_1"});
    AddNodeAttr("T", DT_INT32, &compare);
    *def.add_node() = compare;
    *def.add_node() = RetNode("out", "compare", DT_BOOL, 0);
    return def;
  };
  // A While node of a generated function, lowered as the gradient loop is, one iteration at a
  // time: a segment's iterations are a chain anyway (through the state, or its gradient), and
  // with the loop's parallel_iterations the executor ran ahead of it (LSTM(128), batch 16, 2000
  // steps: a VmHWM rise of 110 MB instead of 67).
  auto while_node = [](const std::string& name, const std::vector<std::string>& inputs,
                               const DataTypeVector& loop_types, const std::string& body_name,
                               const std::string& cond_name) {
    NodeDef nd = MakeNode(name, "While", inputs);
    NameAttrList body_attr, cond_attr;
    body_attr.set_name(body_name);
    cond_attr.set_name(cond_name);
    AddNodeAttr("T", loop_types, &nd);
    AddNodeAttr("body", body_attr, &nd);
    AddNodeAttr("cond", cond_attr, &nd);
    AddNodeAttr("output_shapes", std::vector<TensorShapeProto>(loop_types.size(), UnknownShape()),
                &nd);
    AddNodeAttr("parallel_iterations", 1, &nd);
    AddNodeAttr("_lower_using_switch_merge", true, &nd);
    return nd;
  };

  // Backward body. Loop variables: counter, d(loop variable) per differentiable one, the saved
  // lists, the captured invariants.
  DataTypeVector bwd_types;
  absl::StatusOr<std::string> bwd_name;
  if (!segments) {
    bwd_name = AddFunction(g, iteration_body(1, per_iteration_lists, &bwd_types),
                           body.name() + "_tf_ext_grad");
    if (!bwd_name.ok()) return bwd_name.status();
  } else {
    // With checkpoints, one iteration of the backward loop is a segment [s, counter), s its
    // checkpoint's iteration: a step loop runs the segment's iterations forward from the
    // checkpoint, pushing what each one's gradient reads, then a loop runs the iterations'
    // gradients backwards, popping it. The backward loop's counter goes from the trip count T
    // down to 0 a segment at a time.
    const SegmentPlan& plan = *segments;
    // The step's lists, one per dtype as the forward's.
    DataTypeVector step_list_types;
    for (const SegmentList& list : plan.lists) step_list_types.push_back(list.dtype);
    const std::vector<std::vector<int>> step_groups = ByDtype(step_list_types);
    const int num_segment_lists = step_groups.size();
    const int num_invariants = plan.invariants.size();
    std::vector<PoppedList> lists = per_iteration_lists;
    for (const std::vector<int>& group : step_groups) {
      PoppedList popped{step_list_types[group[0]], {}};
      for (int k : group) popped.items.push_back(plan.lists[k].reads);
      lists.push_back(std::move(popped));
    }
    DataTypeVector iteration_types;
    auto iteration_name = AddFunction(g, iteration_body(2, lists, &iteration_types),
                                      body.name() + "_tf_ext_grad_segment");
    if (!iteration_name.ok()) return iteration_name.status();
    auto iteration_cond = AddFunction(g, compare_cond(iteration_types, "Greater", false),
                                      cond.name() + "_tf_ext_grad_segment");
    if (!iteration_cond.ok()) return iteration_cond.status();

    // The step loop. Loop variables: m (from 0), the segment's length, the state, the lists
    // it pushes, the invariants the step reads.
    GraphDef step = plan.step;
    DataTypeVector step_types = {DT_INT32, DT_INT32};
    const std::string sp = bp + "/step/";
    *step.add_node() = ArgNode(sp + "m", DT_INT32, 0);
    *step.add_node() = ArgNode(sp + "length", DT_INT32, 1);
    *step.add_node() = ScalarConst(sp + "one", 1);
    *step.add_node() = MakeNode(sp + "m_next", "AddV2", {sp + "m", sp + "one"});
    AddNodeAttr("T", DT_INT32, step.mutable_node(step.node_size() - 1));
    *step.add_node() = RetNode(sp + "m_out", sp + "m_next", DT_INT32, 0);
    *step.add_node() = RetNode(sp + "length_out", sp + "length", DT_INT32, 1);
    for (int i = 0; i < num_state; ++i) {
      const DataType t = types[plan.state[i]];
      *step.add_node() = ArgNode(StepStateArg(bp, i), t, 2 + i);
      *step.add_node() = RetNode(absl::StrCat(sp, "state_out_", i), plan.next[i], t, 2 + i);
      step_types.push_back(t);
    }
    for (int k = 0; k < num_segment_lists; ++k) {
      const std::string list = absl::StrCat(sp, "segment_", k);
      const int index = 2 + num_state + k;
      *step.add_node() = ArgNode(list, DT_VARIANT, index);
      std::vector<std::string> values;
      for (int member : step_groups[k]) values.push_back(plan.lists[member].value);
      const std::string pushed = PushAll(&step, list, values, step_list_types[step_groups[k][0]]);
      *step.add_node() = RetNode(list + "/out", pushed, DT_VARIANT, index);
      step_types.push_back(DT_VARIANT);
    }
    for (int c = 0; c < num_invariants; ++c) {
      const int a = plan.invariants[c];
      const int index = 2 + num_state + num_segment_lists + c;
      *step.add_node() = ArgNode(StepInvariantArg(bp, a), types[a], index);
      *step.add_node() = RetNode(absl::StrCat(sp, "invariant_out_", c), StepInvariantArg(bp, a),
                                 types[a], index);
      step_types.push_back(types[a]);
    }
    auto step_name = AddFunction(g, step, body.name() + "_tf_ext_recompute_segment");
    if (!step_name.ok()) return step_name.status();
    auto step_cond = AddFunction(g, compare_cond(step_types, "Less", false),
                                 cond.name() + "_tf_ext_recompute_segment");
    if (!step_cond.ok()) return step_cond.status();

    // The backward loop's body: a segment.
    GraphDef seg;
    const std::string sb = bp + "/segment/";
    auto arg = [&](const std::string& name, DataType t) {
      *seg.add_node() = ArgNode(sb + name, t, bwd_types.size());
      bwd_types.push_back(t);
      return sb + name;
    };
    auto ret = [&](const std::string& input, int index) {
      *seg.add_node() = RetNode(absl::StrCat(sb, "out_", index), input, bwd_types[index], index);
    };
    const std::string counter = arg("counter", DT_INT32);
    std::vector<std::string> d, list_args, checkpoints, capture_args;
    for (int m = 0; m < num_diff; ++m) d.push_back(arg(absl::StrCat("d_", m), types[fg.diff_args[m]]));
    for (int j = 0; j < num_lists; ++j) list_args.push_back(arg(absl::StrCat("list_", j), DT_VARIANT));
    const std::string positions = arg("positions", DT_VARIANT);
    for (int i = 0; i < num_state; ++i) {
      checkpoints.push_back(arg(absl::StrCat("checkpoints_", i), DT_VARIANT));
    }
    for (size_t c = 0; c < captures.size(); ++c) {
      capture_args.push_back(arg(absl::StrCat("capture_", c), types[captures[c]]));
    }
    NodeDef unknown = MakeNode(sb + "unknown_shape", "Const", {});
    {
      Tensor minus_one(DT_INT32, TensorShape({}));
      minus_one.scalar<int32_t>()() = -1;
      AddNodeAttr("dtype", DT_INT32, &unknown);
      AddNodeAttr("value", minus_one, &unknown);
    }
    *seg.add_node() = unknown;
    *seg.add_node() = ScalarConst(sb + "zero", 0);
    auto pop = [&](const std::string& list, DataType dtype) {
      NodeDef nd = MakeNode(list + "/pop", "TensorListPopBack", {list, sb + "unknown_shape"});
      AddNodeAttr("element_dtype", dtype, &nd);
      *seg.add_node() = std::move(nd);
      return list + "/pop";
    };
    const std::string start = pop(positions, DT_INT32) + ":1";
    *seg.add_node() = MakeNode(sb + "length", "Sub", {counter, start});
    AddNodeAttr("T", DT_INT32, seg.mutable_node(seg.node_size() - 1));
    std::vector<std::string> step_in = {sb + "zero", sb + "length"};
    for (int i = 0; i < num_state; ++i) {
      step_in.push_back(pop(checkpoints[i], types[plan.state[i]]) + ":1");
    }
    for (int k = 0; k < num_segment_lists; ++k) {
      const std::string list = absl::StrCat(sb, "segment_", k);
      NodeDef empty = MakeNode(list, "EmptyTensorList", {sb + "unknown_shape", sb + "unknown_shape"});
      AddNodeAttr("element_dtype", step_list_types[step_groups[k][0]], &empty);
      AddNodeAttr("shape_type", DT_INT32, &empty);
      *seg.add_node() = std::move(empty);
      step_in.push_back(list);
    }
    for (int a : plan.invariants) step_in.push_back(capture_args[capture_position(a)]);
    *seg.add_node() = while_node(sb + "recompute", step_in, step_types, *step_name, *step_cond);
    std::vector<std::string> iteration_in = {counter, start};
    for (const std::string& v : d) iteration_in.push_back(v);
    for (const std::string& v : list_args) iteration_in.push_back(v);
    for (int k = 0; k < num_segment_lists; ++k) {
      iteration_in.push_back(absl::StrCat(sb, "recompute:", 2 + num_state + k));
    }
    for (const std::string& v : capture_args) iteration_in.push_back(v);
    *seg.add_node() =
        while_node(sb + "backward", iteration_in, iteration_types, *iteration_name, *iteration_cond);
    // The next segment waits for this one's gradients (the counter is the inner loop's), so
    // that one segment's recomputed tensors are held at a time.
    int index = 0;
    ret(sb + "backward:0", index++);
    for (int m = 0; m < num_diff; ++m) ret(absl::StrCat(sb, "backward:", 2 + m), index++);
    for (int j = 0; j < num_lists; ++j) {
      ret(absl::StrCat(sb, "backward:", 2 + num_diff + j), index++);
    }
    ret(positions + "/pop:0", index++);
    for (int i = 0; i < num_state; ++i) ret(checkpoints[i] + "/pop:0", index++);
    for (const std::string& v : capture_args) ret(v, index++);
    bwd_name = AddFunction(g, seg, body.name() + "_tf_ext_grad");
    if (!bwd_name.ok()) return bwd_name.status();
  }

  // Backward cond: counter > 0.
  auto bcond_name = AddFunction(g, compare_cond(bwd_types, "Greater", true),
                                cond.name() + "_tf_ext_grad");
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
                           .Attr("element_dtype", saved_types[j])
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
  // The tensors the loop keeps (a checkpointed one every k-th iteration); the checkpoints'
  // iterations are bookkeeping.
  stats->accumulators += static_cast<int>(per_iteration.size()) + num_state + fg.stats.accumulators;
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
    auto grad = DifferentiateFunction(g, branches[b], what, Nested());
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

}  // namespace

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

}  // namespace tensorflow::tf_ext
