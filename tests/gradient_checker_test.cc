// The checker itself: it must catch wrong gradients (and say where), not only pass right ones.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/registry.h"
#include "tf_ext/testing/gradient_checker.h"
#include "tests/test_util.h"
#include "tests/testlib/elementwise_op.h"

namespace tensorflow::tf_ext {
namespace {

using test::CheckGradient;
using test::GradientCheckOptions;
using test::GradientCheckResult;

// y = 2 x + w (w rides along). Its registered gradient is deliberately wrong in element 1:
// dx = 2 dy except dx[1] = 3 dy[1]; and it leaks dy into w, which it declares non-differentiable.
REGISTER_OP("TfExtTest>Twice").Input("x: T").Input("w: T").Output("y: T")
    .Attr("T: {float, double}").SetShapeFn(shape_inference::UnchangedShape);

struct TwiceF {
  template <typename T>
  T operator()(T x, T w) const { return T(2) * x + w; }
};
TF_EXT_TEST_REGISTER_ELEMENTWISE_KERNEL("TfExtTest>Twice", TwiceF);

absl::Status WrongTwiceGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("TfExtTest>Twice", attrs);
  // Wrong on purpose: 2 dy + onehot(1) * dy.
  b.Add(FunctionDefHelper::Const<double>("two_f64", 2.0));
  b.Add({{"two"}, "Cast", {"two_f64"}, {{"SrcT", DT_DOUBLE}, {"DstT", grad::Placeholder("T")}}});
  b.Add({{"right"}, "Mul", {grad::GradName("y"), "two"}, b.PassAttrs({"T"})});
  b.Add({{"pick"}, "TfExt>ZeroOut", {grad::GradName("y")}, {{"T", grad::Placeholder("T")},
                                                         {"preserve_index", 1}}});
  b.Add({{"wrong"}, "Add", {"right", "pick"}, b.PassAttrs({"T"})});
  b.Return("x", "wrong").Return("w", grad::GradName("y"));
  return b.Build(g);
}
TF_EXT_REGISTER_GRADIENT("TfExtTest>Twice", WrongTwiceGrad);

Tensor Values(int n) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(0.1 * i - 0.3);
  return test::AsTensor<double>(v);
}

TEST(GradientChecker, CatchesAWrongElementAndNamesIt) {
  GradientCheckResult r;
  ASSERT_TRUE(CheckGradient("TfExtTest>Twice", {}, {Values(4), Values(4)}, {}, &r).ok());
  EXPECT_FALSE(r.Passed(1e-3)) << r.ToString();
  EXPECT_NEAR(r.max_abs_error, 1.0, 1e-6);
  EXPECT_EQ(r.worst_input, "x");
  EXPECT_EQ(r.worst_element, 1);
  EXPECT_EQ(r.worst_row, "output[0][1]");
  EXPECT_NEAR(r.worst_symbolic, 3.0, 1e-9);
  EXPECT_NEAR(r.worst_numeric, 2.0, 1e-6);
  EXPECT_NE(r.ToString().find("TfExtTest>Twice"), std::string::npos);
}

TEST(GradientChecker, CatchesItWithRandomProjectionsToo) {
  GradientCheckOptions opts;
  opts.max_rows = 2;  // 6 outputs > 2: compare v^T J for random v
  GradientCheckResult r;
  ASSERT_TRUE(CheckGradient("TfExtTest>Twice", {}, {Values(6), Values(6)}, opts, &r).ok());
  EXPECT_EQ(r.rows, opts.num_projections);
  EXPECT_FALSE(r.Passed(1e-3)) << r.ToString();
  EXPECT_EQ(r.worst_input, "x");
  EXPECT_EQ(r.worst_element, 1);
}

TEST(GradientChecker, NonDifferentiableInputMustGetZeros) {
  GradientCheckOptions opts;
  opts.non_differentiable_inputs = {"w"};
  GradientCheckResult r;
  ASSERT_TRUE(CheckGradient("TfExtTest>Twice", {}, {Values(3), Values(3)}, opts, &r).ok());
  EXPECT_GT(r.nondiff_max_abs, 0.5) << r.ToString();
  EXPECT_NE(r.ToString().find("non-differentiable"), std::string::npos);
}

TEST(GradientChecker, FloatInputsAreDifferencedInFloat64) {
  GradientCheckResult r;
  Tensor xf = test::AsTensor<float>({0.5f, -1.f, 2.f});
  ASSERT_TRUE(CheckGradient("TfExtTest>Twice", {}, {xf, xf}, {}, &r).ok());
  EXPECT_TRUE(r.numeric_float64);
  // The error is exactly the planted 1.0 (no float32 rounding noise on top).
  EXPECT_NEAR(r.max_abs_error, 1.0, 1e-6);
}

TEST(GradientChecker, ReportsWhyItCannotRun) {
  GradientCheckResult r;
  EXPECT_EQ(CheckGradient("TfExtTest>NoSuchOp", {}, {}, {}, &r).code(), absl::StatusCode::kNotFound);
  absl::Status s = CheckGradient("TfExtTest>Twice", {}, {Values(3)}, {}, &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("op has 2 inputs, got 1"), std::string::npos) << s;
}


// y = x for complex x, with a deliberately wrong gradient conj(dy): right in the real parts,
// wrong in the imaginary ones. TensorFlow's convention makes the right gradient dy.
REGISTER_OP("TfExtTest>ComplexIdentity").Input("x: T").Output("y: T")
    .Attr("T: {complex64, complex128}").SetShapeFn(shape_inference::UnchangedShape);

class ComplexIdentityOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override { ctx->set_output(0, ctx->input(0)); }
};
REGISTER_KERNEL_BUILDER(Name("TfExtTest>ComplexIdentity").Device(DEVICE_CPU), ComplexIdentityOp);

absl::Status ConjugatedGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("TfExtTest>ComplexIdentity", attrs);
  b.Return("x", b.Add({{"dx"}, "Conj", {grad::GradName("y")}, b.PassAttrs({"T"})}));
  return b.Build(g);
}
TF_EXT_REGISTER_GRADIENT("TfExtTest>ComplexIdentity", ConjugatedGrad);

Tensor Complex128(const std::vector<std::complex<double>>& v, TensorShape shape) {
  Tensor t(DT_COMPLEX128, shape);
  for (size_t i = 0; i < v.size(); ++i) t.flat<complex128>()(i) = v[i];
  return t;
}

// A complex element is two reals: rows for its real and imaginary parts (incoming gradients 1
// and i), columns for both parts of each input element; complex64 is differenced in complex128.
TEST(GradientChecker, ComplexInputsAndOutputsAreTwoRealsEach) {
  const Tensor x = Complex128({{0.5, -1}, {2, 0.25}, {-0.75, 1.5}}, {3});
  GradientCheckResult r;
  ASSERT_TRUE(CheckGradient("Mul", {}, {x, x}, {}, &r).ok());
  EXPECT_TRUE(r.Passed(1e-7)) << r.ToString();
  EXPECT_EQ(r.rows, 6);
  EXPECT_EQ(r.columns, 12);
  Tensor x64(DT_COMPLEX64, {3});
  for (int i = 0; i < 3; ++i) x64.flat<complex64>()(i) = complex64(x.flat<complex128>()(i));
  ASSERT_TRUE(CheckGradient("Mul", {}, {x64, x64}, {}, &r).ok());
  EXPECT_TRUE(r.numeric_float64);
  EXPECT_TRUE(r.Passed(1e-5)) << r.ToString();
}

TEST(GradientChecker, CatchesAConjugatedComplexGradient) {
  GradientCheckResult r;
  ASSERT_TRUE(CheckGradient("TfExtTest>ComplexIdentity", {},
                            {Complex128({{0.5, -1}, {2, 0.25}}, {2})}, {}, &r).ok());
  EXPECT_FALSE(r.Passed(1e-3)) << r.ToString();
  EXPECT_NEAR(r.max_abs_error, 2.0, 1e-6);  // -1 against +1 in an imaginary part
  EXPECT_EQ(r.worst_element % 2, 1) << r.ToString();
}

// SPD matrix whose lower triangle Cholesky reads: its (Python's symmetric) gradient matches
// symmetric perturbations only.
TEST(GradientChecker, SymmetricInputsAreDifferencedInPairs) {
  const Tensor a = test::AsTensor<double>({4, 1, 0.5, 1, 3, 0.25, 0.5, 0.25, 2}, {3, 3});
  GradientCheckOptions opts;
  GradientCheckResult r;
  ASSERT_TRUE(CheckGradient("Cholesky", {}, {a}, opts, &r).ok());
  EXPECT_FALSE(r.Passed(1e-3)) << "elementwise: the upper triangle is not read";
  opts.symmetric_inputs = {"input"};
  ASSERT_TRUE(CheckGradient("Cholesky", {}, {a}, opts, &r).ok());
  EXPECT_TRUE(r.Passed(1e-7)) << r.ToString();
  EXPECT_EQ(r.columns, 6);  // the lower triangle
  absl::Status s = CheckGradient("Cholesky", {}, {test::AsTensor<double>({1, 2, 3}, {3})}, opts, &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

// An output Python's gradient ignores (CTCLoss's `gradient`, a by-product it reads through
// PreventGradient) is not compared when named; unnamed, its rows expose the difference.
TEST(GradientChecker, IgnoredOutputsAreNotCompared) {
  std::vector<double> logits(4 * 2 * 3);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(1.7 * i);
  const std::vector<Tensor> inputs = {
      test::AsTensor<double>(logits, {4, 2, 3}),
      test::AsTensor<int64_t>({0, 0, 0, 1, 1, 0}, {3, 2}), test::AsTensor<int32>({0, 1, 1}, {3}),
      test::AsTensor<int32>({4, 3}, {2})};
  GradientCheckOptions opts;
  opts.delta = 1e-3;  // the kernel computes in float
  GradientCheckResult r;
  ASSERT_TRUE(CheckGradient("CTCLoss", {}, inputs, opts, &r).ok());
  EXPECT_FALSE(r.Passed(2e-3)) << r.ToString();
  opts.ignored_outputs = {"gradient"};
  ASSERT_TRUE(CheckGradient("CTCLoss", {}, inputs, opts, &r).ok());
  EXPECT_TRUE(r.Passed(2e-3)) << r.ToString();
  EXPECT_EQ(r.rows, 2);  // the loss of each batch entry
}

// AvgPool3DGrad's OpDef allows double but it has no double CPU kernel: the numeric pass runs in
// float instead of failing.
TEST(GradientChecker, NumericPassStaysInTheInputTypeWithoutAWideKernel) {
  std::vector<float> g(8);
  for (int i = 0; i < 8; ++i) g[i] = 0.1f * i - 0.35f;
  GradientCheckOptions opts;
  opts.non_differentiable_inputs = {"orig_input_shape"};
  GradientCheckResult r;
  ASSERT_TRUE(CheckGradient("AvgPool3DGrad",
                            {{"ksize", std::vector<int>{1, 2, 2, 2, 1}},
                             {"strides", std::vector<int>{1, 1, 1, 1, 1}},
                             {"padding", "VALID"}},
                            {test::AsTensor<int32>({1, 3, 3, 3, 1}),
                             test::AsTensor<float>(g, {1, 2, 2, 2, 1})},
                            opts, &r)
                  .ok());
  EXPECT_FALSE(r.numeric_float64);
  EXPECT_TRUE(r.Passed(1e-3)) << r.ToString();
}

}  // namespace
}  // namespace tensorflow::tf_ext
