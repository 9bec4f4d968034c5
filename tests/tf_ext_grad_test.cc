// End-to-end tests of the tf_ext_grad binary: real process, real op library, no Python.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/env.h"
#include "absl/strings/str_format.h"
#include "tests/command.h"
#include "tf_ext/graph/io/npy_io.h"

namespace tensorflow::tf_ext {
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

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

TEST(TfExtGrad, GraphFileGradientAndSave) {
  const std::string save = TmpFile("grads.txt");
  ToolRun r = RunTool(std::string(kGraph) + " --y=sq --x=x --check --save=" + save);
  ASSERT_EQ(r.code, 0) << r.output;
  // y = (ZeroOut(x, 1) * c)^2 with c1 = 3: dy/dx = [0, 2 * x1 * c1^2, 0] = [0, -36, 0].
  EXPECT_NE(r.output.find("d sum(y) / d x:0: double [3] = [0 -36 0]"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(": PASS"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("built the backward graph in "), std::string::npos) << r.output;
  EXPECT_EQ(ReadAll(save), "y double [3] 0 36 0\nd_x double [3] 0 -36 0\n");
}

// y = x * sum(w) with a 128 MB constant w: the run may hold a few copies of w (the Graph, the
// Session's graph and its kernels' tensors), not one per graph representation (the
// GraphDef read, the Graph, the backward GraphDef, the Session's GraphDef, its Graph, and
// constant folding's copy: 11 copies before tf_ext_grad released and moved them). With
// --hoist_constants the weights are fed, so TensorFlow's optimizer copies none of them: under
// 6 copies. By default they stay constants, which the optimizer needs to fold them (and oneDNN
// to cache its reordered filters): it copies them while it optimizes, as it does for Python's
// tf.function (GradientOptions::hoist_constants), but no more than that.
int64_t PeakMb(const std::string& output) {
  const std::string key = "peak resident memory: ";
  const size_t at = output.find(key);
  if (at == std::string::npos) return -1;
  return std::stoll(output.substr(at + key.size()));
}

std::string WriteWeightGraph(const std::string& name, int64_t n) {
  GraphDef g;
  auto node = [&](const std::string& nm, const std::string& op) {
    NodeDef* d = g.add_node();
    d->set_name(nm);
    d->set_op(op);
    (*d->mutable_attr())["T"].set_type(DT_FLOAT);
    return d;
  };
  NodeDef* x = node("x", "Placeholder");
  x->mutable_attr()->erase("T");
  (*x->mutable_attr())["dtype"].set_type(DT_FLOAT);
  NodeDef* w = node("w", "Const");
  w->mutable_attr()->erase("T");
  (*w->mutable_attr())["dtype"].set_type(DT_FLOAT);
  Tensor wt(DT_FLOAT, TensorShape({n}));
  for (int64_t i = 0; i < n; ++i) wt.flat<float>()(i) = static_cast<float>(i % 7);
  wt.AsProtoTensorContent((*w->mutable_attr())["value"].mutable_tensor());
  NodeDef* axis = node("axis", "Const");
  axis->mutable_attr()->erase("T");
  (*axis->mutable_attr())["dtype"].set_type(DT_INT32);
  Tensor at(DT_INT32, TensorShape({}));
  at.scalar<int32_t>()() = 0;
  at.AsProtoTensorContent((*axis->mutable_attr())["value"].mutable_tensor());
  NodeDef* read = node("w_read", "Identity");
  read->add_input("w");
  NodeDef* sum = node("s", "Sum");
  sum->add_input("w_read");
  sum->add_input("axis");
  (*sum->mutable_attr())["Tidx"].set_type(DT_INT32);
  NodeDef* y = node("y", "Mul");
  y->add_input("x");
  y->add_input("s");
  const std::string path = TmpFile(name);
  EXPECT_TRUE(WriteBinaryProto(Env::Default(), path, g).ok());
  return path;
}

// Copies of the 128 MB weights the run peaked at, running tf_ext_grad with `extra` flags.
double WeightCopies(const std::string& extra) {
  constexpr int64_t kWeights = 32 << 20;  // 128 MB of float32
  const std::string flags = " --y=y --x=x --feed=x=4:1,2,3,4" + extra;
  ToolRun small = RunTool("--graph=" + WriteWeightGraph("w_small.pb", 4) + flags);
  EXPECT_EQ(small.code, 0) << small.output;
  ToolRun big = RunTool("--graph=" + WriteWeightGraph("w_big.pb", kWeights) + flags);
  EXPECT_EQ(big.code, 0) << big.output;
  // d sum(y) / dx = sum(w) = 21 per 7 elements: 21 * (2^25 div 7) + (0 + 1) = 100663291.
  EXPECT_NE(big.output.find("d sum(y) / d x:0: float [4] = [1.00663e+08 1.00663e+08"),
            std::string::npos) << big.output;
  const int64_t base = PeakMb(small.output), peak = PeakMb(big.output);
  EXPECT_GT(base, 0) << small.output;
  EXPECT_GT(peak, 0) << big.output;
  const double copies = static_cast<double>(peak - base) / 128.0;
  EXPECT_GT(copies, 0.9) << "the weights were not even loaded once? peak " << peak << " MB";
  return copies;
}

TEST(TfExtGrad, HoldsFewCopiesOfAFrozenModelsWeights) {
  EXPECT_LT(WeightCopies(" --hoist_constants"), 6.0);
  // Constants: the optimizer's copies on top (8 measured with TensorFlow 2.21), no more.
  EXPECT_LT(WeightCopies(""), 10.0);
}

TEST(TfExtGrad, SaveIsFullPrecision) {
  // x = 1/3 (17 significant digits) through y = x^2 * c1: d/dx = 2 x c1^2 = 6 (exactly 18 x).
  const std::string save = TmpFile("grads_precise.npz");
  ToolRun r = RunTool("--graph=tests/data/zero_out_graph.pbtxt "
                      "--feed=x=3:0,0.33333333333333331,0 --y=sq --x=x --save=" + save);
  ASSERT_EQ(r.code, 0) << r.output;
  auto arrays = ReadNpz(save);
  ASSERT_TRUE(arrays.ok()) << arrays.status();
  ASSERT_EQ(arrays->size(), 2u);
  EXPECT_EQ((*arrays)[0].first, "y");
  EXPECT_EQ((*arrays)[1].first, "d_x");
  const Tensor& dx = (*arrays)[1].second;
  ASSERT_EQ(dx.dtype(), DT_DOUBLE);
  EXPECT_EQ(dx.flat<double>()(1), 2 * (1.0 / 3) * 9);  // bit-exact, not 6 significant digits
  // Text: 17 significant digits. x = 0.1: y = (0.1 * 3)^2 is 0.09000000000000002 in double.
  const std::string text = TmpFile("grads_precise.txt");
  ASSERT_EQ(RunTool("--graph=tests/data/zero_out_graph.pbtxt --feed=x=3:0,0.1,0 --y=sq --x=x "
                    "--save=" + text).code, 0);
  const double zc = 0.1 * 3;
  const std::string want = absl::StrFormat("y double [3] 0 %.17g 0", zc * zc);
  EXPECT_NE(want, "y double [3] 0 0.09 0");
  EXPECT_NE(ReadAll(text).find(want), std::string::npos) << ReadAll(text);
}

// --feed from .npy, .npz (named and single array) and raw files gives the same gradient as the
// inline feed.
TEST(TfExtGrad, FeedsFromFiles) {
  Tensor x(DT_DOUBLE, TensorShape({3}));
  x.flat<double>()(0) = 1.5, x.flat<double>()(1) = -2, x.flat<double>()(2) = 4;
  auto npy = EncodeNpy(x);
  ASSERT_TRUE(npy.ok());
  const std::string npy_path = TmpFile("x.npy"), npz_path = TmpFile("feeds.npz"),
                    one_path = TmpFile("one.npz"), raw_path = TmpFile("x.raw");
  ASSERT_TRUE(WriteStringToFile(Env::Default(), npy_path, *npy).ok());
  Tensor other(DT_DOUBLE, TensorShape({2}));
  other.flat<double>().setZero();
  ASSERT_TRUE(WriteNpz(npz_path, {{"other", other}, {"x", x}}).ok());
  ASSERT_TRUE(WriteNpz(one_path, {{"whatever", x}}).ok());
  ASSERT_TRUE(WriteStringToFile(Env::Default(), raw_path,
                                std::string(static_cast<const char*>(x.data()), x.TotalBytes()))
                  .ok());
  for (const std::string& feed : {"x=@" + npy_path, "x=@" + npz_path, "x=@" + npz_path + ":x",
                                  "x=@" + one_path, "x=3:@" + raw_path}) {
    ToolRun r = RunTool("--graph=tests/data/zero_out_graph.pbtxt --y=sq --x=x --feed=" + feed);
    ASSERT_EQ(r.code, 0) << feed << "\n" << r.output;
    EXPECT_NE(r.output.find("d sum(y) / d x:0: double [3] = [0 -36 0]"), std::string::npos)
        << feed << "\n" << r.output;
  }
  // The wrong array of an archive and a wrong dtype are named.
  ToolRun wrong = RunTool("--graph=tests/data/zero_out_graph.pbtxt --y=sq --x=x --feed=x=@" +
                          npz_path + ":nope");
  EXPECT_EQ(wrong.code, 1);
  EXPECT_NE(wrong.output.find("has no array 'nope' (it has: other, x)"), std::string::npos)
      << wrong.output;
  Tensor xf(DT_FLOAT, TensorShape({3}));
  xf.flat<float>().setZero();
  ASSERT_TRUE(WriteStringToFile(Env::Default(), npy_path, *EncodeNpy(xf)).ok());
  wrong = RunTool("--graph=tests/data/zero_out_graph.pbtxt --y=sq --x=x --feed=x=@" + npy_path);
  EXPECT_EQ(wrong.code, 1);
  EXPECT_NE(wrong.output.find("the array is float, 'x' takes double"), std::string::npos)
      << wrong.output;
}

TEST(TfExtGrad, RandomFeedsForFullyShapedPlaceholders) {
  // missing_grads_graph.pbtxt's x has shape [3]; zero_out_graph's x has none.
  ToolRun r = RunTool("--graph=tests/data/zero_out_graph.pbtxt --y=sq --x=x --feed=x=random:7");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("'x' is not a placeholder of fully known shape"), std::string::npos)
      << r.output;
  GraphDef graph;
  ASSERT_TRUE(ReadTextProto(Env::Default(), "tests/data/zero_out_graph.pbtxt", &graph).ok());
  for (NodeDef& n : *graph.mutable_node()) {
    if (n.name() == "x") (*n.mutable_attr())["shape"].mutable_shape()->add_dim()->set_size(3);
  }
  const std::string shaped = TmpFile("shaped.pbtxt");
  ASSERT_TRUE(WriteTextProto(Env::Default(), shaped, graph).ok());
  // Unfed: random values with the seed printed, and the same values for the same seed.
  ToolRun a = RunTool("--graph=" + shaped + " --y=sq --x=x --seed=5 --check");
  ASSERT_EQ(a.code, 0) << a.output;
  EXPECT_NE(a.output.find("feeding 'x' random values (--seed=5; reproduce with "
                          "--feed=x=random:5)"),
            std::string::npos)
      << a.output;
  ToolRun b = RunTool("--graph=" + shaped + " --y=sq --x=x --feed=x=random:5 --check");
  ASSERT_EQ(b.code, 0) << b.output;
  auto grad_line = [](const std::string& out) {
    const size_t at = out.find("d sum(y) / d x:0");
    return out.substr(at, out.find('\n', at) - at);
  };
  EXPECT_EQ(grad_line(a.output), grad_line(b.output));
  ToolRun c = RunTool("--graph=" + shaped + " --y=sq --x=x --feed=x=random:6");
  EXPECT_NE(grad_line(a.output), grad_line(c.output));
}

TEST(TfExtGrad, ProjectionCheckOnLargeInput) {
  // 1000 elements: --check compares 16 random projections instead of 1000 rows. y = Cumsum(x)
  // (a client-only gradient in TensorFlow, differentiated through the unified registry):
  // d sum(y) / dx_i = 1000 - i.
  const std::string path = "tests/data/zero_out_graph.pbtxt";
  std::string values;
  for (int i = 0; i < 1000; ++i) values += (i ? "," : "") + std::to_string(0.01 * i - 3);
  ToolRun r = RunTool("--graph=" + path + " --y=cum --x=x --check --feed=x=1000:" + values);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("16 random projections per x over 256 elements"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(": PASS"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("d sum(y) / d x:0: double [1000] = [1000 999 998"), std::string::npos)
      << r.output;
  // Elementwise (Cumsum is linear: a large step is exact, a small one would only measure
  // rounding in a sum of ~1e5).
  ToolRun full = RunTool("--graph=" + path +
                         " --y=cum --x=x --check --projections=0 --delta=0.5 --feed=x=1000:" +
                         values);
  ASSERT_EQ(full.code, 0) << full.output;
  EXPECT_NE(full.output.find("1000 elements"), std::string::npos) << full.output;
}

TEST(TfExtGrad, AllOpsWithoutGradientInOneError) {
  ToolRun r = RunTool("--graph=tests/data/missing_grads_graph.pbtxt --y=y --x=x");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("3 op types (3 nodes) between x and y have no C++ gradient"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("EagerPyFunc (1 node: 'epf'): TensorFlow has a gradient for it only "
                          "in Python"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("PyFunc (1 node: 'pf'): TensorFlow's Python registry marks it not "
                          "differentiable"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("Unique (1 node: 'u'): no gradient in any TensorFlow registry"),
            std::string::npos)
      << r.output;
}

TEST(TfExtGrad, BinaryGraphFile) {
  GraphDef graph;
  ASSERT_TRUE(ReadTextProto(Env::Default(),
                                        "tests/data/zero_out_graph.pbtxt", &graph)
                  .ok());
  const std::string binary = TmpFile("zero_out_graph.pb");
  ASSERT_TRUE(WriteBinaryProto(Env::Default(), binary, graph).ok());
  ToolRun r = RunTool("--graph=" + binary + " --feed=x=3:1.5,-2,4 --y=sq --x=x --check");
  ASSERT_EQ(r.code, 0) << r.output;
  // Binary is read first: no text-format parser complaints in the log.
  EXPECT_EQ(r.output.find("Error parsing text-format"), std::string::npos) << r.output;
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
        ErrorCase{"--graph=tests/data/zero_out_graph.pbtxt --y=sq --x=x --feed=x=2x2:1,2,3",
                  "needs 4 values, got 3"},
        ErrorCase{"--graph=tests/tf_ext_grad_test.cc --y=a --x=b", "is not a GraphDef"},
        ErrorCase{"--bogus", "unknown argument '--bogus'"},
        ErrorCase{"--max_values=x", "bad --max_values: 'x' is not an integer"},
        ErrorCase{"--seed=-1", "bad --seed: '-1' is not a non-negative integer"},
        ErrorCase{"--projections=-1", "bad --projections: -1 is below the minimum 0"},
        ErrorCase{"--delta=tiny", "bad --delta: 'tiny' is not a number"},
        ErrorCase{"--check --check", "--check given more than once"},
        ErrorCase{"--graph", "--graph needs a value: --graph=PATH"}));

// Any output of any node may be an x (TensorFlow's builder alone CHECK-fails on an output of a
// multi-output node): y = sum(split(x)[0]^2) + sum(split(x)[1]^2), x = [1, 2, 3, 4].
TEST(TfExtGrad, XMayBeAnyOutputOfAnyNode) {
  const std::string graph = TmpFile("split.pbtxt");
  std::ofstream(graph) << R"pb(
    node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } }
    node { name: "axis" op: "Const" attr { key: "dtype" value { type: DT_INT32 } }
           attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape {} int_val: 0 } } } }
    node { name: "split" op: "Split" input: "axis" input: "x"
           attr { key: "T" value { type: DT_FLOAT } } attr { key: "num_split" value { i: 2 } } }
    node { name: "sq0" op: "Square" input: "split:0" attr { key: "T" value { type: DT_FLOAT } } }
    node { name: "sq1" op: "Square" input: "split:1" attr { key: "T" value { type: DT_FLOAT } } }
    node { name: "y" op: "AddN" input: "sq0" input: "sq1"
           attr { key: "T" value { type: DT_FLOAT } } attr { key: "N" value { i: 2 } } }
  )pb";
  ToolRun r = RunTool("--graph=" + graph + " --y=y --x=split:1,x,split:0,y --feed=x=4:1,2,3,4 --check");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("d sum(y) / d split:1: float [2] = [6 8]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("d sum(y) / d x:0: float [4] = [2 4 6 8]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("d sum(y) / d split:0: float [2] = [2 4]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("d sum(y) / d y:0: float [2] = [1 1]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(": PASS"), std::string::npos) << r.output;
}

// Gradients flow only along differentiable tensors and stop at not-differentiable ops, as in
// Python: TopKV2 reaches y only through its integer indices (into a Gather of constants) and
// through a StopGradient, so it is not on the path and needs no gradient (TensorFlow 2.21 has
// none in C++). y = sum(w[topk(x).indices]) + sum(x^2) + sum(stop_gradient(topk(x).values)):
// dy/dx = 2x, what tf.gradients returns.
TEST(TfExtGrad, FollowsOnlyDifferentiableEdges) {
  const std::string graph = TmpFile("topk.pbtxt"), dump = TmpFile("topk_backward.pbtxt");
  std::ofstream(graph) << R"pb(
node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } }
node { name: "k" op: "Const" attr { key: "dtype" value { type: DT_INT32 } } attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape {} int_val: 2 } } } }
node { name: "topk" op: "TopKV2" input: "x" input: "k" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "w" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape { dim { size: 5 } } float_val: 10 float_val: 20 float_val: 30 float_val: 40 float_val: 50 } } } }
node { name: "axis" op: "Const" attr { key: "dtype" value { type: DT_INT32 } } attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape {} int_val: 0 } } } }
node { name: "gather" op: "GatherV2" input: "w" input: "topk:1" input: "axis" attr { key: "Tparams" value { type: DT_FLOAT } } attr { key: "Tindices" value { type: DT_INT32 } } attr { key: "Taxis" value { type: DT_INT32 } } }
node { name: "sg" op: "StopGradient" input: "topk" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "sq" op: "Square" input: "x" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "s1" op: "Sum" input: "gather" input: "axis" attr { key: "T" value { type: DT_FLOAT } } attr { key: "Tidx" value { type: DT_INT32 } } }
node { name: "s2" op: "Sum" input: "sq" input: "axis" attr { key: "T" value { type: DT_FLOAT } } attr { key: "Tidx" value { type: DT_INT32 } } }
node { name: "s3" op: "Sum" input: "sg" input: "axis" attr { key: "T" value { type: DT_FLOAT } } attr { key: "Tidx" value { type: DT_INT32 } } }
node { name: "y" op: "AddN" input: "s1" input: "s2" input: "s3" attr { key: "T" value { type: DT_FLOAT } } attr { key: "N" value { i: 3 } } }
)pb";
  ToolRun r = RunTool("--graph=" + graph + " --y=y --x=x --feed=x=5:1,5,2,4,3 --dump_backward=" +
                      dump);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("d sum(y) / d x:0: float [5] = [2 10 4 8 6]"), std::string::npos)
      << r.output;
  // No gradient for the ops off the path: with --symbolic_gradients, each op's gradient is
  // one SymbolicGradient node naming the op.
  r = RunTool("--graph=" + graph + " --y=y --x=x --feed=x=5:1,5,2,4,3 --symbolic_gradients " +
              "--dump_backward=" + dump);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("d sum(y) / d x:0: float [5] = [2 10 4 8 6]"), std::string::npos)
      << r.output;
  const std::string backward = ReadAll(dump);
  EXPECT_NE(backward.find("name: \"Square\""), std::string::npos) << backward;
  for (const char* op : {"\"TopKV2\"", "\"GatherV2\"", "\"StopGradient\""}) {
    EXPECT_EQ(backward.find(std::string("name: ") + op), std::string::npos) << op;
  }
}

// Each op's gradient is inlined as plain ops by default (one graph the Session prunes and
// optimizes), and gives the same numbers as the SymbolicGradient nodes: the default example
// passes its numeric check either way, and its backward graph then has no SymbolicGradient.
TEST(TfExtGrad, GradientsInlinedAsPlainOps) {
  const std::string dump = TmpFile("example_backward.pbtxt");
  ToolRun r = RunTool("--check --dump_backward=" + dump);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(": PASS"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" ops inlined)"), std::string::npos) << r.output;
  EXPECT_EQ(ReadAll(dump).find("SymbolicGradient"), std::string::npos);
  r = RunTool("--check --symbolic_gradients --dump_backward=" + dump);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(": PASS"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" ops as SymbolicGradient nodes)"), std::string::npos) << r.output;
  EXPECT_NE(ReadAll(dump).find("SymbolicGradient"), std::string::npos);
}

// A gradient that reads its op's forward outputs (RoiPool's reads argmax) gets them from the
// forward node instead of recomputing the op: one RoiPool in the inlined backward graph (two
// before, the gradient body's copy never merged with the forward). With --symbolic_gradients
// each op's gradient is a SymbolicGradient node, which recomputes inside its function.
TEST(TfExtGrad, GradientsReadForwardOutputsInsteadOfRecomputing) {
  const std::string dump = TmpFile("roi_backward.pbtxt");
  auto count = [](const std::string& text, const std::string& what) {
    int n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  ToolRun r = RunTool("--check --dump_backward=" + dump);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(": PASS"), std::string::npos) << r.output;
  EXPECT_EQ(count(ReadAll(dump), "op: \"TfExt>RoiPool\""), 1);
  EXPECT_EQ(count(ReadAll(dump), "op: \"PartitionedCall\""), 0);
  r = RunTool("--check --symbolic_gradients --dump_backward=" + dump);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(": PASS"), std::string::npos) << r.output;
  EXPECT_EQ(count(ReadAll(dump), "op: \"PartitionedCall\""), 0);
}

// Hostile shapes are errors naming the placeholder, never std::bad_alloc or a CHECK: a
// placeholder of 10^15 elements (random feed: drawn as doubles, 12 bytes each; raw-file feed) and one whose size overflows int64.
TEST(TfExtGrad, HostileShapesAreErrors) {
  auto graph = [](const std::string& name, const std::string& dims) {
    const std::string path = TmpFile(name);
    std::ofstream(path) << "node { name: 'x' op: 'Placeholder' attr { key: 'dtype' value { type: "
                           "DT_FLOAT } } attr { key: 'shape' value { shape { "
                        << dims
                        << " } } } }\nnode { name: 'y' op: 'Square' input: 'x' attr { key: 'T' "
                           "value { type: DT_FLOAT } } }\n";
    return path;
  };
  const std::string huge = graph("huge.pbtxt", "dim { size: 100000 } dim { size: 100000 } "
                                               "dim { size: 100000 }");
  ToolRun r = RunTool("--graph=" + huge + " --y=y --x=x");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("random values for placeholder 'x': float [100000,100000,100000] "
                          "needs 1.2e+16 bytes, more than half of this machine's memory"),
            std::string::npos)
      << r.output;
  const std::string raw = TmpFile("four_floats.bin");
  std::ofstream(raw) << std::string(16, '\0');
  r = RunTool("--graph=" + huge + " --y=y --x=x --feed=x=@" + raw);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("has 16 bytes; float [100000,100000,100000] needs 4e+15"),
            std::string::npos)
      << r.output;
  const std::string overflow = graph("overflow.pbtxt", "dim { size: 10000000000 } "
                                                       "dim { size: 10000000000 }");
  r = RunTool("--graph=" + overflow + " --y=y --x=x");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("placeholder 'x' has an invalid shape"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("Check failed"), std::string::npos) << r.output;
}

// A backward graph can be differentiated again (second order): the second pass names its nodes
// tf_ext_grad_2/..., never colliding with the first pass's tf_ext_grad/... nodes.
TEST(TfExtGrad, DumpedBackwardGraphDifferentiatesAgain) {
  const std::string first = TmpFile("first_backward.pbtxt"), second = TmpFile("second.pbtxt");
  ToolRun r = RunTool(std::string(kGraph) + " --y=sq --x=x --dump_backward=" + first);
  ASSERT_EQ(r.code, 0) << r.output;
  r = RunTool("--graph=" + first + " --feed=x=3:1.5,-2,4 --y=sq --x=x --check --dump_backward=" +
              second);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("d sum(y) / d x:0: double [3] = [0 -36 0]"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(": PASS"), std::string::npos) << r.output;
  EXPECT_NE(ReadAll(second).find("name: \"tf_ext_grad_2/"), std::string::npos);
}

// --benchmark=N times N requests to a GradientSession after the first; the peak memory is this
// process's own (VmHWM), not that of the process that started it: this test touches 800 MB
// first, which getrusage's ru_maxrss in the tool would have reported (it survives exec).
TEST(TfExtGrad, BenchmarkAndOwnPeakMemory) {
  std::vector<char> ballast(800 << 20);
  for (size_t i = 0; i < ballast.size(); i += 4096) ballast[i] = static_cast<char>(i);
  ToolRun r = RunTool("--benchmark=3");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(std::regex_search(
      r.output, std::regex("\nsteady state over 3 runs: min [0-9.]+ ms, median [0-9.]+ ms\n")))
      << r.output;
  const int64_t peak = PeakMb(r.output);
  EXPECT_GT(peak, 50) << r.output;
  EXPECT_LT(peak, 700) << r.output << " (ballast " << static_cast<int>(ballast[4096]) << ")";
  // It times a GradientSession, which has no numeric check: refused, not ignored.
  ToolRun both = RunTool("--benchmark=2 --check");
  EXPECT_NE(both.code, 0) << both.output;
  EXPECT_NE(both.output.find("--benchmark times the GradientSession a server runs; run --check "
                             "without it"),
            std::string::npos)
      << both.output;
}

// Import errors carry a hint only where the cause is known: a cycle is called a cycle, and only
// an unregistered op asks whether its library is loaded.
TEST(TfExtGrad, ImportErrorHintsNameTheirCause) {
  const std::string cycle = TmpFile("cycle.pbtxt"), unknown = TmpFile("unknown_op.pbtxt");
  std::ofstream(cycle) << R"pb(
    node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } }
    node { name: "a" op: "Add" input: "x" input: "b" attr { key: "T" value { type: DT_FLOAT } } }
    node { name: "b" op: "Identity" input: "a" attr { key: "T" value { type: DT_FLOAT } } }
  )pb";
  std::ofstream(unknown) << R"pb(
    node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } }
    node { name: "y" op: "NoSuchOpAnywhere" input: "x" }
  )pb";
  ToolRun r = RunTool("--graph=" + cycle + " --y=b --x=x --feed=x=1");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("cycle"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("a cycle outside any while loop frame"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("op library that defines it"), std::string::npos) << r.output;
  r = RunTool("--graph=" + unknown + " --y=y --x=x --feed=x=1");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("NoSuchOpAnywhere"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(is the op library that defines it loaded?)"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("cycle"), std::string::npos) << r.output;
}

TEST(TfExtGrad, HelpListsEveryFlag) {
  ToolRun r = RunCommand("tf_ext/tf_ext_grad --help");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* flag :
       {"--graph=PATH", "--y=NODE[:IDX]", "--x=NODE[:IDX],...", "--feed=NAME=VALUE", "--seed=N",
        "--library=PATH", "--check", "--projections=N", "--delta=H", "--tolerance=TOL",
        "--save=PATH", "--dump_backward=PATH", "--max_values=N", "--help"}) {
    EXPECT_NE(r.output.find(std::string("  ") + flag), std::string::npos) << flag << r.output;
  }
  EXPECT_NE(r.output.find("values printed per tensor (default: 8)"), std::string::npos)
      << r.output;
}

// docs/cpp.md "Where the op library is found": --library, then $TF_EXT_LIBRARY (alone), then
// runfiles / next to the binary.
TEST(TfExtGrad, LibraryLookupOrder) {
  const std::string graph = std::string(" ") + kGraph + " --y=sq --x=x";
  const std::string want = "d sum(y) / d x:0: double [3] = [0 -36 0]";
  ToolRun r = RunCommand("TF_EXT_LIBRARY=/nonexistent/env.so tf_ext/tf_ext_grad "
                         "--library=tf_ext/_tf_ext_ops.so" + graph);
  EXPECT_EQ(r.code, 0) << r.output;  // the flag wins over the environment
  EXPECT_NE(r.output.find(want), std::string::npos) << r.output;
  r = RunCommand("TF_EXT_LIBRARY=/nonexistent/env.so tf_ext/tf_ext_grad" + graph);
  EXPECT_EQ(r.code, 1) << r.output;  // an explicit choice is never replaced by another copy
  EXPECT_NE(r.output.find("op library '/nonexistent/env.so' not found (from $TF_EXT_LIBRARY)"),
            std::string::npos)
      << r.output;
  r = RunCommand("TF_EXT_LIBRARY=tf_ext/_tf_ext_ops.so tf_ext/tf_ext_grad" + graph);
  EXPECT_EQ(r.code, 0) << r.output;
  r = RunCommand("env -u TF_EXT_LIBRARY tf_ext/tf_ext_grad" + graph);  // runfiles
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(want), std::string::npos) << r.output;
  r = RunCommand("env -u TF_EXT_LIBRARY -u RUNFILES_DIR tf_ext/tf_ext_grad" + graph);
  EXPECT_EQ(r.code, 0) << r.output;  // the binary's own runfiles tree, or next to it
}

TEST(TfExtGrad, MissingLibrary) {
  ToolRun r = RunCommand("tf_ext/tf_ext_grad --library=/nonexistent/lib.so");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("op library '/nonexistent/lib.so' not found"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace tensorflow::tf_ext
