// TensorList gradients (tf_ext/grads/tf/list_grad.cc) through the C++ client registry: the
// cc/framework AddSymbolicGradients that TF_AddGradients and the language bindings use. A list
// with several consumers gets the AddN of their gradient lists; a list output nobody
// differentiates gets ZerosLike of the list. Closed-form references.
#include <gtest/gtest.h>

#include "tensorflow/cc/framework/gradients.h"
#include "tensorflow/cc/framework/scope.h"
#include "tensorflow/cc/ops/array_ops.h"
#include "tensorflow/cc/ops/const_op.h"
#include "tensorflow/cc/ops/list_ops.h"
#include "tensorflow/cc/ops/math_ops.h"
#include "tensorflow/core/public/session.h"
#include "tests/test_util.h"

namespace tensorflow::tf_ext {
namespace {

std::vector<Tensor> RunGraph(const Scope& scope, const std::vector<Output>& fetches) {
  GraphDef graph;
  TF_CHECK_OK(scope.ToGraphDef(&graph));
  std::unique_ptr<Session> session(NewSession(SessionOptions()));
  TF_CHECK_OK(session->Create(graph));
  std::vector<std::string> names;
  for (const Output& out : fetches) names.push_back(out.name());
  std::vector<Tensor> outs;
  absl::Status s = session->Run({}, names, {}, &outs);
  EXPECT_TRUE(s.ok()) << s;
  return outs;
}

Tensor X() { return test::AsTensor<double>({1, -2, 3, 0.5, -1, 4}, TensorShape({3, 2})); }

TEST(ListGradients, SeveralConsumersOfOneList) {
  // l = list(x); loss = sum(3 * l[0]) + sum(stack(l)^2) + sum(l[2] * l[2]):
  // d loss / dx = 2x + 3 in row 0 + 2 x in row 2.
  Scope root = Scope::NewRootScope();
  auto x = ops::Const(root, X());
  auto shape = ops::Const(root, {2});
  auto l = ops::TensorListFromTensor(root, x, shape);
  auto item0 = ops::TensorListGetItem(root, l, 0, shape, DT_DOUBLE);
  auto item2 = ops::TensorListGetItem(root, l, 2, shape, DT_DOUBLE);
  auto stacked = ops::TensorListStack(root, l, shape, DT_DOUBLE);
  auto loss = ops::AddN(
      root, std::initializer_list<Input>{
                ops::Sum(root, ops::Mul(root, ops::Const(root, 3.0), item0), {0}),
                ops::Sum(root, ops::Square(root, stacked), {0, 1}),
                ops::Sum(root, ops::Mul(root, item2, item2), {0})});
  std::vector<Output> grads;
  ASSERT_TRUE(AddSymbolicGradients(root, {loss}, {x}, &grads).ok());
  ASSERT_TRUE(root.status().ok()) << root.status();
  std::vector<Tensor> out = RunGraph(root, {grads[0]});
  ASSERT_EQ(out.size(), 1u);
  test::ExpectTensorNear<double>(
      out[0], test::AsTensor<double>({2 + 3, -4 + 3, 6, 1, -4, 16}, TensorShape({3, 2})), 1e-12);
}

TEST(ListGradients, OutputWithoutIncomingGradient) {
  // (rest, last) = pop_back(list(x)); loss = sum(5 * last): rest gets no gradient (zeros of a
  // list) and d loss / dx = 5 in the last row.
  Scope root = Scope::NewRootScope();
  auto x = ops::Const(root, X());
  auto shape = ops::Const(root, {2});
  auto l = ops::TensorListFromTensor(root, x, shape);
  auto popped = ops::TensorListPopBack(root, l, shape, DT_DOUBLE);
  auto loss = ops::Sum(root, ops::Mul(root, ops::Const(root, 5.0), popped.tensor), {0});
  std::vector<Output> grads;
  ASSERT_TRUE(AddSymbolicGradients(root, {loss}, {x}, &grads).ok());
  ASSERT_TRUE(root.status().ok()) << root.status();
  std::vector<Tensor> out = RunGraph(root, {grads[0]});
  ASSERT_EQ(out.size(), 1u);
  test::ExpectTensorNear<double>(out[0],
                                 test::AsTensor<double>({0, 0, 0, 0, 5, 5}, TensorShape({3, 2})),
                                 1e-12);
}

TEST(ListGradients, SetItemPushBackGatherScatter) {
  // l = scatter(x, [2, 0, 1]); l[1] = 2 x[0]; push 3 x[1]; y = gather(l, [3, 1, 2]);
  // loss = sum(y * w) with w = [[1, 2], [3, 4], [5, 6]]:
  //   l[3] = 3 x[1] -> d x[1] += 3 w[0]; l[1] = 2 x[0] -> d x[0] += 2 w[1];
  //   l[2] = x[0] (scattered) -> d x[0] += w[2]; x[2] went to l[1], overwritten -> 0.
  Scope root = Scope::NewRootScope();
  auto x = ops::Const(root, X());
  auto shape = ops::Const(root, {2});
  auto l = ops::TensorListScatterV2(root, x, ops::Const(root, {2, 0, 1}), shape,
                                    ops::Const(root, -1));
  auto x0 = ops::Reshape(root, ops::Slice(root, x, {0, 0}, {1, 2}), {2});
  auto x1 = ops::Reshape(root, ops::Slice(root, x, {1, 0}, {1, 2}), {2});
  auto set = ops::TensorListSetItem(root, l, 1, ops::Mul(root, ops::Const(root, 2.0), x0));
  auto pushed = ops::TensorListPushBack(root, set, ops::Mul(root, ops::Const(root, 3.0), x1));
  auto y = ops::TensorListGather(root, pushed, ops::Const(root, {3, 1, 2}), shape, DT_DOUBLE);
  auto w = ops::Const(root, test::AsTensor<double>({1, 2, 3, 4, 5, 6}, TensorShape({3, 2})));
  auto loss = ops::Sum(root, ops::Mul(root, y, w), {0, 1});
  std::vector<Output> grads;
  ASSERT_TRUE(AddSymbolicGradients(root, {loss}, {x}, &grads).ok());
  ASSERT_TRUE(root.status().ok()) << root.status();
  std::vector<Tensor> out = RunGraph(root, {grads[0]});
  ASSERT_EQ(out.size(), 1u);
  test::ExpectTensorNear<double>(
      out[0], test::AsTensor<double>({2 * 3 + 5, 2 * 4 + 6, 3 * 1, 3 * 2, 0, 0}, TensorShape({3, 2})),
      1e-12);
}

TEST(ListGradients, SplitConcatWithForwardLengths) {
  // concat(split(x^2, lengths [1, 2])) = x^2: d loss / dx = 2 x w. The client registry passes
  // the forward lengths to ConcatV2's gradient (it declares that it reads them).
  Scope root = Scope::NewRootScope();
  auto x = ops::Const(root, X());
  auto l = ops::TensorListSplit(root, ops::Square(root, x), ops::Const(root, {-1, 2}),
                                ops::Const(root, {int64_t{1}, int64_t{2}}));
  auto concat = ops::TensorListConcatV2(root, l, ops::Const(root, {-1, 2}),
                                        ops::Const(root, std::initializer_list<int64_t>{}),
                                        DT_DOUBLE);
  auto w = ops::Const(root, test::AsTensor<double>({1, 2, 3, 4, 5, 6}, TensorShape({3, 2})));
  auto loss = ops::Sum(root, ops::Mul(root, concat.tensor, w), {0, 1});
  std::vector<Output> grads;
  ASSERT_TRUE(AddSymbolicGradients(root, {loss}, {x}, &grads).ok());
  ASSERT_TRUE(root.status().ok()) << root.status();
  int calls_with_outputs = 0;
  for (const Node* n : root.graph()->op_nodes()) {
    calls_with_outputs += n->type_string() == "PartitionedCall" &&
                          n->def().attr().at("f").func().name().find("with_outputs") !=
                              std::string::npos;
  }
  EXPECT_EQ(calls_with_outputs, 1);
  std::vector<Tensor> out = RunGraph(root, {grads[0]});
  ASSERT_EQ(out.size(), 1u);
  test::ExpectTensorNear<double>(
      out[0], test::AsTensor<double>({2, -8, 18, 4, -10, 48}, TensorShape({3, 2})), 1e-12);
}

}  // namespace
}  // namespace tensorflow::tf_ext
