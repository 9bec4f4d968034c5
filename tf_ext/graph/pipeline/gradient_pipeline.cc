#include "tf_ext/graph/pipeline/gradient_pipeline.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/common_runtime/graph_constructor.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/tensor.pb.h"
#include "tensorflow/core/graph/algorithm.h"
#include "tensorflow/core/graph/graph.h"
#include "tensorflow/core/graph/node_builder.h"
#include "tensorflow/core/graph/optimizer_cse.h"
#include "tensorflow/compiler/tf2xla/functionalize_control_flow.h"
#include "tf_ext/graph/engine/backprop.h"
#include "tf_ext/graph/engine/control_flow.h"
#include "tf_ext/graph/engine/inline_calls.h"
#include "tf_ext/graph/passes/simplify_backward.h"
#include "tf_ext/graph/engine/workarounds.h"
#include "tf_ext/graph/io/tensor_doubles.h"

namespace tensorflow::tf_ext {
namespace {

absl::StatusOr<Node*> FindNode(const std::map<std::string, Node*>& nodes, const TensorRef& ref,
                               const std::string& role) {
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
      // Nor inside a name: the memory plan takes "<pass>/<prefix>/..." (a node Grappler made
      // of a gradient node) for a gradient node.
      if (n->name() == prefix || absl::StartsWith(n->name(), prefix + "/") ||
          absl::StrContains(n->name(), absl::StrCat("/", prefix, "/"))) {
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

Node* AddConst(Graph* g, const std::string& name, const Tensor& value) {
  Node* n = nullptr;
  TF_CHECK_OK(NodeBuilder(g->NewName(name), "Const")
                  .Attr("dtype", value.dtype())
                  .Attr("value", value)
                  .Finalize(g, &n));
  return n;
}

// A fed incoming gradient for y: a Placeholder of y's dtype, passed on only once a run has
// checked that it has y's shape (a smaller one would broadcast through the backward graph into
// wrong gradients). The check compares [rank(dy), shape(dy), rank(y), shape(y)] with
// [rank(y), shape(y), rank(dy), shape(dy)]: equal exactly when the shapes are.
absl::StatusOr<GraphTensor> AddCheckedIncomingGradient(Graph* g, const std::string& prefix,
                                                       Node* y, int index, const std::string& what,
                                                       std::string* placeholder_name) {
  const DataType dtype = y->output_type(index);
  Node* dy = nullptr;
  TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(prefix + "/dy"), "Placeholder")
                         .Attr("dtype", dtype)
                         .Finalize(g, &dy));
  *placeholder_name = dy->name();
  auto shape = [&](Node* n, int i, Node** out) {
    return NodeBuilder(g->NewName(prefix + "/dy_check/shape"), "Shape")
        .Input(n, i)
        .Attr("out_type", DT_INT64)
        .Finalize(g, out);
  };
  Node *dy_shape = nullptr, *y_shape = nullptr;
  TF_RETURN_IF_ERROR(shape(dy, 0, &dy_shape));
  TF_RETURN_IF_ERROR(shape(y, index, &y_shape));
  Node* zero = AddConst(g, prefix + "/dy_check/zero", Tensor(0));
  auto rank = [&](Node* s, Node** out) -> absl::Status {  // [rank] = [size(shape)]
    Node* size = nullptr;
    TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(prefix + "/dy_check/rank"), "Size")
                           .Input(s)
                           .Attr("out_type", DT_INT64)
                           .Finalize(g, &size));
    return NodeBuilder(g->NewName(prefix + "/dy_check/rank"), "ExpandDims")
        .Input(size)
        .Input(zero)
        .Finalize(g, out);
  };
  Node *dy_rank = nullptr, *y_rank = nullptr;
  TF_RETURN_IF_ERROR(rank(dy_shape, &dy_rank));
  TF_RETURN_IF_ERROR(rank(y_shape, &y_rank));
  auto concat = [&](std::vector<NodeBuilder::NodeOut> parts, Node** out) {
    return NodeBuilder(g->NewName(prefix + "/dy_check/concat"), "ConcatV2")
        .Input(parts)
        .Input(zero)
        .Finalize(g, out);
  };
  Node *a = nullptr, *b = nullptr;
  TF_RETURN_IF_ERROR(concat({{dy_rank, 0}, {dy_shape, 0}, {y_rank, 0}, {y_shape, 0}}, &a));
  TF_RETURN_IF_ERROR(concat({{y_rank, 0}, {y_shape, 0}, {dy_rank, 0}, {dy_shape, 0}}, &b));
  Node *equal = nullptr, *all = nullptr, *check = nullptr, *checked = nullptr;
  TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(prefix + "/dy_check/equal"), "Equal")
                         .Input(a)
                         .Input(b)
                         .Finalize(g, &equal));
  TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(prefix + "/dy_check/all"), "All")
                         .Input(equal)
                         .Input(zero)
                         .Finalize(g, &all));
  Tensor message(DT_STRING, TensorShape({}));
  message.scalar<tstring>()() =
      absl::StrCat(what, " must have the shape of y; got its shape, then y's:");
  Node* text = AddConst(g, prefix + "/dy_check/message", message);
  TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(prefix + "/dy_check/assert"), "Assert")
                         .Input(all)
                         .Input(std::vector<NodeBuilder::NodeOut>{{text, 0}, {dy_shape, 0}, {y_shape, 0}})
                         .Finalize(g, &check));
  TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(prefix + "/dy_checked"), "Identity")
                         .Input(dy)
                         .ControlInput(check)
                         .Finalize(g, &checked));
  return GraphTensor{checked, 0};
}

}  // namespace

absl::Status GradientPipeline::PrepareForward(Graph* g) {
  // Nodes added without inputs (a C API TF_NewOperation Placeholder) are reached from the
  // source node, which functionalization and the path search walk from.
  FixupSourceAndSinkEdges(g);
  // 1. Lowered loops and conditionals left in the graph (a C API TF_NewWhile; an imported
  // GraphDef's were converted before import, FunctionalizeV1ControlFlow) back to While/If.
  bool v1 = false;
  for (const Node* n : g->op_nodes()) v1 |= IsV1ControlFlow(n->type_string());
  if (v1) {
    absl::Status s = FunctionalizeControlFlow(g, g->mutable_flib_def());
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the graph's lowered (v1) control flow does not form loops and conditionals "
          "TensorFlow can convert back to While and If: ", s.message()));
    }
    stats_.converted_v1_control_flow = true;
  }
  // 2. Function calls inlined.
  if (options_.inline_calls) {
    auto inlined = InlineFunctionCalls(g);
    if (!inlined.ok()) return inlined.status();
    stats_.inlined_calls += *inlined;
  }
  // 3. Forward rewrites for TensorFlow's kernels.
  if (options_.rewrite_forward) {
    auto workarounds = WorkAroundGradientBugs(g);
    if (!workarounds.ok()) return workarounds.status();
    stats_.workarounds = *workarounds;
  }
  return absl::OkStatus();
}

absl::Status GradientPipeline::AddBackward(Graph* g, const std::vector<GraphTensor>& ys,
                                           const std::vector<GraphTensor>& dys,
                                           const std::vector<GraphTensor>& xs,
                                           std::vector<GraphTensor>* dxs) {
  // 4. The backward nodes (backprop.h), one pass for every x's total derivative.
  BackpropOptions backprop;
  backprop.inline_gradients = options_.inline_gradients;
  backprop.name_prefix = options_.name_prefix;
  backprop.recompute_loop_bodies = options_.backward_memory_budget.set();
  TF_RETURN_IF_ERROR(AddGradients(g, ys, dys, xs, dxs, backprop, &stats_.backprop));
  if (options_.inline_gradients) TF_RETURN_IF_ERROR(SimplifyInlined(g));
  // 6. The memory the run needs, and what is recomputed to fit a budget.
  if (options_.plan_memory || options_.backward_memory_budget.set()) {
    std::set<std::string> seeds;
    for (const GraphTensor& dy : dys) seeds.insert(dy.node->name());
    TF_RETURN_IF_ERROR(PlanMemory(g, options_.name_prefix, options_.keep, seeds,
                                  options_.feed_shapes,
                                  options_.plan_budget_after_optimization
                                      ? MemoryBudget()
                                      : options_.backward_memory_budget,
                                  options_.optimized_run, &stats_.memory));
  }
  return absl::OkStatus();
}

absl::Status GradientPipeline::SimplifyInlined(Graph* g) {
  // 5. An inlined gradient body that recomputes its op's forward (a client gradient converted
  // by unify.h reads the op's outputs so) holds a copy of a forward node: merge equal nodes.
  // Not constants (hashing frozen weights costs time and saves nothing), and not the nodes a
  // run feeds or fetches by name.
  const std::string& prefix = options_.name_prefix;
  if (options_.merge_equal_nodes) {
    const std::set<std::string>& keep = options_.keep;
    FixupSourceAndSinkEdges(g);  // CSE walks the graph from its source node
    OptimizeCSE(g, [&keep, &prefix](const Node* n) {
      return !n->IsConstant() && !absl::StartsWith(n->name(), prefix + "/") &&
             keep.count(n->name()) == 0;
    });
  }
  if (options_.simplify) {
    // Static shapes and forward outputs where Python's gradients use them.
    SimplifyOptions simplify;
    simplify.fold_weight_layouts = options_.fold_weight_layouts;
    auto simplified = SimplifyBackward(g, prefix, options_.keep, simplify);
    if (!simplified.ok()) return simplified.status();
    stats_.simplifications = *simplified;
  }
  return absl::OkStatus();
}

absl::Status BuildGradientGraph(GraphDef* forward, const GradientGraphSpec& spec,
                                const GradientOptions& options, GradientResult* result,
                                GradientGraph* out) {
  const std::string& role = spec.role_prefix;
  if (spec.ys.empty()) return absl::InvalidArgumentError(absl::StrCat("no ", role, "y given"));
  if (spec.xs.empty()) return absl::InvalidArgumentError(absl::StrCat("no ", role, "x given"));
  if (!spec.incoming_gradients.empty() && spec.incoming_gradients.size() != spec.ys.size()) {
    return absl::InvalidArgumentError(absl::StrCat(role, "incoming gradients: ",
                                                   spec.incoming_gradients.size(), " flags for ",
                                                   spec.ys.size(), " ys"));
  }
  // Lowered loops and conditionals back to While and If (control_flow.h).
  auto functionalized = FunctionalizeV1ControlFlow(forward);
  if (!functionalized.ok()) return functionalized.status();
  result->converted_v1_control_flow = *functionalized;
  Graph g(OpRegistry::Global());
  GraphConstructorOptions opts;
  absl::Status s = ConvertGraphDefToGraph(opts, *forward, &g);
  if (!s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("cannot import the graph: ", s.message(), ImportHint(s)));
  }
  if (options.release_forward_graph) GraphDef().Swap(forward);
  PipelineOptions pipeline_options;
  pipeline_options.name_prefix = UnusedPrefix(g);
  pipeline_options.inline_gradients = options.inline_gradients;
  pipeline_options.fold_weight_layouts =
      options.optimize_graph && !HoistsConstants(options, spec.backward_memory_budget);
  pipeline_options.keep = spec.named_nodes;
  pipeline_options.plan_memory = true;
  pipeline_options.feed_shapes = spec.feed_shapes;
  pipeline_options.backward_memory_budget = spec.backward_memory_budget;
  pipeline_options.optimized_run = options.optimize_graph;
  pipeline_options.plan_budget_after_optimization =
      options.optimize_graph && spec.backward_memory_budget.set();
  for (const TensorRef& ref : spec.ys) pipeline_options.keep.insert(ref.node);
  for (const TensorRef& ref : spec.xs) pipeline_options.keep.insert(ref.node);
  GradientPipeline pipeline(std::move(pipeline_options));
  TF_RETURN_IF_ERROR(pipeline.PrepareForward(&g));
  result->inlined_calls = pipeline.stats().inlined_calls;
  result->workarounds = pipeline.stats().workarounds;
  std::map<std::string, Node*> nodes;
  for (Node* n : g.op_nodes()) nodes[n->name()] = n;
  const std::string& prefix = pipeline.options().name_prefix;
  out->prefix = prefix;

  // Each y is read through an Identity, so that an x that is a y itself (rerouted below) still
  // reaches it. d sum(y) / dx: the incoming gradient is ones, unless fed.
  std::vector<GraphTensor> y_reads, dys;
  for (size_t i = 0; i < spec.ys.size(); ++i) {
    const TensorRef& ref = spec.ys[i];
    auto y = FindNode(nodes, ref, role + "y");
    if (!y.ok()) return y.status();
    const DataType dtype = (*y)->output_type(ref.index);
    // A complex y with a fed incoming gradient dy: sum Re(conj(dy) y) is real, as through
    // TfExtAddGradients and Python's tf.gradients (the audit's doors differentiate every op's
    // complex rows so).
    const bool fed = !spec.incoming_gradients.empty() && spec.incoming_gradients[i];
    if (!IsFloatingPoint(dtype) && !(fed && DataTypeIsComplex(dtype))) {
      return absl::InvalidArgumentError(absl::StrCat(
          role, "y '", ref.ToString(), "' is ", DataTypeString(dtype),
          fed ? "; only floating-point and complex tensors have gradients"
              : "; only floating-point tensors have gradients (a complex one with a fed "
                "incoming gradient)"));
    }
    Node* y_ret = nullptr;
    TF_RETURN_IF_ERROR(NodeBuilder(g.NewName(prefix + "/y"), "Identity")
                           .Input(*y, ref.index)
                           .Finalize(&g, &y_ret));
    y_reads.push_back({y_ret, 0});
    out->y_names.push_back(ref.ToString());
    if (fed) {
      std::string name;
      auto dy = AddCheckedIncomingGradient(
          &g, prefix, *y, ref.index,
          absl::StrCat(role, "the incoming gradient of y ", ref.ToString()), &name);
      if (!dy.ok()) return dy.status();
      dys.push_back(*dy);
      out->dy_names.push_back(name + ":0");
    } else {
      Node* ones = nullptr;
      TF_RETURN_IF_ERROR(NodeBuilder(g.NewName(prefix + "/dy"), "OnesLike")
                             .Input(*y, ref.index)
                             .Finalize(&g, &ones));
      dys.push_back({ones, 0});
      out->dy_names.push_back("");
    }
  }
  std::vector<std::pair<Node*, int>> x_outputs;
  for (const TensorRef& ref : spec.xs) {
    auto x = FindNode(nodes, ref, role + "x");
    if (!x.ok()) return x.status();
    x_outputs.push_back({*x, ref.index});
  }
  // Created after the ys' nodes, so that x = y reroutes them too.
  std::vector<GraphTensor> xs, dxs;
  for (const auto& [node, index] : x_outputs) {
    auto read = ReadThroughIdentity(&g, prefix, node, index);
    if (!read.ok()) return read.status();
    xs.push_back({*read, 0});
  }
  TF_RETURN_IF_ERROR(pipeline.AddBackward(&g, y_reads, dys, xs, &dxs));
  if (pipeline.options().plan_budget_after_optimization) {
    std::set<std::string> seeds;
    for (const GraphTensor& dy : dys) seeds.insert(dy.node->name());
    out->deferred_gradient_nodes = DeferredGradientNodes(g, prefix, seeds);
  }
  const PipelineStats& stats = pipeline.stats();
  result->gradient_nodes = stats.backprop.gradient_nodes;
  result->inlined_gradients = stats.backprop.inlined;
  result->loops = stats.backprop.loops;
  result->conditionals = stats.backprop.conditionals;
  result->accumulators = stats.backprop.accumulators;
  result->simplifications = stats.simplifications;
  result->memory = stats.memory;
  for (const GraphTensor& dx : dxs) {
    out->dx_names.push_back(absl::StrCat(dx.node->name(), ":", dx.index));
  }
  g.ToGraphDef(&out->graph);
  return absl::OkStatus();
}

namespace {

// Whether `n` is a constant HoistConstants turns into a placeholder; if so, its shape.
bool IsLargeConstant(const NodeDef& n, const std::set<std::string>& keep, TensorShape* shape) {
  if (n.op() != "Const" || keep.count(n.name()) || !n.attr().contains("value")) return false;
  const TensorProto& proto = n.attr().at("value").tensor();
  if (!DataTypeIsFloating(proto.dtype())) return false;
  if (!TensorShape::BuildTensorShape(proto.tensor_shape(), shape).ok()) return false;
  return shape->num_elements() >= 4096;
}

// A placeholder named as `n` of its dtype and `shape`.
NodeDef PlaceholderLike(const NodeDef& n, const TensorShape& shape) {
  NodeDef p;
  p.set_name(n.name());
  p.set_op("Placeholder");
  p.set_device(n.device());
  AttrValue dtype, shape_attr;
  dtype.set_type(n.attr().at("value").tensor().dtype());
  shape.AsProto(shape_attr.mutable_shape());
  (*p.mutable_attr())["dtype"] = dtype;
  (*p.mutable_attr())["shape"] = shape_attr;
  return p;
}

}  // namespace

bool HoistsConstants(const GradientOptions& options, const MemoryBudget& budget) {
  return options.optimize_graph && (options.hoist_constants || budget.set());
}

std::vector<std::pair<std::string, Tensor>> HoistConstants(const std::set<std::string>& keep,
                                                           GraphDef* graph) {
  std::vector<std::pair<std::string, Tensor>> feeds;
  for (NodeDef& n : *graph->mutable_node()) {
    TensorShape shape;
    if (!IsLargeConstant(n, keep, &shape)) continue;
    Tensor value;
    if (!value.FromProto(n.attr().at("value").tensor())) continue;
    feeds.push_back({n.name() + ":0", std::move(value)});
    n = PlaceholderLike(n, shape);
  }
  return feeds;
}

GraphDef ShapeOnlyCopy(const GraphDef& graph, const std::set<std::string>& keep) {
  GraphDef copy;
  *copy.mutable_versions() = graph.versions();
  *copy.mutable_library() = graph.library();
  for (const NodeDef& n : graph.node()) {
    TensorShape shape;
    *copy.add_node() = IsLargeConstant(n, keep, &shape) ? PlaceholderLike(n, shape) : n;
  }
  return copy;
}

}  // namespace tensorflow::tf_ext
