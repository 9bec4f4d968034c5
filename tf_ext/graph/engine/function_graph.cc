#include "tf_ext/graph/engine/function_graph.h"

#include <atomic>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/common_runtime/function_def_utils.h"
#include "tensorflow/core/common_runtime/graph_constructor.h"
#include "tensorflow/core/framework/graph_to_functiondef.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/graph/tensor_id.h"

namespace tensorflow::tf_ext {

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
                                        const std::set<std::string>& control_rets) {
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

}  // namespace tensorflow::tf_ext
