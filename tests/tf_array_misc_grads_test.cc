// The C++ gradients tf_ext adds for TensorFlow's gather, scatter and strided-update ops
// (tf_ext/grads/tf/array_grad.cc) against numeric Jacobians (tests/numeric_jacobian.h), plus
// their hostile cases (out-of-range indices, empty tensors); the fake-quantisation ops
// (quantization_grad.cc: straight-through estimators, against closed forms) and the gamma
// samplers (random_grad.cc: against RandomGammaGrad of the forward sample). Comparisons with Python's gradients (duplicate
// indices, ties): tests/python/test_tf_array_misc_grads.py.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "tensorflow/cc/framework/gradients.h"
#include "tensorflow/cc/framework/scope.h"
#include "tensorflow/cc/ops/array_ops.h"
#include "tensorflow/cc/ops/const_op.h"
#include "tensorflow/cc/ops/math_ops.h"
#include "tensorflow/cc/ops/random_ops.h"
#include "tensorflow/core/public/session.h"
#include "tests/numeric_jacobian.h"

namespace tensorflow::tf_ext {
namespace {

using test::AsTensor;
using test::Check;
using test::ExpectMatchesNumeric;
using test::OpAttrs;
using test::Random;

Tensor Ints(std::vector<int32> v, TensorShape shape) { return AsTensor<int32>(v, shape); }

// ---------------------------------------------------------------------------------------------
// Gathers and scatters.

TEST(ArrayGrads, Gather) {
  ExpectMatchesNumeric({"Gather", {}, {Random(DT_DOUBLE, {5, 3}, 1), Ints({0, 4, 4, 2}, {2, 2})},
                        {1}});
  ExpectMatchesNumeric({"Gather", {}, {Random(DT_DOUBLE, {4}, 2), Ints({3, 3, 1}, {3})}, {1}});
}

// BroadcastTo with an int32 and an int64 shape (TensorFlow's own gradient refuses int64): new
// leading axes, a size-1 axis broadcast, an axis kept; a scalar broadcast everywhere.
TEST(ArrayGrads, BroadcastToBothIndexTypes) {
  const Tensor shape32 = Ints({2, 2, 3, 4}, {4});
  const Tensor shape64 = AsTensor<int64_t>({2, 2, 3, 4}, {4});
  for (const Tensor& shape : {shape32, shape64}) {
    ExpectMatchesNumeric({"BroadcastTo", {}, {Random(DT_DOUBLE, {1, 3, 1}, 7), shape}, {1}});
    ExpectMatchesNumeric({"BroadcastTo", {}, {Random(DT_DOUBLE, {}, 8), shape}, {1}});
  }
}

// Reshape with an int32 and an int64 shape (TensorFlow's function gradient declares it int32).
TEST(ArrayGrads, ReshapeBothIndexTypes) {
  ExpectMatchesNumeric({"Reshape", {}, {Random(DT_DOUBLE, {3, 4}, 9), Ints({2, -1, 3}, {3})}, {1}});
  ExpectMatchesNumeric(
      {"Reshape", {}, {Random(DT_DOUBLE, {3, 4}, 9), AsTensor<int64_t>({2, -1, 3}, {3})}, {1}});
}

// Distinct indices for Max/Min (their numeric derivative is defined away from ties); duplicate
// indices for Add/Sub (each duplicate gets the whole gradient). K = 1 (rows) and K = 2.
TEST(ArrayGrads, TensorScatter) {
  for (const std::string op : {"TensorScatterAdd", "TensorScatterSub", "TensorScatterUpdate",
                               "TensorScatterMax", "TensorScatterMin"}) {
    const bool dup = op == "TensorScatterAdd" || op == "TensorScatterSub";
    ExpectMatchesNumeric({op, {}, {Random(DT_DOUBLE, {5, 3}, 3),
                                   Ints({3, dup ? 3 : 1, 0}, {3, 1}),
                                   Random(DT_DOUBLE, {3, 3}, 4)},
                          {1}});
    ExpectMatchesNumeric({op, {}, {Random(DT_DOUBLE, {3, 4}, 5),
                                   Ints({2, 1, 0, 3, dup ? 2 : 1, dup ? 1 : 2}, {3, 2}),
                                   Random(DT_DOUBLE, {3}, 6)},
                          {1}});
  }
}

TEST(ArrayGrads, TensorStridedSliceUpdate) {
  // x[1:4:2, ::-1] = value [2, 3]
  ExpectMatchesNumeric({"TensorStridedSliceUpdate",
                        {{"end_mask", 2}, {"begin_mask", 2}},
                        {Random(DT_DOUBLE, {5, 3}, 7), Ints({1, 0}, {2}), Ints({4, 0}, {2}),
                         Ints({2, -1}, {2}), Random(DT_DOUBLE, {2, 3}, 8)},
                        {1, 2, 3}});
  // x[1, :] = value [1] (broadcast along the row; the leading axis shrunk)
  ExpectMatchesNumeric({"TensorStridedSliceUpdate",
                        {{"end_mask", 2}, {"begin_mask", 2}, {"shrink_axis_mask", 1}},
                        {Random(DT_DOUBLE, {3, 4}, 9), Ints({1, 0}, {2}), Ints({2, 0}, {2}),
                         Ints({1, 1}, {2}), Random(DT_DOUBLE, {1}, 10)},
                        {1, 2, 3}});
}

// Out-of-range indices fail the gradient with the op's name (its gathers alone would fail
// with a message naming no op, or a segment sum drop a negative index silently).
TEST(ArrayGrads, OutOfRangeIndicesAreInvalidArguments) {
  const Tensor params = Random(DT_FLOAT, {4, 2}, 11);
  for (const Tensor& ids : {Ints({1, 4}, {2}), Ints({-1, 0}, {2})}) {
    auto r = test::RunSymbolicGradient("Gather", {}, {params, ids}, {Random(DT_FLOAT, {2, 2}, 12)});
    test::ExpectInvalidArgument(r.status(), "Gather", {"out of range"});
  }
  for (const std::string op : {"TensorScatterAdd", "TensorScatterUpdate", "TensorScatterMax"}) {
    for (const Tensor& ids : {Ints({1, 4}, {2, 1}), Ints({-1, 0}, {2, 1})}) {
      auto r = test::RunSymbolicGradient(
          op, {}, {params, ids, Random(DT_FLOAT, {2, 2}, 13)}, {Random(DT_FLOAT, {4, 2}, 14)});
      test::ExpectInvalidArgument(r.status(), op, {"out of range"});
    }
  }
}

// bad_indices_policy = IGNORE: the forward skips an out-of-range index, so its update's
// gradient is zero, and the gradient does not fail.
TEST(ArrayGrads, IgnoredBadIndicesGetZeroGradient) {
  const Tensor dy = AsTensor<float>({1, 2, 3, 4, 5, 6, 7, 8}, TensorShape({4, 2}));
  auto r = test::RunSymbolicGradient(
      "TensorScatterAdd", {{"bad_indices_policy", "IGNORE"}},
      {Random(DT_FLOAT, {4, 2}, 15), Ints({2, 9}, {2, 1}), Random(DT_FLOAT, {2, 2}, 16)}, {dy});
  ASSERT_TRUE(r.ok()) << r.status();
  test::ExpectTensorNear<float>((*r)[2], AsTensor<float>({5, 6, 0, 0}, TensorShape({2, 2})));
  test::ExpectTensorNear<float>((*r)[0], dy);
}

TEST(ArrayGrads, EmptyTensors) {
  // no indices at all: zero update rows, the whole gradient to the tensor
  auto r = test::RunSymbolicGradient(
      "TensorScatterMax", {},
      {Random(DT_FLOAT, {3, 2}, 17), Ints({}, {0, 1}), Tensor(DT_FLOAT, {0, 2})},
      {Random(DT_FLOAT, {3, 2}, 18)});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[2].shape(), TensorShape({0, 2}));
  auto g = test::RunSymbolicGradient("Gather", {}, {Tensor(DT_FLOAT, {0, 3}), Ints({}, {0})},
                                     {Tensor(DT_FLOAT, {0, 3})});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)[0].shape(), TensorShape({0, 3}));
}

// ---------------------------------------------------------------------------------------------
// Fake quantisation: straight-through estimators (no finite difference of the staircase
// checks them), so closed forms. [-1, 1] with 8 bits nudges to [-128/127.5, 127/127.5].

TEST(QuantizationGrads, FakeQuantWithMinMaxArgsPassesTheRangeThrough) {
  const Tensor x = AsTensor<float>({-2.0f, -0.5f, 0.3f, 0.99f, 1.5f});
  const Tensor dy = AsTensor<float>({1, 2, 3, 4, 5});
  auto r = test::RunSymbolicGradient("FakeQuantWithMinMaxArgs",
                                     {{"min", -1.0f}, {"max", 1.0f}}, {x}, {dy});
  ASSERT_TRUE(r.ok()) << r.status();
  test::ExpectTensorNear<float>((*r)[0], AsTensor<float>({0, 2, 3, 4, 0}));
}

TEST(QuantizationGrads, FakeQuantWithMinMaxVarsSendsClampedGradientToTheBounds) {
  const Tensor x = AsTensor<float>({-2.0f, -0.5f, 0.3f, 0.99f, 1.5f, 3.0f});
  const Tensor dy = AsTensor<float>({1, 2, 3, 4, 5, 6});
  auto r = test::RunSymbolicGradient("FakeQuantWithMinMaxVars", {},
                                     {x, AsTensor<float>({-1.0f}), AsTensor<float>({1.0f})},
                                     {dy});
  ASSERT_TRUE(r.ok()) << r.status();
  test::ExpectTensorNear<float>((*r)[0], AsTensor<float>({0, 2, 3, 4, 0, 0}));
  test::ExpectTensorNear<float>((*r)[1], AsTensor<float>({1}));      // below: x = -2
  test::ExpectTensorNear<float>((*r)[2], AsTensor<float>({5 + 6}));  // above: 1.5, 3
}

TEST(QuantizationGrads, QuantizeAndDequantizeV2IsStraightThrough) {
  const Tensor x = AsTensor<double>({-2.0, -0.3, 0.4, 1.7});
  const Tensor dy = AsTensor<double>({1, 2, 3, 4});
  auto r = test::RunSymbolicGradient("QuantizeAndDequantizeV2", {{"range_given", true}},
                                     {x, AsTensor<double>({-1.0}), AsTensor<double>({1.0})}, {dy});
  ASSERT_TRUE(r.ok()) << r.status();
  test::ExpectTensorNear<double>((*r)[0], dy);  // Python: d(input) = d(output)
  test::ExpectTensorNear<double>((*r)[1], AsTensor<double>({0.0}));
  test::ExpectTensorNear<double>((*r)[2], AsTensor<double>({0.0}));
}

// Python's straight-through estimator, masked to the range (TensorFlow's own gradient of the
// op fails to build).
TEST(QuantizationGrads, QuantizeAndDequantizeV4MasksToTheRange) {
  const Tensor x = AsTensor<double>({-2.0, -0.3, 0.4, 1.7});
  const Tensor dy = AsTensor<double>({1, 2, 3, 4});
  auto r = test::RunSymbolicGradient("QuantizeAndDequantizeV4", {{"range_given", true}},
                                     {x, AsTensor<double>({-1.0}), AsTensor<double>({1.0})}, {dy});
  ASSERT_TRUE(r.ok()) << r.status();
  test::ExpectTensorNear<double>((*r)[0], AsTensor<double>({0, 2, 3, 0}));
}

// Linear in `gradients`, piecewise constant in the rest: numeric Jacobians away from the
// range's edges, a scalar range and a per-channel one (axis 1).
TEST(QuantizationGrads, QuantizeAndDequantizeV4Grad) {
  ExpectMatchesNumeric({"QuantizeAndDequantizeV4Grad", {},
                        {Random(DT_DOUBLE, {3, 4}, 20), Random(DT_DOUBLE, {3, 4}, 21),
                         AsTensor<double>({-0.5}), AsTensor<double>({0.5})}});
  ExpectMatchesNumeric({"QuantizeAndDequantizeV4Grad", {{"axis", 1}},
                        {Random(DT_DOUBLE, {3, 4}, 22), Random(DT_DOUBLE, {3, 4}, 23),
                         AsTensor<double>({-0.5, -0.2, -0.9, 0.1}),
                         AsTensor<double>({0.5, 0.3, 0.2, 0.7})}});
}

// ---------------------------------------------------------------------------------------------
// Gamma samplers: d(alpha) = sum over the sample axes of d(sample) RandomGammaGrad(alpha,
// sample), with the sample the forward drew.

// sum over axis 0 of dy * RandomGammaGrad(alpha, sample) for a [n, alpha] sample.
Tensor ExpectedAlphaGrad(const Tensor& alpha, const Tensor& sample, const Tensor& dy) {
  const int64_t n = sample.dim_size(0), k = alpha.NumElements();
  Tensor alpha_b(DT_DOUBLE, sample.shape());
  for (int64_t i = 0; i < n * k; ++i) alpha_b.flat<double>()(i) = alpha.flat<double>()(i % k);
  auto partial = test::RunOp("RandomGammaGrad", {}, {alpha_b, sample});
  EXPECT_TRUE(partial.ok()) << partial.status();
  Tensor want(DT_DOUBLE, alpha.shape());
  want.flat<double>().setZero();
  for (int64_t i = 0; i < n * k; ++i) {
    want.flat<double>()(i % k) += dy.flat<double>()(i) * (*partial)[0].flat<double>()(i);
  }
  return want;
}

TEST(RandomGrads, StatelessRandomGammaRecomputesTheSample) {
  const Tensor alpha = AsTensor<double>({0.5, 2.0, 7.5});
  const Tensor dy = Random(DT_DOUBLE, {4, 3}, 24);
  const Tensor shape = Ints({4, 3}, {2});
  const Tensor seed = Ints({7, 11}, {2});
  auto sample = test::RunOp("StatelessRandomGammaV2", {}, {shape, seed, alpha});
  ASSERT_TRUE(sample.ok()) << sample.status();
  auto r = test::RunSymbolicGradient("StatelessRandomGammaV2", {}, {shape, seed, alpha}, {dy});
  ASSERT_TRUE(r.ok()) << r.status();
  test::ExpectTensorNear<double>((*r)[2], ExpectedAlphaGrad(alpha, (*sample)[0], dy), 1e-9);
  EXPECT_EQ((*r)[0].flat<int32>()(0), 0);
}

// StatelessParameterizedTruncatedNormal: d(means) = the sum of d(sample), d(stddevs) = the sum
// of d(sample) (sample - mean) / stddev, over the extra leading axes (closed forms of the
// implicit gradient; minval / maxval against Python's gradient).
TEST(RandomGrads, StatelessTruncatedNormalMeanAndStddev) {
  const Tensor shape = Ints({4, 3}, {2}), seed = Ints({1, 2}, {2});
  const Tensor means = AsTensor<double>({0.0, 1.0, -0.5}), stddevs = AsTensor<double>({2.0});
  const Tensor lo = AsTensor<double>({-1.0}), hi = AsTensor<double>({1.0, 3.0, 0.0});
  const Tensor dy = Random(DT_DOUBLE, {4, 3}, 27);
  auto sample = test::RunOp("StatelessParameterizedTruncatedNormal", {},
                            {shape, seed, means, stddevs, lo, hi});
  ASSERT_TRUE(sample.ok()) << sample.status();
  auto r = test::RunSymbolicGradient("StatelessParameterizedTruncatedNormal", {},
                                     {shape, seed, means, stddevs, lo, hi}, {dy});
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<double> dmean(3, 0.0);
  double dstd = 0;
  for (int i = 0; i < 12; ++i) {
    const double y = (*sample)[0].flat<double>()(i), g = dy.flat<double>()(i);
    dmean[i % 3] += g;
    dstd += g * (y - means.flat<double>()(i % 3)) / 2.0;
  }
  test::ExpectTensorNear<double>((*r)[2], AsTensor<double>(dmean), 1e-12);
  test::ExpectTensorNear<double>((*r)[3], AsTensor<double>({dstd}), 1e-12);
  ASSERT_EQ((*r)[4].shape(), lo.shape());
  ASSERT_EQ((*r)[5].shape(), hi.shape());
}

// RandomGamma is stateful: through the client registry (cc AddSymbolicGradients), which passes
// the forward sample, the gradient uses the very sample the forward drew...
TEST(RandomGrads, RandomGammaUsesTheForwardSample) {
  Scope root = Scope::NewRootScope();
  auto alpha = ops::Const(root, {0.5, 2.0, 7.5});
  auto sample = ops::RandomGamma(root, ops::Const(root, {4}), alpha,
                                 ops::RandomGamma::Seed(3).Seed2(5));
  const Tensor w = Random(DT_DOUBLE, {4, 3}, 25);
  auto loss = ops::Sum(root, ops::Mul(root, sample, ops::Const(root, w)), {0, 1});
  std::vector<Output> grads;
  ASSERT_TRUE(AddSymbolicGradients(root, {loss}, {alpha}, &grads).ok());
  ASSERT_TRUE(root.status().ok()) << root.status();
  GraphDef graph;
  ASSERT_TRUE(root.ToGraphDef(&graph).ok());
  std::unique_ptr<Session> session(NewSession(SessionOptions()));
  ASSERT_TRUE(session->Create(graph).ok());
  std::vector<Tensor> out;
  ASSERT_TRUE(session->Run({}, {sample.node()->name(), grads[0].name()}, {}, &out).ok());
  test::ExpectTensorNear<double>(out[1],
                                 ExpectedAlphaGrad(AsTensor<double>({0.5, 2.0, 7.5}), out[0], w),
                                 1e-9);
}

// ... and a bare SymbolicGradient, which would draw a new sample, is refused naming the op.
TEST(RandomGrads, RandomGammaWithoutTheSampleIsRefused) {
  auto r = test::RunSymbolicGradient("RandomGamma", {}, {Ints({2}, {1}), AsTensor<double>({1.5})},
                                     {Random(DT_DOUBLE, {2, 1}, 26)});
  test::ExpectInvalidArgument(r.status(), "RandomGamma", {"forward sample"});
}

}  // namespace
}  // namespace tensorflow::tf_ext
