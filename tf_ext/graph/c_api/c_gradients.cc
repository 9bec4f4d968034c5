#include "tf_ext/graph/c_api/c_gradients.h"

#include <algorithm>

#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/c/c_api_internal.h"
#include "tensorflow/c/tf_status_helper.h"
#include "tensorflow/core/graph/algorithm.h"
#include "tensorflow/core/graph/node_builder.h"
#include "tf_ext/graph/engine/control_flow.h"
#include "tf_ext/graph/pipeline/gradient_pipeline.h"

namespace tensorflow::tf_ext {
namespace {

bool PrefixUsed(const Graph& g, const std::string& prefix) {
  for (const Node* n : g.nodes()) {
    if (n->name() == prefix || absl::StartsWith(n->name(), prefix + "/")) return true;
  }
  return false;
}


absl::StatusOr<GraphTensor> ToGraphTensor(const TF_Output& out, const char* role, int i) {
  if (out.oper == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("TfExtAddGradients: ", role, "[", i, "] is NULL"));
  }
  Node* n = &out.oper->node;
  if (out.index < 0 || out.index >= n->num_outputs()) {
    return absl::InvalidArgumentError(absl::StrCat("TfExtAddGradients: ", role, "[", i, "] is output ",
                                                   out.index, " of '", n->name(), "', which has ",
                                                   n->num_outputs(), " outputs"));
  }
  return GraphTensor{n, out.index};
}

// A session extends itself with each new node's NodeDef, not with its edges: makes every
// NodeDef's inputs, data and control, name what its edges say (inlining rewires edges only;
// an inlined gradient's NodeDef still names its function's control inputs, "^dy").
absl::Status SyncNodeDefInputs(Graph* g) {
  for (Node* n : g->op_nodes()) {
    std::vector<const Edge*> data;
    std::vector<std::string> control;
    for (const Edge* e : n->in_edges()) {
      if (!e->IsControlEdge()) {
        data.push_back(e);
      } else if (e->src()->IsOp()) {
        control.push_back("^" + e->src()->name());
      }
    }
    std::vector<std::string> had;
    for (const std::string& in : n->def().input()) {
      if (absl::StartsWith(in, "^")) had.push_back(in);
    }
    std::sort(control.begin(), control.end());
    std::sort(had.begin(), had.end());
    if (had != control) {
      NodeDef* def = n->mutable_def();
      std::vector<std::string> inputs;
      for (const std::string& in : def->input()) {
        if (!absl::StartsWith(in, "^")) inputs.push_back(in);
      }
      def->clear_input();
      for (const std::string& in : inputs) def->add_input(in);
      for (const std::string& in : control) def->add_input(in);
    }
    for (const Edge* e : data) {
      const int i = e->dst_input();
      const std::string want = e->src_output() == 0 ? e->src()->name()
                                                    : absl::StrCat(e->src()->name(), ":", e->src_output());
      const auto& inputs = n->def().input();
      if (i < inputs.size() && (inputs[i] == want || inputs[i] == want + ":0")) continue;
      TF_RETURN_IF_ERROR(g->UpdateEdge(e->src(), e->src_output(), n, i));
    }
  }
  return absl::OkStatus();
}

absl::Status AddGradientsLocked(TF_Graph* graph, const char* prefix_arg, TF_Output* y, int ny,
                                TF_Output* x, int nx, TF_Output* dx, TF_Output* dy) {
  if (!graph->sessions.empty()) {
    return absl::FailedPreconditionError(
        "TfExtAddGradients: a session already runs this graph; add the gradients first (the "
        "control-flow pass replaces nodes, which a running session cannot see)");
  }
  if (ny < 1 || nx < 1 || y == nullptr || x == nullptr || dy == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TfExtAddGradients: need ny >= 1 and nx >= 1 and non-NULL y, x and dy (ny=", ny,
        ", nx=", nx, ")"));
  }
  Graph* g = &graph->graph;
  std::string prefix;
  if (prefix_arg != nullptr) {
    prefix = prefix_arg;
    if (prefix.empty() || PrefixUsed(*g, prefix)) {
      return absl::InvalidArgumentError(absl::StrCat("TfExtAddGradients: prefix '", prefix,
                                                     "' is empty or names nodes already"));
    }
  } else {
    prefix = "tf_ext_gradients";
    for (int i = 1; PrefixUsed(*g, prefix); ++i) prefix = absl::StrCat("tf_ext_gradients_", i);
  }
  const int old_ids = g->num_node_ids();
  std::vector<GraphTensor> ys, xs, dys, dxs;
  for (int i = 0; i < ny; ++i) {
    auto t = ToGraphTensor(y[i], "y", i);
    if (!t.ok()) return t.status();
    Node* read = nullptr;
    // y through an Identity: the gradient seeds it, and a loop's output node gets replaced.
    TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(prefix + "/y"), "Identity")
                           .Input(t->node, t->index)
                           .Finalize(g, &read));
    ys.push_back({read, 0});
    if (dx != nullptr) {
      auto d = ToGraphTensor(dx[i], "dx", i);
      if (!d.ok()) return d.status();
      if (IsV1ControlFlow(d->node->type_string())) {  // replaced when v1 loops are converted
        return absl::InvalidArgumentError(absl::StrCat(
            "TfExtAddGradients: dx[", i, "] is an output of the v1 control-flow node '",
            d->node->name(), "'; read it through an Identity"));
      }
      dys.push_back(*d);
    } else {
      Node* ones = nullptr;
      TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(prefix + "/ones"), "OnesLike")
                             .Input(t->node, t->index)
                             .Finalize(g, &ones));
      dys.push_back({ones, 0});
    }
  }
  for (int i = 0; i < nx; ++i) {
    auto t = ToGraphTensor(x[i], "x", i);
    if (!t.ok()) return t.status();
    if (!IsFunctionalControlFlow(t->node->type_string()) &&
        !IsV1ControlFlow(t->node->type_string())) {
      xs.push_back(*t);
      continue;
    }
    // An output of a loop or conditional: its consumers read it through an Identity, which
    // is x (the node itself is replaced by the control-flow pass or the v1 conversion).
    std::vector<std::pair<Node*, int>> consumers;
    for (const Edge* e : t->node->out_edges()) {
      if (!e->IsControlEdge() && e->src_output() == t->index) {
        consumers.push_back({e->dst(), e->dst_input()});
      }
    }
    Node* read = nullptr;
    TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(prefix + "/x"), "Identity")
                           .Input(t->node, t->index)
                           .Finalize(g, &read));
    for (const auto& [dst, input] : consumers) TF_RETURN_IF_ERROR(g->UpdateEdge(read, 0, dst, input));
    xs.push_back({read, 0});
  }
  // The one gradient pipeline (pipeline/gradient_pipeline.h), editing the caller's graph in
  // place: the caller holds its nodes (TF_Operation pointers), so calls are not inlined,
  // forward nodes are neither rewritten nor merged. Loops built in this process (TF_NewWhile:
  // v1 frames) are converted back to While/If; the y and x reads above follow the rewiring.
  PipelineOptions options;
  options.name_prefix = prefix;
  options.inline_calls = false;
  options.rewrite_forward = false;
  options.merge_equal_nodes = false;
  GradientPipeline pipeline(std::move(options));
  if (absl::Status s = pipeline.PrepareForward(g); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("TfExtAddGradients: ", s.message()));
  }
  const bool converted = pipeline.stats().converted_v1_control_flow;
  TF_RETURN_IF_ERROR(pipeline.AddBackward(g, ys, dys, xs, &dxs));
  const BackpropStats& stats = pipeline.stats().backprop;
  TF_RETURN_IF_ERROR(SyncNodeDefInputs(g));
  // The TF_Graph's index and shape refiner learn the new nodes (and the replaced ones, which
  // keep their names), producers first.
  if (converted) graph->name_map.clear();  // the v1 nodes are gone
  for (Node* n : g->op_nodes()) graph->name_map[n->name()] = n;
  FixupSourceAndSinkEdges(g);  // nodes added without inputs are reached from the source too
  std::vector<Node*> order;
  GetReversePostOrder(*g, &order, NodeComparatorName());
  const bool replaced = converted || stats.loops + stats.conditionals > 0;
  if (replaced) {
    // The pass replaced nodes, whose shape contexts other nodes' shapes point into, and a new
    // node may reuse a replaced one's address: the refiner starts again, as TF_Graph sets it
    // up (shapes set by TF_GraphSetTensorShape are inferred again).
    graph->refiner.~ShapeRefiner();
    new (&graph->refiner) ShapeRefiner(g->versions(), g->op_registry());
    graph->refiner.set_function_library_for_shape_inference(&g->flib_def());
  }
  for (Node* n : order) {
    if (!n->IsOp() || (n->id() < old_ids && !replaced)) continue;
    absl::Status s = graph->refiner.AddNode(n);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("TfExtAddGradients: shape inference of '",
                                                 n->name(), "': ", s.message()));
    }
  }
  for (int i = 0; i < nx; ++i) {
    dy[i].oper = reinterpret_cast<TF_Operation*>(dxs[i].node);
    dy[i].index = dxs[i].index;
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace tensorflow::tf_ext

extern "C" void TfExtAddGradients(TF_Graph* g, const char* prefix, TF_Output* y, int ny,
                                  TF_Output* x, int nx, TF_Output* dx, TF_Status* status,
                                  TF_Output* dy) {
  if (status == nullptr) return;
  if (g == nullptr) {
    tensorflow::Set_TF_Status_from_Status(
        status, absl::InvalidArgumentError("TfExtAddGradients: the graph is NULL"));
    return;
  }
  tensorflow::mutex_lock lock(g->mu);
  tensorflow::Set_TF_Status_from_Status(
      status, tensorflow::tf_ext::AddGradientsLocked(g, prefix, y, ny, x, nx, dx, dy));
}

extern "C" void TfExtPrepareFunctionsForGradients(TF_Graph* g, TF_Status* status) {
  if (status == nullptr) return;
  if (g == nullptr) {
    tensorflow::Set_TF_Status_from_Status(
        status, absl::InvalidArgumentError("TfExtPrepareFunctionsForGradients: the graph is NULL"));
    return;
  }
  tensorflow::mutex_lock lock(g->mu);
  if (!g->sessions.empty()) {
    tensorflow::Set_TF_Status_from_Status(
        status, absl::FailedPreconditionError("TfExtPrepareFunctionsForGradients: a session "
                                              "already runs this graph"));
    return;
  }
  auto rewritten = tensorflow::tf_ext::PrepareFunctionLibraryForGradients(&g->graph);
  tensorflow::Set_TF_Status_from_Status(status, rewritten.status());
}
