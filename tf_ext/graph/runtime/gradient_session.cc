#include "tf_ext/graph/runtime/gradient_session.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "tensorflow/core/common_runtime/graph_constructor.h"
#include "tensorflow/core/common_runtime/shape_refiner.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/graph/algorithm.h"
#include "tensorflow/core/graph/node_builder.h"
#include "tensorflow/core/util/overflow.h"
#include "tf_ext/graph/io/feeds.h"
#include "tf_ext/graph/pipeline/gradient_pipeline.h"
#include "tf_ext/graph/io/graph_io.h"
#include "tf_ext/graph/passes/xla_cluster.h"
#include "tf_ext/graph/runtime/grappler_stages.h"
#include "tf_ext/graph/runtime/session_options.h"

namespace tensorflow::tf_ext {
namespace {

constexpr char kWhat[] = "GradientSession: ";
// Integer feeds of at most this many elements take part in the shape check by value (they may
// be sizes: tf.zeros([n, n]) with a fed n).
constexpr int64_t kValueFeedElements = 16;
// Shape-check results kept (per feed signature) before the cache starts over.
constexpr size_t kCheckCacheSize = 256;

std::string NodeName(const std::string& feed) {
  return std::string(absl::StripSuffix(feed, ":0"));
}

bool IsValueFeed(const Tensor& t) {
  return (t.dtype() == DT_INT32 || t.dtype() == DT_INT64) && t.NumElements() <= kValueFeedElements;
}

// Half of physical memory, as random feeds are bounded (feeds.h).
int64_t DefaultBudget() {
  const double memory = PhysicalMemoryBytes();
  return memory > 0 ? static_cast<int64_t>(memory / 2) : (int64_t{1} << 34);
}

std::string ShapeString(const TensorShape& s) { return s.DebugString(); }

// "x [2,3], n [] = 4": the feeds a shape-check error blames.
std::string DescribeFeeds(const std::vector<std::pair<std::string, Tensor>>& feeds) {
  std::vector<std::string> parts;
  for (const auto& [name, t] : feeds) {
    std::string part = absl::StrCat("'", NodeName(name), "' ", ShapeString(t.shape()));
    if (IsValueFeed(t)) absl::StrAppend(&part, " = ", t.SummarizeValue(kValueFeedElements));
    parts.push_back(part);
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace

std::string IncomingGradientName(const TensorRef& y, const std::string& y_name) {
  std::string name =
      y_name.empty() ? absl::StrCat("d_", y.node, y.index == 0 ? "" : absl::StrCat("_", y.index))
                     : absl::StrCat("d_", y_name);
  for (char& c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  }
  return name;
}

GradientSession::~GradientSession() {
  absl::MutexLock lock(&session_mu_);
  if (session_ != nullptr) session_->Close().IgnoreError();
}

absl::StatusOr<std::unique_ptr<GradientSession>> GradientSession::Create(
    GraphDef graph, const GradientSessionSpec& spec, const GradientSessionOptions& options) {
  std::unique_ptr<GradientSession> gs(new GradientSession());
  gs->spec_ = spec;
  gs->budget_ = options.max_tensor_bytes > 0 ? options.max_tensor_bytes : DefaultBudget();
  // The forward graph's placeholders are the inputs.
  for (const NodeDef& n : graph.node()) {
    const bool with_default = n.op() == "PlaceholderWithDefault";
    if (n.op() != "Placeholder" && !with_default) continue;
    GradientSessionInput input;
    auto alias = spec.input_names.find(n.name());
    input.name = alias != spec.input_names.end() ? alias->second : n.name();
    input.node = n.name();
    input.required = !with_default;
    if (!GetNodeAttr(AttrSlice(n), "dtype", &input.dtype).ok()) continue;
    TensorShapeProto shape;
    if (GetNodeAttr(AttrSlice(n), "shape", &shape).ok()) {
      TF_RETURN_IF_ERROR(PartialTensorShape::BuildPartialTensorShape(shape, &input.shape));
    }
    gs->inputs_.push_back(input);
  }
  if (!spec.y_names.empty() && spec.y_names.size() != spec.ys.size()) {
    return absl::InvalidArgumentError(absl::StrCat(kWhat, spec.y_names.size(), " y names for ",
                                                   spec.ys.size(), " ys"));
  }
  std::set<std::string> input_names, input_nodes;
  for (const GradientSessionInput& in : gs->inputs_) {
    input_names.insert(in.name);
    input_nodes.insert(in.node);
  }

  GradientGraphSpec build_spec;
  build_spec.ys = spec.ys;
  build_spec.xs = spec.xs;
  build_spec.incoming_gradients = spec.incoming_gradients;
  build_spec.named_nodes = input_nodes;
  build_spec.role_prefix = kWhat;
  build_spec.feed_shapes = options.feed_shapes;
  build_spec.backward_memory_budget = options.backward_memory_budget;
  GradientOptions build_options;
  build_options.optimize_graph = options.optimize_graph;
  build_options.hoist_constants = options.hoist_constants;
  build_options.release_forward_graph = true;
  GradientGraph built;
  TF_RETURN_IF_ERROR(BuildGradientGraph(&graph, build_spec, build_options, &gs->build_, &built));
  gs->build_.backward_nodes = built.graph.node_size();

  gs->prefix_ = built.prefix;
  for (const std::string& y : built.y_names) gs->fetches_.push_back(y);
  for (const std::string& dx : built.dx_names) gs->fetches_.push_back(dx);
  // Only the placeholders the fetches need must be fed.
  std::set<std::string> fetched;
  for (const std::string& f : gs->fetches_) fetched.insert(InputNodeName(f));
  const std::set<std::string> needed = NeededNodes(built.graph, fetched);
  std::vector<GradientSessionInput> inputs;
  for (GradientSessionInput& in : gs->inputs_) {
    if (!needed.count(in.node)) continue;
    gs->input_tensors_.push_back(in.node + ":0");
    inputs.push_back(std::move(in));
  }
  for (size_t i = 0; i < spec.ys.size(); ++i) {
    if (built.dy_names[i].empty()) continue;
    GradientSessionInput in;
    in.name = IncomingGradientName(spec.ys[i], spec.y_names.empty() ? "" : spec.y_names[i]);
    in.node = NodeName(built.dy_names[i]);
    if (input_names.count(in.name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          kWhat, "the incoming gradient of y '", spec.ys[i].ToString(), "' would be fed as '",
          in.name, "', which is already a placeholder of the graph"));
    }
    for (const NodeDef& n : built.graph.node()) {
      if (n.name() == NodeName(built.dy_names[i])) {
        GetNodeAttr(AttrSlice(n), "dtype", &in.dtype).IgnoreError();
      }
    }
    gs->input_tensors_.push_back(built.dy_names[i]);
    inputs.push_back(std::move(in));
  }
  gs->inputs_ = std::move(inputs);
  for (size_t i = 0; i < gs->inputs_.size(); ++i) gs->input_index_[gs->inputs_[i].name] = i;

  // The shape checks' graph: large constants as placeholders of their shapes (no copy of the
  // weights). With hoist_constants the Session's graph has them so too, fed per run.
  std::set<std::string> keep = input_nodes;
  for (const TensorRef& y : spec.ys) keep.insert(y.node);
  for (const TensorRef& x : spec.xs) keep.insert(x.node);
  if (HoistsConstants(build_options, options.backward_memory_budget)) {
    gs->constant_feeds_ = HoistConstants(keep, &built.graph);
  }
  {
    const GraphDef shape_def = ShapeOnlyCopy(built.graph, keep);
    gs->shape_graph_ = std::make_unique<Graph>(OpRegistry::Global());
    TF_RETURN_IF_ERROR(ConvertGraphDefToGraph(GraphConstructorOptions(), shape_def,
                                              gs->shape_graph_.get()));
  }
  SessionOptions session_options = BackwardSessionOptions(options.optimize_graph);
  session_options.config.set_intra_op_parallelism_threads(options.intra_op_threads);
  session_options.config.set_inter_op_parallelism_threads(options.inter_op_threads);
  if (options.optimize_graph && options.backward_memory_budget.set()) {
    OptimizedRunSpec run;
    run.prefix = built.prefix;
    run.deferred = built.deferred_gradient_nodes;
    run.keep = keep;
    run.fetches = gs->fetches_;
    for (const std::string& in : gs->input_tensors_) run.feeds.push_back(InputNodeName(in));
    for (const auto& [name, value] : gs->constant_feeds_) run.feeds.push_back(InputNodeName(name));
    run.feed_shapes = options.feed_shapes;
    run.budget = options.backward_memory_budget;
    TF_RETURN_IF_ERROR(PlanOptimizedRun(run, &built.graph, &session_options, &gs->build_.memory));
  }
  if (options.jit_compile) {
    if (options.backward_memory_budget.set()) {
      return absl::InvalidArgumentError(absl::StrCat(
          kWhat, "jit_compile and a memory budget: XLA plans the memory of its cluster itself; "
          "drop one"));
    }
    XlaClusterSpec cluster_spec;
    cluster_spec.feeds = gs->input_tensors_;
    for (const auto& [name, value] : gs->constant_feeds_) cluster_spec.feeds.push_back(name);
    cluster_spec.fetches = gs->fetches_;
    TF_ASSIGN_OR_RETURN(XlaCluster cluster, AddXlaCluster(&built.graph, cluster_spec));
    gs->fetches_ = cluster.fetches;
    gs->build_.xla_cluster_nodes = cluster.nodes;
    gs->jit_ = true;
    gs->jit_cache_ = std::max(options.jit_compile_cache, 1);
    gs->jit_graph_ = built.graph;
  }
  gs->session_options_ = session_options;
  Session* session = nullptr;
  TF_RETURN_IF_ERROR(NewSession(session_options, &session));
  absl::MutexLock lock(&gs->session_mu_);
  gs->session_.reset(session);
  TF_RETURN_IF_ERROR(gs->session_->Create(std::move(built.graph)));
  return gs;
}

int GradientSession::jit_compiled_signatures() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(jit_signatures_.size());
}

absl::Status GradientSession::NoteCompiledSignature(const std::string& signature) const {
  {
    absl::MutexLock lock(&mu_);
    if (jit_signatures_.count(signature)) return absl::OkStatus();
    if (jit_signatures_.size() < jit_cache_) {
      jit_signatures_.insert(signature);
      if (jit_signatures_.size() > 1 && !jit_warned_) {
        jit_warned_ = true;
        LOG(WARNING) << kWhat << "jit_compile: new feed shapes (" << signature
                     << "): XLA compiles the cluster again for every new signature of feed "
                        "shapes (at most " << jit_cache_ << " kept); pad inputs to fixed "
                        "shapes to compile once (docs/xla.md)";
      }
      return absl::OkStatus();
    }
    jit_signatures_ = {signature};
  }
  // Past the cache: a new Session, whose devices hold no compiled program.
  Session* fresh = nullptr;
  TF_RETURN_IF_ERROR(NewSession(session_options_, &fresh));
  std::unique_ptr<Session> owned(fresh);
  TF_RETURN_IF_ERROR(owned->Create(jit_graph_));
  absl::MutexLock lock(&session_mu_);
  session_->Close().IgnoreError();
  session_ = std::move(owned);
  return absl::OkStatus();
}

absl::Status GradientSession::ValidateFeeds(
    const std::vector<std::pair<std::string, Tensor>>& feeds,
    std::vector<std::pair<std::string, Tensor>>* session_feeds, std::string* signature) const {
  std::vector<const Tensor*> given(inputs_.size(), nullptr);
  for (const auto& [name, value] : feeds) {
    auto it = input_index_.find(NodeName(name));
    if (it == input_index_.end()) {
      std::vector<std::string> names;
      for (const GradientSessionInput& in : inputs_) names.push_back(in.name);
      return absl::InvalidArgumentError(absl::StrCat(kWhat, "feed '", name,
                                                     "' is not an input; the inputs are: ",
                                                     absl::StrJoin(names, ", ")));
    }
    const GradientSessionInput& in = inputs_[it->second];
    if (given[it->second] != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(kWhat, "feed '", in.name, "' is given twice"));
    }
    if (!value.IsInitialized()) {
      return absl::InvalidArgumentError(absl::StrCat(kWhat, "feed '", in.name, "' has no value"));
    }
    if (value.dtype() != in.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(kWhat, "feed '", in.name, "' is ",
                                                     DataTypeString(value.dtype()),
                                                     "; the input takes ",
                                                     DataTypeString(in.dtype)));
    }
    if (!in.shape.IsCompatibleWith(value.shape())) {
      return absl::InvalidArgumentError(absl::StrCat(kWhat, "feed '", in.name, "' has shape ",
                                                     value.shape().DebugString(),
                                                     "; the input takes ", in.shape.DebugString()));
    }
    given[it->second] = &value;
  }
  signature->clear();
  for (size_t i = 0; i < inputs_.size(); ++i) {
    if (given[i] == nullptr) {
      if (inputs_[i].required) {
        return absl::InvalidArgumentError(absl::StrCat(kWhat, "feed '", inputs_[i].name,
                                                       "' is missing (", DataTypeString(inputs_[i].dtype),
                                                       " ", inputs_[i].shape.DebugString(), ")"));
      }
      absl::StrAppend(signature, i, ":-;");
      continue;
    }
    session_feeds->push_back({input_tensors_[i], *given[i]});
    absl::StrAppend(signature, i, ":", given[i]->shape().DebugString());
    if (IsValueFeed(*given[i])) {
      absl::StrAppend(signature, "=", given[i]->SummarizeValue(kValueFeedElements));
    }
    absl::StrAppend(signature, ";");
  }
  return absl::OkStatus();
}

absl::Status GradientSession::CheckShapes(
    const std::vector<std::pair<std::string, Tensor>>& session_feeds) const {
  // A copy of the shape graph whose fed placeholders take the feeds' shapes (small integer
  // feeds become constants of their values, for shape functions that read sizes).
  Graph g(shape_graph_->flib_def());
  CopyGraph(*shape_graph_, &g);
  std::map<std::string, Node*> nodes;
  for (Node* n : g.op_nodes()) nodes[n->name()] = n;
  for (const auto& [tensor, value] : session_feeds) {
    auto it = nodes.find(NodeName(tensor));
    if (it == nodes.end()) continue;
    Node* n = it->second;
    if (IsValueFeed(value)) {
      Node* c = nullptr;
      TF_RETURN_IF_ERROR(NodeBuilder(g.NewName(n->name() + "/value"), "Const")
                             .Attr("dtype", value.dtype())
                             .Attr("value", value)
                             .Finalize(&g, &c));
      std::vector<const Edge*> out(n->out_edges().begin(), n->out_edges().end());
      for (const Edge* e : out) {
        if (e->IsControlEdge()) {
          g.AddControlEdge(c, e->dst());
        } else {
          TF_RETURN_IF_ERROR(g.UpdateEdge(c, 0, e->dst(), e->dst_input()));
        }
      }
    } else if (n->type_string() == "Placeholder" || n->type_string() == "PlaceholderWithDefault") {
      TensorShapeProto proto;
      value.shape().AsProto(&proto);
      n->ClearAttr("shape");
      n->AddAttr("shape", proto);
    }
  }
  ShapeRefiner refiner(g.versions(), g.op_registry());
  refiner.set_function_library_for_shape_inference(&g.flib_def());
  FixupSourceAndSinkEdges(&g);
  std::vector<Node*> order;
  GetReversePostOrder(g, &order, NodeComparatorName());
  auto blame = [&]() { return DescribeFeeds(session_feeds); };
  for (Node* n : order) {
    if (!n->IsOp()) continue;
    bool inputs_known = true;
    for (const Edge* e : n->in_edges()) {
      if (!e->IsControlEdge() && e->src()->IsOp() && refiner.GetContext(e->src()) == nullptr) {
        inputs_known = false;
      }
    }
    if (!inputs_known) continue;
    absl::Status s = refiner.AddNode(n);
    if (!s.ok()) {
      // The forward graph's shape functions reject these shapes (a kernel would too); the
      // backward nodes' are not trusted to be exact, and the run checks them.
      if (!absl::StartsWith(n->name(), prefix_ + "/")) {
        return absl::InvalidArgumentError(absl::StrCat(kWhat, "the feeds (", blame(),
                                                       ") do not fit node '", n->name(), "' (",
                                                       n->type_string(), "): ", s.message()));
      }
      continue;
    }
    shape_inference::InferenceContext* c = refiner.GetContext(n);
    for (int i = 0; i < c->num_outputs(); ++i) {
      shape_inference::ShapeHandle h = c->output(i);
      if (!c->RankKnown(h)) continue;
      const int64_t bytes_per_element = DataTypeSize(n->output_type(i));
      int64_t elements = 1;
      bool known = true;
      for (int d = 0; d < c->Rank(h); ++d) {
        const int64_t v = c->Value(c->Dim(h, d));
        if (v < 0) {
          known = false;  // an unknown dimension: counted as nothing
          break;
        }
        elements = MultiplyWithoutOverflow(elements, v);
        if (elements < 0) break;
      }
      if (!known) continue;
      const int64_t bytes =
          elements < 0 ? -1 : MultiplyWithoutOverflow(elements, std::max<int64_t>(bytes_per_element, 1));
      if (bytes < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            kWhat, "the feeds (", blame(), ") make node '", n->name(), "' (", n->type_string(),
            ") output ", c->DebugString(h), ", whose size overflows int64"));
      }
      if (bytes > budget_) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%sthe feeds (%s) make node '%s' (%s) output %s %s: %.3g bytes, over "
            "max_tensor_bytes (%.3g bytes)",
            kWhat, blame(), n->name(), n->type_string(), DataTypeString(n->output_type(i)),
            c->DebugString(h), static_cast<double>(bytes), static_cast<double>(budget_)));
      }
    }
  }
  // An incoming gradient must have its y's shape where shape inference knows it (the graph
  // checks it again on every run, for shapes inference leaves open).
  for (size_t i = 0; i < spec_.ys.size(); ++i) {
    if (spec_.incoming_gradients.empty() || !spec_.incoming_gradients[i]) continue;
    auto y = nodes.find(spec_.ys[i].node);
    if (y == nodes.end()) continue;
    shape_inference::InferenceContext* c = refiner.GetContext(y->second);
    if (c == nullptr || spec_.ys[i].index >= c->num_outputs()) continue;
    shape_inference::ShapeHandle h = c->output(spec_.ys[i].index);
    const std::string name =
        IncomingGradientName(spec_.ys[i], spec_.y_names.empty() ? "" : spec_.y_names[i]);
    for (const auto& [tensor, value] : session_feeds) {
      if (tensor != input_tensors_[input_index_.at(name)]) continue;
      shape_inference::ShapeHandle fed_shape;
      if (!c->MakeShapeFromTensorShape(value.shape(), &fed_shape).ok()) continue;
      shape_inference::ShapeHandle merged;
      if (!c->Merge(h, fed_shape, &merged).ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            kWhat, "feed '", name, "' has shape ", value.shape().DebugString(), "; y '",
            spec_.ys[i].ToString(), "' has shape ", c->DebugString(h)));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status GradientSession::Prepare(
    const std::vector<std::pair<std::string, Tensor>>& feeds,
    std::vector<std::pair<std::string, Tensor>>* session_feeds, std::string* signature_out) const {
  std::string signature;
  TF_RETURN_IF_ERROR(ValidateFeeds(feeds, session_feeds, &signature));
  if (signature_out != nullptr) *signature_out = signature;
  {
    absl::MutexLock lock(&mu_);
    auto it = checked_.find(signature);
    if (it != checked_.end()) return it->second;
  }
  absl::Status s = CheckShapes(*session_feeds);
  absl::MutexLock lock(&mu_);
  if (checked_.size() >= kCheckCacheSize) checked_.clear();
  checked_[signature] = s;
  return s;
}

absl::Status GradientSession::CheckRequest(
    const std::vector<std::pair<std::string, Tensor>>& feeds) const {
  std::vector<std::pair<std::string, Tensor>> session_feeds;
  return Prepare(feeds, &session_feeds);
}

absl::Status GradientSession::Run(const std::vector<std::pair<std::string, Tensor>>& feeds,
                                  std::vector<Tensor>* ys, std::vector<Tensor>* dxs) const {
  std::vector<std::pair<std::string, Tensor>> session_feeds;
  std::string signature;
  TF_RETURN_IF_ERROR(Prepare(feeds, &session_feeds, &signature));
  if (jit_) TF_RETURN_IF_ERROR(NoteCompiledSignature(signature));
  session_feeds.insert(session_feeds.end(), constant_feeds_.begin(), constant_feeds_.end());
  std::vector<Tensor> outs;
  {
    absl::ReaderMutexLock lock(&session_mu_);
    TF_RETURN_IF_ERROR(session_->Run(session_feeds, fetches_, {}, &outs));
  }
  const size_t ny = spec_.ys.size();
  ys->assign(outs.begin(), outs.begin() + ny);
  dxs->assign(outs.begin() + ny, outs.end());
  return absl::OkStatus();
}

}  // namespace tensorflow::tf_ext
