// SimplifyBackward (tf_ext/graph/passes/simplify_backward.h) through BuildGradientGraph: a gradient's
// Shape nodes become constants exactly where the placeholders' shapes fix them, Relu6Grad reads
// the Relu6's output, and the gradient is unchanged (against its closed form, at the kinks'
// sides); a feed that its placeholder's shape does not accept is refused by name. A stride-1
// convolution's input gradient with a constant filter becomes a forward convolution (every
// padding, odd and even kernels), others stay, and each gradient matches a direct sum: dilated
// and explicitly padded convolutions too, whose TensorFlow gradient drops those attrs. A
// MatMul input gradient reads a constant weight pretransposed. A shape node reading another
// shape node gets the value of the tensor it reads, not of a node the pass removed before (the
// graph reuses a removed node's memory; TopKV2's gradient takes Size(Shape(input))).
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/protobuf.h"
#include "tensorflow/core/public/session.h"
#include "tensorflow/core/common_runtime/graph_constructor.h"
#include "tensorflow/core/graph/graph.h"
#include "tf_ext/graph/passes/simplify_backward.h"
#include "tf_ext/graph/pipeline/gradient_pipeline.h"
#include "tf_ext/graph/runtime/graph_gradients.h"
#include "tf_ext/graph/runtime/session_options.h"

namespace tensorflow::tf_ext {
namespace {

// s = sum(relu6(x * c)), c = [1, -2, 4] a constant, x [batch, 3] with `batch` (-1: unknown).
GraphDef Forward(int batch) {
  GraphDef g;
  CHECK(protobuf::TextFormat::ParseFromString(R"pb(
    node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } }
    node { name: "c" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape { dim { size: 3 } }
                                                float_val: 1 float_val: -2 float_val: 4 } } } }
    node { name: "m" op: "Mul" input: "x" input: "c" attr { key: "T" value { type: DT_FLOAT } } }
    node { name: "r" op: "Relu6" input: "m" attr { key: "T" value { type: DT_FLOAT } } }
    node { name: "axes" op: "Const" attr { key: "dtype" value { type: DT_INT32 } }
           attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape { dim { size: 2 } }
                                                int_val: 0 int_val: 1 } } } }
    node { name: "s" op: "Sum" input: "r" input: "axes" attr { key: "T" value { type: DT_FLOAT } }
           attr { key: "Tidx" value { type: DT_INT32 } } }
  )pb", &g));
  TensorShapeProto* shape = (*g.mutable_node(0)->mutable_attr())["shape"].mutable_shape();
  shape->add_dim()->set_size(batch);
  shape->add_dim()->set_size(3);
  return g;
}

// x * c on both sides of 0 and 6 in every column.
Tensor X(int batch) {
  Tensor x(DT_FLOAT, TensorShape({batch, 3}));
  const float values[] = {-1.0f, 2.0f, 7.0f, 0.5f, -3.5f, 1.25f, 3.0f, 0.25f, -0.5f, 6.5f, -1.0f, 2.0f};
  for (int i = 0; i < batch * 3; ++i) x.flat<float>()(i) = values[i % 12];
  return x;
}

struct Built {
  GradientGraph graph;
  GradientResult result;
};

Built Build(int batch) {
  Built b;
  GraphDef forward = Forward(batch);
  GradientGraphSpec spec;
  spec.ys = {*TensorRef::Parse("s")};
  spec.xs = {*TensorRef::Parse("x")};
  GradientOptions options;
  absl::Status s = BuildGradientGraph(&forward, spec, options, &b.result, &b.graph);
  EXPECT_TRUE(s.ok()) << s;
  return b;
}

// d s / d x: c where 0 < x c < 6, else 0.
void ExpectGradient(const Built& b, int batch) {
  std::unique_ptr<Session> session(NewSession(BackwardSessionOptions(true)));
  ASSERT_TRUE(session->Create(b.graph.graph).ok());
  const Tensor x = X(batch);
  std::vector<Tensor> out;
  ASSERT_TRUE(session->Run({{"x", x}}, {b.graph.dx_names[0]}, {}, &out).ok());
  const float c[] = {1, -2, 4};
  for (int i = 0; i < batch * 3; ++i) {
    const float m = x.flat<float>()(i) * c[i % 3];
    EXPECT_EQ(out[0].flat<float>()(i), m > 0 && m < 6 ? c[i % 3] : 0.0f) << i;
  }
}

int CountGradientOps(const Built& b, const std::string& op) {
  int n = 0;
  for (const NodeDef& node : b.graph.graph.node()) {
    if (node.op() == op && absl::StartsWith(node.name(), b.graph.prefix + "/")) ++n;
  }
  return n;
}

TEST(SimplifyBackward, StaticShapesBecomeConstantsAndRelu6GradReadsItsOutput) {
  Built b = Build(4);
  EXPECT_GE(b.result.simplifications.constant_shapes, 2);
  EXPECT_EQ(CountGradientOps(b, "Shape"), 0);
  EXPECT_EQ(b.result.simplifications.outputs_read, 1);
  int relu6_grads = 0;
  for (const NodeDef& node : b.graph.graph.node()) {
    if (node.op() != "Relu6Grad") continue;
    ++relu6_grads;
    EXPECT_EQ(node.input(1), "r");
  }
  EXPECT_EQ(relu6_grads, 1);
  ExpectGradient(b, 4);
}

TEST(SimplifyBackward, UnknownBatchKeepsTheShapesThatDependOnIt) {
  Built b = Build(-1);
  // Shape(x * c) depends on the batch; Shape(c) does not.
  EXPECT_GE(CountGradientOps(b, "Shape"), 1);
  EXPECT_GE(b.result.simplifications.constant_shapes, 1);
  ExpectGradient(b, 4);
  ExpectGradient(b, 1);
}

TEST(SimplifyBackward, AFeedThePlaceholderDoesNotAcceptIsRefused) {
  GradientRequest request;
  request.graph = Forward(4);
  request.y = *TensorRef::Parse("s");
  request.xs = {*TensorRef::Parse("x")};
  request.feeds = {{*TensorRef::Parse("x"), X(2)}};
  GradientResult result;
  const absl::Status s = ComputeGraphGradients(&request, &result, GradientOptions());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "feed 'x:0' has shape [2,3]")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "placeholder 'x' (shape [4,3])")) << s;
}

// s = sum(conv2d(x, w) * k): x [2, 6, 7, 3] fed, w [kh, kw, 3, 4] a constant (or fed), k a
// constant of the output's shape, so d s / d x is the backward-data convolution of k.
struct ConvCase {
  int kh, kw, stride;
  std::string padding;
  std::vector<int64_t> pads;  // top, bottom, left, right (EXPLICIT)
  bool constant_filter;
  bool forward;  // expected to become a forward convolution
  int dilation = 1;
};

constexpr int kN = 2, kH = 6, kW = 7, kC = 3, kO = 4;

Tensor Filled(TensorShape shape, float scale) {
  Tensor t(DT_FLOAT, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.flat<float>()(i) = scale * std::sin(0.7f * i + 0.3f);
  return t;
}

NodeDef Node(const std::string& name, const std::string& op, std::vector<std::string> inputs) {
  NodeDef n;
  n.set_name(name);
  n.set_op(op);
  for (const std::string& in : inputs) n.add_input(in);
  return n;
}

NodeDef ConstNode(const std::string& name, const Tensor& value) {
  NodeDef n = Node(name, "Const", {});
  AddNodeAttr("dtype", value.dtype(), &n);
  AddNodeAttr("value", value, &n);
  return n;
}

NodeDef PlaceholderNode(const std::string& name, TensorShape shape) {
  NodeDef n = Node(name, "Placeholder", {});
  AddNodeAttr("dtype", DT_FLOAT, &n);
  AddNodeAttr("shape", shape, &n);
  return n;
}

// Adds s = sum(input * k), k a constant, to `forward`.
void AddWeightedSum(const std::string& input, const Tensor& k, GraphDef* forward) {
  *forward->add_node() = ConstNode("k", k);
  NodeDef m = Node("m", "Mul", {input, "k"});
  AddNodeAttr("T", DT_FLOAT, &m);
  *forward->add_node() = m;
  Tensor axes(DT_INT32, TensorShape({k.dims()}));
  for (int i = 0; i < k.dims(); ++i) axes.flat<int32>()(i) = i;
  *forward->add_node() = ConstNode("axes", axes);
  NodeDef sum = Node("s", "Sum", {"m", "axes"});
  AddNodeAttr("T", DT_FLOAT, &sum);
  AddNodeAttr("Tidx", DT_INT32, &sum);
  *forward->add_node() = sum;
}

// d s / d x of `forward`.
absl::Status BuildSumGradient(GraphDef* forward, bool hoist_constants, bool optimize, Built* b) {
  GradientGraphSpec spec;
  spec.ys = {*TensorRef::Parse("s")};
  spec.xs = {*TensorRef::Parse("x")};
  GradientOptions options;
  options.hoist_constants = hoist_constants;
  options.optimize_graph = optimize;
  return BuildGradientGraph(forward, spec, options, &b->result, &b->graph);
}

// The forward convolution's padding (top, bottom, left, right) and output size.
void Geometry(const ConvCase& c, int64_t pads[4], int64_t* oh, int64_t* ow) {
  const int64_t in[2] = {kH, kW};
  const int64_t k[2] = {c.dilation * (c.kh - 1) + 1, c.dilation * (c.kw - 1) + 1};  // reach
  int64_t out[2];
  for (int d = 0; d < 2; ++d) {
    if (c.padding == "SAME") {
      out[d] = (in[d] + c.stride - 1) / c.stride;
      const int64_t total = std::max<int64_t>((out[d] - 1) * c.stride + k[d] - in[d], 0);
      pads[2 * d] = total / 2;
      pads[2 * d + 1] = total - total / 2;
    } else {
      pads[2 * d] = c.padding == "EXPLICIT" ? c.pads[2 * d] : 0;
      pads[2 * d + 1] = c.padding == "EXPLICIT" ? c.pads[2 * d + 1] : 0;
      out[d] = (in[d] + pads[2 * d] + pads[2 * d + 1] - k[d]) / c.stride + 1;
    }
  }
  *oh = out[0];
  *ow = out[1];
}

void ExpectConvolutionGradient(const ConvCase& c, bool hoist_constants, bool optimize = true) {
  SCOPED_TRACE(c.padding + " " + std::to_string(c.kh) + "x" + std::to_string(c.kw) + " stride " +
               std::to_string(c.stride) + " dilation " + std::to_string(c.dilation) +
               (c.constant_filter ? "" : ", fed filter") +
               (hoist_constants ? ", hoist_constants" : "") + (optimize ? "" : ", no Grappler"));
  int64_t pads[4], oh, ow;
  Geometry(c, pads, &oh, &ow);
  const Tensor w = Filled(TensorShape({c.kh, c.kw, kC, kO}), 0.5f);
  const Tensor k = Filled(TensorShape({kN, oh, ow, kO}), 1.5f);
  const Tensor x = Filled(TensorShape({kN, kH, kW, kC}), 1.0f);
  GraphDef forward;
  *forward.add_node() = PlaceholderNode("x", TensorShape({kN, kH, kW, kC}));
  *forward.add_node() = c.constant_filter ? ConstNode("w", w)
                                          : PlaceholderNode("w", w.shape());
  NodeDef conv = Node("conv", "Conv2D", {"x", "w"});
  AddNodeAttr("T", DT_FLOAT, &conv);
  AddNodeAttr("strides", std::vector<int32>{1, c.stride, c.stride, 1}, &conv);
  AddNodeAttr("dilations", std::vector<int32>{1, c.dilation, c.dilation, 1}, &conv);
  AddNodeAttr("padding", c.padding, &conv);
  if (c.padding == "EXPLICIT") {
    AddNodeAttr("explicit_paddings",
                std::vector<int64_t>{0, 0, c.pads[0], c.pads[1], c.pads[2], c.pads[3], 0, 0}, &conv);
  }
  *forward.add_node() = conv;
  AddWeightedSum("conv", k, &forward);
  Built b;
  absl::Status s = BuildSumGradient(&forward, hoist_constants, optimize, &b);
  ASSERT_TRUE(s.ok()) << s;
  const bool forward_expected = c.forward && !hoist_constants && optimize;
  EXPECT_EQ(b.result.simplifications.forward_convolutions, forward_expected ? 1 : 0);
  EXPECT_EQ(CountGradientOps(b, "Conv2DBackpropInput"), forward_expected ? 0 : 1);
  EXPECT_EQ(CountGradientOps(b, "Conv2D"), forward_expected ? 1 : 0);

  // dx[n, y, x, ci] = sum over outputs (p, q, co) and taps (i, j) reading it of k * w.
  std::vector<double> expected(x.NumElements(), 0.0);
  for (int64_t n = 0; n < kN; ++n) {
    for (int64_t p = 0; p < oh; ++p) {
      for (int64_t q = 0; q < ow; ++q) {
        for (int64_t i = 0; i < c.kh; ++i) {
          for (int64_t j = 0; j < c.kw; ++j) {
            const int64_t y = p * c.stride + i * c.dilation - pads[0];
            const int64_t xx = q * c.stride + j * c.dilation - pads[2];
            if (y < 0 || y >= kH || xx < 0 || xx >= kW) continue;
            for (int64_t ci = 0; ci < kC; ++ci) {
              for (int64_t co = 0; co < kO; ++co) {
                expected[((n * kH + y) * kW + xx) * kC + ci] +=
                    k.flat<float>()(((n * oh + p) * ow + q) * kO + co) *
                    w.flat<float>()(((i * c.kw + j) * kC + ci) * kO + co);
              }
            }
          }
        }
      }
    }
  }
  std::unique_ptr<Session> session(NewSession(BackwardSessionOptions(optimize)));
  ASSERT_TRUE(session->Create(b.graph.graph).ok());
  std::vector<std::pair<std::string, Tensor>> feeds = {{"x", x}};
  if (!c.constant_filter) feeds.push_back({"w", w});
  std::vector<Tensor> out;
  s = session->Run(feeds, {b.graph.dx_names[0]}, {}, &out);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(out[0].shape(), x.shape());
  for (int64_t i = 0; i < x.NumElements(); ++i) {
    EXPECT_NEAR(out[0].flat<float>()(i), expected[i], 1e-4 * (1 + std::abs(expected[i]))) << i;
  }
}

TEST(SimplifyBackward, StrideOneInputGradientsBecomeForwardConvolutions) {
  const std::vector<ConvCase> cases = {
      {3, 3, 1, "SAME", {}, true, true},
      {2, 4, 1, "SAME", {}, true, true},  // even: the turned padding is the other way round
      {3, 2, 1, "VALID", {}, true, true},
      {1, 1, 1, "VALID", {}, true, true},
      {3, 3, 1, "EXPLICIT", {1, 0, 2, 1}, true, true},
      {3, 3, 1, "EXPLICIT", {3, 0, 0, 0}, true, false},  // more padding than the kernel reaches
      {3, 3, 2, "SAME", {}, true, false},                // strided
      {3, 3, 1, "SAME", {}, false, false},               // the filter is fed
      // Dilated: TensorFlow's Conv2D gradient dropped the dilations (workarounds.h).
      {3, 3, 1, "SAME", {}, true, false, 2},
      {2, 3, 2, "VALID", {}, false, false, 2},
  };
  for (const ConvCase& c : cases) ExpectConvolutionGradient(c, /*hoist_constants=*/false);
  ExpectConvolutionGradient(cases[0], /*hoist_constants=*/true);
  ExpectConvolutionGradient(cases[0], /*hoist_constants=*/false, /*optimize=*/false);
}

// s = sum(matmul(x, w) * k), x [3, 5] fed, w [5, 4] a constant (or fed): d s / d x = k w^T,
// whose MatMul(k, w, transpose_b) reads w pretransposed when w is a constant.
void ExpectMatMulGradient(bool constant_weight, bool hoist_constants) {
  SCOPED_TRACE(std::string(constant_weight ? "constant" : "fed") + " weight" +
               (hoist_constants ? ", hoist_constants" : ""));
  const Tensor x = Filled(TensorShape({3, 5}), 1.0f);
  const Tensor w = Filled(TensorShape({5, 4}), 0.5f);
  const Tensor k = Filled(TensorShape({3, 4}), 1.5f);
  GraphDef forward;
  *forward.add_node() = PlaceholderNode("x", x.shape());
  *forward.add_node() = constant_weight ? ConstNode("w", w) : PlaceholderNode("w", w.shape());
  NodeDef mm = Node("mm", "MatMul", {"x", "w"});
  AddNodeAttr("T", DT_FLOAT, &mm);
  *forward.add_node() = mm;
  AddWeightedSum("mm", k, &forward);
  Built b;
  absl::Status s = BuildSumGradient(&forward, hoist_constants, /*optimize=*/true, &b);
  ASSERT_TRUE(s.ok()) << s;
  const bool expected = constant_weight && !hoist_constants;
  EXPECT_EQ(b.result.simplifications.pretransposed_weights, expected ? 1 : 0);
  int transposed_b = 0;
  for (const NodeDef& node : b.graph.graph.node()) {
    if (node.op() == "MatMul" && node.attr().at("transpose_b").b()) ++transposed_b;
  }
  EXPECT_EQ(transposed_b, expected ? 0 : 1);
  std::unique_ptr<Session> session(NewSession(BackwardSessionOptions(true)));
  ASSERT_TRUE(session->Create(b.graph.graph).ok());
  std::vector<std::pair<std::string, Tensor>> feeds = {{"x", x}};
  if (!constant_weight) feeds.push_back({"w", w});
  std::vector<Tensor> out;
  s = session->Run(feeds, {b.graph.dx_names[0]}, {}, &out);
  ASSERT_TRUE(s.ok()) << s;
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 5; ++j) {
      double want = 0;
      for (int64_t o = 0; o < 4; ++o) want += k.flat<float>()(i * 4 + o) * w.flat<float>()(j * 4 + o);
      EXPECT_NEAR(out[0].flat<float>()(i * 5 + j), want, 1e-5 * (1 + std::abs(want))) << i << "," << j;
    }
  }
}

TEST(SimplifyBackward, ConstantWeightsOfInputGradientMatMulsArePretransposed) {
  ExpectMatMulGradient(/*constant_weight=*/true, /*hoist_constants=*/false);
  ExpectMatMulGradient(/*constant_weight=*/false, /*hoist_constants=*/false);
  ExpectMatMulGradient(/*constant_weight=*/true, /*hoist_constants=*/true);
}

// g/rank = Size(g/shape), g/shape = Shape(x) with x [3, 4], after g/empty = Shape(c) of a scalar
// c ([0]): the pass makes each a constant, the next one in the memory the last one freed.
TEST(SimplifyBackward, ShapeOfAShapeNodeIsItsValueNotARemovedNodes) {
  GraphDef def;
  ASSERT_TRUE(protobuf::TextFormat::ParseFromString(R"pb(
    node { name: "c" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "value" value { tensor { dtype: DT_FLOAT float_val: 1 } } } }
    node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 3 } dim { size: 4 } } } } }
    node { name: "g/empty" op: "Shape" input: "c" attr { key: "T" value { type: DT_FLOAT } } }
    node { name: "g/shape" op: "Shape" input: "x" attr { key: "T" value { type: DT_FLOAT } }
           attr { key: "out_type" value { type: DT_INT64 } } }
    node { name: "g/rank" op: "Size" input: "g/shape" attr { key: "T" value { type: DT_INT64 } } }
    node { name: "g/read_empty" op: "Identity" input: "g/empty"
           attr { key: "T" value { type: DT_INT32 } } }
    node { name: "g/read_shape" op: "Identity" input: "g/shape"
           attr { key: "T" value { type: DT_INT64 } } }
    node { name: "g/read_rank" op: "Identity" input: "g/rank"
           attr { key: "T" value { type: DT_INT32 } } }
  )pb", &def));
  Graph g(OpRegistry::Global());
  ASSERT_TRUE(ConvertGraphDefToGraph(GraphConstructorOptions(), def, &g).ok());
  auto simplified = SimplifyBackward(&g, "g", {"g/read_empty", "g/read_shape", "g/read_rank"});
  ASSERT_TRUE(simplified.ok()) << simplified.status();
  EXPECT_EQ(simplified->constant_shapes, 3);
  std::map<std::string, Tensor> read;  // what each reader's input became
  for (const tensorflow::Node* n : g.op_nodes()) {
    if (!absl::StartsWith(n->name(), "g/read_")) continue;
    const Edge* in = nullptr;
    ASSERT_TRUE(n->input_edge(0, &in).ok());
    ASSERT_TRUE(in->src()->IsConstant()) << n->name() << " reads " << in->src()->name();
    const TensorProto* proto = nullptr;
    ASSERT_TRUE(TryGetNodeAttr(in->src()->attrs(), "value", &proto));
    ASSERT_TRUE(read[n->name()].FromProto(*proto));
  }
  ASSERT_EQ(read.size(), 3u);
  EXPECT_EQ(read["g/read_empty"].NumElements(), 0);
  ASSERT_EQ(read["g/read_shape"].NumElements(), 2);
  EXPECT_EQ(read["g/read_shape"].vec<int64_t>()(0), 3);
  EXPECT_EQ(read["g/read_shape"].vec<int64_t>()(1), 4);
  EXPECT_EQ(read["g/read_rank"].scalar<int32_t>()(), 2);
}

// s = sum(top_k(x, 2).values ^ 2), x [3, 4]: d s / d x = 2 x at each row's two largest, else 0.
// Pow's gradient takes Shape of the scalar exponent ([0]) before TopKV2's takes
// Size(Shape(x)): the rank once read 0 there, and the run failed in a GatherV2 at index -1.
TEST(SimplifyBackward, TopKV2GradientThroughStaticShapes) {
  GraphDef forward;
  ASSERT_TRUE(protobuf::TextFormat::ParseFromString(R"pb(
    node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 3 } dim { size: 4 } } } } }
    node { name: "k" op: "Const" attr { key: "dtype" value { type: DT_INT32 } }
           attr { key: "value" value { tensor { dtype: DT_INT32 int_val: 2 } } } }
    node { name: "top" op: "TopKV2" input: "x" input: "k"
           attr { key: "T" value { type: DT_FLOAT } } }
    node { name: "two" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "value" value { tensor { dtype: DT_FLOAT float_val: 2 } } } }
    node { name: "p" op: "Pow" input: "top" input: "two" attr { key: "T" value { type: DT_FLOAT } } }
    node { name: "axes" op: "Const" attr { key: "dtype" value { type: DT_INT32 } }
           attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape { dim { size: 2 } }
                                                int_val: 0 int_val: 1 } } } }
    node { name: "s" op: "Sum" input: "p" input: "axes" attr { key: "T" value { type: DT_FLOAT } }
           attr { key: "Tidx" value { type: DT_INT32 } } }
  )pb", &forward));
  GradientGraphSpec spec;
  spec.ys = {*TensorRef::Parse("s")};
  spec.xs = {*TensorRef::Parse("x")};
  GradientGraph graph;
  GradientResult result;
  absl::Status s = BuildGradientGraph(&forward, spec, GradientOptions(), &result, &graph);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_GE(result.simplifications.constant_shapes, 4);
  std::unique_ptr<Session> session(NewSession(BackwardSessionOptions(true)));
  ASSERT_TRUE(session->Create(graph.graph).ok());
  Tensor x(DT_FLOAT, TensorShape({3, 4}));
  const float values[] = {0.5f, -1.0f, 2.0f, 1.5f, -0.25f, 3.0f, -2.0f, 1.0f, 0.75f, 0.1f, -0.5f, 0.2f};
  for (int i = 0; i < 12; ++i) x.flat<float>()(i) = values[i];
  std::vector<Tensor> out;
  s = session->Run({{"x", x}}, {graph.dx_names[0]}, {}, &out);
  ASSERT_TRUE(s.ok()) << s;
  const bool top[] = {0, 0, 1, 1, 0, 1, 0, 1, 1, 0, 0, 1};
  for (int i = 0; i < 12; ++i) {
    EXPECT_FLOAT_EQ(out[0].flat<float>()(i), top[i] ? 2 * values[i] : 0.0f) << i;
  }
}

}  // namespace
}  // namespace tensorflow::tf_ext
