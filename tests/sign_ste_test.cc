// TfExt>SignSTE: forward per dtype against a reference, validation of clip on every path, and
// the straight-through gradient through SymbolicGradient in a Session against its closed form.
// TfExt>SignSTEGrad (that gradient's one op): every path against the closed form, its own
// gradient, and its checks.
// (Not CheckGradient: the numeric Jacobian of sign is 0 almost everywhere; the STE is
// deliberately not the true derivative.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_def.pb.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tests/test_util.h"
#include "tf_ext/grads/specialize.h"
#include "tf_ext/testing/op_runner.h"

namespace tensorflow::tf_ext::test {
namespace {

constexpr char kOp[] = "TfExt>SignSTE";
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

template <typename T>
double D(T v) {
  return static_cast<double>(v);
}

// Special values first, then multiples of 0.25 in [-4, 4] (exact in half), cycling.
template <typename T>
Tensor MakeX(const TensorShape& shape, uint32_t seed) {
  static const double kSpecial[] = {0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5,
                                    kInf, -kInf, kNaN, 0.25, -3.0};
  std::mt19937 rng(seed);
  Tensor t(DataTypeToEnum<T>::value, shape);
  auto f = t.flat<T>();
  for (int64_t i = 0; i < f.size(); ++i) {
    const double v = i < 13 ? kSpecial[i] : 0.25 * (static_cast<int>(rng() % 33) - 16);
    f(i) = static_cast<T>(v);
  }
  return t;
}

template <typename T>
class SignSTETyped : public ::testing::Test {};
using Types = ::testing::Types<Eigen::half, float, double>;
TYPED_TEST_SUITE(SignSTETyped, Types);

const std::vector<TensorShape>& Shapes() {
  static const auto* shapes = new std::vector<TensorShape>{
      TensorShape({}),      TensorShape({0}),         TensorShape({13}),
      TensorShape({3, 0, 2}), TensorShape({2, 3, 4}), TensorShape({5, 1, 7, 2}),
      TensorShape({(1 << 16) + 3}),  // split across threads
  };
  return *shapes;
}

TYPED_TEST(SignSTETyped, ForwardIsSign) {
  uint32_t seed = 1;
  for (const TensorShape& shape : Shapes()) {
    Tensor x = MakeX<TypeParam>(shape, seed++);
    for (RunPath path : kAllRunPaths) {
      // The bare kernel with the default clip: clip matters to the gradient only.
      const OpAttrs attrs = path == RunPath::kKernel ? OpAttrs{} : OpAttrs{{"clip", 0.5f}};
      auto out = RunOp(kOp, attrs, {x}, {path});
      ASSERT_TRUE(out.ok()) << out.status();
      const Tensor& y = (*out)[0];
      ASSERT_EQ(y.shape(), shape);
      ASSERT_EQ(y.dtype(), x.dtype());
      for (int64_t i = 0; i < shape.num_elements(); ++i) {
        const double xi = D(x.flat<TypeParam>()(i)), yi = D(y.flat<TypeParam>()(i));
        if (std::isnan(xi)) {
          EXPECT_TRUE(std::isnan(yi)) << "sign(NaN) must stay NaN, got " << yi;
        } else if (xi == 0) {
          EXPECT_EQ(yi, 0.0);
          EXPECT_EQ(std::signbit(yi), std::signbit(xi)) << "a zero keeps its sign bit";
        } else {
          EXPECT_EQ(yi, std::copysign(1.0, xi)) << "x=" << xi;
        }
      }
    }
  }
}

TEST(SignSTE, DefaultClipIsOne) {
  Tensor x(DT_FLOAT, TensorShape({4}));
  x.flat<float>().setValues({-1.0f, 1.0f, 1.0001f, -3.0f});
  Tensor dy(DT_FLOAT, TensorShape({4}));
  dy.flat<float>().setValues({2.0f, 3.0f, 4.0f, 5.0f});
  auto g = RunSymbolicGradient(kOp, {}, {x}, {dy});
  ASSERT_TRUE(g.ok()) << g.status();
  const std::vector<float> want = {2.0f, 3.0f, 0.0f, 0.0f};
  for (int i = 0; i < 4; ++i) EXPECT_EQ((*g)[0].flat<float>()(i), want[i]) << i;
}

TEST(SignSTE, RejectsNegativeOrNonFiniteClip) {
  Tensor x = MakeX<float>(TensorShape({6}), 3);
  const std::vector<std::pair<float, std::string>> cases = {
      {-1.0f, "-1"}, {-0.25f, "-0.25"}, {std::numeric_limits<float>::infinity(), "inf"},
      {std::numeric_limits<float>::quiet_NaN(), "nan"}};
  for (const auto& [clip, shown] : cases) {
    SCOPED_TRACE(shown);
    ExpectRejectedByKernelShapeFnAndGradient(kOp, {{"clip", clip}}, {x},
                                             "clip must be finite and >= 0, got " + shown);
  }
}

// ---- The gradient: TfExt>SignSTE's, which is one TfExt>SignSTEGrad node, and that op ------

constexpr char kGradOp[] = "TfExt>SignSTEGrad";

// The CPU kernels' view of x: a float/double denormal is the zero of its sign.
template <typename T>
double Flushed(T v) {
  const double d = D(v);
  if constexpr (std::is_same_v<T, float>) {
    return std::fabs(d) < std::numeric_limits<float>::min() ? std::copysign(0.0, d) : d;
  } else if constexpr (std::is_same_v<T, double>) {
    return std::fabs(d) < std::numeric_limits<double>::min() ? std::copysign(0.0, d) : d;
  }
  return d;
}

// x: MakeX's values plus denormals (float/double); d_y: small integers, every 17th infinite,
// every 19th NaN (outside the band both must give exactly +0).
template <typename T>
std::pair<Tensor, Tensor> GradInputs(const TensorShape& shape, uint32_t seed) {
  Tensor x = MakeX<T>(shape, seed);
  if constexpr (!std::is_same_v<T, Eigen::half>) {
    auto f = x.flat<T>();
    if (f.size() > 20) {
      f(14) = std::numeric_limits<T>::denorm_min();
      f(15) = -std::numeric_limits<T>::denorm_min();
      f(16) = std::numeric_limits<T>::min();
    }
  }
  Tensor dy(x.dtype(), shape);
  std::mt19937 rng(seed + 1000);
  for (int64_t i = 0; i < shape.num_elements(); ++i) {
    const double v = i % 17 == 3 ? kInf : i % 19 == 5 ? kNaN : static_cast<int>(rng() % 9) - 4;
    dy.flat<T>()(i) = static_cast<T>(v);
  }
  return {dy, x};
}

// The closed form: d(x) = d(y) where |x| <= clip (x as the CPU kernels see it, clip rounded to
// T as the stock-op gradient's Cast gave it; NaN x compares false), else +0 even for an inf or
// NaN d(y).
template <typename T>
void ExpectSteGrad(const Tensor& dy, const Tensor& x, float clip, const Tensor& dx) {
  ASSERT_EQ(dx.shape(), x.shape());
  ASSERT_EQ(dx.dtype(), x.dtype());
  const double clip_t = D(static_cast<T>(clip));
  for (int64_t i = 0; i < x.NumElements(); ++i) {
    const double xi = Flushed(x.flat<T>()(i));
    const double dyi = D(dy.flat<T>()(i));
    const double got = D(dx.flat<T>()(i));
    SCOPED_TRACE(::testing::Message() << "clip=" << clip << " x=" << xi << " d_y=" << dyi
                                      << " shape " << x.shape().DebugString() << " i=" << i);
    if (std::abs(xi) <= clip_t) {
      if (std::isnan(dyi)) {
        EXPECT_TRUE(std::isnan(got));
      } else {
        EXPECT_EQ(got, dyi);
      }
    } else {
      EXPECT_EQ(got, 0.0);
      EXPECT_FALSE(std::signbit(got)) << "outside the band: +0";
    }
  }
}

TYPED_TEST(SignSTETyped, GradientAndGradOpAreTheMaskedSelectOnEveryPath) {
  // SignSTE's gradient through SymbolicGradient in a Session, and its one op on every path.
  uint32_t seed = 50;
  for (const float clip : {1.0f, 0.5f, 0.0f, 2.5f}) {
    for (const TensorShape& shape : Shapes()) {
      Tensor dy, x;
      std::tie(dy, x) = GradInputs<TypeParam>(shape, seed++);
      auto g = RunSymbolicGradient(kOp, {{"clip", clip}}, {x}, {dy});
      ASSERT_TRUE(g.ok()) << g.status();
      ExpectSteGrad<TypeParam>(dy, x, clip, (*g)[0]);
      for (RunPath path : kAllRunPaths) {
        SCOPED_TRACE(static_cast<int>(path));
        auto out = RunOp(kGradOp, {{"clip", clip}}, {dy, x}, {path});
        ASSERT_TRUE(out.ok()) << out.status();
        ExpectSteGrad<TypeParam>(dy, x, clip, (*out)[0]);
      }
    }
  }
}

TEST(SignSTEGrad, HalfComparesAgainstClipRoundedToHalf) {
  // clip 1.0006 rounds to the half after 1 (1 + 2^-10): that x is inside for half.
  const Eigen::half above_one = static_cast<Eigen::half>(1.0 + 1.0 / 1024);
  ASSERT_EQ(static_cast<Eigen::half>(1.0006f), above_one);
  Tensor x(DT_HALF, TensorShape({2})), dy(DT_HALF, TensorShape({2}));
  x.flat<Eigen::half>().setValues({above_one, static_cast<Eigen::half>(1.0 + 2.0 / 1024)});
  dy.flat<Eigen::half>().setValues({Eigen::half(3), Eigen::half(4)});
  auto out = RunOp(kGradOp, {{"clip", 1.0006f}}, {dy, x});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(D((*out)[0].flat<Eigen::half>()(0)), 3.0);
  EXPECT_EQ(D((*out)[0].flat<Eigen::half>()(1)), 0.0);
}

TEST(SignSTEGrad, SignSTEsGradientIsOneGradOpNode) {
  // The FunctionDef every front end specialises: one TfExt>SignSTEGrad node fed d(y) and x
  // (plus the Identity that names the output), nothing else.
  NodeDef node;
  node.set_op(kOp);
  (*node.mutable_attr())["T"].set_type(DT_FLOAT);
  (*node.mutable_attr())["clip"].set_f(0.5f);
  FunctionDef fdef;
  ASSERT_TRUE(SpecializedGradient(node, &fdef).ok());
  std::vector<std::string> ops;
  for (const NodeDef& n : fdef.node_def()) {
    if (n.op() != "Identity") ops.push_back(n.op());
  }
  EXPECT_EQ(ops, std::vector<std::string>{kGradOp});
}

TYPED_TEST(SignSTETyped, GradOpsGradientIsItsMaskAndZero) {
  // d_x = m(x) d_y: d(d_y) = m(x) d(d_x), d(x) = 0.
  const TensorShape shape({4, 9});
  Tensor dy, x;
  std::tie(dy, x) = GradInputs<TypeParam>(shape, 7);
  Tensor ddx(x.dtype(), shape);
  for (int64_t i = 0; i < shape.num_elements(); ++i) {
    ddx.flat<TypeParam>()(i) = static_cast<TypeParam>(static_cast<int>(i % 7) - 3);
  }
  auto g = RunSymbolicGradient(kGradOp, {{"clip", 1.0f}}, {dy, x}, {ddx});
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->size(), 2u);
  for (int64_t i = 0; i < shape.num_elements(); ++i) {
    const double xi = Flushed(x.flat<TypeParam>()(i));
    const double want = std::abs(xi) <= 1.0 ? D(ddx.flat<TypeParam>()(i)) : 0.0;
    EXPECT_EQ(D((*g)[0].template flat<TypeParam>()(i)), want) << "x=" << xi;
    EXPECT_EQ(D((*g)[1].template flat<TypeParam>()(i)), 0.0);
  }
}

TEST(SignSTEGrad, RejectsMismatchedShapesOnEveryPath) {
  Tensor x = MakeX<float>(TensorShape({2, 3}), 4);
  Tensor dy = MakeX<float>(TensorShape({3, 2}), 5);
  for (RunPath path : {RunPath::kSessionConstants, RunPath::kSessionFed, RunPath::kKernel}) {
    ExpectInvalidArgument(RunOp(kGradOp, {}, {dy, x}, {path}).status(), kGradOp,
                          {"d_y must have shape [2,3] (x's shape), got [3,2]"});
  }
}

TEST(SignSTEGrad, RejectsNegativeOrNonFiniteClip) {
  Tensor x = MakeX<float>(TensorShape({6}), 3);
  for (const float clip : {-1.0f, std::numeric_limits<float>::quiet_NaN()}) {
    SCOPED_TRACE(clip);
    for (RunPath path : kAllRunPaths) {
      ExpectInvalidArgument(RunOp(kGradOp, {{"clip", clip}}, {x, x}, {path}).status(), kGradOp,
                            {"clip must be finite and >= 0, got"});
    }
    ExpectInvalidArgument(RunSymbolicGradient(kGradOp, {{"clip", clip}}, {x, x}, {x}).status(),
                          kGradOp, {"clip must be finite and >= 0, got"});
  }
}

// Kernels and gradients for every declared type: ManifestGeneric (manifest_test.cc).

}  // namespace
}  // namespace tensorflow::tf_ext::test
