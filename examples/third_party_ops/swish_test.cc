// The third-party op's C++ gradient from C++: the client API (Scope + AddSymbolicGradients,
// through the client registry entry TF_EXT_REGISTER_GRADIENT adds) and tf_ext's CheckGradient
// (SymbolicGradient through a Session vs float64 central differences).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "tensorflow/cc/framework/gradients.h"
#include "tensorflow/cc/framework/scope.h"
#include "tensorflow/cc/ops/array_ops.h"
#include "tensorflow/cc/ops/const_op.h"
#include "tensorflow/cc/ops/math_ops.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/graph/node_builder.h"
#include "tensorflow/core/public/session.h"
#include "tf_ext/testing/gradient_checker.h"

namespace tensorflow::tf_ext::example {
namespace {

Output Swish(const Scope& scope, Output x) {
  Node* node = nullptr;
  scope.UpdateStatus(NodeBuilder(scope.GetUniqueNameForOp("Swish"), "ThirdParty>Swish")
                         .Input(x.node(), x.index())
                         .Finalize(scope.graph(), &node));
  return Output(node, 0);
}

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

TEST(SwishCcClient, GradientMatchesClosedForm) {
  Scope root = Scope::NewRootScope();
  Output x = ops::Placeholder(root, DT_DOUBLE);
  // loss = sum(2 * swish(x)): d loss / dx = 2 (s + x s (1 - s)).
  Output loss = ops::Sum(root, ops::Mul(root, ops::Const(root, 2.0), Swish(root, x)), {0});
  std::vector<Output> grads;
  ASSERT_TRUE(AddSymbolicGradients(root, {loss}, {x}, &grads).ok());
  ASSERT_TRUE(root.status().ok()) << root.status();

  GraphDef graph;
  ASSERT_TRUE(root.ToGraphDef(&graph).ok());
  std::unique_ptr<Session> session(NewSession(SessionOptions()));
  absl::Status status = session->Create(graph);
  ASSERT_TRUE(status.ok()) << status;
  const std::vector<double> xs = {-3.0, -0.5, 0.0, 0.25, 4.0};
  Tensor feed(DT_DOUBLE, TensorShape({static_cast<int64_t>(xs.size())}));
  for (size_t i = 0; i < xs.size(); ++i) feed.flat<double>()(i) = xs[i];
  std::vector<Tensor> out;
  status = session->Run({{x.name(), feed}}, {grads[0].name()}, {}, &out);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].NumElements(), static_cast<int64_t>(xs.size()));
  for (size_t i = 0; i < xs.size(); ++i) {
    const double s = Sigmoid(xs[i]);
    EXPECT_NEAR(out[0].flat<double>()(i), 2.0 * (s + xs[i] * s * (1 - s)), 1e-12) << i;
  }
}

TEST(SwishCheckGradient, SymbolicMatchesNumeric) {
  for (DataType dtype : {DT_DOUBLE, DT_FLOAT}) {
    Tensor x(dtype, TensorShape({2, 3}));
    for (int i = 0; i < 6; ++i) {
      const double v = -2.5 + i;
      if (dtype == DT_DOUBLE) {
        x.flat<double>()(i) = v;
      } else {
        x.flat<float>()(i) = static_cast<float>(v);
      }
    }
    test::GradientCheckResult r;
    absl::Status status = test::CheckGradient("ThirdParty>Swish", {}, {x},
                                              test::GradientCheckOptions(), &r);
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_EQ(r.columns, 6);
    EXPECT_TRUE(r.Passed(dtype == DT_DOUBLE ? 1e-6 : 1e-3)) << r.ToString();
    EXPECT_TRUE(r.numeric_float64);
  }
}

}  // namespace
}  // namespace tensorflow::tf_ext::example
