#include "tf_ext/graph/engine/workarounds.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/common_runtime/shape_refiner.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/tensor.pb.h"
#include "tensorflow/core/graph/algorithm.h"
#include "tensorflow/core/graph/node_builder.h"
#include "tf_ext/graph/engine/shape_inference.h"

namespace tensorflow::tf_ext {
namespace {

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

absl::StatusOr<GradientWorkarounds> WorkAroundGradientBugs(
    Graph* g, const std::vector<PartialTensorShape>& arg_shapes) {
  ShapeRefiner refiner(g->versions(), g->op_registry());
  InferShapes(g, ArgShapesByName(*g, arg_shapes), &refiner);
  std::vector<Node*> order;
  GetReversePostOrder(*g, &order, NodeComparatorName());
  GradientWorkarounds done;
  for (Node* n : order) {
    shape_inference::InferenceContext* ctx = refiner.GetContext(n);
    if (ctx == nullptr || n->type_string() != "Conv2D") continue;
    auto rewritten = GroupedConvAsDepthwise(g, n, ctx);  // may delete n
    if (!rewritten.ok()) return rewritten.status();
    done.grouped_convs += *rewritten;
  }
  return done;
}

}  // namespace tensorflow::tf_ext
