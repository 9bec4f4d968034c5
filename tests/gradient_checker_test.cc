// The checker itself: it must catch wrong gradients (and say where), not only pass right ones.
#include <gtest/gtest.h>

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
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

}  // namespace
}  // namespace tensorflow::tf_ext
