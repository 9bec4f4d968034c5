// Each GradBuilder helper builds a real gradient for a small test op (registered here with the
// public TF_EXT_REGISTER_GRADIENT macro) and the numbers are checked against numeric Jacobians
// and closed forms.
#include <gtest/gtest.h>

#include <cmath>

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/util/bcast.h"
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/registry.h"
#include "tf_ext/grads/specialize.h"
#include "tf_ext/testing/gradient_checker.h"
#include "tf_ext/testing/op_runner.h"
#include "tests/test_util.h"
#include "tests/testlib/elementwise_op.h"

namespace tensorflow::tf_ext {
namespace {

using grad::GradName;
using grad::GradBuilder;
using test::CheckGradient;
using test::GradientCheckOptions;
using test::GradientCheckResult;

// ---- test ops ---------------------------------------------------------------------------

REGISTER_OP("TfExtTest>Expo").Input("x: T").Output("y: T").Attr("T: {float, double}")
    .SetShapeFn(shape_inference::UnchangedShape);
REGISTER_OP("TfExtTest>Cube").Input("x: T").Output("y: T").Attr("T: {float, double}")
    .SetShapeFn(shape_inference::UnchangedShape);
REGISTER_OP("TfExtTest>BcastMul").Input("a: T").Input("b: T").Output("z: T")
    .Attr("T: {float, double}");
// y = scale * x, argmax = flat index of max(x); k and w only ride along.
REGISTER_OP("TfExtTest>ScaleArgmax").Input("x: T").Input("k: int32").Input("w: float")
    .Output("y: T").Output("argmax: int32").Attr("T: {float, double}").Attr("scale: float");
REGISTER_OP("TfExtTest>ScaleArgmaxGrad").Input("dy: T").Output("dx: T")
    .Attr("T: {float, double}").Attr("scale: float");

struct ExpF { template <typename T> T operator()(T x) const { return std::exp(x); } };

template <typename T>
class BcastMulOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& a = ctx->input(0);
    const Tensor& b = ctx->input(1);
    BCast bcast(BCast::FromShape(a.shape()), BCast::FromShape(b.shape()));
    OP_REQUIRES(ctx, bcast.IsValid(), errors::InvalidArgument("incompatible shapes"));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, BCast::ToShape(bcast.output_shape()), &out));
    // Walk the output in row-major order; map each index back to a and b (size-1 dims repeat).
    const auto& oshape = bcast.output_shape();
    const int rank = oshape.size();
    auto pad = [rank](const TensorShape& s) {
      std::vector<int64_t> d(rank, 1);
      for (int i = 0; i < s.dims(); ++i) d[rank - s.dims() + i] = s.dim_size(i);
      return d;
    };
    std::vector<int64_t> ad = pad(a.shape()), bd = pad(b.shape());
    auto af = a.flat<T>();
    auto bf = b.flat<T>();
    auto of = out->flat<T>();
    std::vector<int64_t> idx(rank, 0);
    for (int64_t o = 0; o < of.size(); ++o) {
      int64_t ai = 0, bi = 0;
      for (int d = 0; d < rank; ++d) {
        ai = ai * ad[d] + (ad[d] == 1 ? 0 : idx[d]);
        bi = bi * bd[d] + (bd[d] == 1 ? 0 : idx[d]);
      }
      of(o) = af(ai) * bf(bi);
      for (int d = rank - 1; d >= 0 && ++idx[d] == oshape[d]; --d) idx[d] = 0;
    }
  }
};

template <typename T>
class ScaleArgmaxOp : public OpKernel {
 public:
  explicit ScaleArgmaxOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("scale", &scale_));
  }
  void Compute(OpKernelContext* ctx) override {
    auto x = ctx->input(0).flat<T>();
    Tensor *y = nullptr, *argmax = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, ctx->input(0).shape(), &y));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({}), &argmax));
    int32 best = 0;
    for (int64_t i = 0; i < x.size(); ++i) {
      y->flat<T>()(i) = static_cast<T>(scale_) * x(i);
      if (x(i) > x(best)) best = static_cast<int32>(i);
    }
    argmax->scalar<int32>()() = best;
  }
 private:
  float scale_;
};

template <typename T>
class ScaleArgmaxGradOp : public OpKernel {
 public:
  explicit ScaleArgmaxGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("scale", &scale_));
  }
  void Compute(OpKernelContext* ctx) override {
    Tensor* dx = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, ctx->input(0).shape(), &dx));
    auto dy = ctx->input(0).flat<T>();
    for (int64_t i = 0; i < dy.size(); ++i) dx->flat<T>()(i) = static_cast<T>(scale_) * dy(i);
  }
 private:
  float scale_;
};

#define REGISTER_TEST_KERNELS(T)                                                              \
  REGISTER_KERNEL_BUILDER(                                                                    \
      Name("TfExtTest>BcastMul").Device(DEVICE_CPU).TypeConstraint<T>("T"), BcastMulOp<T>);   \
  REGISTER_KERNEL_BUILDER(                                                                    \
      Name("TfExtTest>ScaleArgmax").Device(DEVICE_CPU).TypeConstraint<T>("T"),                \
      ScaleArgmaxOp<T>);                                                                      \
  REGISTER_KERNEL_BUILDER(                                                                    \
      Name("TfExtTest>ScaleArgmaxGrad").Device(DEVICE_CPU).TypeConstraint<T>("T"),            \
      ScaleArgmaxGradOp<T>);
REGISTER_TEST_KERNELS(float);
REGISTER_TEST_KERNELS(double);
TF_EXT_TEST_REGISTER_ELEMENTWISE_KERNEL("TfExtTest>Expo", ExpF);
TF_EXT_TEST_REGISTER_ELEMENTWISE_KERNEL("TfExtTest>Cube", test::CubeF);

// ---- their gradients, one helper each ----------------------------------------------------

absl::Status ExpoGrad(const AttrSlice& attrs, FunctionDef* g) {
  GradBuilder b("TfExtTest>Expo", attrs);
  // d/dx exp(x) = exp(x) = y: dx = dy * y (y recomputed by UnaryCwise).
  b.UnaryCwise({{{"dx"}, "Mul", {GradName("y"), "y"}, b.PassAttrs({"T"})}});
  return b.Build(g);
}

absl::Status CubeGrad(const AttrSlice& attrs, FunctionDef* g) {
  GradBuilder b("TfExtTest>Cube", attrs);
  std::string three = b.TypedConst("three", 3.0);
  // d/dx x^3 = 3 x^2: dx = dy * 3 * x * x.
  b.UnaryCwise({{{"x2"}, "Square", {"x"}, b.PassAttrs({"T"})},
                {{"x2_3"}, "Mul", {"x2", three}, b.PassAttrs({"T"})},
                {{"dx"}, "Mul", {GradName("y"), "x2_3"}, b.PassAttrs({"T"})}});
  return b.Build(g);
}

absl::Status BcastMulGrad(const AttrSlice& attrs, FunctionDef* g) {
  GradBuilder b("TfExtTest>BcastMul", attrs);
  // z = a * b: dz/da = b, dz/db = a, then summed over the broadcast axes.
  b.Add({{"ga"}, "Mul", {GradName("z"), "b"}, b.PassAttrs({"T"})});
  b.Add({{"gb"}, "Mul", {GradName("z"), "a"}, b.PassAttrs({"T"})});
  auto [da, db] = b.ReduceForBroadcast("a", "b", "ga", "gb");
  b.Return("a", da).Return("b", db);
  return b.Build(g);
}

absl::Status ScaleArgmaxGrad(const AttrSlice& attrs, FunctionDef* g) {
  GradBuilder b("TfExtTest>ScaleArgmax", attrs);
  // dx = scale * dy through the dedicated op; d(argmax) is ignored; k and w get zeros.
  b.DedicatedOp("TfExtTest>ScaleArgmaxGrad", {GradName("y")}, {"T", "scale"}, {"x"});
  b.NotDifferentiable("k").NotDifferentiable("w");
  return b.Build(g);
}

absl::Status MissingInputGrad(const AttrSlice& attrs, FunctionDef* g) {
  GradBuilder b("TfExtTest>BcastMul", attrs);
  b.Add({{"ga"}, "Mul", {GradName("z"), "b"}, b.PassAttrs({"T"})});
  b.Return("a", "ga");  // no gradient for b: Build must refuse
  return b.Build(g);
}

TF_EXT_REGISTER_GRADIENT("TfExtTest>Expo", ExpoGrad);
TF_EXT_REGISTER_GRADIENT("TfExtTest>Cube", CubeGrad);
TF_EXT_REGISTER_GRADIENT("TfExtTest>BcastMul", BcastMulGrad);
TF_EXT_REGISTER_GRADIENT("TfExtTest>ScaleArgmax", ScaleArgmaxGrad);
TF_EXT_REGISTER_NO_GRADIENT("TfExtTest>ScaleArgmaxGrad");

template <typename T>
Tensor Random(const TensorShape& shape, double lo, double hi, int seed) {
  Tensor t(DataTypeToEnum<T>::value, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < t.NumElements(); ++i) t.flat<T>()(i) = static_cast<T>(u(rng));
  return t;
}

template <typename T>
double Tol() { return std::is_same_v<T, double> ? 1e-6 : 1e-3; }

template <typename T>
class GradBuilderTyped : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(GradBuilderTyped, FloatTypes);

TYPED_TEST(GradBuilderTyped, UnaryCwiseReadingY) {
  GradientCheckResult r;
  Tensor x = Random<TypeParam>(TensorShape({3, 4}), -1, 1, 1);
  ASSERT_TRUE(CheckGradient("TfExtTest>Expo", {}, {x}, {}, &r).ok());
  EXPECT_TRUE(r.Passed(Tol<TypeParam>())) << r.ToString();
  // Closed form too: d sum(exp(x)) / dx = exp(x).
  absl::StatusOr<std::vector<Tensor>> g = test::RunSymbolicGradient("TfExtTest>Expo", {}, {x},
                                        {test::AsTensor<TypeParam>(std::vector<TypeParam>(12, 1),
                                                                   TensorShape({3, 4}))});
  ASSERT_TRUE(g.ok()) << g.status();
  for (int i = 0; i < 12; ++i) {
    EXPECT_NEAR((*g)[0].flat<TypeParam>()(i), std::exp(x.flat<TypeParam>()(i)), 1e-5);
  }
}

TYPED_TEST(GradBuilderTyped, UnaryCwiseWithTypedConst) {
  GradientCheckResult r;
  Tensor x = Random<TypeParam>(TensorShape({7}), -2, 2, 2);
  ASSERT_TRUE(CheckGradient("TfExtTest>Cube", {}, {x}, {}, &r).ok());
  EXPECT_TRUE(r.Passed(Tol<TypeParam>())) << r.ToString();
  EXPECT_GT(r.columns, 0);
}

TYPED_TEST(GradBuilderTyped, BinaryBroadcastReducesToEachInputShape) {
  const std::vector<std::pair<TensorShape, TensorShape>> shapes = {
      {TensorShape({2, 3}), TensorShape({2, 3})},
      {TensorShape({2, 3}), TensorShape({3})},
      {TensorShape({4, 1, 3}), TensorShape({2, 1})},
      {TensorShape({}), TensorShape({2, 2})}};
  int seed = 3;
  for (const auto& [sa, sb] : shapes) {
    GradientCheckResult r;
    Tensor a = Random<TypeParam>(sa, -1, 1, seed++);
    Tensor b = Random<TypeParam>(sb, -1, 1, seed++);
    ASSERT_TRUE(CheckGradient("TfExtTest>BcastMul", {}, {a, b}, {}, &r).ok());
    EXPECT_TRUE(r.Passed(Tol<TypeParam>())) << sa.DebugString() << " * " << sb.DebugString()
                                            << ": " << r.ToString();
  }
}

TYPED_TEST(GradBuilderTyped, MultiOutputDedicatedOpAndNonDifferentiableInputs) {
  Tensor x = Random<TypeParam>(TensorShape({2, 3}), -1, 1, 9);
  Tensor k = test::AsTensor<int32>({4, 5});
  Tensor w = test::AsTensor<float>({0.5f, 1.5f, 2.5f});
  GradientCheckOptions opts;
  opts.non_differentiable_inputs = {"k", "w"};
  GradientCheckResult r;
  ASSERT_TRUE(CheckGradient("TfExtTest>ScaleArgmax", {{"scale", 2.5f}}, {x, k, w}, opts, &r).ok());
  EXPECT_TRUE(r.Passed(Tol<TypeParam>())) << r.ToString();
  // Closed form: dx = 2.5 dy, whatever the argmax output's incoming gradient is.
  Tensor dy = Random<TypeParam>(TensorShape({2, 3}), -1, 1, 10);
  absl::StatusOr<std::vector<Tensor>> g = test::RunSymbolicGradient("TfExtTest>ScaleArgmax", {{"scale", 2.5f}}, {x, k, w},
                                        {dy, test::AsTensor<int32>({7})});
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->size(), 3u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_NEAR((*g)[0].flat<TypeParam>()(i), 2.5 * dy.flat<TypeParam>()(i), 1e-6);
  }
  test::ExpectTensorNear<int32>((*g)[1], test::AsTensor<int32>({0, 0}));
  test::ExpectTensorNear<float>((*g)[2], test::AsTensor<float>({0, 0, 0}));
}

TEST(GradBuilder, RefusesAGradientMissingAnInput) {
  AttrValueMap attrs;
  attrs["T"].set_type(DT_FLOAT);
  FunctionDef g;
  absl::Status s = MissingInputGrad(AttrSlice(&attrs), &g);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("TfExtTest>BcastMul: the gradient for input 'b' was never defined"),
            std::string::npos)
      << s;
}

TEST(GradBuilder, RequireTypesNamesOpAndType) {
  AttrValueMap attrs;
  attrs["T"].set_type(DT_INT32);
  GradBuilder b("TfExtTest>Cube", AttrSlice(&attrs));
  b.RequireTypes("T", {DT_FLOAT, DT_DOUBLE});
  FunctionDef g;
  absl::Status s = b.Build(&g);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("TfExtTest>Cube is not differentiable for T=int32"), std::string::npos)
      << s;
}

TEST(GradBuilder, SignatureFollowsTheOpDef) {
  AttrValueMap attrs;
  attrs["T"].set_type(DT_FLOAT);
  attrs["scale"].set_f(1);
  FunctionDef g;
  ASSERT_TRUE(ScaleArgmaxGrad(AttrSlice(&attrs), &g).ok());
  const OpDef& sig = g.signature();
  std::vector<std::string> in, out;
  for (const auto& a : sig.input_arg()) in.push_back(a.name());
  for (const auto& a : sig.output_arg()) out.push_back(a.name());
  EXPECT_EQ(in, (std::vector<std::string>{"x", "k", "w", "d_y", "d_argmax"}));
  EXPECT_EQ(out, (std::vector<std::string>{"d_x", "d_k", "d_w"}));
}

TEST(Registry, OneCallFillsEveryRegistry) {
  EXPECT_EQ(LookupGradientKind("TfExtTest>Cube"), GradientKind::kFunction);
  EXPECT_EQ(LookupGradientKind("TfExtTest>ScaleArgmaxGrad"), GradientKind::kNone);
  EXPECT_EQ(LookupGradientKind("TfExtTest>NoSuchOp"), GradientKind::kMissing);
}

TEST(Registry, RegisteringTwiceKeepsTheFirstAndDoesNotAbort) {
  // TensorFlow itself CHECK-fails on a duplicate; tf_ext keeps the first registration.
  EXPECT_TRUE(RegisterGradient("TfExtTest>Cube", ExpoGrad));
  GradientCheckResult r;
  Tensor x = Random<double>(TensorShape({5}), -2, 2, 4);
  ASSERT_TRUE(CheckGradient("TfExtTest>Cube", {}, {x}, {}, &r).ok());
  EXPECT_TRUE(r.Passed(1e-6)) << r.ToString();
}

TEST(Registry, SpecializedGradientHasNoPlaceholders) {
  NodeDef node;
  node.set_op("TfExtTest>ScaleArgmax");
  (*node.mutable_attr())["T"].set_type(DT_DOUBLE);
  (*node.mutable_attr())["scale"].set_f(2);
  FunctionDef f1, f2;
  ASSERT_TRUE(SpecializedGradient(node, &f1).ok());
  EXPECT_EQ(f1.signature().attr_size(), 0);
  for (const auto& arg : f1.signature().input_arg()) {
    EXPECT_TRUE(arg.type_attr().empty()) << arg.name();
  }
  EXPECT_EQ(f1.signature().input_arg(0).type(), DT_DOUBLE);
  for (const NodeDef& n : f1.node_def()) {
    for (const auto& kv : n.attr()) EXPECT_TRUE(kv.second.placeholder().empty()) << n.name();
  }
  // Same attrs -> same name; other attrs -> another name.
  ASSERT_TRUE(SpecializedGradient(node, &f2).ok());
  EXPECT_EQ(f1.signature().name(), f2.signature().name());
  (*node.mutable_attr())["scale"].set_f(3);
  ASSERT_TRUE(SpecializedGradient(node, &f2).ok());
  EXPECT_NE(f1.signature().name(), f2.signature().name());
  // Missing and non-differentiable ops are told apart.
  node.set_op("TfExtTest>ScaleArgmaxGrad");
  EXPECT_EQ(SpecializedGradient(node, &f2).code(), absl::StatusCode::kInvalidArgument);
  node.set_op("TfExtTest>NoSuchOp");
  EXPECT_EQ(SpecializedGradient(node, &f2).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tensorflow::tf_ext
