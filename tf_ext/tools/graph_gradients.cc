#include "tf_ext/tools/graph_gradients.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tensorflow/core/common_runtime/gradients.h"
#include "tensorflow/core/common_runtime/graph_constructor.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/framework/tensor.pb.h"
#include "tensorflow/core/graph/graph.h"
#include "tensorflow/core/graph/node_builder.h"
#include "tensorflow/core/platform/env.h"
#include "tf_ext/grads/registry.h"
#include "tf_ext/testing/tensor_doubles.h"

namespace tensorflow::tf_ext::tools {
namespace {

double Sum(const Tensor& t) {
  double s = 0;
  for (double v : testing::ToDoubles(t)) s += v;
  return s;
}

// Every op strictly between the xs and y must have a gradient function; find the first that
// has none, so the user gets "op Foo (node n) has no gradient" instead of a runtime failure.
absl::Status CheckPathHasGradients(const Graph& g, Node* y, const std::vector<Node*>& xs) {
  std::set<const Node*> from_x, to_y;
  std::deque<const Node*> q(xs.begin(), xs.end());
  while (!q.empty()) {
    const Node* n = q.front();
    q.pop_front();
    if (!from_x.insert(n).second) continue;
    for (const Edge* e : n->out_edges()) {
      if (!e->IsControlEdge()) q.push_back(e->dst());
    }
  }
  q.assign({y});
  while (!q.empty()) {
    const Node* n = q.front();
    q.pop_front();
    if (!to_y.insert(n).second) continue;
    for (const Edge* e : n->in_edges()) {
      if (!e->IsControlEdge()) q.push_back(e->src());
    }
  }
  for (const Node* n : g.op_nodes()) {
    if (!from_x.count(n) || !to_y.count(n)) continue;
    if (std::find(xs.begin(), xs.end(), n) != xs.end()) continue;
    gradient::Creator creator;
    if (!gradient::GetOpGradientCreator(n->type_string(), &creator).ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "op ", n->type_string(), " (node '", n->name(),
          "') lies between x and y but has no gradient registered"));
    }
  }
  return absl::OkStatus();
}

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

std::vector<std::pair<std::string, Tensor>> Feeds(const GradientRequest& r) {
  std::vector<std::pair<std::string, Tensor>> feeds;
  for (const auto& [ref, t] : r.feeds) feeds.push_back({ref.ToString(), t});
  return feeds;
}

}  // namespace

std::string TensorRef::ToString() const { return absl::StrCat(node, ":", index); }

absl::StatusOr<TensorRef> TensorRef::Parse(const std::string& s) {
  TensorRef ref;
  const size_t colon = s.rfind(':');
  ref.node = s.substr(0, colon);
  if (colon != std::string::npos && !absl::SimpleAtoi(s.substr(colon + 1), &ref.index)) {
    return absl::InvalidArgumentError(absl::StrCat("bad tensor name '", s, "' (want node:index)"));
  }
  if (ref.node.empty()) return absl::InvalidArgumentError("empty tensor name");
  return ref;
}

absl::Status LoadGraph(const std::string& path, GraphDef* graph) {
  if (!Env::Default()->FileExists(path).ok()) {
    return absl::NotFoundError(absl::StrCat("graph file '", path, "' does not exist"));
  }
  absl::Status s = ReadTextOrBinaryProto(Env::Default(), path, graph);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a GraphDef (text or binary): ", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::pair<TensorRef, Tensor>> ParseFeed(const std::string& spec,
                                                       const GraphDef& graph) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("feed '", spec, "' must look like name=2x3:1,2,3,4,5,6"));
  }
  auto ref = TensorRef::Parse(spec.substr(0, eq));
  if (!ref.ok()) return ref.status();
  std::string rest = spec.substr(eq + 1);
  std::string values = rest;
  TensorShape shape;
  bool explicit_shape = false;
  if (const size_t colon = rest.find(':'); colon != std::string::npos) {
    explicit_shape = true;
    values = rest.substr(colon + 1);
    const std::string dims = rest.substr(0, colon);
    if (dims != "scalar") {
      for (absl::string_view d : absl::StrSplit(dims, 'x')) {
        int64_t v;
        if (!absl::SimpleAtoi(d, &v) || v < 0) {
          return absl::InvalidArgumentError(absl::StrCat("feed '", spec, "': bad shape '", dims, "'"));
        }
        shape.AddDim(v);
      }
    }
  }
  std::vector<double> vals;
  for (absl::string_view v : absl::StrSplit(values, ',', absl::SkipEmpty())) {
    double d;
    if (!absl::SimpleAtod(v, &d)) {
      return absl::InvalidArgumentError(absl::StrCat("feed '", spec, "': bad value '", v, "'"));
    }
    vals.push_back(d);
  }
  if (!explicit_shape) shape = TensorShape({static_cast<int64_t>(vals.size())});
  if (shape.num_elements() != static_cast<int64_t>(vals.size())) {
    return absl::InvalidArgumentError(absl::StrCat("feed '", spec, "': shape ", shape.DebugString(),
                                                   " needs ", shape.num_elements(), " values, got ",
                                                   vals.size()));
  }
  DataType dtype = DT_FLOAT;
  for (const NodeDef& n : graph.node()) {
    if (n.name() == ref->node && n.attr().contains("dtype")) dtype = n.attr().at("dtype").type();
  }
  auto t = testing::FromDoubles(dtype, shape, vals);
  if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat("feed '", spec, "': ", t.status().message()));
  return std::make_pair(*ref, *t);
}

std::string FormatTensor(const Tensor& t, int max_values) {
  std::vector<std::string> vals;
  const int64_t n = t.NumElements();
  const std::vector<double> values = testing::ToDoubles(t);
  for (int64_t i = 0; i < std::min<int64_t>(values.size(), max_values); ++i) {
    vals.push_back(absl::StrCat(values[i]));
  }
  if (n > max_values) vals.push_back(absl::StrCat("... (", n - max_values, " more)"));
  return absl::StrCat(DataTypeString(t.dtype()), " ", t.shape().DebugString(), " = [",
                      absl::StrJoin(vals, " "), "]");
}

absl::Status ComputeGraphGradients(const GradientRequest& request, GradientResult* result) {
  Graph g(OpRegistry::Global());
  GraphConstructorOptions opts;
  absl::Status s = ConvertGraphDefToGraph(opts, request.graph, &g);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("cannot import the graph: ", s.message(),
                                               " (is the op library that defines it loaded?)"));
  }
  std::map<std::string, Node*> nodes;
  for (Node* n : g.op_nodes()) nodes[n->name()] = n;
  auto y = FindNode(nodes, request.y, "--y");
  if (!y.ok()) return y.status();
  if (!testing::IsFloatingPoint((*y)->output_type(request.y.index))) {
    return absl::InvalidArgumentError(absl::StrCat("--y '", request.y.ToString(), "' is ",
                                                   DataTypeString((*y)->output_type(request.y.index)),
                                                   "; only floating-point tensors have gradients"));
  }
  if (request.xs.empty()) return absl::InvalidArgumentError("no --x given");
  std::vector<NodeOut> xs;
  std::vector<Node*> x_nodes;
  for (const TensorRef& ref : request.xs) {
    auto x = FindNode(nodes, ref, "--x");
    if (!x.ok()) return x.status();
    xs.push_back({*x, ref.index});
    x_nodes.push_back(*x);
  }
  TF_RETURN_IF_ERROR(CheckPathHasGradients(g, *y, x_nodes));

  // TensorFlow's builder sends each y's incoming gradient along the *in-edges* of the y node
  // (it is written for function return nodes), so y is read through an Identity that plays
  // the return node. d sum(y) / dx: the incoming gradient is ones.
  Node* y_ret = nullptr;
  TF_RETURN_IF_ERROR(
      NodeBuilder("tf_ext_grad/y", "Identity").Input(*y, request.y.index).Finalize(&g, &y_ret));
  Node* dy = nullptr;
  TF_RETURN_IF_ERROR(NodeBuilder("tf_ext_grad/dy", "OnesLike")
                         .Input(*y, request.y.index)
                         .Finalize(&g, &dy));
  // One backward pass per x: TensorFlow's builder stops back-propagation at every requested x,
  // so asking for x and a tensor computed from x together would cut x's path.
  std::vector<NodeOut> grads;
  for (const NodeOut& x : xs) {
    std::vector<NodeOut> grad;
    TF_RETURN_IF_ERROR(AddSymbolicGradients({{y_ret, 0}}, {x}, {{dy, 0}}, &grad, &g));
    grads.push_back(grad[0]);
  }
  g.ToGraphDef(&result->backward_graph);

  result->session.reset(NewSession(SessionOptions()));
  if (result->session == nullptr) return absl::InternalError("could not create a Session");
  TF_RETURN_IF_ERROR(result->session->Create(result->backward_graph));
  // x values: a fed x is taken from its feed (TensorFlow refuses to fetch a fed tensor).
  const auto feeds = Feeds(request);
  auto fed = [&](const std::string& name) -> const Tensor* {
    for (const auto& f : feeds) {
      if (f.first == name) return &f.second;
    }
    return nullptr;
  };
  std::vector<std::string> fetches = {request.y.ToString()};
  for (const NodeOut& gr : grads) fetches.push_back(gr.name());
  for (const TensorRef& ref : request.xs) {
    if (fed(ref.ToString()) == nullptr) fetches.push_back(ref.ToString());
  }
  std::vector<Tensor> outs;
  TF_RETURN_IF_ERROR(result->session->Run(feeds, fetches, {}, &outs));
  result->y = outs[0];
  const size_t n = request.xs.size();
  result->grads.assign(outs.begin() + 1, outs.begin() + 1 + n);
  size_t next = 1 + n;
  for (const TensorRef& ref : request.xs) {
    const Tensor* f = fed(ref.ToString());
    result->xs.push_back(f != nullptr ? *f : outs[next++]);
  }
  return absl::OkStatus();
}

absl::Status NumericCheck(const GradientRequest& request, const GradientResult& result,
                          double delta, NumericCheckResult* check) {
  *check = NumericCheckResult();
  GraphDef numeric = request.graph;
  std::set<std::string> in_library;
  for (NodeDef& n : *numeric.mutable_node()) {
    FunctionDef surrogate;
    if (!SpecializedSurrogateForward(n, &surrogate).ok()) continue;
    check->surrogates.push_back(absl::StrCat(n.op(), " (node '", n.name(), "')"));
    const std::string fname = surrogate.signature().name();
    if (in_library.insert(fname).second) *numeric.mutable_library()->add_function() = surrogate;
    n.set_op(fname);
    n.clear_attr();
  }
  Session* session = result.session.get();
  std::unique_ptr<Session> numeric_session;
  if (!check->surrogates.empty()) {
    numeric_session.reset(NewSession(SessionOptions()));
    if (numeric_session == nullptr) return absl::InternalError("could not create a Session");
    TF_RETURN_IF_ERROR(numeric_session->Create(numeric));
    session = numeric_session.get();
  }
  for (size_t i = 0; i < request.xs.size(); ++i) {
    const Tensor& base = result.xs[i];
    if (!testing::IsFloatingPoint(base.dtype())) continue;
    const double h = delta > 0 ? delta : (base.dtype() == DT_DOUBLE ? 1e-6 : 1e-3);
    const std::string name = request.xs[i].ToString();
    // Feeding x overrides whatever computed it (placeholder or intermediate tensor).
    auto feeds = Feeds(request);
    feeds.erase(std::remove_if(feeds.begin(), feeds.end(),
                               [&](const auto& f) { return f.first == name; }),
                feeds.end());
    feeds.push_back({name, Tensor()});
    const std::vector<double> base_values = testing::ToDoubles(base);
    const std::vector<double> grad_values = testing::ToDoubles(result.grads[i]);
    for (int64_t k = 0; k < base.NumElements(); ++k) {
      double f[2];
      for (int side = 0; side < 2; ++side) {
        std::vector<double> x = base_values;
        x[k] += side == 0 ? h : -h;
        auto fed = testing::FromDoubles(base.dtype(), base.shape(), x);
        if (!fed.ok()) return fed.status();
        feeds.back().second = *fed;
        std::vector<Tensor> y;
        TF_RETURN_IF_ERROR(session->Run(feeds, {request.y.ToString()}, {}, &y));
        f[side] = Sum(y[0]);
      }
      const double num = (f[0] - f[1]) / (2 * h);
      const double sym = grad_values[k];
      const double abs_err = std::abs(sym - num);
      const double rel_err = abs_err / std::max(1.0, std::abs(num));
      ++check->elements;
      check->max_abs_error = std::max(check->max_abs_error, abs_err);
      if (rel_err >= check->max_rel_error) {
        check->max_rel_error = rel_err;
        check->worst_x = static_cast<int>(i);
        check->worst_element = k;
        check->worst_symbolic = sym;
        check->worst_numeric = num;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace tensorflow::tf_ext::tools
