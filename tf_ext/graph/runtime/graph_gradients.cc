#include "tf_ext/graph/runtime/graph_gradients.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/platform/env_time.h"
#include "tf_ext/graph/pipeline/gradient_pipeline.h"
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
  if (options.keep_backward_graph) result->backward_graph = backward;
  result->build_seconds = Seconds() - start;

  const double run_start = Seconds();
  if (HoistsConstants(options, spec.backward_memory_budget)) {
    std::set<std::string> keep = spec.named_nodes;
    keep.insert(req.y.node);
    for (const TensorRef& x : req.xs) keep.insert(x.node);
    result->constant_feeds = HoistConstants(keep, &backward);
  }
  result->session.reset(NewSession(BackwardSessionOptions(options.optimize_graph)));
  if (result->session == nullptr) return absl::InternalError("could not create a Session");
  TF_RETURN_IF_ERROR(result->session->Create(std::move(backward)));
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
  std::vector<Tensor> outs;
  result->fetches.assign(fetches.begin(), fetches.begin() + 1 + grad_names.size());
  TF_RETURN_IF_ERROR(result->session->Run(feeds, fetches, {}, &outs));
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
