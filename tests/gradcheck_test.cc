// End-to-end tests of tf_ext_gradcheck on tf_ext's library, on a flawed third-party library
// and on TensorFlow's own ops.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "tensorflow/core/framework/types.h"
#include "tests/command.h"
#include "tf_ext/grads/manifest.h"

namespace {

using ToolRun = ::tensorflow::tf_ext::test::CommandResult;

ToolRun Gradcheck(const std::string& args) {
  return ::tensorflow::tf_ext::test::RunCommand("tf_ext/tf_ext_gradcheck " + args);
}

// The table row of `op` for `dtype` ends with `result`.
bool HasRow(const std::string& out, const std::string& op, const std::string& dtype,
            const std::string& result) {
  const std::regex row("\\| " + op + " +\\| [^|]+\\| " +
                       dtype + " +\\|[^\\n]*\\| " + result + " +\\|");
  return std::regex_search(out, row);
}

TEST(Gradcheck, EveryDeclaredOpOfTheLibraryIsChecked) {
  // No --spec: the input specs come from the library's declarations (TfExtGradCheckSpecs).
  ToolRun r = Gradcheck("--library=tf_ext/_tf_ext_ops.so");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::vector<tensorflow::tf_ext::OpFacts> manifest = tensorflow::tf_ext::GradientManifest();
  ASSERT_GE(manifest.size(), 10u);
  for (const auto& f : manifest) {
    const std::string& op = f.op;
    switch (f.differentiability) {
      case tensorflow::tf_ext::Differentiability::kGradient:
        // Every declared float type is differenced against numeric Jacobians and passes.
        for (const char* dtype : {"float", "double"}) {
          const bool declared = std::any_of(f.types.begin(), f.types.end(), [&](auto t) {
            return tensorflow::DataTypeString(t) == dtype;
          });
          if (declared) {
            EXPECT_TRUE(HasRow(r.output, op, dtype, "PASS")) << op << "\n" << r.output;
          }
        }
        break;
      case tensorflow::tf_ext::Differentiability::kBackwardOp:
        // Their gradient (a second derivative) is registered unimplemented.
        EXPECT_TRUE(HasRow(r.output, op, "-", "unimpl\\.")) << op << "\n" << r.output;
        break;
      case tensorflow::tf_ext::Differentiability::kNotDifferentiable:
        EXPECT_TRUE(HasRow(r.output, op, "-", "no-grad")) << op << "\n" << r.output;
        break;
    }
  }
  // The STE and the reversal are checked through their surrogate forwards.
  EXPECT_NE(r.output.find("surrogate forward TfExt_SignSTE_surrogate_"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(" 0 failed"), std::string::npos) << r.output;
}

TEST(Gradcheck, FlawedLibraryIsReported) {
  ToolRun r = Gradcheck("--library=tests/_badgrad_ops.so");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(HasRow(r.output, "TfExtTest>BadScale", "float", "FAIL")) << r.output;
  EXPECT_TRUE(HasRow(r.output, "TfExtTest>BadScale", "double", "FAIL")) << r.output;
  EXPECT_TRUE(HasRow(r.output, "TfExtTest>NoGradYet", "-", "missing")) << r.output;
  EXPECT_TRUE(HasRow(r.output, "TfExtTest>Frozen", "-", "no-grad")) << r.output;
  // The note says where: symbolic 3 against numeric 2.
  EXPECT_NE(r.output.find("symbolic 3, numeric 2"), std::string::npos) << r.output;
}

// TensorFlow ops whose FDH gradients are right.
constexpr char kGoodTfOps[] =
    "Tanh,Sigmoid,Mul,Add,Sub,Div,Exp,Log,Sqrt,Rsqrt,Square,Abs,Sin,Cos,Neg,Reciprocal,Asin,"
    "Acos,Atan,Atanh,Sinh,Cosh,Log1p,Expm1,Maximum,Minimum,SquaredDifference,Pow,MatMul,"
    "BatchMatMulV2,Sum,Mean,Max,Softmax,LogSoftmax,Relu,Conv2D,MaxPool,AvgPool,BiasAdd,"
    "Transpose,Reshape,Sign";

TEST(Gradcheck, TensorFlowCoreOps) {
  ToolRun r = Gradcheck(
      std::string("--library=none --spec=tf_ext/tools/tf_core_gradcheck_spec.txt --ops=") +
      kGoodTfOps);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("gradcheck: 86 passed, 0 failed"), std::string::npos) << r.output;
}

TEST(Gradcheck, FindsTensorFlowsWrongAsinhAndAcoshGradients) {
  // TensorFlow 2.21's FDH gradients (core/ops/math_grad.cc) multiply dy by cosh(y) / sinh(y)
  // where the derivative is 1/cosh(y) / 1/sinh(y); the checker must flag both.
  ToolRun r =
      Gradcheck("--library=none --spec=tf_ext/tools/tf_core_gradcheck_spec.txt --ops=Asinh,Acosh");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(HasRow(r.output, "Asinh", "double", "FAIL")) << r.output;
  EXPECT_TRUE(HasRow(r.output, "Acosh", "double", "FAIL")) << r.output;
}

// Ops that only had a client gradient in TensorFlow (and Erfc, which had none) are checked
// through the function registry once the op library is loaded and has unified the registries.
TEST(Gradcheck, UnifiedAndNewGradientsPass) {
  const char* ops[] = {"Erfc", "Erf", "Atan2", "Softplus", "Softsign", "LeakyRelu",
                       "DepthwiseConv2dNative", "Elu", "Selu", "Tile"};
  std::string list;
  for (const char* op : ops) list += std::string(list.empty() ? "" : ",") + op;
  ToolRun r = Gradcheck("--library=tf_ext/_tf_ext_ops.so "
                        "--spec=tf_ext/tools/tf_core_gradcheck_spec.txt --ops=" + list);
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* op : ops) {
    EXPECT_TRUE(HasRow(r.output, op, "double", "PASS")) << op << "\n" << r.output;
    EXPECT_TRUE(HasRow(r.output, op, "float", "PASS")) << op << "\n" << r.output;
  }
  // Without the library TensorFlow's function registry has none of them.
  ToolRun bare = Gradcheck(
      "--library=none --spec=tf_ext/tools/tf_core_gradcheck_spec.txt --ops=Erfc,Softplus");
  EXPECT_NE(bare.output.find("op library: none (--library=none)"), std::string::npos)
      << bare.output;
  EXPECT_TRUE(HasRow(bare.output, "Erfc", "-", "missing")) << bare.output;
  EXPECT_TRUE(HasRow(bare.output, "Softplus", "-", "missing")) << bare.output;
}

// Without --library the op library is found as tf_ext_grad finds it (here: the test's
// runfiles hold //tf_ext:_tf_ext_ops.so), and the tool says which one and how. Softplus then
// has its gradient: TensorFlow alone reports it missing.
TEST(Gradcheck, FindsTheLibraryLikeTfExtGrad) {
  const std::string check = "--spec=tf_ext/tools/tf_core_gradcheck_spec.txt --ops=Softplus";
  ToolRun r = Gradcheck(check);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(std::regex_search(
      r.output, std::regex("op library: [^\\n]*/tf_ext/_tf_ext_ops\\.so \\(from runfiles\\)")))
      << r.output;
  EXPECT_TRUE(HasRow(r.output, "Softplus", "double", "PASS")) << r.output;
  EXPECT_TRUE(HasRow(r.output, "Softplus", "float", "PASS")) << r.output;

  // $TF_EXT_LIBRARY comes before runfiles, and an explicit choice that does not exist fails
  // instead of falling back to another copy.
  ToolRun env = ::tensorflow::tf_ext::test::RunCommand(
      "TF_EXT_LIBRARY=tf_ext/_tf_ext_ops.so tf_ext/tf_ext_gradcheck " + check);
  ASSERT_EQ(env.code, 0) << env.output;
  EXPECT_NE(env.output.find("op library: tf_ext/_tf_ext_ops.so (from $TF_EXT_LIBRARY)"),
            std::string::npos)
      << env.output;
  ToolRun missing = ::tensorflow::tf_ext::test::RunCommand(
      "TF_EXT_LIBRARY=/nonexistent/lib.so tf_ext/tf_ext_gradcheck " + check);
  EXPECT_EQ(missing.code, 2) << missing.output;
  EXPECT_NE(missing.output.find("op library '/nonexistent/lib.so' not found (from "
                                "$TF_EXT_LIBRARY)"),
            std::string::npos)
      << missing.output;

  ToolRun flag = Gradcheck("--library=tf_ext/_tf_ext_ops.so " + check);
  EXPECT_NE(flag.output.find("op library: tf_ext/_tf_ext_ops.so (from --library)"),
            std::string::npos)
      << flag.output;
}

TEST(Gradcheck, RegistryReport) {
  ToolRun r = Gradcheck("--registries --library=tf_ext/_tf_ext_ops.so");
  ASSERT_EQ(r.code, 0) << r.output;
  // TensorFlow alone: some ops in one registry only; after loading tf_ext: none.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.output, m,
      std::regex("before: (\\d+) ops; both registries (\\d+), function only (\\d+), client only "
                 "(\\d+), neither (\\d+)")))
      << r.output;
  EXPECT_GT(std::stoi(m[3]), 10) << r.output;   // function only
  EXPECT_GT(std::stoi(m[4]), 50) << r.output;   // client only
  EXPECT_NE(r.output.find("function only 0, client only 0"), std::string::npos) << r.output;
  for (const char* op : {" Pad ", " DepthwiseConv2dNative ", " Einsum ", " IdentityN "}) {
    EXPECT_NE(r.output.substr(r.output.find("added to the function registry")).find(op),
              std::string::npos)
        << op << r.output;
  }
  EXPECT_NE(r.output.find("added to the client registry"), std::string::npos) << r.output;
  ToolRun full = Gradcheck("--registries=full");
  EXPECT_NE(full.output.find("still lacking in the function registry"), std::string::npos)
      << full.output;
  EXPECT_EQ(Gradcheck("--registries=bogus").code, 2);
}

TEST(Gradcheck, UsageErrors) {
  ToolRun none = Gradcheck("--library=none");
  EXPECT_EQ(none.code, 2) << none.output;
  EXPECT_NE(none.output.find("--library=none needs --ops"), std::string::npos) << none.output;
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {"--ops=Tanh --bogus", "unknown argument '--bogus'"},
           {"--ops=Tanh --seed=x", "bad --seed: 'x' is not a non-negative integer"},
           {"--ops=Tanh --tol_float=big", "bad --tol_float: 'big' is not a number"},
           {"--ops=Tanh --ops=Mul", "--ops given more than once"},
           {"--registries=bogus", "bad --registries: 'bogus' is not one of summary, full"},
       }) {
    ToolRun bad = Gradcheck(args);
    EXPECT_EQ(bad.code, 2) << args << "\n" << bad.output;
    EXPECT_NE(bad.output.find(message), std::string::npos) << args << "\n" << bad.output;
  }
  ToolRun help = Gradcheck("--help");
  EXPECT_EQ(help.code, 0) << help.output;
  for (const char* flag : {"--library=PATH", "--ops=A,B", "--spec=FILE", "--seed=N",
                           "--tol_float=TOL", "--tol_double=TOL", "--registries[=full]"}) {
    EXPECT_NE(help.output.find(flag), std::string::npos) << flag << "\n" << help.output;
  }
  ToolRun r = Gradcheck("--library=/nonexistent.so");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("op library '/nonexistent.so' not found (from --library)"),
            std::string::npos)
      << r.output;
}

}  // namespace
