// The C++ client API (Scope, cc/framework AddSymbolicGradients, ClientSession) differentiates
// tf_ext ops through the client registry entry that TF_EXT's one-call registration adds.
#include <gtest/gtest.h>

#include "tensorflow/cc/framework/grad_op_registry.h"
#include "tensorflow/cc/framework/gradients.h"
#include "tensorflow/cc/framework/scope.h"
#include "tensorflow/cc/ops/array_ops.h"
#include "tensorflow/cc/ops/const_op.h"
#include "tensorflow/cc/ops/math_ops.h"
#include "tensorflow/core/graph/node_builder.h"
#include "tensorflow/core/public/session.h"
#include "tests/test_util.h"

namespace tensorflow::tf_ext {
namespace {

// tf_ext ops have no generated C++ wrappers; NodeBuilder adds them to a Scope's graph.
Output ZeroOut(const Scope& scope, Output x, int64_t preserve_index) {
  Node* node = nullptr;
  scope.UpdateStatus(NodeBuilder(scope.GetUniqueNameForOp("ZeroOut"), "TfExt>ZeroOut")
                         .Input(x.node(), x.index())
                         .Attr("preserve_index", preserve_index)
                         .Finalize(scope.graph(), &node));
  return Output(node, 0);
}

// Runs `fetches` of the scope's graph. (ClientSession is not exported by the pip wheel's
// libtensorflow_cc, so the graph goes through a plain Session.)
std::vector<Tensor> RunGraph(const Scope& scope, const std::vector<std::pair<Output, Tensor>>& feeds,
                             const std::vector<Output>& fetches) {
  GraphDef graph;
  TF_CHECK_OK(scope.ToGraphDef(&graph));
  std::unique_ptr<Session> session(NewSession(SessionOptions()));
  TF_CHECK_OK(session->Create(graph));
  std::vector<std::pair<std::string, Tensor>> named_feeds;
  for (const auto& [out, t] : feeds) named_feeds.push_back({out.name(), t});
  std::vector<std::string> names;
  for (const Output& out : fetches) names.push_back(out.name());
  std::vector<Tensor> outs;
  absl::Status s = session->Run(named_feeds, names, {}, &outs);
  EXPECT_TRUE(s.ok()) << s;
  return outs;
}

TEST(CcClientGradients, ZeroOutInsideALargerGraph) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root, DT_DOUBLE);
  // loss = sum(3 * ZeroOut(x, 1)^2): d loss / dx = [0, 6 x1, 0, 0].
  Output z = ZeroOut(root, x, 1);
  Output loss = ops::Sum(root, ops::Mul(root, ops::Const(root, 3.0), ops::Square(root, z)), {0});
  std::vector<Output> grads;
  ASSERT_TRUE(AddSymbolicGradients(root, {loss}, {x}, &grads).ok());
  ASSERT_TRUE(root.status().ok()) << root.status();
  std::vector<Tensor> out = RunGraph(root, {{x, test::AsTensor<double>({1, 2, 3, 4})}}, {grads[0]});
  ASSERT_EQ(out.size(), 1u);
  test::ExpectTensorNear<double>(out[0], test::AsTensor<double>({0, 12, 0, 0}));
}

TEST(CcClientGradients, ExplicitIncomingGradient) {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root, DT_FLOAT);
  auto dy = ops::Placeholder(root, DT_FLOAT);
  Output z = ZeroOut(root, x, 3);
  std::vector<Output> grads;
  ASSERT_TRUE(AddSymbolicGradients(root, {z}, {x}, {dy}, &grads).ok());
  std::vector<Tensor> out =
      RunGraph(root,
               {{x, test::AsTensor<float>({1, 2, 3, 4}, TensorShape({2, 2}))},
                {dy, test::AsTensor<float>({5, 6, 7, 8}, TensorShape({2, 2}))}},
               {grads[0]});
  ASSERT_EQ(out.size(), 1u);
  test::ExpectTensorNear<float>(out[0], test::AsTensor<float>({0, 0, 0, 8}, TensorShape({2, 2})));
}

TEST(CcClientGradients, RegistryHasOurGradient) {
  ops::GradFunc fn = nullptr;
  ASSERT_TRUE(ops::GradOpRegistry::Global()->Lookup("TfExt>ZeroOut", &fn).ok());
  EXPECT_NE(fn, nullptr);
}

}  // namespace
}  // namespace tensorflow::tf_ext
