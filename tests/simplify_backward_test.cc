// SimplifyBackward (tf_ext/graph/simplify_backward.h) through BuildGradientGraph: a gradient's
// Shape nodes become constants exactly where the placeholders' shapes fix them, Relu6Grad reads
// the Relu6's output, and the gradient is unchanged (against its closed form, at the kinks'
// sides); a feed that its placeholder's shape does not accept is refused by name.
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/protobuf.h"
#include "tensorflow/core/public/session.h"
#include "tf_ext/graph/gradient_graph.h"
#include "tf_ext/graph/graph_gradients.h"
#include "tf_ext/graph/session_options.h"

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

}  // namespace
}  // namespace tensorflow::tf_ext
