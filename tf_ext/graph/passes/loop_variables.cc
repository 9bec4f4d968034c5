#include "tf_ext/graph/passes/loop_variables.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/graph/node_builder.h"

namespace tensorflow::tf_ext {
namespace {

// In `f` (a loop body or cond), argument `i` read only by ReadVariableOp nodes (each becomes
// an Identity of the value) and, in a body, returned as output `i` unchanged. False (f
// untouched) when it is used any other way.
bool ArgToValue(FunctionDef* f, int i, DataType dtype, bool body) {
  if (i >= f->signature().input_arg_size()) return false;
  const std::string arg = f->signature().input_arg(i).name();
  std::vector<NodeDef*> reads;
  for (NodeDef& n : *f->mutable_node_def()) {
    for (const std::string& in : n.input()) {
      if (in != arg && in != arg + ":0") continue;
      if (n.op() != "ReadVariableOp") return false;
      reads.push_back(&n);
    }
  }
  for (const auto& [out, value] : f->ret()) {
    if (value != arg) continue;
    if (!body || i >= f->signature().output_arg_size() || f->signature().output_arg(i).name() != out) {
      return false;
    }
  }
  f->mutable_signature()->mutable_input_arg(i)->set_type(dtype);
  if (body) f->mutable_signature()->mutable_output_arg(i)->set_type(dtype);
  f->mutable_arg_attr()->erase(i);
  for (NodeDef* n : reads) {
    n->set_op("Identity");
    n->mutable_attr()->erase("dtype");
    AttrValue t;
    t.set_type(dtype);
    (*n->mutable_attr())["T"] = t;
    // Its output is Identity's "output", not ReadVariableOp's "value".
    const std::string from = n->name() + ":value:", to = n->name() + ":output:";
    auto rename = [&](std::string* ref) {
      if (absl::StartsWith(*ref, from)) *ref = to + ref->substr(from.size());
    };
    for (NodeDef& m : *f->mutable_node_def()) {
      for (std::string& in : *m.mutable_input()) rename(&in);
    }
    for (auto& [out, value] : *f->mutable_ret()) rename(&value);
  }
  return true;
}

}  // namespace

Node* VariableOfEdge(const Edge* e) {
  Node* n = e->src();
  int index = e->src_output();
  while (n->type_string() == "Identity" || n->type_string() == "IdentityN") {
    const Edge* in = nullptr;
    if (!n->input_edge(n->type_string() == "IdentityN" ? index : 0, &in).ok()) return nullptr;
    n = in->src();
    index = in->src_output();
  }
  return n->type_string() == "VarHandleOp" ? n : nullptr;
}

namespace {

// Where a control-flow node's functions see its inputs: node input i is argument i - offset of
// each function; `types` lists the inputs' types (from input `offset` on). Only a loop's body
// passes its arguments through to outputs of the same index.
struct ControlFlowFunctions {
  int offset = 0;
  const char* types = "";
  bool loop = false;
  std::vector<NameAttrList*> functions;  // into the node's NodeDef
  std::vector<bool> passes_through;      // per function: a loop body
};

// The functions of a While/StatelessWhile, If/StatelessIf or Case/StatelessCase node (pointers
// into `def`); false for any other node, or one missing a function or its types attr.
bool FunctionsOf(NodeDef* def, ControlFlowFunctions* out) {
  const std::string& op = def->op();
  auto func = [&](const char* name) -> NameAttrList* {
    auto it = def->mutable_attr()->find(name);
    return it == def->mutable_attr()->end() ? nullptr : it->second.mutable_func();
  };
  if (op == "While" || op == "StatelessWhile") {
    *out = {0, "T", true, {func("body"), func("cond")}, {true, false}};
  } else if (op == "If" || op == "StatelessIf") {
    *out = {1, "Tin", false, {func("then_branch"), func("else_branch")}, {false, false}};
  } else if (op == "Case" || op == "StatelessCase") {
    *out = {1, "Tin", false, {}, {}};
    auto it = def->mutable_attr()->find("branches");
    if (it == def->mutable_attr()->end()) return false;
    for (NameAttrList& f : *it->second.mutable_list()->mutable_func()) {
      out->functions.push_back(&f);
      out->passes_through.push_back(false);
    }
  } else {
    return false;
  }
  if (out->functions.empty()) return false;
  for (NameAttrList* f : out->functions) {
    if (f == nullptr) return false;
  }
  return def->attr().count(out->types) > 0;
}

}  // namespace

absl::StatusOr<int> ReadLoopVariablesOutside(Graph* g,
                                             const std::function<bool(const Node*)>& which) {
  int rewritten = 0;
  std::vector<Node*> loops;
  for (Node* n : g->op_nodes()) {
    const std::string& op = n->type_string();
    if (op == "While" || op == "StatelessWhile" || op == "If" || op == "StatelessIf" ||
        op == "Case" || op == "StatelessCase") {
      loops.push_back(n);
    }
  }
  for (Node* loop : loops) {
    NodeDef def = loop->def();
    ControlFlowFunctions cf;
    if (!FunctionsOf(&def, &cf)) continue;
    std::vector<FunctionDef> functions;
    for (const NameAttrList* f : cf.functions) {
      const FunctionDef* fdef = g->flib_def().Find(f->name());
      if (fdef == nullptr) break;
      functions.push_back(*fdef);
    }
    if (functions.size() != cf.functions.size()) continue;
    std::vector<std::pair<int, Node*>> inputs;  // (input index, its variable)
    for (const Edge* e : loop->in_edges()) {
      if (e->IsControlEdge() || e->dst_input() < cf.offset ||
          loop->input_type(e->dst_input()) != DT_RESOURCE) {
        continue;
      }
      Node* v = VariableOfEdge(e);
      if (v == nullptr || !which(v)) continue;
      DataType dtype;
      if (!GetNodeAttr(v->attrs(), "dtype", &dtype).ok()) continue;
      const int arg = e->dst_input() - cf.offset;
      std::vector<FunctionDef> tried = functions;
      bool only_read = true;
      for (size_t k = 0; k < tried.size() && only_read; ++k) {
        only_read = ArgToValue(&tried[k], arg, dtype, cf.passes_through[k]);
      }
      if (!only_read) continue;
      functions = std::move(tried);
      def.mutable_attr()->at(cf.types).mutable_list()->set_type(arg, dtype);
      auto shapes = def.mutable_attr()->find("output_shapes");
      if (cf.loop && shapes != def.mutable_attr()->end() &&
          arg < shapes->second.list().shape_size()) {
        TensorShapeProto unknown;
        unknown.set_unknown_rank(true);
        *shapes->second.mutable_list()->mutable_shape(arg) = unknown;
      }
      inputs.push_back({e->dst_input(), v});
    }
    if (inputs.empty()) continue;
    // The rewritten functions, under new names (a function used twice, as two Case branches
    // may be, is rewritten the same way both times).
    const std::string suffix = absl::StrCat("_tf_ext_values_", rewritten);
    FunctionDefLibrary lib;
    std::set<std::string> added;
    for (size_t k = 0; k < functions.size(); ++k) {
      const std::string renamed = cf.functions[k]->name() + suffix;
      functions[k].mutable_signature()->set_name(renamed);
      cf.functions[k]->set_name(renamed);
      if (added.insert(renamed).second) *lib.add_function() = functions[k];
    }
    TF_RETURN_IF_ERROR(g->AddFunctionLibrary(lib));
    def.mutable_attr()->erase("_read_only_resource_inputs");
    // The loop node again, its edges moved over; each variable read once, before it.
    std::vector<std::pair<Node*, int>> data_in(loop->num_inputs(), {nullptr, 0});
    std::vector<Node*> control_in, control_out;
    std::vector<std::tuple<int, Node*, int>> data_out;  // (output, consumer, input)
    for (const Edge* e : loop->in_edges()) {
      if (e->IsControlEdge()) {
        control_in.push_back(e->src());
      } else {
        data_in[e->dst_input()] = {e->src(), e->src_output()};
      }
    }
    for (const Edge* e : loop->out_edges()) {
      if (e->IsControlEdge()) {
        control_out.push_back(e->dst());
      } else {
        data_out.push_back({e->src_output(), e->dst(), e->dst_input()});
      }
    }
    const std::string name = loop->name();
    g->RemoveNode(loop);
    def.set_name(name);
    absl::Status status;
    Node* replaced = g->AddNode(def, &status);
    TF_RETURN_IF_ERROR(status);
    std::vector<Node*> variable_of_output(replaced->num_outputs(), nullptr);
    for (const auto& [index, v] : inputs) {
      DataType dtype;
      TF_RETURN_IF_ERROR(GetNodeAttr(v->attrs(), "dtype", &dtype));
      Node* read = nullptr;
      TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(name + "/read_variable"), "ReadVariableOp")
                             .Input(v, 0)
                             .Attr("dtype", dtype)
                             .Finalize(g, &read));
      data_in[index] = {read, 0};
      if (index < static_cast<int>(variable_of_output.size())) variable_of_output[index] = v;
      ++rewritten;
    }
    for (int i = 0; i < static_cast<int>(data_in.size()); ++i) {
      g->AddEdge(data_in[i].first, data_in[i].second, replaced, i);
    }
    for (Node* src : control_in) g->AddControlEdge(src, replaced);
    for (Node* dst : control_out) g->AddControlEdge(replaced, dst);
    for (const auto& [output, dst, input] : data_out) {
      // A loop's output of a variable input is that input (the handle); a conditional's
      // outputs are its branches' own.
      if (cf.loop && variable_of_output[output] != nullptr) {
        g->AddEdge(variable_of_output[output], 0, dst, input);  // the handle, as before
      } else {
        g->AddEdge(replaced, output, dst, input);
      }
    }
  }
  return rewritten;
}

}  // namespace tensorflow::tf_ext
