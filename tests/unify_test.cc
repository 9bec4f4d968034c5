// Registry unification (tf_ext/grads/unify.h): ops that had only a C++ client gradient now
// differentiate through SymbolicGradient (the function registry), checked against float64
// numeric Jacobians; the gradients no registry had (IdentityN, Erfc) likewise; the
// unification is idempotent and its conversion errors name the op.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tensorflow/cc/framework/grad_op_registry.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/tensor.h"
#include "tests/test_util.h"
#include "tf_ext/grads/client_gradient.h"
#include "tf_ext/grads/unify.h"
#include "tf_ext/testing/gradient_checker.h"
#include "tf_ext/testing/op_runner.h"

namespace tensorflow::tf_ext {
namespace {

using test::AsTensor;
using test::CheckGradient;
using test::GradientCheckOptions;
using test::GradientCheckResult;
using test::OpAttrs;

// Deterministic, kink-free inputs: 0.3 + 0.17 * i (wrapped into [-1.2, 1.3]).
Tensor Smooth(TensorShape shape, double offset = 0) {
  Tensor t(DT_DOUBLE, shape);
  auto f = t.flat<double>();
  for (int64_t i = 0; i < f.size(); ++i) f(i) = offset + 0.3 + 0.17 * i - 2.5 * ((i * 7) % 3 == 2);
  return t;
}

struct ClientOnlyCase {
  std::string op;
  OpAttrs attrs;
  std::vector<Tensor> inputs;
  std::vector<std::string> non_differentiable;
  // Finite-difference step (0: the checker's default). Ops whose output is float32 whatever
  // the input (ResizeBilinear) are linear: a large step is exact and beats float32 rounding.
  double delta = 0;
};

std::vector<ClientOnlyCase> Cases() {
  std::vector<ClientOnlyCase> cases;
  cases.push_back({"Pad", {}, {Smooth({2, 3}), AsTensor<int32>({1, 0, 0, 2}, {2, 2})},
                   {"paddings"}});
  cases.push_back({"MirrorPad", {{"mode", "REFLECT"}},
                   {Smooth({3, 4}), AsTensor<int32>({1, 1, 2, 0}, {2, 2})}, {"paddings"}});
  cases.push_back({"DepthwiseConv2dNative",
                   {{"strides", std::vector<int32>{1, 1, 1, 1}}, {"padding", "VALID"}},
                   {Smooth({1, 4, 4, 2}), Smooth({2, 2, 2, 2}, 0.1)}, {}});
  cases.push_back({"Elu", {}, {Smooth({6})}, {}});
  cases.push_back({"Selu", {}, {Smooth({6})}, {}});
  cases.push_back({"Softplus", {}, {Smooth({6})}, {}});
  cases.push_back({"Erf", {}, {Smooth({6})}, {}});
  cases.push_back({"Cumsum", {}, {Smooth({5}), AsTensor<int32>({0})}, {"axis"}});
  cases.push_back({"Atan2", {}, {Smooth({4}), Smooth({4}, 2.0)}, {}});
  cases.push_back({"GatherV2", {},
                   {Smooth({4, 3}), AsTensor<int32>({2, 0, 2}), AsTensor<int32>({0})},
                   {"indices", "axis"}});
  cases.push_back({"Tile", {}, {Smooth({2, 2}), AsTensor<int32>({2, 3})}, {"multiples"}});
  cases.push_back({"Prod", {}, {Smooth({2, 3}, 1.0), AsTensor<int32>({1})},
                   {"reduction_indices"}});
  cases.push_back({"BatchMatMulV3", {{"Tout", DT_DOUBLE}},
                   {Smooth({2, 2, 3}), Smooth({2, 3, 2}, 0.4)}, {}});
  cases.push_back({"ResizeBilinear", {}, {Smooth({1, 3, 3, 1}), AsTensor<int32>({5, 4})},
                   {"size"}, 0.25});
  return cases;
}

class ClientOnlyGradient : public ::testing::TestWithParam<ClientOnlyCase> {};

TEST_P(ClientOnlyGradient, SymbolicGradientMatchesNumericJacobian) {
  const ClientOnlyCase& c = GetParam();
  // The op had only a client gradient in TensorFlow; unification gave it a function one.
  gradient::Creator creator;
  ASSERT_TRUE(gradient::GetOpGradientCreator(c.op, &creator).ok()) << c.op;
  ASSERT_TRUE(creator != nullptr) << c.op;
  GradientCheckOptions options;
  options.non_differentiable_inputs = c.non_differentiable;
  options.delta = c.delta;
  GradientCheckResult r;
  const absl::Status s = CheckGradient(c.op, c.attrs, c.inputs, options, &r);
  ASSERT_TRUE(s.ok()) << c.op << ": " << s;
  EXPECT_TRUE(r.Passed(1e-6)) << r.ToString();
  EXPECT_GT(r.rows, 0);
}

INSTANTIATE_TEST_SUITE_P(Ops, ClientOnlyGradient, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.op; });

// List-input ops and a bool input (which CheckGradient's differencing does not take):
// SymbolicGradient against closed forms.
TEST(ListInputs, AddNGradientIsTheIncomingGradientForEveryInput) {
  const Tensor dy = AsTensor<double>({1, -2, 3, 0.5});
  auto dx = test::RunSymbolicGradient("AddN", {{"N", 3}},
                                         {Smooth({4}), Smooth({4}, 1), Smooth({4}, 2)}, {dy});
  ASSERT_TRUE(dx.ok()) << dx.status();
  ASSERT_EQ(dx->size(), 3u);
  for (const Tensor& d : *dx) test::ExpectTensorNear<double>(d, dy);
}

TEST(ListInputs, EinsumMatmulGradient) {
  // y = a b (ij,jk->ik): d(a) = dy b^T, d(b) = a^T dy.
  const Tensor a = AsTensor<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = AsTensor<double>({1, -1, 0, 2, 3, 1}, {3, 2});
  const Tensor dy = AsTensor<double>({1, 2, -1, 0.5}, {2, 2});
  auto dx = test::RunSymbolicGradient("Einsum", {{"equation", "ij,jk->ik"}, {"N", 2}},
                                         {a, b}, {dy});
  ASSERT_TRUE(dx.ok()) << dx.status();
  ASSERT_EQ(dx->size(), 2u);
  test::ExpectTensorNear<double>((*dx)[0], AsTensor<double>({-1, 4, 5, -1.5, 1, -2.5}, {2, 3}),
                                 1e-12);
  test::ExpectTensorNear<double>((*dx)[1], AsTensor<double>({-3, 4, -3, 6.5, -3, 9}, {3, 2}),
                                 1e-12);
}

TEST(ListInputs, SelectV2RoutesByConditionAndConditionGetsZeros) {
  const Tensor dy = AsTensor<double>({1, 2, 3});
  auto dx = test::RunSymbolicGradient(
      "SelectV2", {}, {AsTensor<bool>({true, false, true}), Smooth({3}), Smooth({3}, 1)}, {dy});
  ASSERT_TRUE(dx.ok()) << dx.status();
  ASSERT_EQ(dx->size(), 3u);
  test::ExpectTensorNear<bool>((*dx)[0], AsTensor<bool>({false, false, false}));
  test::ExpectTensorNear<double>((*dx)[1], AsTensor<double>({1, 0, 3}));
  test::ExpectTensorNear<double>((*dx)[2], AsTensor<double>({0, 2, 0}));
}

TEST(CoreGradients, IdentityNPassesEachGradientThrough) {
  const Tensor dy0 = AsTensor<double>({1, 2, 3});
  const Tensor dy1 = AsTensor<float>({-1, 0.5f, 4, 2}, {2, 2});
  auto dx = test::RunSymbolicGradient("IdentityN", {},
                                         {Smooth({3}), AsTensor<float>({0, 1, 2, 3}, {2, 2})},
                                         {dy0, dy1});
  ASSERT_TRUE(dx.ok()) << dx.status();
  ASSERT_EQ(dx->size(), 2u);
  test::ExpectTensorNear<double>((*dx)[0], dy0);
  test::ExpectTensorNear<float>((*dx)[1], dy1);
}

TEST(CoreGradients, Erfc) {
  for (DataType dtype : {DT_DOUBLE, DT_FLOAT}) {
    Tensor x = Smooth({8});
    if (dtype == DT_FLOAT) {
      Tensor xf(DT_FLOAT, x.shape());
      for (int i = 0; i < 8; ++i) xf.flat<float>()(i) = static_cast<float>(x.flat<double>()(i));
      x = xf;
    }
    GradientCheckResult r;
    ASSERT_TRUE(CheckGradient("Erfc", {}, {x}, {}, &r).ok());
    EXPECT_TRUE(r.Passed(dtype == DT_DOUBLE ? 1e-8 : 1e-4)) << r.ToString();
  }
}

TEST(Unify, EveryOpInOneRegistryIsInBoth) {
  RegistryReport report;
  ASSERT_TRUE(UnifyGradientRegistries(&report).ok());
  // The library already unified when it was loaded (here: statically linked), so this call
  // is the second: it adds nothing.
  EXPECT_TRUE(report.added_function.empty()) << report.ToString(false);
  EXPECT_TRUE(report.added_client.empty()) << report.ToString(false);
  EXPECT_EQ(report.after.function_only, 0);
  EXPECT_EQ(report.after.client_only, 0);
  EXPECT_GT(report.after.both, 200);
  EXPECT_EQ(report.before.both, report.after.both);
  // Every op missing from one registry is missing from the other too.
  EXPECT_EQ(report.lacking_function, report.lacking_client);
  const RegistryCounts now = CountGradientRegistries();
  EXPECT_EQ(now.both, report.after.both);
}

TEST(Unify, CEntryPointReports) {
  char text[4096];
  ASSERT_EQ(TfExtUnifyGradientRegistries(text, sizeof(text)), 0);
  EXPECT_NE(std::string(text).find("function only 0, client only 0"), std::string::npos) << text;
  ASSERT_EQ(TfExtUnifyGradientRegistries(nullptr, 0), 0);
}

TEST(Unify, ConversionErrorsNameTheOp) {
  ops::GradFunc pad_grad = nullptr;
  ASSERT_TRUE(ops::GradOpRegistry::Global()->Lookup("Pad", &pad_grad).ok());
  FunctionDef fdef;
  // No T: the forward node cannot be typed.
  AttrValueMap attrs;
  absl::Status s = ClientGradientAsFunction("Pad", pad_grad, AttrSlice(&attrs), &fdef);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("Pad: "), std::string::npos) << s;
}

TEST(Unify, ConvertedFunctionSignatureIsFlatAndConcrete) {
  ops::GradFunc grad = nullptr;
  ASSERT_TRUE(ops::GradOpRegistry::Global()->Lookup("AddN", &grad).ok());
  AttrValueMap attrs;
  attrs["T"].set_type(DT_FLOAT);
  attrs["N"].set_i(3);
  FunctionDef fdef;
  ASSERT_TRUE(ClientGradientAsFunction("AddN", grad, AttrSlice(&attrs), &fdef).ok());
  const OpDef& sig = fdef.signature();
  // x_0..x_2, dy_0 -> dx_0..dx_2, all float, no attrs left.
  ASSERT_EQ(sig.input_arg_size(), 4);
  ASSERT_EQ(sig.output_arg_size(), 3);
  EXPECT_EQ(sig.input_arg(3).name(), "dy_0");
  EXPECT_EQ(sig.output_arg(2).name(), "dx_2");
  for (const auto& arg : sig.input_arg()) EXPECT_EQ(arg.type(), DT_FLOAT);
  EXPECT_EQ(sig.attr_size(), 0);
}

}  // namespace
}  // namespace tensorflow::tf_ext
