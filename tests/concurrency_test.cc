// Every tf_ext op, forward and gradient, run from 8 threads on one Session for a fixed
// number of steps; every result must equal, bit for bit, the single-threaded run of the same
// inputs (the kernels are deterministic, and shared state must not leak between calls).
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/function.pb.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/framework/node_def_builder.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/public/session.h"

namespace tensorflow::tf_ext {
namespace {

constexpr int kThreads = 8;
constexpr int kSteps = 25;
constexpr int kInputSets = 6;

using NodeOut = NodeDefBuilder::NodeOut;

class GraphBuilder {
 public:
  NodeOut Placeholder(const std::string& name, DataType dt) {
    Add(NodeDefBuilder(name, "Placeholder").Attr("dtype", dt));
    return NodeOut(name, 0, dt);
  }
  void Add(NodeDefBuilder b) {
    NodeDef* n = graph_.add_node();
    ASSERT_TRUE(b.Finalize(n).ok()) << b.Finalize(n);
  }
  // SymbolicGradient of `op` (with `attrs`) at `inputs`, incoming gradients `dys`: one
  // gradient per input, through the op's FDH gradient.
  void Gradient(const std::string& name, const std::string& op,
                const std::vector<std::pair<std::string, AttrValue>>& attrs,
                const std::vector<NodeOut>& inputs, const std::vector<NodeOut>& dys) {
    NameAttrList f;
    f.set_name(op);
    for (const auto& [k, v] : attrs) (*f.mutable_attr())[k] = v;
    std::vector<NodeOut> all = inputs;
    all.insert(all.end(), dys.begin(), dys.end());
    DataTypeVector tin, tout;
    for (const auto& in : all) tin.push_back(in.data_type);
    for (const auto& in : inputs) tout.push_back(in.data_type);
    Add(NodeDefBuilder(name, "SymbolicGradient").Input(all).Attr("Tin", tin).Attr("Tout", tout)
            .Attr("f", f));
  }
  const GraphDef& graph() const { return graph_; }

 private:
  GraphDef graph_;
};

AttrValue I(int64_t v) { AttrValue a; a.set_i(v); return a; }
AttrValue F(float v) { AttrValue a; a.set_f(v); return a; }
AttrValue T(DataType t) { AttrValue a; a.set_type(t); return a; }
AttrValue S(const std::string& s) { AttrValue a; a.set_s(s); return a; }
AttrValue L(std::vector<int64_t> v) {
  AttrValue a;
  for (int64_t x : v) a.mutable_list()->add_i(x);
  return a;
}

struct Inputs {
  Tensor x, rois;
};

Inputs MakeInputs(int seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  Inputs in{Tensor(DT_DOUBLE, TensorShape({2, 6, 6, 4})), Tensor(DT_FLOAT, TensorShape({3, 5}))};
  for (int64_t i = 0; i < in.x.NumElements(); ++i) in.x.flat<double>()(i) = u(rng);
  std::uniform_real_distribution<float> c(-1.f, 7.f);
  for (int r = 0; r < 3; ++r) {
    float x1 = c(rng), x2 = c(rng), y1 = c(rng), y2 = c(rng);
    if (x2 < x1) std::swap(x1, x2);
    if (y2 < y1) std::swap(y1, y2);
    const float row[5] = {static_cast<float>(r % 2), x1, y1, x2, y2};
    for (int k = 0; k < 5; ++k) in.rois.matrix<float>()(r, k) = row[k];
  }
  return in;
}

// Bit-identical tensors; a string tensor holds a serialized FunctionDef, compared as one
// (protobuf map order is not part of the contract).
bool SameBits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  if (a.dtype() == DT_STRING) {
    FunctionDef fa, fb;
    return fa.ParseFromString(a.scalar<tstring>()()) && fb.ParseFromString(b.scalar<tstring>()()) &&
           FunctionDefsEqual(fa, fb);
  }
  return a.tensor_data() == b.tensor_data();
}

TEST(Concurrency, EveryOpForwardAndGradientFromEightThreadsMatchesOneThread) {
  GraphBuilder g;
  const NodeOut x = g.Placeholder("x", DT_DOUBLE);
  const NodeOut rois = g.Placeholder("rois", DT_FLOAT);
  std::vector<std::string> fetches;
  auto op = [&](const std::string& name, const std::string& type, const std::vector<NodeOut>& in,
                const std::vector<std::pair<std::string, AttrValue>>& attrs, int outputs = 1) {
    NodeDefBuilder b(name, type);
    for (const auto& i : in) b.Input(i);
    for (const auto& [k, v] : attrs) b.Attr(k, v);
    g.Add(std::move(b));
    for (int k = 0; k < outputs; ++k) fetches.push_back(name + ":" + std::to_string(k));
  };
  const std::vector<std::pair<std::string, AttrValue>> roi = {
      {"pooled_height", I(2)}, {"pooled_width", I(2)}, {"spatial_scale", F(1.f)}};
  auto ps = roi;
  ps.push_back({"sampling_ratio", I(2)});
  const std::vector<std::pair<std::string, AttrValue>> med = {
      {"ksize", L({3, 3})}, {"strides", L({1, 2})}, {"padding", S("SAME")}};

  op("zero_out", "TfExt>ZeroOut", {x}, {{"preserve_index", I(5)}});
  op("roi_pool", "TfExt>RoiPool", {x, rois}, roi, 2);
  op("roi_pool_grad", "TfExt>RoiPoolGrad",
     {x, rois, NodeOut("roi_pool", 1, DT_INT32), NodeOut("roi_pool", 0, DT_DOUBLE)}, roi);
  op("ps_roi_align", "TfExt>PsRoiAlign", {x, rois}, ps);
  op("ps_roi_align_grad", "TfExt>PsRoiAlignGrad",
     {x, rois, NodeOut("ps_roi_align", 0, DT_DOUBLE)}, ps);
  op("median", "TfExt>MedianPool2D", {x}, med);
  op("median_grad", "TfExt>MedianPool2DGrad", {x, NodeOut("median", 0, DT_DOUBLE)}, med);
  op("sign", "TfExt>SignSTE", {x}, {{"clip", F(0.5f)}});
  op("reversal", "TfExt>GradientReversal", {x}, {{"scale", F(0.25f)}});
  op("smooth_l1", "TfExt>SmoothL1", {x}, {{"delta", F(0.5f)}});

  // Gradients through the FDH gradient functions (SymbolicGradient), d(y) = y.
  auto with_t = [](std::vector<std::pair<std::string, AttrValue>> a) {
    a.push_back({"T", T(DT_DOUBLE)});
    return a;
  };
  g.Gradient("d_zero_out", "TfExt>ZeroOut", with_t({{"preserve_index", I(5)}}), {x},
             {NodeOut("zero_out", 0, DT_DOUBLE)});
  g.Gradient("d_roi_pool", "TfExt>RoiPool", with_t(roi), {x, rois},
             {NodeOut("roi_pool", 0, DT_DOUBLE), NodeOut("roi_pool", 1, DT_INT32)});
  g.Gradient("d_ps_roi_align", "TfExt>PsRoiAlign", with_t(ps), {x, rois},
             {NodeOut("ps_roi_align", 0, DT_DOUBLE)});
  g.Gradient("d_median", "TfExt>MedianPool2D", with_t(med), {x},
             {NodeOut("median", 0, DT_DOUBLE)});
  g.Gradient("d_sign", "TfExt>SignSTE", with_t({{"clip", F(0.5f)}}), {x},
             {NodeOut("sign", 0, DT_DOUBLE)});
  g.Gradient("d_reversal", "TfExt>GradientReversal", with_t({{"scale", F(0.25f)}}), {x},
             {NodeOut("reversal", 0, DT_DOUBLE)});
  g.Gradient("d_smooth_l1", "TfExt>SmoothL1", with_t({{"delta", F(0.5f)}}), {x},
             {NodeOut("smooth_l1", 0, DT_DOUBLE)});
  for (const char* n : {"d_zero_out:0", "d_roi_pool:0", "d_roi_pool:1", "d_ps_roi_align:0",
                        "d_ps_roi_align:1", "d_median:0", "d_sign:0", "d_reversal:0",
                        "d_smooth_l1:0"}) {
    fetches.push_back(n);
  }
  // The registry op, too: a gradient FunctionDef built concurrently.
  NodeDef fwd;
  fwd.set_op("TfExt>PsRoiAlign");
  for (const auto& [k, v] : with_t(ps)) (*fwd.mutable_attr())[k] = v;
  Tensor node_def(DT_STRING, TensorShape({}));
  node_def.scalar<tstring>()() = fwd.SerializeAsString();
  AttrValue value;
  node_def.AsProtoTensorContent(value.mutable_tensor());
  g.Add(NodeDefBuilder("node_def", "Const").Attr("dtype", DT_STRING).Attr("value", value));
  op("gradient_function_def", "TfExt>GradientFunctionDef",
     {NodeOut("node_def", 0, DT_STRING)}, {});
  if (HasFatalFailure()) return;

  SessionOptions options;
  options.config.set_intra_op_parallelism_threads(4);
  options.config.set_inter_op_parallelism_threads(4);
  std::unique_ptr<Session> session(NewSession(options));
  ASSERT_TRUE(session->Create(g.graph()).ok());

  std::vector<Inputs> inputs;
  std::vector<std::vector<Tensor>> want(kInputSets);
  for (int k = 0; k < kInputSets; ++k) {
    inputs.push_back(MakeInputs(k));
    absl::Status s = session->Run({{"x", inputs[k].x}, {"rois", inputs[k].rois}}, fetches, {},
                                  &want[k]);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(want[k].size(), fetches.size());
  }

  std::atomic<int> mismatches{0}, errors{0}, runs{0};
  std::vector<std::string> first_problem(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int step = 0; step < kSteps; ++step) {
        const int k = (t + step) % kInputSets;
        std::vector<Tensor> got;
        absl::Status s = session->Run({{"x", inputs[k].x}, {"rois", inputs[k].rois}}, fetches,
                                      {}, &got);
        ++runs;
        if (!s.ok()) {
          if (errors++ == 0) first_problem[t] = std::string(s.message());
          continue;
        }
        for (size_t i = 0; i < fetches.size(); ++i) {
          if (!SameBits(got[i], want[k][i])) {
            if (mismatches++ == 0) first_problem[t] = fetches[i] + " differs";
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  std::string problems;
  for (const auto& p : first_problem) {
    if (!p.empty()) problems += p + "; ";
  }
  EXPECT_EQ(runs.load(), kThreads * kSteps);
  EXPECT_EQ(errors.load(), 0) << problems;
  EXPECT_EQ(mismatches.load(), 0) << problems;
}

}  // namespace
}  // namespace tensorflow::tf_ext
