// End-to-end tests of the tf_ext_grad binary: real process, real op library, no Python.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/platform/env.h"
#include "tests/command.h"

namespace {

using ToolRun = ::tensorflow::tf_ext::test::CommandResult;
using ::tensorflow::tf_ext::test::RunCommand;

ToolRun RunTool(const std::string& args) {
  return RunCommand("tf_ext/tf_ext_grad --library=tf_ext/_tf_ext_ops.so " + args);
}

std::string TmpFile(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

const char kGraph[] = "--graph=tests/data/zero_out_graph.pbtxt --feed=x=3:1.5,-2,4";

TEST(TfExtGrad, GraphFileGradientAndSave) {
  const std::string save = TmpFile("grads.txt");
  ToolRun r = RunTool(std::string(kGraph) + " --y=sq --x=x --check --save=" + save);
  ASSERT_EQ(r.code, 0) << r.output;
  // y = (ZeroOut(x, 1) * c)^2 with c1 = 3: dy/dx = [0, 2 * x1 * c1^2, 0] = [0, -36, 0].
  EXPECT_NE(r.output.find("d sum(y) / d x:0: double [3] = [0 -36 0]"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(": PASS"), std::string::npos) << r.output;
  std::ifstream in(save);
  std::stringstream contents;
  contents << in.rdbuf();
  EXPECT_EQ(contents.str(), "x:0 double [3] = [0 -36 0]\n");
}

TEST(TfExtGrad, BinaryGraphFile) {
  tensorflow::GraphDef graph;
  ASSERT_TRUE(tensorflow::ReadTextProto(tensorflow::Env::Default(),
                                        "tests/data/zero_out_graph.pbtxt", &graph)
                  .ok());
  const std::string binary = TmpFile("zero_out_graph.pb");
  ASSERT_TRUE(tensorflow::WriteBinaryProto(tensorflow::Env::Default(), binary, graph).ok());
  ToolRun r = RunTool("--graph=" + binary + " --feed=x=3:1.5,-2,4 --y=sq --x=x --check");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("d sum(y) / d x:0: double [3] = [0 -36 0]"), std::string::npos)
      << r.output;
}

TEST(TfExtGrad, IntermediateAndInputTogether) {
  // zc = z * c is computed from x; both gradients must be complete (no cut path).
  ToolRun r = RunTool(std::string(kGraph) + " --y=sq --x=x,zc --check");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("d sum(y) / d x:0: double [3] = [0 -36 0]"), std::string::npos)
      << r.output;
  // d/d zc of zc^2 = 2 zc = [0, -12, 0].
  EXPECT_NE(r.output.find("d sum(y) / d zc:0: double [3] = [0 -12 0]"), std::string::npos)
      << r.output;
}

TEST(TfExtGrad, DefaultExampleRunsAndPasses) {
  ToolRun r = RunTool("--check");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("built-in example"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("d sum(y) / d features:0: double [1,8,8,8]"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("tolerance 1e-06: PASS"), std::string::npos) << r.output;
  // The STE and the reversal are compared through their surrogate forwards.
  EXPECT_NE(r.output.find("surrogate forward of TfExt>SignSTE"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("surrogate forward of TfExt>GradientReversal"), std::string::npos)
      << r.output;
}

struct ErrorCase {
  const char* args;
  const char* message;
};

class TfExtGradErrors : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(TfExtGradErrors, ExitNonZeroWithClearMessage) {
  ToolRun r = RunTool(GetParam().args);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find(GetParam().message), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("Check failed"), std::string::npos) << r.output;
}

INSTANTIATE_TEST_SUITE_P(
    All, TfExtGradErrors,
    ::testing::Values(
        ErrorCase{"--graph=tests/data/missing.pbtxt --y=a --x=b",
                  "graph file 'tests/data/missing.pbtxt' does not exist"},
        ErrorCase{"--graph=tests/data/zero_out_graph.pbtxt --y=nope --x=x --feed=x=1",
                  "no node named 'nope'"},
        ErrorCase{"--graph=tests/data/zero_out_graph.pbtxt --y=sq --x=x:7 --feed=x=1",
                  "'x:7': node has 1 outputs"},
        ErrorCase{"--graph=tests/data/zero_out_graph.pbtxt --y=cum --x=x --feed=x=3:1,2,3",
                  "op Cumsum (node 'cum') lies between x and y but has no gradient"},
        ErrorCase{"--graph=tests/data/zero_out_graph.pbtxt --y=sq --x=x --feed=x=2x2:1,2,3",
                  "needs 4 values, got 3"},
        ErrorCase{"--graph=tests/tf_ext_grad_test.cc --y=a --x=b", "is not a GraphDef"},
        ErrorCase{"--bogus", "unknown argument '--bogus'"}));

TEST(TfExtGrad, MissingLibrary) {
  ToolRun r = RunCommand("tf_ext/tf_ext_grad --library=/nonexistent/lib.so");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("op library '/nonexistent/lib.so' not found"), std::string::npos)
      << r.output;
}

}  // namespace
