#include "tf_ext/graph/graph_gradients.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/common_runtime/graph_constructor.h"
#include "tensorflow/core/graph/graph.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/tensor.pb.h"
#include "tensorflow/core/graph/algorithm.h"
#include "tensorflow/core/graph/node_builder.h"
#include "tensorflow/core/graph/optimizer_cse.h"
#include "tensorflow/core/platform/env_time.h"
#include "tf_ext/graph/backprop.h"
#include "tf_ext/graph/control_flow.h"
#include "tf_ext/graph/inline_calls.h"
#include "tf_ext/graph/session_options.h"
#include "tf_ext/graph/workarounds.h"
#include "tf_ext/testing/tensor_doubles.h"

namespace tensorflow::tf_ext {
namespace {

double Seconds() { return EnvTime::NowMicros() * 1e-6; }

absl::StatusOr<Node*> FindNode(const std::map<std::string, Node*>& nodes, const TensorRef& ref,
                               const char* role) {
  auto it = nodes.find(ref.node);
  if (it == nodes.end()) {
    return absl::NotFoundError(
        absl::StrCat(role, " '", ref.ToString(), "': no node named '", ref.node, "' in the graph"));
  }
  if (ref.index < 0 || ref.index >= it->second->num_outputs()) {
    return absl::InvalidArgumentError(absl::StrCat(role, " '", ref.ToString(), "': node has ",
                                                   it->second->num_outputs(), " outputs"));
  }
  return it->second;
}

// The nodes a run fetches or feeds by name: y's, the xs', the feeds'.
std::set<std::string> NamedNodes(const GradientRequest& request) {
  std::set<std::string> names = {request.y.node};
  for (const TensorRef& x : request.xs) names.insert(x.node);
  for (const auto& [ref, value] : request.feeds) names.insert(ref.node);
  return names;
}

// x (output `index` of `n`) read through an Identity that takes over all of its consumers: the
// gradient of x alone, not of n's other outputs (which may depend on x too, through n's
// inputs). Feeding or fetching x by its own name still works.
absl::StatusOr<Node*> ReadThroughIdentity(Graph* g, const std::string& prefix, Node* n,
                                          int index) {
  std::vector<std::pair<Node*, int>> consumers;  // (node, input)
  for (const Edge* e : n->out_edges()) {
    if (!e->IsControlEdge() && e->src_output() == index) {
      consumers.push_back({e->dst(), e->dst_input()});
    }
  }
  Node* read = nullptr;
  TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(prefix + "/x"), "Identity")
                         .Input(n, index)
                         .Finalize(g, &read));
  for (const auto& [dst, input] : consumers) TF_RETURN_IF_ERROR(g->UpdateEdge(read, 0, dst, input));
  return read;
}

// "tf_ext_grad", or "tf_ext_grad_2", ...: the first that no node's name is or begins with (a
// backward graph differentiated again holds the first pass's nodes).
std::string UnusedPrefix(const Graph& g) {
  for (int i = 1;; ++i) {
    const std::string prefix = i == 1 ? "tf_ext_grad" : absl::StrCat("tf_ext_grad_", i);
    bool used = false;
    for (const Node* n : g.nodes()) {
      if (n->name() == prefix || absl::StartsWith(n->name(), prefix + "/")) {
        used = true;
        break;
      }
    }
    if (!used) return prefix;
  }
}

// A hint for an import error, only where its cause is known.
std::string ImportHint(const absl::Status& s) {
  if (absl::StrContains(s.message(), "Op type not registered")) {
    return " (is the op library that defines it loaded?)";
  }
  if (absl::StrContains(s.message(), "cycle")) {
    return " (a cycle outside any while loop frame: the GraphDef itself is malformed)";
  }
  return "";
}

// Imports, inlines and differentiates the request's graph into `backward` (forward +
// backward); `grad_names`: the tensor of d sum(y) / d x, per x. The Graph exists only in here.
absl::Status BuildBackwardGraph(GradientRequest* request_ptr, const GradientOptions& options,
                                GradientResult* result, GraphDef* backward,
                                std::vector<std::string>* grad_names) {
  const GradientRequest& request = *request_ptr;
  // Lowered loops and conditionals back to While and If (control_flow.h).
  auto functionalized = FunctionalizeV1ControlFlow(&request_ptr->graph);
  if (!functionalized.ok()) return functionalized.status();
  result->converted_v1_control_flow = *functionalized;
  Graph g(OpRegistry::Global());
  GraphConstructorOptions opts;
  absl::Status s = ConvertGraphDefToGraph(opts, request.graph, &g);
  if (!s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("cannot import the graph: ", s.message(), ImportHint(s)));
  }
  if (options.release_forward_graph) GraphDef().Swap(&request_ptr->graph);
  auto inlined = InlineFunctionCalls(&g);
  if (!inlined.ok()) return inlined.status();
  result->inlined_calls = *inlined;
  auto workarounds = WorkAroundGradientBugs(&g);
  if (!workarounds.ok()) return workarounds.status();
  result->workarounds = *workarounds;
  std::map<std::string, Node*> nodes;
  for (Node* n : g.op_nodes()) nodes[n->name()] = n;
  auto y = FindNode(nodes, request.y, "--y");
  if (!y.ok()) return y.status();
  if (!test::IsFloatingPoint((*y)->output_type(request.y.index))) {
    return absl::InvalidArgumentError(absl::StrCat("--y '", request.y.ToString(), "' is ",
                                                   DataTypeString((*y)->output_type(request.y.index)),
                                                   "; only floating-point tensors have gradients"));
  }
  if (request.xs.empty()) return absl::InvalidArgumentError("no --x given");
  const std::string prefix = UnusedPrefix(g);
  std::vector<std::pair<Node*, int>> x_outputs;
  for (const TensorRef& ref : request.xs) {
    auto x = FindNode(nodes, ref, "--x");
    if (!x.ok()) return x.status();
    x_outputs.push_back({*x, ref.index});
  }

  // y is read through an Identity, so that an x that is y itself (rerouted below) still
  // reaches it. d sum(y) / dx: the incoming gradient is ones.
  Node* y_ret = nullptr;
  TF_RETURN_IF_ERROR(
      NodeBuilder(g.NewName(prefix + "/y"), "Identity").Input(*y, request.y.index).Finalize(&g, &y_ret));
  Node* dy = nullptr;
  TF_RETURN_IF_ERROR(NodeBuilder(g.NewName(prefix + "/dy"), "OnesLike")
                         .Input(*y, request.y.index)
                         .Finalize(&g, &dy));
  // Created after y's nodes, so that x = y reroutes them too.
  std::vector<Node*> x_reads;
  for (const auto& [node, index] : x_outputs) {
    auto read = ReadThroughIdentity(&g, prefix, node, index);
    if (!read.ok()) return read.status();
    x_reads.push_back(*read);
  }
  // One pass for all xs: each x's total derivative (backprop.h).
  std::vector<GraphTensor> xs, dxs;
  for (Node* x : x_reads) xs.push_back({x, 0});
  BackpropOptions backprop;
  backprop.inline_gradients = options.inline_gradients;
  backprop.name_prefix = prefix;
  BackpropStats stats;
  TF_RETURN_IF_ERROR(AddGradients(&g, {{y_ret, 0}}, {{dy, 0}}, xs, &dxs, backprop, &stats));
  result->gradient_nodes = stats.gradient_nodes;
  result->inlined_gradients = stats.inlined;
  result->loops = stats.loops;
  result->conditionals = stats.conditionals;
  result->accumulators = stats.accumulators;
  for (const GraphTensor& dx : dxs) grad_names->push_back(absl::StrCat(dx.node->name(), ":", dx.index));
  if (options.inline_gradients) {
    // An inlined gradient body that recomputes its op's forward (a client gradient converted
    // by unify.h reads the op's outputs so) holds a copy of a forward node: merge equal nodes.
    // Not constants (hashing frozen weights costs time and saves nothing), and not the nodes
    // the run feeds or fetches by name.
    const std::set<std::string> keep = NamedNodes(request);
    FixupSourceAndSinkEdges(&g);  // CSE walks the graph from its source node
    OptimizeCSE(&g, [&keep, &prefix](const Node* n) {
      return !n->IsConstant() && !absl::StartsWith(n->name(), prefix + "/") &&
             keep.count(n->name()) == 0;
    });
  }
  g.ToGraphDef(backward);
  return absl::OkStatus();
}

// Floating-point Const nodes of at least 4096 elements become Placeholders, their values
// returned as feeds: Grappler (optimize_graph) copies the GraphDef it optimizes, constants
// included, and folds and reorders constants into new ones; a fed tensor it never sees. The
// nodes the request names (fetched or fed by name) keep their Consts.
std::vector<std::pair<std::string, Tensor>> HoistConstants(const GradientRequest& request,
                                                           GraphDef* graph) {
  const std::set<std::string> named = NamedNodes(request);
  std::vector<std::pair<std::string, Tensor>> feeds;
  for (NodeDef& n : *graph->mutable_node()) {
    if (n.op() != "Const" || named.count(n.name()) || !n.attr().contains("value")) continue;
    const TensorProto& proto = n.attr().at("value").tensor();
    if (!DataTypeIsFloating(proto.dtype())) continue;
    int64_t elements = 1;
    for (const auto& d : proto.tensor_shape().dim()) elements *= d.size();
    if (elements < 4096) continue;
    Tensor value;
    if (!value.FromProto(proto)) continue;
    n.set_op("Placeholder");
    n.clear_attr();
    AttrValue dtype, shape;
    dtype.set_type(value.dtype());
    value.shape().AsProto(shape.mutable_shape());
    (*n.mutable_attr())["dtype"] = dtype;
    (*n.mutable_attr())["shape"] = shape;
    feeds.push_back({n.name() + ":0", std::move(value)});
  }
  return feeds;
}

}  // namespace

absl::Status ComputeGraphGradients(GradientRequest* request, GradientResult* result,
                                   const GradientOptions& options) {
  const GradientRequest& req = *request;
  const double start = Seconds();
  GraphDef backward;
  std::vector<std::string> grad_names;
  TF_RETURN_IF_ERROR(BuildBackwardGraph(request, options, result, &backward, &grad_names));
  result->backward_nodes = backward.node_size();
  if (options.keep_backward_graph) result->backward_graph = backward;
  result->build_seconds = Seconds() - start;

  const double run_start = Seconds();
  if (options.optimize_graph) result->constant_feeds = HoistConstants(req, &backward);
  result->session.reset(NewSession(GradientSessionOptions(options.optimize_graph)));
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
