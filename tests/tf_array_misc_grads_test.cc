// The C++ gradients tf_ext adds for TensorFlow's gather, scatter and strided-update ops
// (tf_ext/grads/tf/array_grad.cc) against numeric Jacobians (tests/numeric_jacobian.h), plus
// their hostile cases: out-of-range indices, empty tensors. Comparisons with Python's gradients (duplicate
// indices, ties): tests/python/test_tf_array_misc_grads.py.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
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

}  // namespace
}  // namespace tensorflow::tf_ext
