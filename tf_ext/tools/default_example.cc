// The graph tf_ext_grad differentiates when given no --graph: every tf_ext op on one path.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/framework/tensor.pb.h"
#include "tf_ext/tools/default_example.h"

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
  // A small detection head in float64, through every tf_ext op:
  //   features [1,8,8,8] --RoiPool(3x3)--> pooled --MedianPool2D(3x3, SAME)--> med
  //   features --PsRoiAlign(2x2)--> ps --SignSTE--> --GradientReversal(0.5)--> rev
  //   loss = sum(med^2) + sum(rev * w) + sum(ZeroOut(med, 5)^2)
  GradientRequest r;
  GraphWriter w(&r.graph);
  constexpr DataType kT = DT_DOUBLE;
  auto sum_all = [&](const std::string& name, const std::string& input, int rank) {
    Tensor axes(DT_INT32, TensorShape({rank}));
    for (int i = 0; i < rank; ++i) axes.flat<int32>()(i) = i;
    w.Const(name + "/axes", axes);
    NodeDef* n = w.Node(name, "Sum", {input, name + "/axes"});
    GraphWriter::Type(n, "T", kT);
    GraphWriter::Type(n, "Tidx", DT_INT32);
  };

  NodeDef* features = w.Node("features", "Placeholder", {});
  (*features->mutable_attr())["dtype"].set_type(kT);
  // Distinct values 1/256 apart (37 is coprime with 512): no ties for max/median to break.
  Tensor feed(kT, TensorShape({1, 8, 8, 8}));
  for (int i = 0; i < 512; ++i) feed.flat<double>()(i) = ((i * 37) % 512) / 256.0 - 1.0;
  Tensor rois(DT_FLOAT, TensorShape({2, 5}));
  const float boxes[] = {0, 0.5f, 0.5f, 6.5f, 5.5f, 0, 2, 1, 7, 7};
  std::copy(boxes, boxes + 10, rois.flat<float>().data());
  w.Const("rois", rois);

  NodeDef* pool = w.Node("roi_pool", "TfExt>RoiPool", {"features", "rois"});
  GraphWriter::Type(pool, "T", kT);
  (*pool->mutable_attr())["pooled_height"].set_i(3);
  (*pool->mutable_attr())["pooled_width"].set_i(3);
  (*pool->mutable_attr())["spatial_scale"].set_f(1.0f);

  NodeDef* med = w.Node("median_pool", "TfExt>MedianPool2D", {"roi_pool:0"});
  GraphWriter::Type(med, "T", kT);
  for (const char* attr : {"ksize", "strides"}) {
    auto* list = (*med->mutable_attr())[attr].mutable_list();
    const int v = std::string(attr) == "ksize" ? 3 : 1;
    list->add_i(v);
    list->add_i(v);
  }
  (*med->mutable_attr())["padding"].set_s("SAME");

  NodeDef* ps = w.Node("ps_roi_align", "TfExt>PsRoiAlign", {"features", "rois"});
  GraphWriter::Type(ps, "T", kT);
  (*ps->mutable_attr())["pooled_height"].set_i(2);
  (*ps->mutable_attr())["pooled_width"].set_i(2);
  (*ps->mutable_attr())["spatial_scale"].set_f(1.0f);
  (*ps->mutable_attr())["sampling_ratio"].set_i(2);

  NodeDef* ste = w.Node("sign_ste", "TfExt>SignSTE", {"ps_roi_align"});
  GraphWriter::Type(ste, "T", kT);
  (*ste->mutable_attr())["clip"].set_f(1.0f);
  NodeDef* rev = w.Node("gradient_reversal", "TfExt>GradientReversal", {"sign_ste"});
  GraphWriter::Type(rev, "T", kT);
  (*rev->mutable_attr())["scale"].set_f(0.5f);
  Tensor weights(kT, TensorShape({2, 2, 2, 2}));
  for (int i = 0; i < 16; ++i) weights.flat<double>()(i) = 0.25 * (i % 5) - 0.5;
  w.Const("w", weights);
  GraphWriter::Type(w.Node("rev_w", "Mul", {"gradient_reversal", "w"}), "T", kT);

  NodeDef* zero = w.Node("zero_out", "TfExt>ZeroOut", {"median_pool"});
  GraphWriter::Type(zero, "T", kT);
  (*zero->mutable_attr())["preserve_index"].set_i(5);

  GraphWriter::Type(w.Node("med_sq", "Square", {"median_pool"}), "T", kT);
  GraphWriter::Type(w.Node("zero_sq", "Square", {"zero_out"}), "T", kT);
  sum_all("loss_med", "med_sq", 4);
  sum_all("loss_rev", "rev_w", 4);
  sum_all("loss_zero", "zero_sq", 4);
  // Add, not AddN: AddN has no FDH gradient in TensorFlow.
  GraphWriter::Type(w.Node("loss_med_rev", "Add", {"loss_med", "loss_rev"}), "T", kT);
  GraphWriter::Type(w.Node("loss", "Add", {"loss_med_rev", "loss_zero"}), "T", kT);

  r.y = {"loss", 0};
  r.xs = {{"features", 0}, {"ps_roi_align", 0}, {"median_pool", 0}};
  r.feeds = {{{"features", 0}, feed}};
  return r;
}

}  // namespace tensorflow::tf_ext::tools
