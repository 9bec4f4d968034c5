#include "tf_ext/graph/engine/function_gradient.h"

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
#include "tf_ext/graph/engine/backward_nodes.h"
#include "tf_ext/graph/engine/inline_calls.h"
#include "tf_ext/graph/engine/shape_inference.h"
#include "tf_ext/graph/engine/workarounds.h"
#include "tf_ext/graph/io/tensor_doubles.h"

namespace tensorflow::tf_ext {
namespace {

// Shape(t) and Size(t) nodes of the gradient, t a forward tensor: the gradient must not keep
// t (save it every iteration, or output it from a branch) only to read its shape. Where the
// body's argument shapes fix t's shape, the node becomes a constant (which TensorFlow's
// optimizer then folds into the shape arithmetic, as Python's gradients skip it for matching
// static shapes); otherwise it moves into the forward body, so that only the shape is kept.
absl::Status ShapesFromForward(Graph* bg, FunctionGradient* fg,
                               const std::vector<PartialTensorShape>& arg_shapes) {
  ShapeRefiner refiner(bg->versions(), bg->op_registry());
  InferShapes(bg, ArgShapesByName(*bg, arg_shapes), &refiner,
              [fg](const Node* n) { return !fg->IsGradient(n->name()); });
  // ZerosLike(t) of a numeric forward t: Fill(Shape(t), 0), so that only t's shape is needed
  // (TensorListSetItem's gradient zeroes the item it overwrote: a loop saved every item
  // only for this).
  std::vector<Node*> zeros_like;
  for (Node* n : bg->op_nodes()) {
    if (n->type_string() != "ZerosLike" || !fg->IsGradient(n->name())) continue;
    if (IsNumeric(n->output_type(0))) zeros_like.push_back(n);
  }
  for (Node* n : zeros_like) {
    const Edge* in = nullptr;
    if (!n->input_edge(0, &in).ok()) continue;
    auto zero_value = FromDoubles(n->output_type(0), TensorShape({}), {0.0});
    if (!zero_value.ok()) return zero_value.status();
    Node *shape = nullptr, *zero = nullptr, *fill = nullptr;
    TF_RETURN_IF_ERROR(NodeBuilder(bg->NewName(fg->prefix + "/zeros/shape"), "Shape")
                           .Input(in->src(), in->src_output())
                           .Attr("out_type", DT_INT32)
                           .Finalize(bg, &shape));
    TF_RETURN_IF_ERROR(NodeBuilder(bg->NewName(fg->prefix + "/zeros/zero"), "Const")
                           .Attr("dtype", n->output_type(0))
                           .Attr("value", *zero_value)
                           .Finalize(bg, &zero));
    TF_RETURN_IF_ERROR(NodeBuilder(bg->NewName(fg->prefix + "/zeros"), "Fill")
                           .Input(shape)
                           .Input(zero)
                           .Finalize(bg, &fill));
    std::vector<std::pair<Node*, int>> consumers;
    std::vector<Node*> controlled, controls;
    for (const Edge* e : n->out_edges()) {
      if (e->IsControlEdge()) controlled.push_back(e->dst());
      else consumers.push_back({e->dst(), e->dst_input()});
    }
    for (const Edge* e : n->in_edges()) {
      if (e->IsControlEdge()) controls.push_back(e->src());
    }
    for (const auto& [dst, input] : consumers) TF_RETURN_IF_ERROR(bg->UpdateEdge(fill, 0, dst, input));
    for (Node* dst : controlled) bg->AddControlEdge(fill, dst);
    for (Node* src : controls) bg->AddControlEdge(src, fill);
    bg->RemoveNode(n);
  }
  std::vector<Node*> shape_nodes;
  for (Node* n : bg->op_nodes()) {
    const std::string& op = n->type_string();
    if ((op == "Shape" || op == "Size") && fg->IsGradient(n->name())) shape_nodes.push_back(n);
  }
  for (Node* n : shape_nodes) {
    const Edge* in = nullptr;
    if (!n->input_edge(0, &in).ok()) continue;
    // Through the Identity nodes an inlined gradient reads its op's inputs with.
    while (in->src()->type_string() == "Identity" && fg->IsGradient(in->src()->name()) &&
           in->src()->input_edge(0, &in).ok()) {
    }
    if (fg->IsGradient(in->src()->name())) continue;
    DataType out_type = DT_INT32;
    TF_RETURN_IF_ERROR(GetNodeAttr(n->attrs(), "out_type", &out_type));
    Node* replacement = nullptr;
    if (std::optional<Tensor> value =
            StaticShapeValue(refiner, in->src(), in->src_output(), n->type_string(), out_type)) {
      TF_RETURN_IF_ERROR(NodeBuilder(bg->NewName(fg->prefix + "/static_shape"), "Const")
                             .Attr("dtype", out_type)
                             .Attr("value", *value)
                             .Finalize(bg, &replacement));
    } else {
      // A forward node (its name is not the gradient's): the shape is what gets kept.
      TF_RETURN_IF_ERROR(NodeBuilder(bg->NewName(fg->prefix + "_shape/of"), n->type_string())
                             .Input(in->src(), in->src_output())
                             .Attr("out_type", out_type)
                             .Finalize(bg, &replacement));
      fg->forward.insert(replacement->name());
    }
    std::vector<std::pair<Node*, int>> consumers;
    std::vector<Node*> controlled;
    for (const Edge* e : n->out_edges()) {
      if (e->IsControlEdge()) controlled.push_back(e->dst());
      else consumers.push_back({e->dst(), e->dst_input()});
    }
    for (const auto& [dst, input] : consumers) {
      TF_RETURN_IF_ERROR(bg->UpdateEdge(replacement, 0, dst, input));
    }
    for (Node* dst : controlled) bg->AddControlEdge(replacement, dst);
    bg->RemoveNode(n);
  }
  return absl::OkStatus();
}

// Whether `n`, through Identity nodes, is a Const; if so, its value in *value.
bool ConstValue(const Node* n, Tensor* value) {
  const Edge* in = nullptr;
  while (n->type_string() == "Identity" && n->input_edge(0, &in).ok()) n = in->src();
  if (!n->IsConstant()) return false;
  const TensorProto* proto = nullptr;
  if (!TryGetNodeAttr(n->attrs(), "value", &proto) || proto == nullptr) return false;
  return value->FromProto(*proto);
}

// The broadcasting arithmetic of binary ops' gradients (BroadcastGradientArgs, then a Sum over
// the reduction axes and a Reshape to the input's shape), removed where static shapes show it
// does nothing: operands of equal shapes. Python's gradients skip it so when the shapes are
// static; in a loop body TensorFlow's optimizer does not, and every node costs every iteration.
absl::Status RemoveStaticBroadcasts(Graph* bg, const FunctionGradient& fg,
                                    const std::map<std::string, PartialTensorShape>& arg_shapes) {
  ShapeRefiner refiner(bg->versions(), bg->op_registry());
  InferShapes(bg, arg_shapes, &refiner);  // the incoming gradients' _Arg nodes too
  auto bypass = [bg](Node* n, const Edge* in) -> absl::Status {
    std::vector<std::pair<Node*, int>> consumers;
    for (const Edge* e : n->out_edges()) {
      if (e->IsControlEdge()) return absl::OkStatus();  // keep it
      consumers.push_back({e->dst(), e->dst_input()});
    }
    for (const auto& [dst, input] : consumers) {
      TF_RETURN_IF_ERROR(bg->UpdateEdge(in->src(), in->src_output(), dst, input));
    }
    return absl::OkStatus();
  };
  std::vector<Node*> nodes;
  for (Node* n : bg->op_nodes()) {
    if (fg.IsGradient(n->name())) nodes.push_back(n);
  }
  for (Node* n : nodes) {
    const std::string& op = n->type_string();
    if (op != "Sum" && op != "Reshape") continue;
    const Edge* data = nullptr;
    const Edge* arg = nullptr;
    if (!n->input_edge(0, &data).ok() || !n->input_edge(1, &arg).ok()) continue;
    shape_inference::InferenceContext* c = refiner.GetContext(data->src());
    if (c == nullptr) continue;
    const shape_inference::ShapeHandle in_shape = c->output(data->src_output());
    if (!c->FullyDefined(in_shape)) continue;
    if (op == "Sum") {
      // Sum over the axes BroadcastGradientArgs gives for two equal static shapes: none.
      const Node* bga = arg->src();
      if (bga->type_string() != "BroadcastGradientArgs") continue;
      const Edge* s0 = nullptr;
      const Edge* s1 = nullptr;
      Tensor v0, v1;
      if (!bga->input_edge(0, &s0).ok() || !bga->input_edge(1, &s1).ok() ||
          !ConstValue(s0->src(), &v0) || !ConstValue(s1->src(), &v1) ||
          v0.NumElements() != v1.NumElements() ||
          v0.tensor_data() != v1.tensor_data()) {
        continue;
      }
      TF_RETURN_IF_ERROR(bypass(n, data));
    } else {
      // Reshape to the shape the tensor has.
      Tensor target;
      if (!ConstValue(arg->src(), &target) || target.dims() != 1 ||
          target.NumElements() != c->Rank(in_shape)) {
        continue;
      }
      bool same = true;
      for (int d = 0; d < c->Rank(in_shape); ++d) {
        const int64_t want = target.dtype() == DT_INT32 ? target.vec<int32_t>()(d)
                                                        : target.vec<int64_t>()(d);
        same &= want == c->Value(c->Dim(in_shape, d));
      }
      if (same) TF_RETURN_IF_ERROR(bypass(n, data));
    }
  }
  return absl::OkStatus();
}

// The node behind `e`'s source, through Identity nodes.
const Node* Behind(const Edge* e) {
  const Node* n = e->src();
  const Edge* in = nullptr;
  while (n->type_string() == "Identity" && n->input_edge(0, &in).ok()) n = in->src();
  return n;
}

// Whether output `index` of `n` is a loop counter: loop variable a as the iteration starts,
// which the body advances by a nonzero constant (ret a = arg a + c). Its value differs every
// iteration (for fewer than 2^32 / |c| iterations).
bool IsLoopCounter(const Node* n, int index, const std::vector<Node*>& rets) {
  const int a = SourceArg(n, index);
  if (a < 0 || a >= static_cast<int>(rets.size())) return false;
  const Edge* e = nullptr;
  if (!rets[a]->input_edge(0, &e).ok()) return false;
  const Node* step = Behind(e);
  if ((step->type_string() != "AddV2" && step->type_string() != "Add") ||
      step->num_inputs() != 2) {
    return false;
  }
  const Edge* in[2] = {nullptr, nullptr};
  if (!step->input_edge(0, &in[0]).ok() || !step->input_edge(1, &in[1]).ok()) return false;
  for (int k = 0; k < 2; ++k) {
    Tensor c;
    if (SourceArg(in[k]->src(), in[k]->src_output()) != a ||
        !ConstValue(Behind(in[1 - k]), &c) || c.NumElements() != 1) {
      continue;
    }
    if (c.dtype() == DT_INT32 && c.flat<int32_t>()(0) != 0) return true;
    if (c.dtype() == DT_INT64 && c.flat<int64_t>()(0) != 0) return true;
  }
  return false;
}

// Whether `tensor` ("node:index") is output 0 of `n` or that output through Identity nodes.
bool PassesOn(const Node* n, const std::string& tensor) {
  const TensorId id = ParseTensorName(tensor);
  if (n->name() == id.node()) return id.index() == 0;
  for (const Edge* e : n->out_edges()) {
    if (!e->IsControlEdge() && e->src_output() == 0 && e->dst()->type_string() == "Identity" &&
        PassesOn(e->dst(), tensor)) {
      return true;
    }
  }
  return false;
}

// Whether every data consumer of `n`, through Identity nodes, is `only`.
bool OnlyFeeds(const Node* n, const Node* only) {
  for (const Edge* e : n->out_edges()) {
    if (e->IsControlEdge()) continue;
    const Node* dst = e->dst();
    if (dst == only) continue;
    if (dst->type_string() != "Identity" || !OnlyFeeds(dst, only)) return false;
  }
  return true;
}

// AddN(L, SetItem(Reserve(...), i, x)) of two TensorLists: the gradient of GetItem (a list of
// uninitialised elements but x at i) summed into the gradient of a list read every iteration
// (an RNN's input sequence). The sum walks both lists, so a loop of T steps would take T^2;
// SetItem(L, i, GetItem(L, i) + x) is the same list in O(1) (GetItem reads an uninitialised
// element as zeros, and SetItem updates L in place).
//
// In a loop body (`rets`: the forward body's _Retval nodes), when L is the incoming gradient of
// loop variable m, nothing else reads it, the sum is that variable's gradient and i is a loop
// counter, the loop writes each element once: SetItem(L, i, x), with L started from a list of
// uninitialised elements and the incoming gradient added once after the loop (recorded in
// fg->fresh_lists; control_flow.cc builds both). No read-modify-write per iteration: on a
// Keras LSTM of 1000 steps that arithmetic, waiting on the input-gradient MatMul, kept the
// backward loop's iterations from overlapping (about 15% of its time on two cores).
absl::Status SumListsInPlace(Graph* bg, FunctionGradient* fg, const std::vector<Node*>* rets) {
  std::vector<Node*> sums;
  for (Node* n : bg->op_nodes()) {
    if (n->type_string() == "AddN" && n->num_inputs() == 2 && n->output_type(0) == DT_VARIANT &&
        fg->IsGradient(n->name())) {
      sums.push_back(n);
    }
  }
  for (Node* n : sums) {
    const Edge* in[2] = {nullptr, nullptr};
    if (!n->input_edge(0, &in[0]).ok() || !n->input_edge(1, &in[1]).ok()) continue;
    for (int k = 0; k < 2; ++k) {
      const Node* set = Behind(in[k]);
      if (set->type_string() != "TensorListSetItem") continue;
      const Edge* list_in = nullptr;
      const Edge* index_in = nullptr;
      const Edge* item_in = nullptr;
      if (!set->input_edge(0, &list_in).ok() || !set->input_edge(1, &index_in).ok() ||
          !set->input_edge(2, &item_in).ok() ||
          Behind(list_in)->type_string() != "TensorListReserve") {
        continue;
      }
      DataType element = DT_INVALID;
      TF_RETURN_IF_ERROR(GetNodeAttr(set->attrs(), "element_dtype", &element));
      const Edge* other = in[1 - k];
      const std::string base = bg->NewName(fg->prefix + "/list_sum");
      int fresh = -1;  // the loop variable whose gradient L is, when the loop writes it once
      if (rets != nullptr && IsLoopCounter(index_in->src(), index_in->src_output(), *rets)) {
        const Node* l = Behind(other);
        for (size_t m = 0; m < fg->d_rets.size(); ++m) {
          if (fg->d_rets[m] == l->name() && OnlyFeeds(l, n) && PassesOn(n, fg->d_args[m])) {
            fresh = m;
          }
        }
      }
      // The item written at i: x where the loop writes each element once, else L[i] (zeros of
      // x's shape if uninitialised) + x, written back into L.
      NodeBuilder::NodeOut item(item_in->src(), item_in->src_output());
      if (fresh < 0) {
        Node* shape = nullptr;
        Node* old = nullptr;
        Node* sum = nullptr;
        TF_RETURN_IF_ERROR(NodeBuilder(base + "/shape", "Shape")
                               .Input(item)
                               .Attr("out_type", DT_INT32)
                               .Finalize(bg, &shape));
        TF_RETURN_IF_ERROR(NodeBuilder(base + "/old", "TensorListGetItem")
                               .Input(other->src(), other->src_output())
                               .Input(index_in->src(), index_in->src_output())
                               .Input(shape, 0)
                               .Attr("element_dtype", element)
                               .Finalize(bg, &old));
        TF_RETURN_IF_ERROR(
            NodeBuilder(base + "/add", "AddV2").Input(old, 0).Input(item).Finalize(bg, &sum));
        item = NodeBuilder::NodeOut(sum, 0);
      }
      Node* out = nullptr;
      TF_RETURN_IF_ERROR(NodeBuilder(base, "TensorListSetItem")
                             .Input(other->src(), other->src_output())
                             .Input(index_in->src(), index_in->src_output())
                             .Input(item)
                             .Attr("element_dtype", element)
                             .Finalize(bg, &out));
      std::vector<std::pair<Node*, int>> consumers;
      for (const Edge* e : n->out_edges()) {
        if (!e->IsControlEdge()) consumers.push_back({e->dst(), e->dst_input()});
      }
      for (const auto& [dst, input] : consumers) {
        TF_RETURN_IF_ERROR(bg->UpdateEdge(out, 0, dst, input));
      }
      if (fresh >= 0) fg->fresh_lists.push_back({fresh, element});
      break;
    }
  }
  return absl::OkStatus();
}

// A TensorListSetItem / PushBack / PopBack updates its list in place only when it holds the
// list's only reference: where a read of the same list (GetItem, Length, ElementShape) may
// still be pending, it copies all T elements, and a loop of T steps takes T^2. The reads go
// first (control edges), unless that would make a cycle.
absl::Status ReadListsBeforeUpdates(Graph* bg, const FunctionGradient& fg) {
  static const auto* updates = new std::set<std::string>{"TensorListSetItem",
                                                         "TensorListPushBack", "TensorListPopBack"};
  static const auto* reads = new std::set<std::string>{"TensorListGetItem", "TensorListLength",
                                                       "TensorListElementShape"};
  std::vector<std::pair<Node*, Node*>> edges;  // (read, update)
  for (Node* u : bg->op_nodes()) {
    if (!updates->count(u->type_string()) || !fg.IsGradient(u->name())) continue;
    const Edge* list = nullptr;
    if (!u->input_edge(0, &list).ok()) continue;
    // Everything downstream of the update: a read there would make a cycle.
    std::set<const Node*> after;
    std::vector<const Node*> stack = {u};
    while (!stack.empty()) {
      const Node* n = stack.back();
      stack.pop_back();
      if (!after.insert(n).second) continue;
      for (const Edge* e : n->out_edges()) stack.push_back(e->dst());
    }
    for (const Edge* e : list->src()->out_edges()) {
      Node* r = e->dst();
      if (e->IsControlEdge() || e->src_output() != list->src_output() || r == u ||
          !reads->count(r->type_string()) || after.count(r)) {
        continue;
      }
      edges.push_back({r, u});
    }
  }
  for (const auto& [r, u] : edges) bg->AddControlEdge(r, u);
  return absl::OkStatus();
}

// A gradient node that computes what a forward node computes (an FDH gradient recomputes its
// op's output: Sigmoid's, Tanh's) reads that forward node instead, which the gradient keeps
// anyway, rather than keeping the op's inputs to recompute it every iteration.
absl::Status ReuseForwardNodes(Graph* bg, FunctionGradient* fg) {
  auto key = [fg](const Node* n) -> std::optional<std::string> {
    if (n->op_def().is_stateful() || n->IsArg() || n->IsRetval()) return std::nullopt;
    std::string k = n->type_string();
    std::vector<std::string> inputs(n->num_inputs());
    for (const Edge* e : n->in_edges()) {
      if (e->IsControlEdge()) return std::nullopt;
      const Edge* in = e;
      while (in->src()->type_string() == "Identity" && fg->IsGradient(in->src()->name()) &&
             in->src()->input_edge(0, &in).ok()) {
      }
      if (fg->IsGradient(in->src()->name())) return std::nullopt;  // reads the gradient
      inputs[e->dst_input()] = TensorName(in->src()->name(), in->src_output());
    }
    for (const std::string& in : inputs) absl::StrAppend(&k, "|", in);
    std::map<std::string, std::string> attrs;
    for (const auto& [name, value] : n->attrs()) {
      if (!absl::StartsWith(name, "_")) attrs[name] = SummarizeAttrValue(value);
    }
    for (const auto& [name, value] : attrs) absl::StrAppend(&k, "|", name, "=", value);
    return k;
  };
  std::map<std::string, Node*> forward;
  std::vector<std::pair<Node*, std::string>> candidates;
  for (Node* n : bg->op_nodes()) {
    if (n->num_inputs() == 0) continue;
    auto k = key(n);
    if (!k.has_value()) continue;
    if (fg->IsGradient(n->name())) {
      candidates.push_back({n, *k});
    } else {
      forward.emplace(*k, n);
    }
  }
  for (const auto& [n, k] : candidates) {
    auto it = forward.find(k);
    if (it == forward.end()) continue;
    std::vector<std::tuple<int, Node*, int>> consumers;
    for (const Edge* e : n->out_edges()) {
      if (!e->IsControlEdge()) consumers.push_back({e->src_output(), e->dst(), e->dst_input()});
    }
    bool control_out = false;
    for (const Edge* e : n->out_edges()) control_out |= e->IsControlEdge();
    if (control_out) continue;
    for (const auto& [out, dst, input] : consumers) {
      TF_RETURN_IF_ERROR(bg->UpdateEdge(it->second, out, dst, input));
    }
    bg->RemoveNode(n);
  }
  return absl::OkStatus();
}

}  // namespace


// The forward tensors the live gradient nodes read (out->needed): args, constants, or tensors
// the forward saves. `where` names the function in errors.
absl::Status CollectNeeded(const Graph& bg, const std::string& where, FunctionGradient* out) {
  std::set<std::string> seen;
  for (const Node* n : bg.op_nodes()) {
    if (!out->IsGradient(n->name()) || out->dead.count(n->name())) continue;
    for (const Edge* e : n->in_edges()) {
      if (e->IsControlEdge() || out->IsGradient(e->src()->name())) continue;
      const std::string t = TensorName(e->src()->name(), e->src_output());
      if (!seen.insert(t).second) continue;
      Needed need{Needed::kSaved, t, e->src()->output_type(e->src_output())};
      need.arg = SourceArg(e->src(), e->src_output());
      if (need.arg >= 0) {
        need.kind = Needed::kArg;
      } else if (e->src()->IsConstant() && e->src()->num_inputs() == 0) {
        need.kind = Needed::kConst;
      } else if (need.dtype == DT_RESOURCE) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": the gradient of '", n->name(), "' reads the resource '",
            t, "', which is neither an input nor a constant of the function"));
      }
      out->needed.push_back(need);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<FunctionGradient> DifferentiateFunction(
    Graph* g, const NameAttrList& f, const std::string& what,
    const NestedControlFlowPass& prepare_nested, const std::vector<PartialTensorShape>& arg_shapes,
    bool loop_body, const std::vector<bool>& wanted_args) {
  auto body = Instantiate(g->flib_def(), f);
  if (!body.ok()) return body.status();
  // The body in a graph of its own that holds g's functions (the instantiated body's graph
  // sees them only as ops), for the loops and calls inside it.
  GraphDef body_def;
  (*body)->graph->ToGraphDef(&body_def);
  body_def.clear_library();
  auto owned = std::make_unique<Graph>(g->flib_def());
  Graph* bg = owned.get();
  GraphConstructorOptions opts;
  opts.allow_internal_ops = true;
  TF_RETURN_IF_ERROR(ConvertGraphDefToGraph(opts, body_def, bg));
  std::map<std::string, Node*> by_name;
  for (Node* n : bg->op_nodes()) by_name[n->name()] = n;
  std::vector<Node*> arg_nodes, ret_nodes;
  for (const Node* n : (*body)->arg_nodes) arg_nodes.push_back(by_name.at(n->name()));
  for (const Node* n : (*body)->ret_nodes) ret_nodes.push_back(by_name.at(n->name()));
  FunctionGradient out;
  auto inlined = InlineFunctionCalls(bg);
  if (!inlined.ok()) return inlined.status();
  // The forward rewrite TensorFlow's kernels need (workarounds.h: a grouped Conv2D), in the body
  // as the pipeline does it in the graph (pipeline/gradient_pipeline.h, step 3).
  auto workarounds = WorkAroundGradientBugs(bg, arg_shapes);
  if (!workarounds.ok()) return workarounds.status();
  out.prefix = UnusedPrefix(*bg, "tf_ext_grad");
  out.num_args = (*body)->arg_types.size();
  out.num_rets = (*body)->ret_types.size();
  for (const Node* n : (*body)->control_ret_nodes) out.control_rets.insert(n->name());
  std::vector<GraphTensor> ys, dys, xs;
  for (int k = 0; k < out.num_rets; ++k) {
    Node* ret = ret_nodes[k];
    const Edge* e = nullptr;
    TF_RETURN_IF_ERROR(ret->input_edge(0, &e));
    out.ret_source.push_back(SourceArg(e->src(), e->src_output()));
    if (!Flows((*body)->ret_types[k])) continue;
    // Read through an Identity: a ret that is a nested loop's output stays valid when the
    // loop is rewritten.
    Node* y = nullptr;
    TF_RETURN_IF_ERROR(NodeBuilder(bg->NewName(out.prefix + "_y/ret"), "Identity")
                           .Input(e->src(), e->src_output())
                           .Finalize(bg, &y));
    TF_RETURN_IF_ERROR(bg->UpdateEdge(y, 0, ret, 0));
    Node* dy = nullptr;
    TF_RETURN_IF_ERROR(NodeBuilder(absl::StrCat(out.prefix, "/d_ret_", k), "_Arg")
                           .Attr("T", (*body)->ret_types[k])
                           .Attr("index", 0)  // set when the gradient function is built
                           .Finalize(bg, &dy));
    ys.push_back({y, 0});
    dys.push_back({dy, 0});
    out.diff_rets.push_back(k);
    out.d_rets.push_back(dy->name());
  }
  for (int k = 0; k < out.num_args; ++k) {
    if (!Flows((*body)->arg_types[k])) continue;
    xs.push_back({arg_nodes[k], 0});
    out.diff_args.push_back(k);
  }
  // Nested control flow first, so that the forward nodes are known before the gradient's.
  auto nested = prepare_nested(bg, ys, xs, out.prefix + "_cf");
  if (!nested.ok()) {
    const absl::Status& s = nested.status();
    return absl::Status(s.code(), absl::StrCat("in ", what, " '", f.name(), "': ", s.message()));
  }
  for (const Node* n : bg->nodes()) out.forward.insert(n->name());
  for (const std::string& d : out.d_rets) out.forward.erase(d);
  BackpropOptions options;
  options.name_prefix = out.prefix;
  options.inline_gradients = true;
  std::vector<GraphTensor> dxs;
  BackpropStats stats;
  absl::Status s = AddBackwardNodes(bg, ys, dys, xs, &dxs, options, &stats);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("in ", what, " '", f.name(), "': ", s.message()));
  }
  out.stats.loops = stats.loops;
  out.stats.conditionals = stats.conditionals;
  out.stats.accumulators = stats.accumulators;
  for (const GraphTensor& dx : dxs) out.d_args.push_back(TensorName(dx.node->name(), dx.index));
  TF_RETURN_IF_ERROR(ShapesFromForward(bg, &out, arg_shapes));
  TF_RETURN_IF_ERROR(ReuseForwardNodes(bg, &out));
  {
    // The args' shapes, and each incoming gradient's (its ret's, when the ret is an arg).
    std::map<std::string, PartialTensorShape> shapes;
    for (size_t k = 0; k < arg_shapes.size() && k < arg_nodes.size(); ++k) {
      shapes[arg_nodes[k]->name()] = arg_shapes[k];
    }
    for (size_t m = 0; m < out.diff_rets.size(); ++m) {
      const int k = out.diff_rets[m];
      if (k < static_cast<int>(arg_shapes.size()) && out.num_args == out.num_rets) {
        shapes[out.d_rets[m]] = arg_shapes[k];  // a loop: ret k has arg k's shape invariant
      }
    }
    TF_RETURN_IF_ERROR(RemoveStaticBroadcasts(bg, out, shapes));
  }
  TF_RETURN_IF_ERROR(SumListsInPlace(bg, &out, loop_body ? &ret_nodes : nullptr));
  TF_RETURN_IF_ERROR(ReadListsBeforeUpdates(bg, out));
  // The gradient nodes the d(args) depend on. The rest is dead: an inlined gradient takes every
  // input of its op through an Identity, read or not, and such a node must not make a forward
  // tensor (a TensorList the loop writes) saved every iteration.
  // A loop-invariant arg whose gradient nobody wants: d(arg) = d(ret), its incoming gradient
  // passed through (DifferentiateFunction's wanted_args).
  std::vector<bool> pass_through(out.diff_args.size(), false);
  if (loop_body && out.diff_args == out.diff_rets) {
    for (size_t m = 0; m < out.diff_args.size(); ++m) {
      const int k = out.diff_args[m];
      if (k < static_cast<int>(wanted_args.size()) && !wanted_args[k] &&
          out.ret_source[k] == k) {
        pass_through[m] = true;
        out.d_args[m] = TensorName(out.d_rets[m], 0);
      }
    }
  }
  std::set<const Node*> live;
  std::vector<const Node*> stack;
  for (size_t m = 0; m < dxs.size(); ++m) {
    if (!pass_through[m]) stack.push_back(dxs[m].node);
  }
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (!out.IsGradient(n->name()) || !live.insert(n).second) continue;
    for (const Edge* e : n->in_edges()) stack.push_back(e->src());
  }
  for (const Node* n : bg->op_nodes()) {
    if (out.IsGradient(n->name()) && !live.count(n)) out.dead.insert(n->name());
  }
  TF_RETURN_IF_ERROR(CollectNeeded(*bg, absl::StrCat("in ", what, " '", f.name(), "'"), &out));
  TF_RETURN_IF_ERROR(MergeLibrary(bg->flib_def(), g));
  bg->ToGraphDef(&out.graph);
  out.graph.clear_library();
  return out;
}

// The body's forward nodes (not the gradient's), for a rewritten forward function.
GraphDef ForwardNodes(const FunctionGradient& fg) {
  GraphDef def;
  *def.mutable_versions() = fg.graph.versions();
  for (const NodeDef& n : fg.graph.node()) {
    if (!fg.IsGradient(n.name())) *def.add_node() = n;
  }
  return def;
}

// The gradient's nodes, reading each forward tensor from `replace(needed)` (constants are
// copied); control edges from forward nodes are dropped.
GraphDef GradientNodes(const FunctionGradient& fg,
                       const std::map<std::string, std::string>& replacement) {
  GraphDef def;
  *def.mutable_versions() = fg.graph.versions();
  std::set<std::string> consts;
  for (const Needed& need : fg.needed) {
    if (need.kind == Needed::kConst) consts.insert(std::string(ParseTensorName(need.tensor).first));
  }
  for (const NodeDef& n : fg.graph.node()) {
    if (consts.count(n.name())) {
      NodeDef c = n;
      c.clear_input();
      *def.add_node() = c;
      continue;
    }
    if (!fg.IsGradient(n.name())) continue;
    // Dead gradient nodes are dropped, but the incoming gradients stay the function's inputs.
    if (fg.dead.count(n.name()) && n.op() != "_Arg") continue;
    NodeDef copy = n;
    copy.clear_input();
    for (const std::string& in : n.input()) {
      const TensorId id = ParseTensorName(in);
      const std::string src(id.first);
      if (fg.IsGradient(src)) {
        copy.add_input(in);
        continue;
      }
      if (id.second < 0) continue;  // a control edge from a forward node
      const std::string t = TensorName(src, id.second);
      auto it = replacement.find(t);
      copy.add_input(it != replacement.end() ? it->second : t);
    }
    *def.add_node() = std::move(copy);
  }
  return def;
}


}  // namespace tensorflow::tf_ext
