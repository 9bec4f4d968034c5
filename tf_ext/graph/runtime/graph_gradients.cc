#include "tf_ext/graph/runtime/graph_gradients.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/platform/env_time.h"
#include "tf_ext/graph/io/graph_io.h"
#include "tf_ext/graph/passes/xla_cluster.h"
#include "tf_ext/graph/pipeline/gradient_pipeline.h"
#include "tf_ext/graph/runtime/grappler_stages.h"
#include "tf_ext/graph/runtime/session_options.h"

namespace tensorflow::tf_ext {
namespace {

double Seconds() { return EnvTime::NowMicros() * 1e-6; }

}  // namespace

absl::Status ComputeGraphGradients(GradientRequest* request, GradientResult* result,
                                   const GradientOptions& options) {
  const GradientRequest& req = *request;
  const double start = Seconds();
  // A placeholder's shape attr is a contract the build relies on (simplify_backward.h makes
  // shapes that follow from it constants): a feed must match it.
  for (const auto& [ref, value] : req.feeds) {
    for (const NodeDef& n : req.graph.node()) {
      if (n.name() != ref.node || n.op() != "Placeholder" || !n.attr().contains("shape")) continue;
      PartialTensorShape shape;
      if (PartialTensorShape::BuildPartialTensorShape(n.attr().at("shape").shape(), &shape).ok() &&
          !shape.IsCompatibleWith(value.shape())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "feed '", ref.ToString(), "' has shape ", value.shape().DebugString(),
            ", which placeholder '", n.name(), "' (shape ", shape.DebugString(),
            ") does not accept"));
      }
    }
  }
  GradientGraphSpec spec;
  spec.ys = {req.y};
  spec.xs = req.xs;
  for (const auto& [ref, value] : req.feeds) {
    spec.named_nodes.insert(ref.node);
    if (ref.index == 0) spec.feed_shapes[ref.node] = value.shape();
  }
  spec.backward_memory_budget = req.backward_memory_budget;
  GradientGraph built;
  TF_RETURN_IF_ERROR(BuildGradientGraph(&request->graph, spec, options, result, &built));
  GraphDef backward;
  backward.Swap(&built.graph);
  const std::vector<std::string>& grad_names = built.dx_names;
  result->backward_nodes = backward.node_size();
  const bool plan_after_optimization = options.optimize_graph && spec.backward_memory_budget.set();
  if (options.keep_backward_graph && !plan_after_optimization) result->backward_graph = backward;
  result->build_seconds = Seconds() - start;

  double run_start = Seconds();
  if (HoistsConstants(options, spec.backward_memory_budget)) {
    std::set<std::string> keep = spec.named_nodes;
    keep.insert(req.y.node);
    for (const TensorRef& x : req.xs) keep.insert(x.node);
    result->constant_feeds = HoistConstants(keep, &backward);
  }
  // x values: a fed x is taken from its feed (TensorFlow refuses to fetch a fed tensor).
  const auto feeds = SessionFeeds(req, result);
  auto fed = [&](const std::string& name) -> const Tensor* {
    for (const auto& f : feeds) {
      if (f.first == name) return &f.second;
    }
    return nullptr;
  };
  std::vector<std::string> fetches = {req.y.ToString()};
  for (const std::string& gr : grad_names) fetches.push_back(gr);
  for (const TensorRef& ref : req.xs) {
    if (fed(ref.ToString()) == nullptr) fetches.push_back(ref.ToString());
  }
  SessionOptions session_options = BackwardSessionOptions(options.optimize_graph);
  if (plan_after_optimization) {
    OptimizedRunSpec run;
    run.prefix = built.prefix;
    run.deferred = built.deferred_gradient_nodes;
    run.keep = spec.named_nodes;
    run.fetches = fetches;
    for (const auto& f : feeds) run.feeds.push_back(InputNodeName(f.first));
    run.feed_shapes = spec.feed_shapes;
    run.budget = spec.backward_memory_budget;
    const double plan_start = Seconds();
    TF_RETURN_IF_ERROR(PlanOptimizedRun(run, &backward, &session_options, &result->memory));
    result->build_seconds += Seconds() - plan_start;
    run_start += Seconds() - plan_start;
    result->backward_nodes = backward.node_size();
    if (options.keep_backward_graph) result->backward_graph = backward;  // as it runs
  }
  if (options.jit_compile) {
    if (spec.backward_memory_budget.set()) {
      return absl::InvalidArgumentError(
          "jit_compile and a memory budget: XLA plans the memory of its cluster itself; drop one");
    }
    XlaClusterSpec cluster_spec;
    for (const auto& f : feeds) cluster_spec.feeds.push_back(f.first);
    cluster_spec.fetches = fetches;
    TF_ASSIGN_OR_RETURN(XlaCluster cluster, AddXlaCluster(&backward, cluster_spec));
    fetches = cluster.fetches;
    result->xla_cluster_nodes = cluster.nodes;
  }
  result->session.reset(NewSession(session_options));
  if (result->session == nullptr) return absl::InternalError("could not create a Session");
  TF_RETURN_IF_ERROR(result->session->Create(std::move(backward)));
  std::vector<Tensor> outs;
  result->fetches.assign(fetches.begin(), fetches.begin() + 1 + grad_names.size());
  const XlaCompileStats compiled = XlaCompilations();
  TF_RETURN_IF_ERROR(result->session->Run(feeds, fetches, {}, &outs));
  if (options.jit_compile) {
    result->xla_compile_seconds = (XlaCompilations().micros - compiled.micros) * 1e-6;
  }
  result->y = outs[0];
  const size_t n = req.xs.size();
  result->grads.assign(outs.begin() + 1, outs.begin() + 1 + n);
  size_t next = 1 + n;
  for (const TensorRef& ref : req.xs) {
    const Tensor* f = fed(ref.ToString());
    result->xs.push_back(f != nullptr ? *f : outs[next++]);
  }
  result->run_seconds = Seconds() - run_start;
  return absl::OkStatus();
}
}  // namespace tensorflow::tf_ext
