// TfExt>ZeroOut: forward per dtype and rank, validation, and its C++ gradient through
// SymbolicGradient (closed form and numeric Jacobian).
#include <gtest/gtest.h>

#include <numeric>

#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tf_ext/testing/gradient_checker.h"
#include "tests/test_util.h"
#include "tf_ext/testing/op_runner.h"

namespace tensorflow::tf_ext::test {
namespace {

template <typename T>
Tensor Iota(const TensorShape& shape, T start) {
  Tensor t(DataTypeToEnum<T>::value, shape);
  auto f = t.flat<T>();
  for (int64_t i = 0; i < f.size(); ++i) f(i) = static_cast<T>(start + static_cast<T>(i));
  return t;
}

template <typename T>
class ZeroOutTyped : public ::testing::Test {};
using ZeroOutTypes = ::testing::Types<float, double, int32>;
TYPED_TEST_SUITE(ZeroOutTyped, ZeroOutTypes);

TYPED_TEST(ZeroOutTyped, KeepsOnlyPreservedElementForEveryRank) {
  const std::vector<TensorShape> shapes = {TensorShape({}), TensorShape({7}), TensorShape({3, 4}),
                                           TensorShape({2, 3, 5}), TensorShape({2, 1, 3, 2})};
  for (const TensorShape& shape : shapes) {
    const int64_t n = shape.num_elements();
    for (int64_t p : {int64_t{0}, n / 2, n - 1}) {
      Tensor in = Iota<TypeParam>(shape, TypeParam(3));
      for (RunPath path : {RunPath::kSessionFed, RunPath::kSessionConstants}) {
        auto out = RunOp("TfExt>ZeroOut", {{"preserve_index", p}}, {in}, {path});
        ASSERT_TRUE(out.ok()) << out.status();
        const Tensor& z = (*out)[0];
        ASSERT_EQ(z.shape(), shape);
        ASSERT_EQ(z.dtype(), DataTypeToEnum<TypeParam>::value);
        for (int64_t i = 0; i < n; ++i) {
          const TypeParam want = i == p ? in.flat<TypeParam>()(i) : TypeParam(0);
          EXPECT_EQ(z.flat<TypeParam>()(i), want) << shape.DebugString() << " p=" << p << " i=" << i;
        }
      }
    }
  }
}

TYPED_TEST(ZeroOutTyped, LargeTensorUsesAllElements) {
  // Big enough for the CPU functor to split the work across threads.
  const int64_t n = 1 << 20;
  Tensor in = Iota<TypeParam>(TensorShape({n}), TypeParam(1));
  auto out = RunOp("TfExt>ZeroOut", {{"preserve_index", n - 3}}, {in});
  ASSERT_TRUE(out.ok()) << out.status();
  auto z = (*out)[0].flat<TypeParam>();
  int64_t nonzero = 0;
  for (int64_t i = 0; i < n; ++i) nonzero += z(i) != TypeParam(0);
  EXPECT_EQ(nonzero, 1);
  EXPECT_EQ(z(n - 3), in.flat<TypeParam>()(n - 3));
}

TEST(ZeroOut, RejectsOutOfRangeIndexInKernelAndShapeFn) {
  Tensor in = Iota<float>(TensorShape({2, 3}), 1.f);
  for (RunPath path : {RunPath::kSessionFed, RunPath::kSessionConstants}) {
    auto out = RunOp("TfExt>ZeroOut", {{"preserve_index", 6}}, {in}, {path});
    ExpectInvalidArgument(out.status(), "TfExt>ZeroOut", {"preserve_index 6", "(6)"});
  }
}

TEST(ZeroOut, RejectsEmptyInput) {
  Tensor in(DT_FLOAT, TensorShape({0, 4}));
  auto out = RunOp("TfExt>ZeroOut", {{"preserve_index", 0}}, {in});
  ExpectInvalidArgument(out.status(), "TfExt>ZeroOut", {"(0)"});
}

TEST(ZeroOut, RejectsNegativeIndexAttr) {
  Tensor in = Iota<float>(TensorShape({3}), 1.f);
  auto out = RunOp("TfExt>ZeroOut", {{"preserve_index", -1}}, {in});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("preserve_index"), std::string::npos) << out.status();
}

template <typename T>
class ZeroOutGradTyped : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(ZeroOutGradTyped, FloatTypes);

TYPED_TEST(ZeroOutGradTyped, SymbolicGradientRoutesDyToPreservedIndex) {
  Tensor x = Iota<TypeParam>(TensorShape({2, 3}), TypeParam(1));
  Tensor dy = Iota<TypeParam>(TensorShape({2, 3}), TypeParam(10));
  auto g = RunSymbolicGradient("TfExt>ZeroOut", {{"preserve_index", 4}}, {x}, {dy});
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->size(), 1u);
  for (int64_t i = 0; i < 6; ++i) {
    EXPECT_EQ((*g)[0].flat<TypeParam>()(i), i == 4 ? TypeParam(14) : TypeParam(0)) << i;
  }
}

TYPED_TEST(ZeroOutGradTyped, MatchesNumericJacobian) {
  const double tol = std::is_same_v<TypeParam, double> ? 1e-6 : 1e-3;
  for (const TensorShape& shape : {TensorShape({5}), TensorShape({3, 4}), TensorShape({2, 2, 3})}) {
    Tensor x = Iota<TypeParam>(shape, TypeParam(-2));
    GradientCheckResult r;
    ASSERT_TRUE(CheckGradient("TfExt>ZeroOut", {{"preserve_index", shape.num_elements() - 2}},
                              {x}, GradientCheckOptions(), &r)
                    .ok());
    EXPECT_TRUE(r.Passed(tol)) << r.ToString();
    EXPECT_EQ(r.rows, shape.num_elements());
    EXPECT_EQ(r.columns, shape.num_elements());
    EXPECT_TRUE(r.numeric_float64);
  }
}

TEST(ZeroOutGrad, Int32IsNotDifferentiable) {
  Tensor x = Iota<int32>(TensorShape({3}), 1);
  auto g = RunSymbolicGradient("TfExt>ZeroOut", {}, {x}, {x});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("TfExt>ZeroOut is not differentiable for T=int32"),
            std::string::npos)
      << g.status();
}

}  // namespace
}  // namespace tensorflow::tf_ext::test
