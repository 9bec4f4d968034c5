#include "tf_ext/graph/passes/xla_cluster.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "tensorflow/core/common_runtime/graph_constructor.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/graph_to_functiondef.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/graph/graph.h"
#include "tensorflow/core/lib/monitoring/collection_registry.h"
#include "tf_ext/graph/io/graph_io.h"
#include "tf_ext/graph/io/tensor_ref.h"

namespace tensorflow::tf_ext {

namespace {

constexpr char kWhat[] = "jit_compile: ";

// A NodeDef with its OpDef's default attrs, as kernels are looked up.
absl::StatusOr<NodeDef> WithDefaults(const NodeDef& n, const FunctionLibraryDefinition& flib) {
  const OpDef* op_def = nullptr;
  TF_RETURN_IF_ERROR(flib.LookUpOpDef(n.op(), &op_def));
  NodeDef full = n;
  AddDefaultsToNodeDef(*op_def, &full);
  return full;
}

// Why XLA cannot compile `n` (empty: it can): no XLA kernel for it, or for a node of a
// function it calls (while/if bodies, called functions), transitively.
std::string WhyNotCompilable(const NodeDef& n, const FunctionLibraryDefinition& flib,
                             std::set<std::string>* checked_functions) {
  auto full = WithDefaults(n, flib);
  if (!full.ok()) return std::string(full.status().message());
  if (flib.Find(n.op()) == nullptr &&
      !FindKernelDef(DeviceType(DEVICE_CPU_XLA_JIT), *full, nullptr, nullptr).ok()) {
    return absl::StrCat("node '", n.name(), "' (", n.op(), ") has no XLA kernel");
  }
  std::vector<std::string> called;
  if (flib.Find(n.op()) != nullptr) called.push_back(n.op());
  // In attr-name order (a proto map's own order varies), so the first culprit named is stable.
  const std::map<std::string, AttrValue> attrs(full->attr().begin(), full->attr().end());
  for (const auto& [name, value] : attrs) {
    if (value.has_func()) called.push_back(value.func().name());
    for (const NameAttrList& f : value.list().func()) called.push_back(f.name());
  }
  for (const std::string& fn : called) {
    if (!checked_functions->insert(fn).second) continue;
    const FunctionDef* fdef = flib.Find(fn);
    if (fdef == nullptr) continue;
    for (const NodeDef& inner : fdef->node_def()) {
      std::string why = WhyNotCompilable(inner, flib, checked_functions);
      if (!why.empty()) return absl::StrCat(why, ", in function '", fn, "' that node '", n.name(), "' calls");
    }
  }
  return "";
}

struct Analysis {
  std::map<std::string, int> index;      // node name -> position in the graph
  std::set<std::string> needed, outside;
  std::vector<int> inside;               // positions, in the graph's order
};

// The nodes the fetches and targets need, stopping at the fed nodes.
absl::Status FindNeeded(const GraphDef& graph, const std::set<std::string>& fed,
                        const std::vector<std::string>& roots, Analysis* a) {
  std::vector<std::string> stack;
  for (const std::string& root : roots) {
    const std::string node = InputNodeName(root);
    if (!a->index.count(node)) {
      return absl::InvalidArgumentError(absl::StrCat(kWhat, "'", root, "' is not in the graph"));
    }
    stack.push_back(node);
  }
  while (!stack.empty()) {
    const std::string name = stack.back();
    stack.pop_back();
    if (!a->needed.insert(name).second || fed.count(name)) continue;
    for (const std::string& in : graph.node(a->index.at(name)).input()) {
      const std::string src = InputNodeName(in);
      if (!a->index.count(src)) {
        return absl::InvalidArgumentError(absl::StrCat(kWhat, "node '", name, "' reads '", in,
                                                       "', which is not in the graph"));
      }
      stack.push_back(src);
    }
  }
  return absl::OkStatus();
}

// Outside: the fed nodes, and the needed nodes XLA cannot compile whose data inputs are all
// outside (a fixed point, in any order). Inside: the rest, each of which XLA must compile.
absl::Status Classify(const GraphDef& graph, const std::set<std::string>& fed,
                      const FunctionLibraryDefinition& flib, Analysis* a) {
  std::map<std::string, std::string> why;
  std::set<std::string> checked;
  for (const std::string& name : a->needed) {
    if (fed.count(name)) continue;
    std::string reason = WhyNotCompilable(graph.node(a->index.at(name)), flib, &checked);
    if (!reason.empty()) why[name] = reason;
  }
  a->outside = fed;
  for (bool changed = true; changed;) {
    changed = false;
    for (const auto& [name, reason] : why) {
      if (a->outside.count(name)) continue;
      const NodeDef& n = graph.node(a->index.at(name));
      bool sources_outside = true;
      for (const std::string& in : n.input()) {
        if (in[0] != '^' && !a->outside.count(InputNodeName(in))) sources_outside = false;
      }
      if (sources_outside) changed = a->outside.insert(name).second || changed;
    }
  }
  for (const auto& [name, reason] : why) {
    if (!a->outside.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          kWhat, reason, ": XLA cannot compile it, so the graph cannot run as one XLA cluster; "
          "run without jit_compile"));
    }
  }
  for (int i = 0; i < graph.node_size(); ++i) {
    const std::string& name = graph.node(i).name();
    if (a->needed.count(name) && !a->outside.count(name)) a->inside.push_back(i);
  }
  return absl::OkStatus();
}

absl::StatusOr<DataType> OutputType(const GraphDef& graph, const Analysis& a,
                                    const FunctionLibraryDefinition& flib, const TensorRef& t) {
  const NodeDef& n = graph.node(a.index.at(t.node));
  TF_ASSIGN_OR_RETURN(NodeDef full, WithDefaults(n, flib));
  const OpDef* op_def = nullptr;
  TF_RETURN_IF_ERROR(flib.LookUpOpDef(n.op(), &op_def));
  DataType type = DT_INVALID;
  TF_RETURN_IF_ERROR(OutputTypeForNode(full, *op_def, t.index, &type));
  return type;
}

NodeDef ArgOrRetval(const char* op, const std::string& name, DataType type, int index) {
  NodeDef n;
  n.set_name(name);
  n.set_op(op);
  (*n.mutable_attr())["T"].set_type(type);
  (*n.mutable_attr())["index"].set_i(index);
  return n;
}

// `want`, or want_<k>: a name no node (nor its /done) and no function of the graph has.
std::string UniqueName(const GraphDef& graph, const Analysis& a, const std::string& want) {
  std::set<std::string> functions;
  for (const FunctionDef& f : graph.library().function()) functions.insert(f.signature().name());
  std::string name = want;
  for (int k = 1; a.index.count(name) || a.index.count(name + "/done") || functions.count(name);
       ++k) {
    name = absl::StrCat(want, "_", k);
  }
  return name;
}

// The cluster's function body: the inside nodes, outside tensors read through _Arg nodes, the
// fetches returned through _Retval nodes. Fills the arguments (outside tensors, in order), the
// outside control sources, and the return types.
struct Body {
  GraphDef graph;
  std::vector<std::string> args;
  std::vector<DataType> arg_types, ret_types;
  std::set<std::string> control_sources;
  std::map<std::string, int> ret_of_fetch;  // inside fetch tensor -> its output index
  bool stateful = false;
};

absl::Status MakeBody(GraphDef* graph, const Analysis& a, const XlaClusterSpec& spec,
                      const FunctionLibraryDefinition& flib, const std::string& prefix,
                      Body* body) {
  // The returns first: their nodes may be moved into the body below.
  std::vector<NodeDef> rets;
  for (const std::string& fetch : spec.fetches) {
    TF_ASSIGN_OR_RETURN(TensorRef ref, TensorRef::Parse(fetch));
    if (a.outside.count(ref.node) || body->ret_of_fetch.count(ref.ToString())) continue;
    const int j = static_cast<int>(body->ret_types.size());
    TF_ASSIGN_OR_RETURN(DataType type, OutputType(*graph, a, flib, ref));
    rets.push_back(ArgOrRetval("_Retval", absl::StrCat(prefix, "/ret_", j), type, j));
    rets.back().add_input(ref.ToString());
    body->ret_types.push_back(type);
    body->ret_of_fetch[ref.ToString()] = j;
  }
  for (const NodeDef& n : graph->node()) {
    if (!a.outside.count(n.name()) || !a.needed.count(n.name())) continue;
    for (const std::string& in : n.input()) {
      if (!a.outside.count(InputNodeName(in))) {
        return absl::InvalidArgumentError(absl::StrCat(
            kWhat, "node '", n.name(), "' (", n.op(), "), which XLA cannot compile, reads '", in,
            "', which the cluster computes"));
      }
    }
  }
  std::map<std::string, std::string> arg_name;  // outside tensor -> its _Arg node
  for (int i : a.inside) {
    NodeDef* n = graph->mutable_node(i);
    NodeDef copy = spec.keep_originals ? *n : std::move(*n);
    copy.clear_device();
    copy.mutable_attr()->erase("_class");  // colocation with nodes the body does not hold
    const OpDef* op_def = nullptr;
    if (flib.LookUpOpDef(copy.op(), &op_def).ok() && op_def->is_stateful()) body->stateful = true;
    std::vector<std::string> inputs;
    for (const std::string& in : copy.input()) {
      const std::string src = InputNodeName(in);
      if (!a.outside.count(src)) {
        inputs.push_back(in);
      } else if (in[0] == '^') {
        body->control_sources.insert(src);
      } else {
        TF_ASSIGN_OR_RETURN(TensorRef ref, TensorRef::Parse(in));
        const std::string tensor = ref.ToString();
        if (!arg_name.count(tensor)) {
          const int k = static_cast<int>(body->args.size());
          TF_ASSIGN_OR_RETURN(DataType type, OutputType(*graph, a, flib, ref));
          arg_name[tensor] = absl::StrCat(prefix, "/arg_", k);
          body->args.push_back(tensor);
          body->arg_types.push_back(type);
          *body->graph.add_node() = ArgOrRetval("_Arg", arg_name[tensor], type, k);
        }
        inputs.push_back(arg_name[tensor]);
      }
    }
    copy.clear_input();
    for (const std::string& in : inputs) copy.add_input(in);
    *body->graph.add_node() = std::move(copy);
  }
  for (NodeDef& ret : rets) *body->graph.add_node() = std::move(ret);
  *body->graph.mutable_library() = graph->library();
  *body->graph.mutable_versions() = graph->versions();
  return absl::OkStatus();
}

absl::Status ToFunction(Body* body, const XlaClusterSpec& spec, const std::string& name,
                        const FunctionLibraryDefinition& flib, FunctionDef* fdef) {
  Graph g(flib);
  GraphConstructorOptions options;
  options.allow_internal_ops = true;
  TF_RETURN_IF_ERROR(ConvertGraphDefToGraph(options, std::move(body->graph), &g));
  const std::set<std::string> targets(spec.targets.begin(), spec.targets.end());
  TF_RETURN_IF_ERROR(GraphToFunctionDef(
      g, name,
      [&targets](const Node* n) -> std::optional<std::string> {
        if (targets.count(n->name())) return n->name();
        return std::nullopt;
      },
      fdef));
  (*fdef->mutable_attr())["_XlaMustCompile"].set_b(true);
  (*fdef->mutable_attr())["_noinline"].set_b(true);
  return absl::OkStatus();
}

NodeDef CallNode(const std::string& name, const Body& body) {
  NodeDef call;
  call.set_name(name);
  call.set_op(body.stateful ? "StatefulPartitionedCall" : "PartitionedCall");
  for (const std::string& arg : body.args) call.add_input(arg);
  for (const std::string& src : body.control_sources) call.add_input("^" + src);
  auto& attr = *call.mutable_attr();
  for (DataType t : body.arg_types) attr["Tin"].mutable_list()->add_type(t);
  for (DataType t : body.ret_types) attr["Tout"].mutable_list()->add_type(t);
  if (body.arg_types.empty()) attr["Tin"].mutable_list();
  if (body.ret_types.empty()) attr["Tout"].mutable_list();
  attr["f"].mutable_func()->set_name(name);
  attr["_XlaMustCompile"].set_b(true);
  attr["config"].set_s("");
  attr["config_proto"].set_s("");
  attr["executor_type"].set_s("");
  return call;
}

}  // namespace

absl::StatusOr<XlaCluster> AddXlaCluster(GraphDef* graph, const XlaClusterSpec& spec) {
  // Every backend's XLA kernels, TensorFlow's and (registered at the first shape function of a
  // tf_ext op, when the graph was built) tf_ext's.
  XlaOpRegistry::RegisterCompilationKernels();
  FunctionLibraryDefinition flib(OpRegistry::Global(), graph->library());
  Analysis a;
  for (int i = 0; i < graph->node_size(); ++i) a.index[graph->node(i).name()] = i;
  std::set<std::string> fed;
  for (const std::string& feed : spec.feeds) {
    TF_ASSIGN_OR_RETURN(TensorRef ref, TensorRef::Parse(feed));
    if (ref.index != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          kWhat, "feed '", feed, "' is not a node's output 0, which only a cluster's caller can feed"));
    }
    fed.insert(ref.node);
  }
  std::vector<std::string> roots = spec.fetches;
  roots.insert(roots.end(), spec.targets.begin(), spec.targets.end());
  TF_RETURN_IF_ERROR(FindNeeded(*graph, fed, roots, &a));
  TF_RETURN_IF_ERROR(Classify(*graph, fed, flib, &a));
  const std::string name = UniqueName(*graph, a, spec.name);
  Body body;
  TF_RETURN_IF_ERROR(MakeBody(graph, a, spec, flib, name, &body));
  FunctionDef fdef;
  TF_RETURN_IF_ERROR(ToFunction(&body, spec, name, flib, &fdef));

  XlaCluster cluster;
  cluster.nodes = static_cast<int>(a.inside.size());
  for (const std::string& fetch : spec.fetches) {
    TF_ASSIGN_OR_RETURN(TensorRef ref, TensorRef::Parse(fetch));
    auto it = body.ret_of_fetch.find(ref.ToString());
    cluster.fetches.push_back(it == body.ret_of_fetch.end() ? fetch
                                                            : absl::StrCat(name, ":", it->second));
  }
  if (!spec.keep_originals) {  // only what the run needs: the outside nodes it reads
    GraphDef kept;
    for (NodeDef& n : *graph->mutable_node()) {
      if (a.outside.count(n.name()) && a.needed.count(n.name())) *kept.add_node() = std::move(n);
    }
    graph->mutable_node()->Swap(kept.mutable_node());
  }
  *graph->mutable_library()->add_function() = std::move(fdef);
  *graph->add_node() = CallNode(name, body);
  if (!spec.targets.empty()) {
    NodeDef done;
    done.set_name(name + "/done");
    done.set_op("NoOp");
    done.add_input("^" + name);
    *graph->add_node() = std::move(done);
    cluster.target = name + "/done";
  }
  return cluster;
}

XlaCompileStats XlaCompilations() {
  XlaCompileStats stats;
  monitoring::CollectionRegistry::CollectMetricsOptions options;
  options.collect_metric_descriptors = false;
  const auto metrics = monitoring::CollectionRegistry::Default()->CollectMetrics(options);
  auto value = [&](const char* name) -> int64_t {
    auto it = metrics->point_set_map.find(name);
    if (it == metrics->point_set_map.end() || it->second->points.empty()) return 0;
    return it->second->points[0]->int64_value;
  };
  stats.compilations = value("/tensorflow/core/xla_compilations");
  stats.micros = value("/tensorflow/core/xla_compilation_time_usecs");
  return stats;
}

}  // namespace tensorflow::tf_ext
