#include "tf_ext/graph/passes/simplify_backward.h"

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "tensorflow/core/common_runtime/shape_refiner.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/graph/node_builder.h"
#include "tf_ext/graph/engine/shape_inference.h"

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

// Finishes `b` (the node replacing `n`) with n's control inputs, then replaces `n` by it.
absl::Status ReplaceWith(Graph* g, Node* n, NodeBuilder* b) {
  for (const Edge* e : n->in_edges()) {
    if (e->IsControlEdge()) b->ControlInput(e->src());
  }
  Node* replacement = nullptr;
  TF_RETURN_IF_ERROR(b->Finalize(g, &replacement));
  return Replace(g, n, replacement);
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

// Filters up to Grappler's constant-folding limit (ConstantFolding's max_constant_size_in_bytes,
// 10 MB), so that the turned filter below is folded into a constant once.
constexpr int64_t kMaxTurnedFilterBytes = 10 << 20;

// The constant `n` input `index` reads (through Identity nodes), if it is one of at most
// kMaxTurnedFilterBytes of type `t`; with its shape.
std::optional<std::pair<Node*, int>> SmallConstant(const Node* n, int index, DataType t,
                                                   TensorShape* shape) {
  auto source = SourceOf(n, index);
  if (!source.has_value() || !source->first->IsConstant()) return std::nullopt;
  const TensorProto* proto = nullptr;
  if (!TryGetNodeAttr(source->first->attrs(), "value", &proto) || proto->dtype() != t ||
      !TensorShape::BuildTensorShape(proto->tensor_shape(), shape).ok() ||
      shape->num_elements() * DataTypeSize(t) > kMaxTurnedFilterBytes) {
    return std::nullopt;
  }
  return source;
}

bool AllOnes(const Node* n, const char* attr) {
  std::vector<int32> values;
  if (!GetNodeAttr(n->attrs(), attr, &values).ok()) return attr == std::string("dilations");
  for (int32 v : values) {
    if (v != 1) return false;
  }
  return true;
}

// Conv2DBackpropInput(sizes, W, dy) of stride 1 and dilation 1 (NHWC), W a constant ->
// Conv2D(dy, W') (simplify_backward.h). The forward convolution padded (top, bottom, left,
// right) reads x[p + k - top] for output p and tap k, so dx[q] sums dy[q - k + top] W[k], the
// convolution of dy with the turned filter padded (kh-1-top, kh-1-bottom, kw-1-left,
// kw-1-right); its output size is in + top + bottom - kh + 1 + (kh-1-top) + (kh-1-bottom) - kh
// + 1 = in. `turned` holds the W' made so far, by the filter's node.
absl::StatusOr<bool> ForwardConvolution(Graph* g, Node* n, std::map<const Node*, Node*>* turned) {
  DataType t;
  std::string padding, format;
  if (!GetNodeAttr(n->attrs(), "T", &t).ok() || !GetNodeAttr(n->attrs(), "padding", &padding).ok() ||
      !GetNodeAttr(n->attrs(), "data_format", &format).ok()) {
    return false;
  }
  if ((t != DT_FLOAT && t != DT_DOUBLE && t != DT_HALF && t != DT_BFLOAT16) || format != "NHWC" ||
      !AllOnes(n, "strides") || !AllOnes(n, "dilations")) {
    return false;
  }
  TensorShape shape;
  auto filter = SmallConstant(n, 1, t, &shape);
  if (!filter.has_value() || shape.dims() != 4) return false;
  const int64_t kh = shape.dim_size(0), kw = shape.dim_size(1);
  int64_t pads[4] = {0, 0, 0, 0};  // top, bottom, left, right of the forward convolution
  if (padding == "SAME") {
    pads[0] = (kh - 1) / 2;
    pads[1] = kh - 1 - pads[0];
    pads[2] = (kw - 1) / 2;
    pads[3] = kw - 1 - pads[2];
  } else if (padding == "EXPLICIT") {
    std::vector<int64_t> explicit_paddings;
    if (!GetNodeAttr(n->attrs(), "explicit_paddings", &explicit_paddings).ok() ||
        explicit_paddings.size() != 8) {
      return false;
    }
    for (int i = 0; i < 4; ++i) pads[i] = explicit_paddings[2 + i];
  } else if (padding != "VALID") {
    return false;
  }
  std::vector<int64_t> turned_pads = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < 4; ++i) {
    turned_pads[2 + i] = (i < 2 ? kh : kw) - 1 - pads[i];
    if (turned_pads[2 + i] < 0) return false;
  }
  std::string turned_padding = "EXPLICIT";
  if (turned_pads == std::vector<int64_t>(8, 0)) {
    turned_padding = "VALID";
  } else if (turned_pads[2] == (kh - 1) / 2 && turned_pads[3] == kh - 1 - turned_pads[2] &&
             turned_pads[4] == (kw - 1) / 2 && turned_pads[5] == kw - 1 - turned_pads[4]) {
    turned_padding = "SAME";
  }
  const Edge* dy = nullptr;
  TF_RETURN_IF_ERROR(n->input_edge(2, &dy));
  Node*& w_turned = (*turned)[filter->first];
  if (w_turned == nullptr) {
    // W' = transpose(reverse(W, [0, 1]), [0, 1, 3, 2]): ops on the constant, which Grappler
    // folds, and which keep the graph differentiable with respect to W (a gradient penalty
    // differentiates this graph again, the filter then a variable).
    auto int_const = [&](const std::string& name, std::vector<int32> values, Node** out) {
      Tensor v(DT_INT32, TensorShape({static_cast<int64_t>(values.size())}));
      for (size_t i = 0; i < values.size(); ++i) v.flat<int32>()(i) = values[i];
      return NodeBuilder(g->NewName(n->name() + "/" + name), "Const")
          .Attr("dtype", DT_INT32)
          .Attr("value", v)
          .Finalize(g, out);
    };
    Node *axes = nullptr, *perm = nullptr, *reversed = nullptr;
    TF_RETURN_IF_ERROR(int_const("turn_axes", {0, 1}, &axes));
    TF_RETURN_IF_ERROR(int_const("swap_channels", {0, 1, 3, 2}, &perm));
    TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(n->name() + "/turned"), "ReverseV2")
                           .Input(filter->first, filter->second)
                           .Input(axes)
                           .Finalize(g, &reversed));
    TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(n->name() + "/turned_filter"), "Transpose")
                           .Input(reversed)
                           .Input(perm)
                           .Finalize(g, &w_turned));
  }
  NodeBuilder b(g->NewName(n->name() + "/forward"), "Conv2D");
  b.Input(dy->src(), dy->src_output())
      .Input(w_turned, 0)
      .Attr("T", t)
      .Attr("strides", std::vector<int32>{1, 1, 1, 1})
      .Attr("padding", turned_padding)
      .Attr("data_format", "NHWC")
      .Attr("dilations", std::vector<int32>{1, 1, 1, 1})
      .Device(n->requested_device());
  if (turned_padding == "EXPLICIT") b.Attr("explicit_paddings", turned_pads);
  TF_RETURN_IF_ERROR(ReplaceWith(g, n, &b));
  return true;
}

// MatMul(a, W, transpose_b) with W a constant -> MatMul(a, transpose(W)) (simplify_backward.h).
// `transposed` holds the transpose(W) made so far, by W's node.
absl::StatusOr<bool> PretransposedWeight(Graph* g, Node* n,
                                         std::map<const Node*, Node*>* transposed) {
  DataType t;
  bool transpose_a = false, transpose_b = false;
  if (!GetNodeAttr(n->attrs(), "T", &t).ok() ||
      !GetNodeAttr(n->attrs(), "transpose_a", &transpose_a).ok() ||
      !GetNodeAttr(n->attrs(), "transpose_b", &transpose_b).ok() || !transpose_b ||
      (t != DT_FLOAT && t != DT_DOUBLE && t != DT_HALF && t != DT_BFLOAT16)) {
    return false;
  }
  TensorShape shape;
  auto w = SmallConstant(n, 1, t, &shape);
  if (!w.has_value() || shape.dims() != 2) return false;
  Node*& w_t = (*transposed)[w->first];
  if (w_t == nullptr) {
    Tensor perm(DT_INT32, TensorShape({2}));
    perm.flat<int32>()(0) = 1;
    perm.flat<int32>()(1) = 0;
    Node* perm_node = nullptr;
    TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(n->name() + "/transpose_perm"), "Const")
                           .Attr("dtype", DT_INT32)
                           .Attr("value", perm)
                           .Finalize(g, &perm_node));
    TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(n->name() + "/transposed_weight"), "Transpose")
                           .Input(w->first, w->second)
                           .Input(perm_node)
                           .Finalize(g, &w_t));
  }
  const Edge* a = nullptr;
  TF_RETURN_IF_ERROR(n->input_edge(0, &a));
  NodeBuilder b(g->NewName(n->name() + "/pretransposed"), "MatMul");
  b.Input(a->src(), a->src_output())
      .Input(w_t, 0)
      .Attr("T", t)
      .Attr("transpose_a", transpose_a)
      .Attr("transpose_b", false)
      .Device(n->requested_device());
  TF_RETURN_IF_ERROR(ReplaceWith(g, n, &b));
  return true;
}

}  // namespace

absl::StatusOr<BackwardSimplifications> SimplifyBackward(Graph* g, const std::string& prefix,
                                                         const std::set<std::string>& keep,
                                                         const SimplifyOptions& options) {
  BackwardSimplifications stats;
  std::vector<Node*> gradients;
  for (Node* n : g->op_nodes()) {
    if (absl::StartsWith(n->name(), prefix + "/") && !keep.count(n->name())) gradients.push_back(n);
  }
  stats.outputs_read = ReadReluOutputs(g, gradients);
  if (options.fold_weight_layouts) {
    std::map<const Node*, Node*> turned, transposed;
    for (Node*& n : gradients) {
      const bool conv = n->type_string() == "Conv2DBackpropInput";
      if (!conv && n->type_string() != "MatMul") continue;
      auto rewritten = conv ? ForwardConvolution(g, n, &turned) : PretransposedWeight(g, n, &transposed);
      if (!rewritten.ok()) return rewritten.status();
      if (*rewritten) {
        ++(conv ? stats.forward_convolutions : stats.pretransposed_weights);
        n = nullptr;  // removed
      }
    }
  }

  std::vector<Node*> shape_nodes;
  for (Node* n : gradients) {
    if (n == nullptr) continue;
    const std::string& op = n->type_string();
    if (op == "Shape" || op == "Size" || op == "Rank") shape_nodes.push_back(n);
  }
  if (shape_nodes.empty()) return stats;
  // Every value is read before the graph changes: the refiner keys its contexts by Node*, and
  // the graph gives a removed node's memory to the next node added, so a constant made for one
  // shape node would otherwise read a removed node's shape when another shape node reads it
  // (TopKV2's gradient takes Size(Shape(input)): its rank was the scalar Shape's [0], 0).
  ShapeRefiner refiner(g->versions(), g->op_registry());
  InferShapes(g, {}, &refiner);
  std::vector<std::pair<Node*, Tensor>> values;
  for (Node* n : shape_nodes) {
    auto x = SourceOf(n, 0);
    if (!x.has_value()) continue;
    DataType out_type = DT_INT32;
    if (n->type_string() != "Rank" && !GetNodeAttr(n->attrs(), "out_type", &out_type).ok()) continue;
    std::optional<Tensor> value =
        StaticShapeValue(refiner, x->first, x->second, n->type_string(), out_type);
    if (value.has_value()) values.push_back({n, *std::move(value)});
  }
  for (auto& [n, value] : values) {
    Node* constant = nullptr;
    TF_RETURN_IF_ERROR(NodeBuilder(g->NewName(n->name() + "/static"), "Const")
                           .Attr("dtype", value.dtype())
                           .Attr("value", value)
                           .Finalize(g, &constant));
    TF_RETURN_IF_ERROR(Replace(g, n, constant));
    ++stats.constant_shapes;
  }
  return stats;
}

}  // namespace tensorflow::tf_ext
