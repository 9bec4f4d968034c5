#include "tf_ext/graph/runtime/grappler_stages.h"

#include <memory>
#include <set>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tensorflow/core/common_runtime/graph_constructor.h"
#include "tensorflow/core/common_runtime/lower_functional_ops.h"
#include "tensorflow/core/common_runtime/optimization_registry.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/attr_value_util.h"
#include "tensorflow/core/framework/function.pb.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/graph/graph.h"
#include "tensorflow/core/grappler/clusters/utils.h"
#include "tensorflow/core/grappler/clusters/virtual_cluster.h"
#include "tensorflow/core/grappler/grappler_item.h"
#include "tensorflow/core/grappler/optimizers/meta_optimizer.h"
#include "tensorflow/core/protobuf/rewriter_config.pb.h"
#include "tf_ext/graph/io/graph_io.h"

namespace tensorflow::tf_ext {
namespace {

constexpr char kCpu[] = "/job:localhost/replica:0/task:0/device:CPU:0";

std::string Mb(int64_t bytes) { return absl::StrFormat("%.1f MB", bytes / 1048576.0); }

// A feed as the Session gives it to Grappler: a tensor of the placeholder's type and shape, an
// unknown dimension 0 and an unknown rank [0] (GraphExecutionState::OptimizeGraph).
bool FakeFeed(const NodeDef& n, Tensor* out) {
  DataType dtype;
  PartialTensorShape shape;
  if (!GetNodeAttr(AttrSlice(n), "dtype", &dtype).ok() ||
      !GetNodeAttr(AttrSlice(n), "shape", &shape).ok()) {
    return false;
  }
  TensorShape full({0});
  if (!shape.unknown_rank()) {
    for (int i = 0; i < shape.dims(); ++i) {
      if (shape.dim_size(i) < 0) shape.set_dim(i, 0);
    }
    if (!shape.AsTensorShape(&full)) return false;
  }
  *out = Tensor(dtype, full);
  return true;
}

// The Session lowers functional loops and conditionals (LowerFunctionalOpsPass, before
// placement) before its Grappler runs, and Grappler then optimizes the lowered bodies with the
// graph around them: so does stage 1.
absl::Status LowerControlFlow(const ConfigProto& config, GraphDef* graph) {
  static const std::set<std::string>* kFunctional = new std::set<std::string>{
      "While", "StatelessWhile", "If", "StatelessIf", "Case", "StatelessCase"};
  bool functional = false;
  for (const NodeDef& n : graph->node()) functional = functional || kFunctional->count(n.op());
  if (!functional) return absl::OkStatus();
  FunctionLibraryDefinition flib(OpRegistry::Global(), graph->library());
  auto g = std::make_unique<Graph>(flib);
  TF_RETURN_IF_ERROR(ConvertGraphDefToGraph(GraphConstructorOptions(), *graph, g.get()));
  SessionOptions session_options;
  session_options.config = config;
  GraphOptimizationPassOptions options;
  options.session_options = &session_options;
  options.flib_def = &flib;
  options.graph = &g;
  TF_RETURN_IF_ERROR(LowerFunctionalOpsPass().Run(options));
  graph->Clear();
  g->ToGraphDef(graph);
  return absl::OkStatus();
}

}  // namespace

void RemapOnly(ConfigProto* config) {
  RewriterConfig* r = config->mutable_graph_options()->mutable_rewrite_options();
  r->set_constant_folding(RewriterConfig::OFF);
  r->set_shape_optimization(RewriterConfig::OFF);
  r->set_arithmetic_optimization(RewriterConfig::OFF);
  r->set_dependency_optimization(RewriterConfig::OFF);
  r->set_loop_optimization(RewriterConfig::OFF);
  r->set_function_optimization(RewriterConfig::OFF);
  r->set_common_subgraph_elimination(RewriterConfig::OFF);
  r->set_debug_stripper(RewriterConfig::OFF);
  r->set_layout_optimizer(RewriterConfig::OFF);
  r->set_memory_optimization(RewriterConfig::NO_MEM_OPT);
  r->set_implementation_selector(RewriterConfig::OFF);
  r->set_pin_to_host_optimization(RewriterConfig::OFF);
  r->set_remapping(RewriterConfig::ON);
  // Model pruning stays, as in the Session's own run: it cuts the graph to the run's fetches
  // first, so that the remapper counts only the readers that run.
}

absl::Status OptimizeBeforePlanning(const OptimizedRunSpec& spec, const ConfigProto& config,
                                    GraphDef* graph) {
  ConfigProto stage1 = config;
  RewriterConfig* r = stage1.mutable_graph_options()->mutable_rewrite_options();
  r->set_remapping(RewriterConfig::OFF);
  r->set_layout_optimizer(RewriterConfig::OFF);
  r->set_memory_optimization(RewriterConfig::NO_MEM_OPT);

  TF_RETURN_IF_ERROR(LowerControlFlow(config, graph));
  // The graph as the Session's Grappler sees it: placed (on the CPU here; the devices asked
  // for are given back below, so that the Session places the result as it would the graph).
  std::unordered_map<std::string, std::string> devices;
  for (NodeDef& n : *graph->mutable_node()) {
    if (!n.device().empty()) devices[n.name()] = n.device();
    n.set_device(kCpu);
  }
  grappler::GrapplerItem item;
  item.id = "tf_ext_backward";
  item.fetch = spec.fetches;
  std::set<std::string> feeds(spec.feeds.begin(), spec.feeds.end());
  for (const NodeDef& n : graph->node()) {
    Tensor fake;
    if (feeds.count(n.name()) && FakeFeed(n, &fake)) item.feed.emplace_back(n.name(), fake);
  }
  item.graph.Swap(graph);
  grappler::VirtualCluster cluster(
      std::unordered_map<std::string, DeviceProperties>{{kCpu, grappler::GetLocalCPUInfo()}});
  TF_RETURN_IF_ERROR(cluster.Provision());
  grappler::MetaOptimizer optimizer(nullptr, stage1);
  GraphDef optimized;
  absl::Status s = optimizer.Optimize(&cluster, item, &optimized);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("memory budget: TensorFlow's graph optimizations "
                                               "failed on the gradient graph: ", s.message()));
  }
  for (NodeDef& n : *optimized.mutable_node()) {
    auto it = devices.find(n.name());
    n.set_device(it != devices.end() ? it->second : "");
  }
  graph->Swap(&optimized);
  return absl::OkStatus();
}

absl::Status PlanAfterOptimization(const OptimizedRunSpec& spec, const ConfigProto& config,
                                   GraphDef* graph, MemoryPlan* plan) {
  TF_RETURN_IF_ERROR(OptimizeBeforePlanning(spec, config, graph));
  Graph g(OpRegistry::Global());
  TF_RETURN_IF_ERROR(ConvertGraphDefToGraph(GraphConstructorOptions(), *graph, &g));
  std::set<std::string> keep = spec.keep;
  for (const std::string& f : spec.fetches) keep.insert(InputNodeName(f));
  for (const std::string& f : spec.feeds) keep.insert(f);
  MemoryBudget budget = spec.budget;
  budget.fraction_of = plan->unbudgeted_peak_bytes;
  MemoryPlan optimized;
  absl::Status s = PlanMemory(&g, spec.prefix, keep, {}, spec.feed_shapes, budget,
                              /*fused_kernels=*/true, &optimized, &spec.deferred);
  if (!s.ok()) {
    if (s.code() != absl::StatusCode::kResourceExhausted) return s;
    return absl::ResourceExhaustedError(absl::StrCat(
        s.message(), " (estimates of the graph once TensorFlow's optimizations ran; the built "
        "graph's estimate is ", Mb(plan->unbudgeted_peak_bytes), ")"));
  }
  optimized.optimized_peak_bytes = optimized.unbudgeted_peak_bytes;
  optimized.unbudgeted_peak_bytes = plan->unbudgeted_peak_bytes;
  *plan = optimized;
  graph->Clear();
  g.ToGraphDef(graph);
  return absl::OkStatus();
}

namespace {

// Whether two NodeDefs are the same node, its device aside.
bool SameNodeDef(const NodeDef& a, const NodeDef& b) {
  if (a.op() != b.op() || a.input_size() != b.input_size() || a.attr_size() != b.attr_size()) {
    return false;
  }
  for (int i = 0; i < a.input_size(); ++i) {
    if (a.input(i) != b.input(i)) return false;
  }
  for (const auto& [key, value] : a.attr()) {
    auto it = b.attr().find(key);
    if (it == b.attr().end() || !AreAttrValuesEqual(value, it->second)) return false;
  }
  return true;
}

// The references of KeepUnoptimizedNodes' kept nodes.
class UnoptimizedReferences {
 public:
  UnoptimizedReferences(const GraphDef& original, GraphDef* optimized) : optimized_(optimized) {
    for (const NodeDef& n : original.node()) before_[n.name()] = &n;
    for (const NodeDef& n : optimized->node()) after_[n.name()] = n;
    for (const auto& [name, n] : after_) names_.insert(name);
  }

  // Keeps the original node `name` where the optimized graph has none by that name.
  void Keep(const std::string& name) {
    if (!after_.count(name)) Resolve(name);
  }

 private:
  // The name a kept node reads the original node `name` by: the optimized node if it is the
  // same node reading the same nodes, else the original node, added under its name where the
  // optimized graph has none and under a new name where the optimized graph's differs.
  std::string Resolve(const std::string& name) {
    auto done = resolved_.find(name);
    if (done != resolved_.end()) return done->second;
    auto original = before_.find(name);
    if (original == before_.end()) return name;  // not the original's: left as it is
    auto optimized = after_.find(name);
    if (optimized != after_.end() && Same(name)) return resolved_[name] = name;
    std::string target = name;
    for (int i = 0; optimized != after_.end() && names_.count(target); ++i) {
      target = absl::StrCat(name, "/unoptimized", i > 0 ? absl::StrCat("_", i) : "");
    }
    names_.insert(target);
    resolved_[name] = target;  // before its inputs: a loop's back edge comes round to it
    NodeDef n = *original->second;
    n.set_name(target);
    for (std::string& input : *n.mutable_input()) {
      const bool control = !input.empty() && input[0] == '^';
      const std::string node = InputNodeName(input);
      const size_t colon = input.find(':');
      const std::string output = colon == std::string::npos ? "" : input.substr(colon);
      input = absl::StrCat(control ? "^" : "", Resolve(node), output);
    }
    *optimized_->add_node() = std::move(n);
    return target;
  }

  // Whether the optimized node `name` is the original one reading the same nodes, transitively.
  bool Same(const std::string& name) {
    auto memo = same_.find(name);
    if (memo != same_.end()) return memo->second;
    auto original = before_.find(name);
    auto optimized = after_.find(name);
    if (original == before_.end() || optimized == after_.end() ||
        !SameNodeDef(*original->second, optimized->second)) {
      return same_[name] = false;
    }
    same_[name] = true;  // a loop's back edge: judged by the rest of the loop
    for (const std::string& input : original->second->input()) {
      if (!Same(InputNodeName(input))) return same_[name] = false;
    }
    return true;
  }

  GraphDef* optimized_;
  std::unordered_map<std::string, const NodeDef*> before_;
  std::unordered_map<std::string, NodeDef> after_;
  std::set<std::string> names_;
  std::unordered_map<std::string, std::string> resolved_;
  std::unordered_map<std::string, bool> same_;
};

}  // namespace

void KeepUnoptimizedNodes(const GraphDef& original, GraphDef* optimized) {
  UnoptimizedReferences references(original, optimized);
  for (const NodeDef& n : original.node()) references.Keep(n.name());
  std::set<std::string> functions;
  for (const FunctionDef& f : optimized->library().function()) {
    functions.insert(f.signature().name());
  }
  for (const FunctionDef& f : original.library().function()) {
    if (!functions.count(f.signature().name())) *optimized->mutable_library()->add_function() = f;
  }
  std::set<std::string> gradients;
  for (const GradientDef& d : optimized->library().gradient()) gradients.insert(d.function_name());
  for (const GradientDef& d : original.library().gradient()) {
    if (!gradients.count(d.function_name())) *optimized->mutable_library()->add_gradient() = d;
  }
}

absl::Status PlanOptimizedRun(const OptimizedRunSpec& spec, GraphDef* graph,
                              SessionOptions* session_options, MemoryPlan* plan) {
  GraphDef optimized = *graph;
  TF_RETURN_IF_ERROR(PlanAfterOptimization(spec, session_options->config, &optimized, plan));
  // Nothing recomputed: the Session optimizes the graph as built, as without a budget (the
  // same kernels on the same values as stage 1 and the remapper, and on loops faster: the
  // Session's own run optimized a Keras LSTM's lowered loops better than the two stages did).
  if (plan->recomputed_nodes == 0) return absl::OkStatus();
  graph->Swap(&optimized);
  RemapOnly(&session_options->config);
  return absl::OkStatus();
}

}  // namespace tensorflow::tf_ext
