#include "tf_ext/tools/graph_gradients.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tensorflow/core/common_runtime/function_body.h"
#include "tensorflow/core/common_runtime/function_def_utils.h"
#include "tensorflow/core/common_runtime/gradients.h"
#include "tensorflow/core/common_runtime/graph_constructor.h"
#include "tensorflow/core/common_runtime/inline_function_utils.h"
#include "tensorflow/core/common_runtime/shape_refiner.h"
#include "tensorflow/core/graph/algorithm.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/framework/tensor.pb.h"
#include "tensorflow/core/graph/graph.h"
#include "tensorflow/core/graph/node_builder.h"
#include "tensorflow/core/platform/env.h"
#include "absl/strings/match.h"
#include "tensorflow/core/platform/env_time.h"
#include "tensorflow/core/protobuf/config.pb.h"
#include "tensorflow/core/protobuf/rewriter_config.pb.h"
#include "tf_ext/grads/registry.h"
#include "tf_ext/grads/specialize.h"
#include "tf_ext/testing/tensor_doubles.h"
#include "tf_ext/tools/npy_io.h"
#include "tf_ext_python_gradients.h"

namespace tensorflow::tf_ext::tools {
namespace {

double Sum(const Tensor& t) {
  double s = 0;
  for (double v : test::ToDoubles(t)) s += v;
  return s;
}


double Seconds() { return EnvTime::NowMicros() * 1e-6; }

bool InList(const char* const* list, const std::string& op) {
  for (; *list != nullptr; ++list) {
    if (op == *list) return true;
  }
  return false;
}

// Control-flow loops: TensorFlow has no C++ gradient for them in either registry.
bool IsLoopOp(const std::string& op) {
  static const auto* loop_ops = new std::set<std::string>{
      "While", "StatelessWhile", "Enter", "RefEnter", "Exit", "RefExit", "Switch", "RefSwitch",
      "Merge", "RefMerge", "NextIteration", "RefNextIteration", "LoopCond"};
  return loop_ops->count(op) > 0 || absl::StartsWith(op, "TensorList");
}

}  // namespace

absl::Status CheckPathHasGradients(const Graph& g, const Node* y, const std::vector<Node*>& xs) {
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
  std::map<std::string, std::vector<std::string>> missing;  // op type -> nodes
  for (const Node* n : g.op_nodes()) {
    if (!from_x.count(n) || !to_y.count(n)) continue;
    if (std::find(xs.begin(), xs.end(), n) != xs.end()) continue;
    gradient::Creator creator;
    if (!gradient::GetOpGradientCreator(n->type_string(), &creator).ok()) {
      missing[n->type_string()].push_back(n->name());
    }
  }
  if (missing.empty()) return absl::OkStatus();
  std::vector<std::string> lines, loops;
  int nodes = 0;
  for (const auto& [op, names] : missing) {
    nodes += names.size();
    std::string line = absl::StrCat("  ", op, " (", names.size(), " node",
                                    names.size() == 1 ? "" : "s", ": '", names[0], "'",
                                    names.size() > 1 ? ", ..." : "", ")");
    if (IsLoopOp(op)) {
      loops.push_back(op);
      absl::StrAppend(&line, ": control-flow loop op");
    } else if (InList(kTfExtPythonGradientOps, op)) {
      absl::StrAppend(&line, ": TensorFlow has a gradient for it only in Python");
    } else if (InList(kTfExtPythonNoGradientOps, op)) {
      absl::StrAppend(&line, ": TensorFlow's Python registry marks it not differentiable");
    } else {
      absl::StrAppend(&line, ": no gradient in any TensorFlow registry");
    }
    lines.push_back(line);
  }
  std::string msg = absl::StrCat(missing.size(), " op type", missing.size() == 1 ? "" : "s",
                                 " (", nodes, " node", nodes == 1 ? "" : "s",
                                 ") between x and y have no C++ gradient:\n",
                                 absl::StrJoin(lines, "\n"));
  if (!loops.empty()) {
    absl::StrAppend(&msg, "\nloops are not differentiated by tf_ext_grad (",
                    absl::StrJoin(loops, ", "),
                    "): unroll them before freezing, e.g. Keras RNN layers with unroll=True");
  }
  return absl::InvalidArgumentError(msg);
}

absl::StatusOr<int> InlineFunctionCalls(Graph* g) {
  const FunctionLibraryDefinition& flib = g->flib_def();
  int inlined = 0;
  for (int depth = 0;; ++depth) {
    std::vector<Node*> calls;
    for (Node* n : g->op_nodes()) {
      if (n->IsPartitionedCall() || flib.Find(n->type_string()) != nullptr) calls.push_back(n);
    }
    if (calls.empty()) return inlined;
    if (depth == 100) {
      return absl::InvalidArgumentError("function calls nested over 100 deep (recursion?)");
    }
    for (Node* n : calls) {
      NameAttrList func;
      if (n->IsPartitionedCall()) {
        TF_RETURN_IF_ERROR(GetNodeAttr(n->attrs(), "f", &func));
      } else {
        func.set_name(n->type_string());
        for (const auto& [k, v] : n->attrs()) (*func.mutable_attr())[k] = v;
      }
      const FunctionDef* fdef = flib.Find(func.name());
      if (fdef == nullptr) {
        return absl::NotFoundError(absl::StrCat("node '", n->name(), "' calls function '",
                                                func.name(), "', which the graph's library lacks"));
      }
      std::unique_ptr<FunctionBody> body;
      TF_RETURN_IF_ERROR(FunctionDefToBodyHelper(*fdef, AttrSlice(&func.attr()), &flib, &body));
      InlineFunctionBodyOptions options;
      options.ignore_noinline = true;
      options.inline_impl_selection_group_functions = true;
      // Keep an IdentityN named like the call, so `--y`/`--x` may name its outputs.
      options.keep_caller_node = InlineFunctionBodyOptions::KeepCallerNode::kFetchable;
      if (n->IsPartitionedCall()) {
        options.output_control_src = InlineFunctionBodyOptions::OutputControlSource::kControlOutputs;
        options.inlined_function_body_placer = InlinedFunctionBodyPlacer::MultiDevice();
      }
      const std::string name = n->name();
      if (absl::Status s = InlineFunctionBody(flib, g, n, body.get(), options); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("cannot inline function '", func.name(),
                                                   "' called by node '", name, "': ", s.message()));
      }
      ++inlined;
    }
  }
}

namespace {

// Constant negative reduction indices of `n` made non-negative (true if rewritten).
absl::StatusOr<bool> NormalizeReductionIndices(Graph* g, Node* n,
                                               shape_inference::InferenceContext* ctx) {
  const Edge* edge = nullptr;
  if (!n->input_edge(1, &edge).ok() || edge->src()->type_string() != "Const") return false;
  if (!ctx->RankKnown(ctx->input(0))) return false;
  const int64_t rank = ctx->Rank(ctx->input(0));
  Tensor indices;
  if (!indices.FromProto(edge->src()->def().attr().at("value").tensor())) return false;
  if (indices.dtype() != DT_INT32 && indices.dtype() != DT_INT64) return false;
  std::vector<double> values = test::ToDoubles(indices);
  bool negative = false;
  for (double& v : values) {
    if (v < 0 && v >= -rank) {
      v += rank;
      negative = true;
    }
  }
  if (!negative) return false;
  auto fixed = test::FromDoubles(indices.dtype(), indices.shape(), values);
  if (!fixed.ok()) return false;
  Node* c = nullptr;
  TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(absl::StrCat(n->name(), "/nonnegative_axes")), "Const")
                         .Attr("dtype", indices.dtype())
                         .Attr("value", *fixed)
                         .Finalize(g, &c));
  TF_RETURN_IF_ERROR(g->UpdateEdge(c, 0, n, 1));
  return true;
}

// A Conv2D with one input channel per group as DepthwiseConv2dNative (true if rewritten).
absl::StatusOr<bool> GroupedConvAsDepthwise(Graph* g, Node* n,
                                            shape_inference::InferenceContext* ctx) {
  std::string format, padding;
  if (!GetNodeAttr(n->attrs(), "data_format", &format).ok() || format != "NHWC") return false;
  if (!GetNodeAttr(n->attrs(), "padding", &padding).ok() || padding == "EXPLICIT") return false;
  shape_inference::ShapeHandle x = ctx->input(0), f = ctx->input(1);
  if (!ctx->RankKnown(x) || !ctx->RankKnown(f) || ctx->Rank(x) != 4 || ctx->Rank(f) != 4) {
    return false;
  }
  const int64_t channels = ctx->Value(ctx->Dim(x, 3));
  const int64_t kh = ctx->Value(ctx->Dim(f, 0)), kw = ctx->Value(ctx->Dim(f, 1)),
                f_in = ctx->Value(ctx->Dim(f, 2)), f_out = ctx->Value(ctx->Dim(f, 3));
  if (channels <= 1 || f_in != 1 || kh < 0 || kw < 0 || f_out <= 0 || f_out % channels != 0) {
    return false;  // not grouped with one channel per group (or shapes unknown)
  }
  const Edge *x_edge = nullptr, *f_edge = nullptr;
  TF_RETURN_IF_ERROR(n->input_edge(0, &x_edge));
  TF_RETURN_IF_ERROR(n->input_edge(1, &f_edge));
  const std::string name = n->name();
  Tensor shape(DT_INT32, TensorShape({4}));
  auto s = shape.vec<int32_t>();
  s(0) = kh, s(1) = kw, s(2) = channels, s(3) = f_out / channels;
  Node *shape_node = nullptr, *filter = nullptr, *depthwise = nullptr;
  TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(name + "/depthwise_filter_shape"), "Const")
                         .Attr("dtype", DT_INT32)
                         .Attr("value", shape)
                         .Finalize(g, &shape_node));
  TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(name + "/depthwise_filter"), "Reshape")
                         .Input(f_edge->src(), f_edge->src_output())
                         .Input(shape_node)
                         .Finalize(g, &filter));
  // (destination, input; -1 = control). Copied: RemoveNode frees the edges.
  std::vector<std::pair<Node*, int>> consumers;
  for (const Edge* e : n->out_edges()) {
    consumers.push_back({e->dst(), e->IsControlEdge() ? -1 : e->dst_input()});
  }
  NodeBuilder builder(name, "DepthwiseConv2dNative");
  builder.Input(x_edge->src(), x_edge->src_output()).Input(filter);
  for (const char* attr : {"T", "strides", "padding", "data_format", "dilations"}) {
    if (const AttrValue* v = n->attrs().Find(attr)) builder.Attr(attr, *v);
  }
  for (const Edge* e : n->in_edges()) {
    if (e->IsControlEdge()) builder.ControlInput(e->src());
  }
  const std::string device = n->requested_device();
  g->RemoveNode(n);  // frees the name for the replacement
  TF_RETURN_IF_ERROR(builder.Device(device).Finalize(g, &depthwise));
  for (const auto& [dst, input] : consumers) {
    if (input < 0) {
      g->AddControlEdge(depthwise, dst);
    } else {
      g->AddEdge(depthwise, 0, dst, input);
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<GradientWorkarounds> WorkAroundGradientBugs(Graph* g) {
  static const auto* reductions =
      new std::set<std::string>{"Sum", "Mean", "Prod", "Max", "Min", "EuclideanNorm"};
  ShapeRefiner refiner(g->versions(), g->op_registry());
  std::vector<Node*> order;
  GetReversePostOrder(*g, &order);
  // A node whose shape function fails (or whose inputs' did) just has no context and is left
  // alone.
  for (Node* n : order) refiner.AddNode(n).IgnoreError();
  GradientWorkarounds done;
  for (Node* n : order) {
    shape_inference::InferenceContext* ctx = refiner.GetContext(n);
    if (ctx == nullptr) continue;
    if (reductions->count(n->type_string()) && n->num_inputs() == 2) {
      auto rewritten = NormalizeReductionIndices(g, n, ctx);
      if (!rewritten.ok()) return rewritten.status();
      done.negative_axes += *rewritten;
    } else if (n->type_string() == "Conv2D") {
      auto rewritten = GroupedConvAsDepthwise(g, n, ctx);  // may delete n
      if (!rewritten.ok()) return rewritten.status();
      done.grouped_convs += *rewritten;
    }
  }
  return done;
}

namespace {

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
  // Binary first: ReadTextProto logs every parse error of a binary file.
  if (ReadBinaryProto(Env::Default(), path, graph).ok()) return absl::OkStatus();
  graph->Clear();
  absl::Status s = ReadTextProto(Env::Default(), path, graph);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a GraphDef (text or binary): ", s.message()));
  }
  return absl::OkStatus();
}

namespace {

const NodeDef* FindNodeDef(const GraphDef& graph, const std::string& name) {
  for (const NodeDef& n : graph.node()) {
    if (n.name() == name) return &n;
  }
  return nullptr;
}

// The placeholder's shape attr, when fully known.
std::optional<TensorShape> KnownShape(const NodeDef* n) {
  if (n == nullptr || !n->attr().contains("shape")) return std::nullopt;
  const PartialTensorShape shape(n->attr().at("shape").shape());
  TensorShape full;
  if (!shape.AsTensorShape(&full)) return std::nullopt;
  return full;
}

absl::StatusOr<Tensor> RandomTensor(DataType dtype, const TensorShape& shape, uint64_t seed) {
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  std::mt19937_64 gen(seq);
  std::normal_distribution<double> normal;
  std::vector<double> values(shape.num_elements());
  const bool real = test::IsFloatingPoint(dtype);
  for (double& v : values) v = real ? normal(gen) : static_cast<double>(gen() % 10);
  return test::FromDoubles(dtype, shape, values);
}

// "2x3" as a shape; errors name the feed.
absl::StatusOr<TensorShape> ParseDims(const std::string& spec, const std::string& dims) {
  TensorShape shape;
  for (absl::string_view d : absl::StrSplit(dims, 'x')) {
    int64_t v;
    if (!absl::SimpleAtoi(d, &v) || v < 0 || !shape.AddDimWithStatus(v).ok()) {
      return absl::InvalidArgumentError(absl::StrCat("feed '", spec, "': bad shape '", dims, "'"));
    }
  }
  return shape;
}

absl::StatusOr<Tensor> FeedFromFile(const std::string& spec, const std::string& node,
                                    const std::string& file, const std::string& dims,
                                    bool has_dims, DataType dtype, const NodeDef* placeholder) {
  std::string path = file, key;
  if (const size_t npz = file.find(".npz:"); npz != std::string::npos) {
    path = file.substr(0, npz + 4);
    key = file.substr(npz + 5);
  }
  auto check_dtype = [&](const Tensor& t) -> absl::StatusOr<Tensor> {
    if (t.dtype() != dtype) {
      return absl::InvalidArgumentError(absl::StrCat("feed '", spec, "': the array is ",
                                                     DataTypeString(t.dtype()), ", '", node,
                                                     "' takes ", DataTypeString(dtype)));
    }
    return t;
  };
  if (absl::EndsWith(path, ".npy")) {
    auto t = ReadNpy(path);
    if (!t.ok()) return t.status();
    return check_dtype(*t);
  }
  if (absl::EndsWith(path, ".npz")) {
    auto arrays = ReadNpz(path);
    if (!arrays.ok()) return arrays.status();
    std::vector<std::string> names;
    for (const auto& [name, t] : *arrays) {
      names.push_back(name);
      if (name == (key.empty() ? node : key)) return check_dtype(t);
    }
    if (key.empty() && arrays->size() == 1) return check_dtype(arrays->front().second);
    return absl::InvalidArgumentError(absl::StrCat("feed '", spec, "': ", path, " has no array '",
                                                   key.empty() ? node : key, "' (it has: ",
                                                   absl::StrJoin(names, ", "), ")"));
  }
  // Raw bytes of the placeholder's dtype.
  TensorShape shape;
  if (has_dims) {
    auto parsed = ParseDims(spec, dims);
    if (!parsed.ok()) return parsed.status();
    shape = *parsed;
  } else if (auto known = KnownShape(placeholder)) {
    shape = *known;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "feed '", spec, "': raw file needs a shape (e.g. ", node, "=2x3:@", file,
        ") because '", node, "' has no fully known shape"));
  }
  std::string bytes;
  TF_RETURN_IF_ERROR(ReadFileToString(Env::Default(), path, &bytes));
  if (!DataTypeCanUseMemcpy(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("feed '", spec, "': raw ", DataTypeString(dtype),
                                                   " files are not supported"));
  }
  Tensor t(dtype, shape);
  if (bytes.size() != t.TotalBytes()) {
    return absl::InvalidArgumentError(absl::StrCat("feed '", spec, "': ", path, " has ", bytes.size(),
                                                   " bytes; ", DataTypeString(dtype), " ",
                                                   shape.DebugString(), " needs ", t.TotalBytes()));
  }
  if (!bytes.empty()) std::memcpy(t.data(), bytes.data(), bytes.size());
  return t;
}

}  // namespace

absl::StatusOr<std::pair<TensorRef, Tensor>> ParseFeed(const std::string& spec,
                                                       const GraphDef& graph) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "feed '", spec, "' must look like name=2x3:1,2,3,4,5,6, name=@file.npy or name=random"));
  }
  auto ref = TensorRef::Parse(spec.substr(0, eq));
  if (!ref.ok()) return ref.status();
  const NodeDef* placeholder = FindNodeDef(graph, ref->node);
  DataType dtype = DT_FLOAT;
  if (placeholder != nullptr && placeholder->attr().contains("dtype")) {
    dtype = placeholder->attr().at("dtype").type();
  }
  std::string rest = spec.substr(eq + 1);
  if (rest == "random" || absl::StartsWith(rest, "random:")) {
    uint64_t seed = 0;
    if (rest != "random" && !absl::SimpleAtoi(rest.substr(7), &seed)) {
      return absl::InvalidArgumentError(absl::StrCat("feed '", spec, "': bad seed"));
    }
    auto shape = KnownShape(placeholder);
    if (!shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "feed '", spec, "': '", ref->node, "' is not a placeholder of fully known shape"));
    }
    auto t = RandomTensor(dtype, *shape, seed);
    if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat("feed '", spec, "': ", t.status().message()));
    return std::make_pair(*ref, *t);
  }
  std::string values = rest, dims;
  bool explicit_shape = false;
  if (!absl::StartsWith(rest, "@")) {
    if (const size_t colon = rest.find(':'); colon != std::string::npos) {
      explicit_shape = true;
      values = rest.substr(colon + 1);
      dims = rest.substr(0, colon);
    }
  }
  if (absl::StartsWith(values, "@")) {
    auto t = FeedFromFile(spec, ref->node, values.substr(1), dims, explicit_shape, dtype,
                          placeholder);
    if (!t.ok()) return t.status();
    return std::make_pair(*ref, *t);
  }
  TensorShape shape;
  if (explicit_shape && dims != "scalar") {
    auto parsed = ParseDims(spec, dims);
    if (!parsed.ok()) return parsed.status();
    shape = *parsed;
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
  auto t = test::FromDoubles(dtype, shape, vals);
  if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat("feed '", spec, "': ", t.status().message()));
  return std::make_pair(*ref, *t);
}

std::vector<std::string> AddRandomFeeds(GradientRequest* request, uint64_t seed) {
  std::vector<std::string> fed;
  for (const NodeDef& n : request->graph.node()) {
    if (n.op() != "Placeholder") continue;
    bool has_feed = false;
    for (const auto& [ref, t] : request->feeds) has_feed |= ref.node == n.name();
    if (has_feed) continue;
    auto shape = KnownShape(&n);
    if (!shape || !n.attr().contains("dtype")) continue;
    auto t = RandomTensor(n.attr().at("dtype").type(), *shape, seed);
    if (!t.ok()) continue;
    request->feeds.push_back({TensorRef{n.name(), 0}, *t});
    fed.push_back(n.name());
  }
  return fed;
}

absl::Status SaveGradients(const std::string& path, const GradientRequest& request,
                           const GradientResult& result) {
  std::vector<std::pair<std::string, Tensor>> arrays = {{"y", result.y}};
  for (size_t i = 0; i < request.xs.size(); ++i) {
    const TensorRef& x = request.xs[i];
    std::string name = "d_" + x.node;
    if (x.index != 0) absl::StrAppend(&name, "_", x.index);
    for (char& c : name) {
      if (c == '/' || c == ':') c = '_';
    }
    arrays.push_back({name, result.grads[i]});
  }
  if (absl::EndsWith(path, ".npz")) return WriteNpz(path, arrays);
  std::string text;
  for (const auto& [name, t] : arrays) {
    std::vector<std::string> dims, values;
    for (int d = 0; d < t.dims(); ++d) dims.push_back(absl::StrCat(t.dim_size(d)));
    for (double v : test::ToDoubles(t)) values.push_back(absl::StrFormat("%.17g", v));
    absl::StrAppend(&text, name, " ", DataTypeString(t.dtype()), " [", absl::StrJoin(dims, ","),
                    "] ", absl::StrJoin(values, " "), "\n");
  }
  return WriteStringToFile(Env::Default(), path, text);
}

std::string FormatTensor(const Tensor& t, int max_values) {
  std::vector<std::string> vals;
  const int64_t n = t.NumElements();
  const std::vector<double> values = test::ToDoubles(t);
  for (int64_t i = 0; i < std::min<int64_t>(values.size(), max_values); ++i) {
    vals.push_back(absl::StrCat(values[i]));
  }
  if (n > max_values) vals.push_back(absl::StrCat("... (", n - max_values, " more)"));
  return absl::StrCat(DataTypeString(t.dtype()), " ", t.shape().DebugString(), " = [",
                      absl::StrJoin(vals, " "), "]");
}

namespace {

// A static graph: the Session drops its GraphDef once it has built its executors. Unless
// `optimize`, TensorFlow's graph optimizations are off: on a frozen model, constant folding
// (classic L1 and Grappler's) copies every weight that passes an Identity, and Grappler's
// passes over the forward + backward graph cost more than they save (Keras ResNet152,
// training mode, batch 8: peak RSS 3.55 GB -> 1.30 GB, run 13.8 s -> 5.0 s, same gradient).
SessionOptions GradientSessionOptions(bool optimize) {
  SessionOptions options;
  options.config.mutable_experimental()->set_optimize_for_static_graph(true);
  if (!optimize) {
    options.config.mutable_graph_options()->mutable_rewrite_options()->set_disable_meta_optimizer(
        true);
    options.config.mutable_graph_options()->mutable_optimizer_options()->set_opt_level(
        OptimizerOptions::L0);
  }
  return options;
}

// Imports, inlines and differentiates the request's graph into `backward` (forward +
// backward); `grad_names`: the tensor of d sum(y) / d x, per x. The Graph exists only in here.
absl::Status BuildBackwardGraph(GradientRequest* request_ptr, const GradientOptions& options,
                                GradientResult* result, GraphDef* backward,
                                std::vector<std::string>* grad_names) {
  const GradientRequest& request = *request_ptr;
  Graph g(OpRegistry::Global());
  GraphConstructorOptions opts;
  absl::Status s = ConvertGraphDefToGraph(opts, request.graph, &g);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("cannot import the graph: ", s.message(),
                                               " (is the op library that defines it loaded?)"));
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
  for (const NodeOut& x : xs) {
    std::vector<NodeOut> grad;
    TF_RETURN_IF_ERROR(AddSymbolicGradients({{y_ret, 0}}, {x}, {{dy, 0}}, &grad, &g));
    grad_names->push_back(grad[0].name());
  }
  g.ToGraphDef(backward);
  return absl::OkStatus();
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
  result->session.reset(NewSession(GradientSessionOptions(options.optimize_graph)));
  if (result->session == nullptr) return absl::InternalError("could not create a Session");
  TF_RETURN_IF_ERROR(result->session->Create(std::move(backward)));
  // x values: a fed x is taken from its feed (TensorFlow refuses to fetch a fed tensor).
  const auto feeds = Feeds(req);
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

absl::Status NumericCheck(const GradientRequest& request, const GradientResult& result,
                          const NumericCheckOptions& options, NumericCheckResult* check) {
  const double start = Seconds();
  *check = NumericCheckResult();
  // One pass finds the surrogate nodes; the forward graph (its weights) is copied only if
  // there are any, and only their nodes are rewritten.
  std::vector<std::pair<int, FunctionDef>> surrogates;
  for (int i = 0; i < request.graph.node_size(); ++i) {
    FunctionDef surrogate;
    if (SpecializedSurrogateForward(request.graph.node(i), &surrogate).ok()) {
      surrogates.emplace_back(i, std::move(surrogate));
    }
  }
  GraphDef numeric;
  if (!surrogates.empty()) numeric = request.graph;
  std::set<std::string> in_library;
  for (auto& [index, surrogate] : surrogates) {
    NodeDef& n = *numeric.mutable_node(index);
    check->surrogates.push_back(absl::StrCat(n.op(), " (node '", n.name(), "')"));
    const std::string fname = surrogate.signature().name();
    if (in_library.insert(fname).second) *numeric.mutable_library()->add_function() = surrogate;
    n.set_op(fname);
    n.clear_attr();
  }
  Session* session = result.session.get();
  std::unique_ptr<Session> numeric_session;
  if (!check->surrogates.empty()) {
    numeric_session.reset(NewSession(GradientSessionOptions(options.optimize_graph)));
    if (numeric_session == nullptr) return absl::InternalError("could not create a Session");
    TF_RETURN_IF_ERROR(numeric_session->Create(numeric));
    session = numeric_session.get();
  }
  std::mt19937_64 gen(options.seed);
  for (size_t i = 0; i < request.xs.size(); ++i) {
    const Tensor& base = result.xs[i];
    if (!test::IsFloatingPoint(base.dtype())) continue;
    const double h = options.delta > 0 ? options.delta : (base.dtype() == DT_DOUBLE ? 1e-6 : 1e-3);
    const std::string name = request.xs[i].ToString();
    // Feeding x overrides whatever computed it (placeholder or intermediate tensor).
    auto feeds = Feeds(request);
    feeds.erase(std::remove_if(feeds.begin(), feeds.end(),
                               [&](const auto& f) { return f.first == name; }),
                feeds.end());
    feeds.push_back({name, Tensor()});
    const std::vector<double> base_values = test::ToDoubles(base);
    const std::vector<double> grad_values = test::ToDoubles(result.grads[i]);
    const int64_t n = base.NumElements();
    const int projections = options.projections >= 0 ? options.projections : (n <= 256 ? 0 : 16);
    if (projections > 0) check->projections = projections;
    // Elementwise: direction e_k. Projection: direction v in {-1, +1}^n; d sum(y) along v is
    // <grad, v>.
    const int64_t directions = projections > 0 ? projections : n;
    std::vector<double> v(n);
    for (int64_t k = 0; k < directions; ++k) {
      if (projections > 0) {
        for (double& e : v) e = (gen() & 1) ? 1.0 : -1.0;
      }
      double f[2];
      for (int side = 0; side < 2; ++side) {
        std::vector<double> x = base_values;
        const double step = side == 0 ? h : -h;
        if (projections > 0) {
          for (int64_t e = 0; e < n; ++e) x[e] += step * v[e];
        } else {
          x[k] += step;
        }
        auto fed = test::FromDoubles(base.dtype(), base.shape(), x);
        if (!fed.ok()) return fed.status();
        feeds.back().second = *fed;
        std::vector<Tensor> y;
        TF_RETURN_IF_ERROR(session->Run(feeds, {request.y.ToString()}, {}, &y));
        f[side] = Sum(y[0]);
      }
      const double num = (f[0] - f[1]) / (2 * h);
      double sym = 0;
      if (projections > 0) {
        for (int64_t e = 0; e < n; ++e) sym += grad_values[e] * v[e];
      } else {
        sym = grad_values[k];
      }
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
  check->seconds = Seconds() - start;
  return absl::OkStatus();
}

}  // namespace tensorflow::tf_ext::tools
