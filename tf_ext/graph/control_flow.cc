#include "tf_ext/graph/control_flow.h"

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
#include "tf_ext/graph/backprop.h"
#include "tf_ext/graph/inline_calls.h"
#include "tf_ext/graph/shape_inference.h"
#include "tf_ext/graph/workarounds.h"

namespace tensorflow::tf_ext {
namespace {

// The attrs of a rewritten node that its gradient reads (tf_ext/grads/control_flow_attrs.h).
using control_flow::kCaptures;
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

// Loop variables and branch inputs whose gradient is computed (a resource handle's is not).
bool Flows(DataType t) { return t != DT_RESOURCE && IsDifferentiableType(t); }

std::string TensorName(const std::string& node, int index) {
  return absl::StrCat(node, ":", index);
}

std::string UnusedPrefix(const Graph& g, const std::string& base) {
  for (int i = 1;; ++i) {
    const std::string prefix = i == 1 ? base : absl::StrCat(base, "_", i);
    bool used = false;
    for (const Node* n : g.nodes()) {
      if (absl::StartsWith(n->name(), prefix)) {
        used = true;
        break;
      }
    }
    if (!used) return prefix;
  }
}

NodeDef MakeNode(const std::string& name, const std::string& op,
                 const std::vector<std::string>& inputs) {
  NodeDef n;
  n.set_name(name);
  n.set_op(op);
  for (const std::string& in : inputs) n.add_input(in);
  return n;
}

NodeDef ArgNode(const std::string& name, DataType type, int index) {
  NodeDef n = MakeNode(name, "_Arg", {});
  AddNodeAttr("T", type, &n);
  AddNodeAttr("index", index, &n);
  return n;
}

NodeDef RetNode(const std::string& name, const std::string& input, DataType type, int index) {
  NodeDef n = MakeNode(name, "_Retval", {input});
  AddNodeAttr("T", type, &n);
  AddNodeAttr("index", index, &n);
  return n;
}

NodeDef ScalarConst(const std::string& name, int32_t value) {
  NodeDef n = MakeNode(name, "Const", {});
  Tensor t(DT_INT32, TensorShape({}));
  t.scalar<int32_t>()() = value;
  AddNodeAttr("dtype", DT_INT32, &n);
  AddNodeAttr("value", t, &n);
  return n;
}

TensorShapeProto UnknownShape() {
  TensorShapeProto s;
  s.set_unknown_rank(true);
  return s;
}

// A function of the graph's library, instantiated with its attrs.
absl::StatusOr<std::unique_ptr<FunctionBody>> Instantiate(const FunctionLibraryDefinition& flib,
                                                          const NameAttrList& f) {
  const FunctionDef* fdef = flib.Find(f.name());
  if (fdef == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("no function '", f.name(), "' in the library"));
  }
  std::unique_ptr<FunctionBody> body;
  TF_RETURN_IF_ERROR(FunctionDefToBodyHelper(*fdef, AttrSlice(&f.attr()), &flib, &body));
  return body;
}

// Adds the function `def` (a graph of _Arg, _Retval and body nodes) to g's library under a new
// name built from `base`; nodes named in `control_rets` stay control outputs (a stateful op
// no output reads).
absl::StatusOr<std::string> AddFunction(Graph* g, const GraphDef& def, const std::string& base,
                                        const std::set<std::string>& control_rets = {}) {
  static std::atomic<int64_t> next{0};
  std::string name;
  do {
    name = absl::StrCat(base, "_", next++);
  } while (g->flib_def().Find(name) != nullptr);
  Graph fg(g->flib_def());
  GraphConstructorOptions opts;
  opts.allow_internal_ops = true;
  TF_RETURN_IF_ERROR(ConvertGraphDefToGraph(opts, def, &fg));
  FunctionDef fdef;
  TF_RETURN_IF_ERROR(GraphToFunctionDef(
      fg, name,
      [&control_rets](const Node* n) -> std::optional<std::string> {
        if (control_rets.count(n->name())) return n->name();
        return std::nullopt;
      },
      &fdef));
  FunctionDefLibrary lib;
  *lib.add_function() = std::move(fdef);
  TF_RETURN_IF_ERROR(g->AddFunctionLibrary(lib));
  return name;
}

// Functions `from` has and g lacks.
absl::Status MergeLibrary(const FunctionLibraryDefinition& from, Graph* g) {
  FunctionDefLibrary lib;
  const FunctionDefLibrary all = from.ToProto();
  for (const FunctionDef& f : all.function()) {
    if (g->flib_def().Find(f.signature().name()) == nullptr) *lib.add_function() = f;
  }
  if (lib.function_size() == 0) return absl::OkStatus();
  return g->AddFunctionLibrary(lib);
}

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

  bool IsGradient(const std::string& node) const { return forward.count(node) == 0; }
};

// The arg `n` (output `index`) passes on, through Identity nodes, or -1.
int SourceArg(const Node* n, int index) {
  while (n->type_string() == "Identity" && index == 0) {
    const Edge* e = nullptr;
    if (!n->input_edge(0, &e).ok()) return -1;
    n = e->src();
    index = e->src_output();
  }
  if (!n->IsArg()) return -1;
  int arg = -1;
  return GetNodeAttr(n->attrs(), "index", &arg).ok() ? arg : -1;
}

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
    shape_inference::InferenceContext* c = refiner.GetContext(in->src());
    if (c != nullptr && c->FullyDefined(c->output(in->src_output()))) {
      const shape_inference::ShapeHandle shape = c->output(in->src_output());
      const int rank = c->Rank(shape);
      Tensor value;
      if (n->type_string() == "Shape") {
        value = Tensor(out_type, TensorShape({rank}));
        for (int d = 0; d < rank; ++d) {
          const int64_t dim = c->Value(c->Dim(shape, d));
          if (out_type == DT_INT32) value.vec<int32_t>()(d) = dim;
          else value.vec<int64_t>()(d) = dim;
        }
      } else {
        int64_t size = 1;
        for (int d = 0; d < rank; ++d) size *= c->Value(c->Dim(shape, d));
        value = Tensor(out_type, TensorShape({}));
        if (out_type == DT_INT32) value.scalar<int32_t>()() = size;
        else value.scalar<int64_t>()() = size;
      }
      TF_RETURN_IF_ERROR(NodeBuilder(bg->NewName(fg->prefix + "/static_shape"), "Const")
                             .Attr("dtype", out_type)
                             .Attr("value", value)
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

// AddN(L, SetItem(Reserve(...), i, x)) of two TensorLists: the gradient of GetItem (a list of
// uninitialised elements but x at i) summed into the gradient of a list read every iteration
// (an RNN's input sequence). The sum walks both lists, so a loop of T steps would take T^2;
// SetItem(L, i, GetItem(L, i) + x) is the same list in O(1) (GetItem reads an uninitialised
// element as zeros, and SetItem updates L in place).
absl::Status SumListsInPlace(Graph* bg, const FunctionGradient& fg) {
  std::vector<Node*> sums;
  for (Node* n : bg->op_nodes()) {
    if (n->type_string() == "AddN" && n->num_inputs() == 2 && n->output_type(0) == DT_VARIANT &&
        fg.IsGradient(n->name())) {
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
      const std::string base = bg->NewName(fg.prefix + "/list_sum");
      Node* shape = nullptr;
      Node* old = nullptr;
      Node* sum = nullptr;
      Node* out = nullptr;
      // L[i] (zeros of x's shape if uninitialised) + x, written back into L.
      TF_RETURN_IF_ERROR(NodeBuilder(base + "/shape", "Shape")
                             .Input(item_in->src(), item_in->src_output())
                             .Attr("out_type", DT_INT32)
                             .Finalize(bg, &shape));
      TF_RETURN_IF_ERROR(NodeBuilder(base + "/old", "TensorListGetItem")
                             .Input(other->src(), other->src_output())
                             .Input(index_in->src(), index_in->src_output())
                             .Input(shape, 0)
                             .Attr("element_dtype", element)
                             .Finalize(bg, &old));
      TF_RETURN_IF_ERROR(NodeBuilder(base + "/add", "AddV2")
                             .Input(old, 0)
                             .Input(item_in->src(), item_in->src_output())
                             .Finalize(bg, &sum));
      TF_RETURN_IF_ERROR(NodeBuilder(base, "TensorListSetItem")
                             .Input(other->src(), other->src_output())
                             .Input(index_in->src(), index_in->src_output())
                             .Input(sum, 0)
                             .Attr("element_dtype", element)
                             .Finalize(bg, &out));
      std::vector<std::pair<Node*, int>> consumers;
      for (const Edge* e : n->out_edges()) {
        if (!e->IsControlEdge()) consumers.push_back({e->dst(), e->dst_input()});
      }
      for (const auto& [dst, input] : consumers) {
        TF_RETURN_IF_ERROR(bg->UpdateEdge(out, 0, dst, input));
      }
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

absl::StatusOr<FunctionGradient> DifferentiateFunction(
    Graph* g, const NameAttrList& f, const std::string& what,
    const std::vector<PartialTensorShape>& arg_shapes = {}) {
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
  // TensorFlow's gradient bugs, worked around in the body as in the graph (a LayerNorm's
  // negative reduction axis, which Mean's gradient cannot take).
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
  auto nested = PrepareControlFlowForGradients(bg, ys, xs, out.prefix + "_cf");
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
  absl::Status s = AddGradients(bg, ys, dys, xs, &dxs, options, &stats);
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
  TF_RETURN_IF_ERROR(SumListsInPlace(bg, out));
  TF_RETURN_IF_ERROR(ReadListsBeforeUpdates(bg, out));
  // The gradient nodes the d(args) depend on. The rest is dead: an inlined gradient takes every
  // input of its op through an Identity, read or not, and such a node must not make a forward
  // tensor (a TensorList the loop writes) saved every iteration.
  std::set<const Node*> live;
  std::vector<const Node*> stack;
  for (const GraphTensor& dx : dxs) stack.push_back(dx.node);
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (!out.IsGradient(n->name()) || !live.insert(n).second) continue;
    for (const Edge* e : n->in_edges()) stack.push_back(e->src());
  }
  for (const Node* n : bg->op_nodes()) {
    if (out.IsGradient(n->name()) && !live.count(n)) out.dead.insert(n->name());
  }
  // The forward tensors the gradient reads.
  std::set<std::string> seen;
  for (const Node* n : bg->op_nodes()) {
    if (!out.IsGradient(n->name()) || out.dead.count(n->name())) continue;
    for (const Edge* e : n->in_edges()) {
      if (e->IsControlEdge() || out.IsGradient(e->src()->name())) continue;
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
            "in ", what, " '", f.name(), "': the gradient of '", n->name(), "' reads the resource '",
            t, "', which is neither an input nor a constant of the function"));
      }
      out.needed.push_back(need);
    }
  }
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

// Identity nodes with one data input and no control edges, bypassed: an inlined gradient
// reads each input and writes each output through one, and in a loop body every node costs
// each iteration.
void BypassIdentities(GraphDef* def) {
  std::map<std::string, std::string> source;  // Identity node -> its input tensor
  std::set<std::string> controlling;          // nodes other nodes depend on by control
  for (const NodeDef& n : def->node()) {
    for (const std::string& in : n.input()) {
      if (absl::StartsWith(in, "^")) controlling.insert(in.substr(1));
    }
  }
  for (const NodeDef& n : def->node()) {
    if (n.op() == "Identity" && n.input_size() == 1 && !absl::StartsWith(n.input(0), "^") &&
        !controlling.count(n.name())) {
      source[n.name()] = n.input(0);
    }
  }
  auto resolve = [&source](std::string t) {
    for (int hops = 0; hops < 1000; ++hops) {
      const TensorId id = ParseTensorName(t);
      if (id.second != 0) return t;
      auto it = source.find(std::string(id.first));
      if (it == source.end()) return t;
      t = it->second;
    }
    return t;
  };
  GraphDef out;
  *out.mutable_versions() = def->versions();
  for (const NodeDef& n : def->node()) {
    if (source.count(n.name())) continue;
    NodeDef copy = n;
    for (std::string& in : *copy.mutable_input()) {
      if (!absl::StartsWith(in, "^")) in = resolve(in);
    }
    *out.add_node() = std::move(copy);
  }
  def->Swap(&out);
}

void SetIndex(GraphDef* def, const std::string& node, int index) {
  for (NodeDef& n : *def->mutable_node()) {
    if (n.name() == node) (*n.mutable_attr())["index"].set_i(index);
  }
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

absl::Status RewriteWhile(Graph* g, Node* n, const std::string& prefix, ControlFlowStats* stats) {
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
  auto grad = DifferentiateFunction(g, body, what, shapes);
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
  // Lowered to v1 frames when the graph runs (LowerFunctionalOpsPass), as Python's while_v2
  // marks the loops it builds: the executor then overlaps iterations (parallel_iterations) and
  // calls no function per iteration. A frozen loop often says false.
  SetAttrValue(true, &(*def.mutable_attr())["_lower_using_switch_merge"]);
  AddNodeAttr(kPass, prefix, &def);
  AddNodeAttr(kFunctions, std::vector<std::string>{*bwd_name, *bcond_name}, &def);
  AddNodeAttr(kInputs, fg.diff_args, &def);
  AddNodeAttr(kCaptures, captures, &def);
  AddNodeAttr(kNumOutputs, num_vars, &def);
  AddNodeAttr(kNumSaved, num_saved, &def);
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

namespace {

// The nodes of lowered Case ops (an N-way _SwitchN and the N-input Merges its branches meet in,
// which TensorFlow's functionalization does not convert): from each _SwitchN forward to those
// Merges, not past a loop's Exit or NextIteration. They stay v1 ops, differentiated one by one
// (AddV1ConditionalGradient).
std::set<std::string> LoweredCaseNodes(const GraphDef& graph) {
  std::map<std::string, std::vector<const NodeDef*>> consumers;
  std::map<std::string, const NodeDef*> by_name;
  for (const NodeDef& n : graph.node()) {
    by_name[n.name()] = &n;
    for (const std::string& in : n.input()) {
      consumers[std::string(ParseTensorName(in).first)].push_back(&n);
    }
  }
  std::set<std::string> nodes;
  std::vector<const NodeDef*> stack;
  for (const NodeDef& n : graph.node()) {
    if (n.op() == "_SwitchN") stack.push_back(&n);
  }
  while (!stack.empty()) {
    const NodeDef* n = stack.back();
    stack.pop_back();
    if (!nodes.insert(n->name()).second) continue;
    const bool case_merge = n->op() == "Merge" && n->input_size() > 2;
    if (case_merge || n->op() == "Exit" || n->op() == "NextIteration") continue;
    for (const NodeDef* c : consumers[n->name()]) stack.push_back(c);
  }
  return nodes;
}

}  // namespace

absl::StatusOr<bool> FunctionalizeV1ControlFlow(GraphDef* graph) {
  static const auto* v1_ops = new std::set<std::string>{
      "Enter", "RefEnter", "Exit", "RefExit", "Switch", "RefSwitch", "Merge", "RefMerge",
      "NextIteration", "RefNextIteration", "LoopCond"};
  std::map<std::string, std::string> v1_nodes;  // op -> first node
  for (const NodeDef& n : graph->node()) {
    if (v1_ops->count(n.op())) v1_nodes.emplace(n.op(), n.name());
  }
  for (const FunctionDef& f : graph->library().function()) {
    for (const NodeDef& n : f.node_def()) {
      if (v1_ops->count(n.op())) v1_nodes.emplace(n.op(), f.signature().name() + "/" + n.name());
    }
  }
  if (v1_nodes.empty()) return false;
  FunctionLibraryDefinition library(OpRegistry::Global(), graph->library());
  const std::set<std::string> lowered_cases = LoweredCaseNodes(*graph);
  absl::Status s = FunctionalizeControlFlowForGraphDef(
      graph, &library,
      [&lowered_cases](const Node* n) { return lowered_cases.count(n->name()) == 0; },
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
    const std::string& name_prefix) {
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
    absl::Status s = IsWhile(n->type_string()) ? RewriteWhile(g, n, name_prefix, &stats)
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
    add({n, num_outputs});  // the iteration count
    for (int k : inputs) {
      auto d = dy(k);
      if (!d.ok()) return d.status();
      add(*d);
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
    builder.Attr("_lower_using_switch_merge", true);  // as the forward loop (RewriteWhile)
    TF_RETURN_IF_ERROR(builder.Finalize(g, &grad));
    for (size_t m = 0; m < inputs.size(); ++m) result[inputs[m]] = {grad, 1 + static_cast<int>(m)};
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
