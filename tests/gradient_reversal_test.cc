// TfExt>GradientReversal: forward identity sharing the input buffer, validation of scale,
// the reversed gradient through SymbolicGradient (closed form and numeric Jacobian), and
// GradBuilder::GetAttr, which the gradient uses to read scale.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/function.pb.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_def.pb.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tests/test_util.h"
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/manifest.h"
#include "tf_ext/testing/gradient_checker.h"
#include "tf_ext/testing/op_runner.h"

namespace tensorflow::tf_ext::test {
namespace {

constexpr char kOp[] = "TfExt>GradientReversal";

// Multiples of 0.5 in [-4, 4] (exact in half, and so are their products with the scales
// below), with a NaN and infinities for the forward.
template <typename T>
Tensor MakeTensor(const TensorShape& shape, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  Tensor t(DataTypeToEnum<T>::value, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    double v = 0.5 * (static_cast<int>(rng() % 17) - 8);
    if (specials && i % 7 == 1) v = std::numeric_limits<double>::quiet_NaN();
    if (specials && i % 7 == 4) v = i % 2 ? std::numeric_limits<double>::infinity() : -0.0;
    t.flat<T>()(i) = static_cast<T>(v);
  }
  return t;
}

const std::vector<TensorShape>& Shapes() {
  static const auto* shapes = new std::vector<TensorShape>{
      TensorShape({}), TensorShape({0}), TensorShape({9}), TensorShape({3, 0}),
      TensorShape({2, 3, 4}), TensorShape({5, 1, 3, 2})};
  return *shapes;
}

template <typename T>
class GradientReversalTyped : public ::testing::Test {};
using Types = ::testing::Types<Eigen::half, float, double>;
TYPED_TEST_SUITE(GradientReversalTyped, Types);

TYPED_TEST(GradientReversalTyped, ForwardIsIdentity) {
  uint32_t seed = 1;
  for (const TensorShape& shape : Shapes()) {
    Tensor x = MakeTensor<TypeParam>(shape, seed++, /*specials=*/true);
    for (RunPath path : {RunPath::kSessionFed, RunPath::kSessionConstants}) {
      auto out = RunOp(kOp, {{"scale", 0.3f}}, {x}, {path});
      ASSERT_TRUE(out.ok()) << out.status();
      const Tensor& y = (*out)[0];
      ASSERT_EQ(y.shape(), shape);
      ASSERT_EQ(y.dtype(), x.dtype());
      // Bitwise: NaN payloads and the sign of zero survive.
      EXPECT_EQ(0, memcmp(y.data(), x.data(), x.TotalBytes())) << shape.DebugString();
    }
  }
}

TYPED_TEST(GradientReversalTyped, ForwardSharesTheInputBuffer) {
  uint32_t seed = 10;
  for (const TensorShape& shape : Shapes()) {
    Tensor x = MakeTensor<TypeParam>(shape, seed++, /*specials=*/false);
    auto out = RunOp(kOp, {{"scale", 2.0f}}, {x}, {RunPath::kKernel});
    ASSERT_TRUE(out.ok()) << out.status();
    const Tensor& y = (*out)[0];
    ASSERT_EQ(y.shape(), shape);
    if (shape.num_elements() == 0) continue;  // an empty tensor has no buffer to share
    EXPECT_TRUE(y.SharesBufferWith(x)) << shape.DebugString();
    EXPECT_EQ(y.data(), x.data()) << shape.DebugString();
  }
}

TYPED_TEST(GradientReversalTyped, GradientIsMinusScaleTimesDy) {
  uint32_t seed = 20;
  for (const float scale : {1.0f, 0.5f, -2.0f, 0.0f, 3.25f}) {
    for (const TensorShape& shape : Shapes()) {
      Tensor x = MakeTensor<TypeParam>(shape, seed++, /*specials=*/false);
      Tensor dy = MakeTensor<TypeParam>(shape, seed++, /*specials=*/false);
      auto g = RunSymbolicGradient(kOp, {{"scale", scale}}, {x}, {dy});
      ASSERT_TRUE(g.ok()) << g.status();
      const Tensor& dx = (*g)[0];
      ASSERT_EQ(dx.shape(), shape);
      ASSERT_EQ(dx.dtype(), x.dtype());
      for (int64_t i = 0; i < shape.num_elements(); ++i) {
        const double want = -static_cast<double>(scale) * static_cast<double>(dy.flat<TypeParam>()(i));
        EXPECT_EQ(static_cast<double>(dx.flat<TypeParam>()(i)), want + 0.0)
            << "scale=" << scale << " i=" << i;
      }
    }
  }
}

TEST(GradientReversal, DefaultScaleIsOne) {
  Tensor x(DT_DOUBLE, TensorShape({3}));
  x.flat<double>().setValues({1, 2, 3});
  Tensor dy(DT_DOUBLE, TensorShape({3}));
  dy.flat<double>().setValues({0.5, -4, 7});
  auto g = RunSymbolicGradient(kOp, {}, {x}, {dy});
  ASSERT_TRUE(g.ok()) << g.status();
  for (int i = 0; i < 3; ++i) EXPECT_EQ((*g)[0].flat<double>()(i), -dy.flat<double>()(i));
}

// The numeric Jacobian of the identity is I, so: with scale = -1 the symbolic gradient must
// match it exactly as for any op, and with another scale it must be -scale times it (the
// largest error is then |1 + scale| on every diagonal entry).
TEST(GradientReversal, NumericJacobianOfTheIdentityTimesMinusScale) {
  const std::vector<TensorShape> shapes = {TensorShape({}), TensorShape({7}),
                                           TensorShape({3, 4}), TensorShape({2, 1, 3, 2}),
                                           TensorShape({30, 20})};  // > 512 rows: projections
  for (DataType dt : {DT_FLOAT, DT_DOUBLE}) {
    const double tol = dt == DT_DOUBLE ? 1e-6 : 1e-3;
    uint32_t seed = 5;
    for (const TensorShape& shape : shapes) {
      Tensor x = dt == DT_DOUBLE ? MakeTensor<double>(shape, seed++, false)
                                 : MakeTensor<float>(shape, seed++, false);
      GradientCheckResult r;
      ASSERT_TRUE(CheckGradient(kOp, {{"scale", -1.0f}}, {x}, GradientCheckOptions(), &r).ok());
      EXPECT_TRUE(r.Passed(tol)) << r.ToString();
      EXPECT_EQ(r.columns, shape.num_elements());
      if (shape.num_elements() <= 512) {
        EXPECT_EQ(r.rows, shape.num_elements()) << r.ToString();
      }

      // Any scale: checked against the registered surrogate forward -scale * x.
      ASSERT_TRUE(CheckGradient(kOp, {{"scale", 0.5f}}, {x}, GradientCheckOptions(), &r).ok());
      EXPECT_TRUE(r.Passed(tol)) << r.ToString();
      EXPECT_NE(r.numeric_reference.find("surrogate forward"), std::string::npos);

      if (shape.num_elements() > 512) continue;  // projections mix entries: no single value
      // Against the op itself (the identity), the reversal is off by exactly 1 + scale.
      GradientCheckOptions against_op;
      against_op.use_surrogate_forward = false;
      ASSERT_TRUE(CheckGradient(kOp, {{"scale", 0.5f}}, {x}, against_op, &r).ok());
      EXPECT_NEAR(r.max_abs_error, 1.5, tol) << r.ToString();
      EXPECT_NEAR(r.worst_symbolic, -0.5 * r.worst_numeric, tol) << r.ToString();
    }
  }
}

TEST(GradientReversal, RejectsNonFiniteScale) {
  Tensor x = MakeTensor<float>(TensorShape({4}), 3, false);
  const std::vector<std::pair<float, std::string>> cases = {
      {std::numeric_limits<float>::infinity(), "inf"},
      {-std::numeric_limits<float>::infinity(), "-inf"},
      {std::numeric_limits<float>::quiet_NaN(), "nan"}};
  for (const auto& [scale, shown] : cases) {
    SCOPED_TRACE(shown);
    ExpectRejectedByKernelShapeFnAndGradient(kOp, {{"scale", scale}}, {x},
                                             "scale must be finite, got " + shown);
  }
}

// Kernels and gradients for every declared type: ManifestGeneric (manifest_test.cc).

// ---- GradBuilder::GetAttr: the node's value, else the OpDef default; errors name the op. ----

TEST(GradBuilderGetAttr, ReadsTheNodeValueOrTheOpDefDefault) {
  AttrValueMap attrs;
  attrs["T"].set_type(DT_FLOAT);
  {
    grad::GradBuilder b(kOp, AttrSlice(&attrs));
    EXPECT_EQ(b.GetAttr<float>("scale"), 1.0f);  // absent: OpDef default
    EXPECT_EQ(b.GetAttr<DataType>("T"), DT_FLOAT);
  }
  attrs["scale"].set_f(2.5f);
  {
    grad::GradBuilder b(kOp, AttrSlice(&attrs));
    EXPECT_EQ(b.GetAttr<float>("scale"), 2.5f);
  }
}

TEST(GradBuilderGetAttr, MissingOrMistypedAttrFailsTheBuild) {
  AttrValueMap attrs;
  attrs["T"].set_type(DT_FLOAT);
  for (int mistyped = 0; mistyped < 2; ++mistyped) {
    grad::GradBuilder b(kOp, AttrSlice(&attrs));
    if (mistyped) {
      EXPECT_EQ(b.GetAttr<int64_t>("scale"), 0);
    } else {
      EXPECT_EQ(b.GetAttr<float>("no_such_attr"), 0.0f);
    }
    b.NotDifferentiable("x");
    FunctionDef f;
    ExpectInvalidArgument(b.Build(&f), kOp, {mistyped ? "scale" : "no_such_attr"});
  }
}

TEST(GradBuilderGetAttr, GradientUsesTheDefaultScaleWhenTheAttrIsAbsent) {
  // What a SymbolicGradient whose f lists only T would instantiate.
  AttrValueMap attrs;
  attrs["T"].set_type(DT_FLOAT);
  FunctionDef f;
  ASSERT_TRUE(FindOpFacts("TfExt>GradientReversal")->gradient(AttrSlice(&attrs), &f).ok());
  int consts = 0;
  for (const NodeDef& n : f.node_def()) {
    if (n.op() != "Const") continue;
    ++consts;
    Tensor v;
    ASSERT_TRUE(v.FromProto(n.attr().at("value").tensor()));
    EXPECT_EQ(v.scalar<double>()(), -1.0);
  }
  EXPECT_EQ(consts, 1);
}

}  // namespace
}  // namespace tensorflow::tf_ext::test
