#include "tf_ext/graph/simplify_backward.h"

#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "tensorflow/core/common_runtime/shape_refiner.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/graph/node_builder.h"
#include "tf_ext/graph/shape_inference.h"

namespace tensorflow::tf_ext {
namespace {

// The tensor `n`'s input `index` reads, through Identity nodes.
std::optional<std::pair<Node*, int>> SourceOf(const Node* n, int index) {
  const Edge* e = nullptr;
  if (!n->input_edge(index, &e).ok()) return std::nullopt;
  while (e->src()->type_string() == "Identity") {
    const Edge* next = nullptr;
    if (!e->src()->input_edge(0, &next).ok()) break;
    e = next;
  }
  return std::make_pair(e->src(), e->src_output());
}

// Moves every consumer of `from`'s output 0 (and its control edges) to `to`, then removes
// `from`.
absl::Status Replace(Graph* g, Node* from, Node* to) {
  std::vector<std::pair<Node*, int>> consumers;
  std::vector<Node*> controlled;
  for (const Edge* e : from->out_edges()) {
    if (e->IsControlEdge()) controlled.push_back(e->dst());
    else consumers.push_back({e->dst(), e->dst_input()});
  }
  for (const auto& [dst, input] : consumers) TF_RETURN_IF_ERROR(g->UpdateEdge(to, 0, dst, input));
  for (Node* dst : controlled) g->AddControlEdge(to, dst);
  g->RemoveNode(from);
  return absl::OkStatus();
}

// ReluGrad(dy, x) -> ReluGrad(dy, Relu(x)), the same for Relu6Grad and Relu6, when the forward
// graph computes that Relu of exactly that tensor.
int ReadReluOutputs(Graph* g, const std::vector<Node*>& gradients) {
  int rewired = 0;
  for (Node* n : gradients) {
    const std::string& op = n->type_string();
    const std::string relu = op == "ReluGrad" ? "Relu" : op == "Relu6Grad" ? "Relu6" : "";
    if (relu.empty()) continue;
    auto x = SourceOf(n, 1);
    if (!x.has_value()) continue;
    for (const Edge* e : x->first->out_edges()) {
      Node* r = e->dst();
      if (e->IsControlEdge() || e->src_output() != x->second || r->type_string() != relu ||
          r->num_inputs() != 1 || r->output_type(0) != n->input_type(1)) {
        continue;
      }
      if (g->UpdateEdge(r, 0, n, 1).ok()) ++rewired;
      break;
    }
  }
  return rewired;
}

}  // namespace

absl::StatusOr<BackwardSimplifications> SimplifyBackward(Graph* g, const std::string& prefix,
                                                         const std::set<std::string>& keep) {
  BackwardSimplifications stats;
  std::vector<Node*> gradients;
  for (Node* n : g->op_nodes()) {
    if (absl::StartsWith(n->name(), prefix + "/") && !keep.count(n->name())) gradients.push_back(n);
  }
  stats.outputs_read = ReadReluOutputs(g, gradients);

  std::vector<Node*> shape_nodes;
  for (Node* n : gradients) {
    const std::string& op = n->type_string();
    if (op == "Shape" || op == "Size" || op == "Rank") shape_nodes.push_back(n);
  }
  if (shape_nodes.empty()) return stats;
  ShapeRefiner refiner(g->versions(), g->op_registry());
  InferShapes(g, {}, &refiner);
  for (Node* n : shape_nodes) {
    auto x = SourceOf(n, 0);
    if (!x.has_value()) continue;
    DataType out_type = DT_INT32;
    if (n->type_string() != "Rank" && !GetNodeAttr(n->attrs(), "out_type", &out_type).ok()) continue;
    std::optional<Tensor> value =
        StaticShapeValue(refiner, x->first, x->second, n->type_string(), out_type);
    if (!value.has_value()) continue;
    Node* constant = nullptr;
    TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(n->name() + "/static"), "Const")
                           .Attr("dtype", out_type)
                           .Attr("value", *value)
                           .Finalize(g, &constant));
    TF_RETURN_IF_ERROR(Replace(g, n, constant));
    ++stats.constant_shapes;
  }
  return stats;
}

}  // namespace tensorflow::tf_ext
