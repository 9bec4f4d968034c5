// Function gradients of While / StatelessWhile / If / StatelessIf / Case / StatelessCase, for
// SymbolicGradient (a gradient of a function that contains a loop or conditional, TensorFlow's
// graph-level builder, and through the registry unification TF_AddGradients).
//
// A gradient creator sees only its node's attrs, so these work on nodes tf_ext's control-flow
// pass has rewritten (tf_ext/graph/engine/control_flow.h, docs/control_flow.md): the pass records the
// backward functions it generated in the node's "_tf_ext_grad_*" attrs
// (tf_ext/grads/control_flow_attrs.h), and PrepareFunctionLibraryForGradients rewrites the
// loops and conditionals inside a graph's functions. On a node the pass has not rewritten the
// gradient is an InvalidArgument saying so; a graph optimization pass (below) gives the same
// error for a SymbolicGradient of a function holding such a loop, where TensorFlow's runtime
// would otherwise return zeros without calling any creator.
//
// SymbolicGradient passes no forward outputs, so the gradient function runs the rewritten
// forward node once more (which saves what the gradient reads), then the backward loop or
// conditional on its saved values:
//   While:  fwd = While'(x); back = While(count, dy, accumulators, invariants) over the
//           backward body; d(loop variable k) = back[1 + m] for the differentiated ones;
//   If/Case: fwd = If'(pred, x); back = If(pred, dy, saved, x) over the branches' gradients;
//           d(x_i) = back[m] for the differentiated inputs.
// Everything else (counters, accumulators, predicates, integers) gets zeros. Like every
// SymbolicGradient this recomputes the forward node: a loop of stateful ops draws again (tf_ext's
// own backward builder, tf_ext_grad and TfExtAddGradients reuse the forward node instead).
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/common_runtime/optimization_registry.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tf_ext/grads/control_flow_attrs.h"
#include "tf_ext/grads/tf/tf_gradient.h"

namespace tensorflow::tf_ext {
namespace {

using FDH = FunctionDefHelper;
namespace cf = control_flow;

NameAttrList Func(const std::string& name) {
  NameAttrList f;
  f.set_name(name);
  return f;
}

std::vector<TensorShapeProto> UnknownShapes(size_t n) {
  TensorShapeProto unknown;
  unknown.set_unknown_rank(true);
  return std::vector<TensorShapeProto>(n, unknown);
}

absl::Status NotPrepared(const std::string& op) {
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": no gradient for a node tf_ext's control-flow pass has not rewritten. Differentiate "
      "with tf_ext (tf_ext_grad, tf::tf_ext::AddGradients, TfExtAddGradients), or run "
      "PrepareFunctionLibraryForGradients (tf_ext/graph/engine/control_flow.h) on the graph before a "
      "SymbolicGradient of a function holding it"));
}

// "<name>_<i>: <type>" per type.
std::vector<std::string> Args(const std::string& name, const DataTypeVector& types) {
  std::vector<std::string> args;
  for (size_t i = 0; i < types.size(); ++i) {
    args.push_back(absl::StrCat(name, "_", i, ": ", DataTypeString(types[i])));
  }
  return args;
}

// The gradient of input i where none flows: zeros of its type (a resource's value: float).
void Zeros(const std::string& x, DataType type, const std::string& out,
           std::vector<FDH::Node>* nodes) {
  if (type == DT_RESOURCE) {
    nodes->push_back(FDH::Const<float>(out, 0.0f));
  } else {
    nodes->push_back({{out}, "ZerosLike", {x}, {{"T", type}}});
  }
}

absl::Status WhileGrad(const std::string& op, const AttrSlice& attrs, FunctionDef* g) {
  std::vector<std::string> functions;
  std::vector<int> inputs, captures;
  int num_outputs = 0, num_saved = 0;
  if (!GetNodeAttr(attrs, cf::kFunctions, &functions).ok()) return NotPrepared(op);
  DataTypeVector types;
  NameAttrList body, cond;
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "T", &types));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "body", &body));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "cond", &cond));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, cf::kInputs, &inputs));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, cf::kCaptures, &captures));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, cf::kNumOutputs, &num_outputs));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, cf::kNumSaved, &num_saved));
  auto fresh = cf::FreshLists(attrs, op, inputs.size());
  if (!fresh.ok()) return fresh.status();
  int parallel = 10;
  (void)GetNodeAttr(attrs, "parallel_iterations", &parallel);
  const int m = types.size();
  if (functions.size() != 2 || m != num_outputs + 1 + num_saved) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": inconsistent _tf_ext_grad attrs"));
  }
  std::vector<std::string> in = Args("x", types);
  for (const std::string& d : Args("dy", types)) in.push_back(d);
  std::vector<std::string> out;
  DataTypeVector out_types;
  for (DataType t : types) out_types.push_back(t == DT_RESOURCE ? DT_FLOAT : t);
  out = Args("dx", out_types);
  std::vector<FDH::Node> nodes;
  // The rewritten forward loop again: it saves what the backward loop reads.
  std::vector<std::string> x;
  for (int k = 0; k < m; ++k) x.push_back(absl::StrCat("x_", k));
  nodes.push_back({{"fwd"},
                   op,
                   x,
                   {{"T", types},
                    {"body", body},
                    {"cond", cond},
                    {"parallel_iterations", parallel},
                    {"output_shapes", UnknownShapes(m)}}});
  // d(the loop) = the loop run backwards over the saved values.
  std::vector<std::string> back_in = {absl::StrCat("fwd:output:", num_outputs)};
  DataTypeVector back_types = {DT_INT32};
  for (int k : inputs) {
    back_in.push_back(absl::StrCat("dy_", k));
    back_types.push_back(types[k]);
  }
  // A list the backward loop writes once per element (control_flow_attrs.h) starts with
  // uninitialised elements, as long as the incoming gradient and with its element shape.
  for (const auto& [j, element] : *fresh) {
    const std::string dy = absl::StrCat("dy_", inputs[j]);
    const std::string list = absl::StrCat("fresh_list_", j);
    nodes.push_back(
        {{list + "_shape"}, "TensorListElementShape", {dy}, {{"shape_type", DT_INT32}}});
    nodes.push_back({{list + "_length"}, "TensorListLength", {dy}});
    nodes.push_back({{list},
                     "TensorListReserve",
                     {list + "_shape:element_shape:0", list + "_length:length:0"},
                     {{"element_dtype", element}, {"shape_type", DT_INT32}}});
    back_in[1 + j] = list + ":handle:0";
  }
  for (int j = 0; j < num_saved; ++j) {
    back_in.push_back(absl::StrCat("fwd:output:", num_outputs + 1 + j));
    back_types.push_back(DT_VARIANT);
  }
  for (int k : captures) {
    back_in.push_back(absl::StrCat("x_", k));
    back_types.push_back(types[k]);
  }
  nodes.push_back({{"back"},
                   "While",
                   back_in,
                   {{"T", back_types},
                    {"body", Func(functions[0])},
                    {"cond", Func(functions[1])},
                    {"parallel_iterations", parallel},
                    {"output_shapes", UnknownShapes(back_types.size())}}});
  std::vector<std::pair<std::string, std::string>> ret;
  for (int k = 0; k < m; ++k) {
    std::string value;
    for (size_t j = 0; j < inputs.size(); ++j) {
      if (inputs[j] != k) continue;
      value = absl::StrCat("back:output:", 1 + j);
      if (fresh->count(j)) {
        // The incoming gradient plus what the loop wrote.
        const std::string sum = absl::StrCat("fresh_list_sum_", j);
        nodes.push_back({{sum}, "AddN", {absl::StrCat("dy_", k), value},
                         {{"N", 2}, {"T", DT_VARIANT}}});
        value = sum + ":sum:0";
      }
    }
    if (value.empty()) {
      Zeros(absl::StrCat("x_", k), types[k], absl::StrCat("zeros_", k), &nodes);
      value = absl::StrCat("zeros_", k, types[k] == DT_RESOURCE ? ":output:0" : ":y:0");
    }
    ret.push_back({absl::StrCat("dx_", k), value});
  }
  *g = FDH::Create(op + "Grad", in, out, {}, nodes, ret);
  return absl::OkStatus();
}

absl::Status ConditionalGrad(const std::string& op, const AttrSlice& attrs, FunctionDef* g) {
  std::vector<std::string> functions;
  std::vector<int> inputs, outputs;
  int num_outputs = 0, num_saved = 0;
  if (!GetNodeAttr(attrs, cf::kFunctions, &functions).ok()) return NotPrepared(op);
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, cf::kInputs, &inputs));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, cf::kOutputs, &outputs));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, cf::kNumOutputs, &num_outputs));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, cf::kNumSaved, &num_saved));
  DataTypeVector tin, tout;
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "Tin", &tin));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "Tout", &tout));
  const bool is_case = op == "Case" || op == "StatelessCase";
  DataType pred_type = DT_INT32;
  if (!is_case) TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "Tcond", &pred_type));
  if (static_cast<int>(tout.size()) != num_outputs + num_saved) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": inconsistent _tf_ext_grad attrs"));
  }
  std::vector<std::string> in = {absl::StrCat("pred: ", DataTypeString(pred_type))};
  for (const std::string& a : Args("x", tin)) in.push_back(a);
  for (const std::string& d : Args("dy", tout)) in.push_back(d);
  DataTypeVector out_types = {pred_type};
  for (DataType t : tin) out_types.push_back(t == DT_RESOURCE ? DT_FLOAT : t);
  std::vector<std::string> out = {absl::StrCat("d_pred: ", DataTypeString(pred_type))};
  for (size_t i = 0; i < tin.size(); ++i) {
    out.push_back(absl::StrCat("dx_", i, ": ", DataTypeString(out_types[1 + i])));
  }
  std::vector<FDH::Node> nodes;
  std::vector<std::string> fwd_in = {"pred"};
  for (size_t i = 0; i < tin.size(); ++i) fwd_in.push_back(absl::StrCat("x_", i));
  FDH::AttrValueWrapper unused;
  std::vector<std::pair<std::string, FDH::AttrValueWrapper>> fwd_attrs = {
      {"Tin", tin}, {"Tout", tout}, {"output_shapes", UnknownShapes(tout.size())}};
  if (is_case) {
    std::vector<NameAttrList> branches;
    TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "branches", &branches));
    fwd_attrs.push_back({"branches", branches});
  } else {
    NameAttrList then_branch, else_branch;
    TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "then_branch", &then_branch));
    TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "else_branch", &else_branch));
    fwd_attrs.push_back({"Tcond", pred_type});
    fwd_attrs.push_back({"then_branch", then_branch});
    fwd_attrs.push_back({"else_branch", else_branch});
  }
  // The rewritten conditional again: its extra outputs are what the branches' gradients read.
  nodes.push_back({{"fwd"}, op, fwd_in, fwd_attrs});
  // d(the conditional) = the same predicate over the branches' gradients.
  std::vector<std::string> back_in = {"pred"};
  DataTypeVector back_tin, back_tout;
  for (int k : outputs) {
    back_in.push_back(absl::StrCat("dy_", k));
    back_tin.push_back(tout[k]);
  }
  for (int s = 0; s < num_saved; ++s) {
    back_in.push_back(absl::StrCat("fwd:output:", num_outputs + s));
    back_tin.push_back(DT_VARIANT);
  }
  for (size_t i = 0; i < tin.size(); ++i) {
    back_in.push_back(absl::StrCat("x_", i));
    back_tin.push_back(tin[i]);
  }
  for (int i : inputs) back_tout.push_back(tin[i]);
  std::vector<std::pair<std::string, FDH::AttrValueWrapper>> back_attrs = {
      {"Tin", back_tin}, {"Tout", back_tout}, {"output_shapes", UnknownShapes(back_tout.size())}};
  if (is_case) {
    std::vector<NameAttrList> fs;
    for (const std::string& f : functions) fs.push_back(Func(f));
    back_attrs.push_back({"branches", fs});
  } else {
    back_attrs.push_back({"Tcond", pred_type});
    back_attrs.push_back({"then_branch", Func(functions[0])});
    back_attrs.push_back({"else_branch", Func(functions[1])});
  }
  nodes.push_back({{"back"}, op, back_in, back_attrs});
  Zeros("pred", pred_type, "zeros_pred", &nodes);
  std::vector<std::pair<std::string, std::string>> ret = {{"d_pred", "zeros_pred:y:0"}};
  for (size_t i = 0; i < tin.size(); ++i) {
    std::string value;
    for (size_t m = 0; m < inputs.size(); ++m) {
      if (inputs[m] == static_cast<int>(i)) value = absl::StrCat("back:output:", m);
    }
    if (value.empty()) {
      Zeros(absl::StrCat("x_", i), tin[i], absl::StrCat("zeros_", i), &nodes);
      value = absl::StrCat("zeros_", i, tin[i] == DT_RESOURCE ? ":output:0" : ":y:0");
    }
    ret.push_back({absl::StrCat("dx_", i), value});
  }
  *g = FDH::Create(op + "Grad", in, out, {}, nodes, ret);
  return absl::OkStatus();
}

// The first functional loop or conditional the pass has not rewritten in function `name` or the
// functions it calls (bodies, branches, calls), as "<op> node '<node>' in function '<fn>'"; ""
// where there is none.
std::string FindUnprepared(const FunctionLibraryDefinition& lib, const std::string& name,
                           absl::flat_hash_set<std::string>* seen) {
  if (!seen->insert(name).second) return "";
  const FunctionDef* f = lib.Find(name);
  if (f == nullptr) return "";
  for (const NodeDef& node : f->node_def()) {
    if ((node.op() == "While" || node.op() == "StatelessWhile" || node.op() == "If" ||
         node.op() == "StatelessIf" || node.op() == "Case" || node.op() == "StatelessCase") &&
        !node.attr().contains(cf::kFunctions)) {
      return absl::StrCat(node.op(), " node '", node.name(), "' in function '", name, "'");
    }
    std::string found = FindUnprepared(lib, node.op(), seen);
    for (const auto& [key, value] : node.attr()) {
      if (!found.empty()) break;
      if (value.has_func()) found = FindUnprepared(lib, value.func().name(), seen);
      for (const NameAttrList& g : value.list().func()) {
        if (found.empty()) found = FindUnprepared(lib, g.name(), seen);
      }
    }
    if (!found.empty()) return found;
  }
  return "";
}

// A SymbolicGradient node of a function holding a loop the pass has not rewritten would return
// zeros, not an error: TensorFlow's function runtime lowers the function's loops to Enter /
// Switch / Merge / Exit frames before it differentiates the body, and its builder
// (core/graph/gradients.cc) never reaches a Switch whose loop-body output gets no gradient, so
// every input upstream of the loop gets ZerosLike. No gradient creator runs on that path, so
// this pass, run on every graph a Session or function runtime places (once the op library is
// loaded), refuses such a graph with NotPrepared's error instead. Conditionals are refused too,
// as their creator would refuse them at run time.
class RefuseUnpreparedSymbolicGradients : public GraphOptimizationPass {
 public:
  absl::Status Run(const GraphOptimizationPassOptions& options) override {
    if (options.graph == nullptr || *options.graph == nullptr) return absl::OkStatus();
    const Graph& g = **options.graph;
    const FunctionLibraryDefinition& lib =
        options.flib_def != nullptr ? *options.flib_def : g.flib_def();
    for (const Node* n : g.op_nodes()) {
      if (n->type_string() != "SymbolicGradient") continue;
      const AttrValue* f = n->attrs().Find("f");
      if (f == nullptr || !f->has_func()) continue;
      absl::flat_hash_set<std::string> seen;
      const std::string found = FindUnprepared(lib, f->func().name(), &seen);
      if (found.empty()) continue;
      const std::string op = found.substr(0, found.find(' '));
      return absl::InvalidArgumentError(absl::StrCat(
          "SymbolicGradient node '", n->name(), "' of function '", f->func().name(), "' holds ",
          found, absl::StrContains(op, "While")
                     ? " (TensorFlow's runtime would lower the loop and return zeros for it). "
                     : ". ",
          NotPrepared(op).message()));
    }
    return absl::OkStatus();
  }
};

}  // namespace

REGISTER_OPTIMIZATION(OptimizationPassRegistry::PRE_PLACEMENT, 0,
                      RefuseUnpreparedSymbolicGradients);

#define TF_EXT_CONTROL_FLOW_GRAD(op, fn)                                               \
  TF_EXT_REGISTER_TF_GRADIENT(op, [](const AttrSlice& attrs, FunctionDef* g) {       \
    return fn(op, attrs, g);                                                         \
  })

TF_EXT_CONTROL_FLOW_GRAD("While", WhileGrad);
TF_EXT_CONTROL_FLOW_GRAD("StatelessWhile", WhileGrad);
TF_EXT_CONTROL_FLOW_GRAD("If", ConditionalGrad);
TF_EXT_CONTROL_FLOW_GRAD("StatelessIf", ConditionalGrad);
TF_EXT_CONTROL_FLOW_GRAD("Case", ConditionalGrad);
TF_EXT_CONTROL_FLOW_GRAD("StatelessCase", ConditionalGrad);

}  // namespace tensorflow::tf_ext
