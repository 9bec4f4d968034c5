// The graph tf_ext_grad differentiates when given no --graph: every tf_ext op on one path.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/framework/tensor.pb.h"
#include "tf_ext/tools/graph_gradients.h"

namespace tensorflow::tf_ext::tools {
namespace {

class GraphWriter {
 public:
  explicit GraphWriter(GraphDef* g) : g_(g) {}

  NodeDef* Node(const std::string& name, const std::string& op, std::vector<std::string> inputs) {
    NodeDef* n = g_->add_node();
    n->set_name(name);
    n->set_op(op);
    for (const std::string& in : inputs) n->add_input(in);
    return n;
  }
  NodeDef* Const(const std::string& name, const Tensor& t) {
    NodeDef* n = Node(name, "Const", {});
    (*n->mutable_attr())["dtype"].set_type(t.dtype());
    t.AsProtoTensorContent((*n->mutable_attr())["value"].mutable_tensor());
    return n;
  }
  static void Type(NodeDef* n, const std::string& attr = "T", DataType t = DT_FLOAT) {
    (*n->mutable_attr())[attr].set_type(t);
  }

 private:
  GraphDef* g_;
};

}  // namespace

GradientRequest DefaultExample() {
  GradientRequest r;
  GraphWriter w(&r.graph);
  // x: [2, 4] placeholder, fed below; w: constant weights.
  NodeDef* x = w.Node("x", "Placeholder", {});
  (*x->mutable_attr())["dtype"].set_type(DT_FLOAT);
  Tensor weights(DT_FLOAT, TensorShape({2, 4}));
  Tensor feed(DT_FLOAT, TensorShape({2, 4}));
  for (int i = 0; i < 8; ++i) {
    weights.flat<float>()(i) = 0.5f + 0.25f * i;
    feed.flat<float>()(i) = std::sin(1.0f + i);
  }
  w.Const("w", weights);
  GraphWriter::Type(w.Node("xw", "Mul", {"x", "w"}));
  // z keeps only element 5 of x*w: the loss depends on x[1][1] alone.
  NodeDef* z = w.Node("zero_out", "TfExt>ZeroOut", {"xw"});
  GraphWriter::Type(z);
  (*z->mutable_attr())["preserve_index"].set_i(5);
  GraphWriter::Type(w.Node("square", "Square", {"zero_out"}));
  Tensor axes(DT_INT32, TensorShape({2}));
  axes.flat<int32>()(0) = 0;
  axes.flat<int32>()(1) = 1;
  w.Const("axes", axes);
  NodeDef* loss = w.Node("loss", "Sum", {"square", "axes"});
  GraphWriter::Type(loss);
  GraphWriter::Type(loss, "Tidx", DT_INT32);
  r.y = {"loss", 0};
  r.xs = {{"x", 0}, {"xw", 0}};
  r.feeds = {{{"x", 0}, feed}};
  return r;
}

}  // namespace tensorflow::tf_ext::tools
