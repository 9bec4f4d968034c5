// ExportGradientSavedModel (tf_ext/graph/runtime/export.h) through the library API: the export of
// y = tanh(x w + b) loads with TensorFlow's LoadSavedModel and gives the gradients the library
// computed; weights held as constants or fed by the run (GradientResult::constant_feeds) both
// become variables; what cannot be exported is refused with nothing left on disk.
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensorflow/cc/saved_model/loader.h"
#include "tensorflow/core/platform/env.h"
#include "tensorflow/core/platform/path.h"
#include "tensorflow/core/platform/protobuf.h"
#include "tensorflow/core/protobuf/saved_model.pb.h"
#include "tests/test_util.h"
#include "tf_ext/graph/runtime/export.h"
#include "tf_ext/graph/runtime/graph_gradients.h"

namespace tensorflow::tf_ext {
namespace {

std::string TempDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return io::JoinPath(tmp != nullptr ? tmp : "/tmp", name);
}

Tensor Values(TensorShape shape, float scale) {
  Tensor t(DT_FLOAT, shape);
  auto flat = t.flat<float>();
  for (int64_t i = 0; i < flat.size(); ++i) flat(i) = scale * ((i * 37 % 23) - 11) / 11.0f;
  return t;
}

// y = tanh(x w + b): x [2,8] fed, w [8,4] and b [4] constants (32 and 4 elements).
GradientRequest Request() {
  GradientRequest request;
  GraphDef& g = request.graph;
  CHECK(protobuf::TextFormat::ParseFromString(R"pb(
    node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 2 } dim { size: 8 } } } } }
    node { name: "w" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } } }
    node { name: "b" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } } }
    node { name: "xw" op: "MatMul" input: "x" input: "w" attr { key: "T" value { type: DT_FLOAT } } }
    node { name: "z" op: "AddV2" input: "xw" input: "b" attr { key: "T" value { type: DT_FLOAT } } }
    node { name: "y" op: "Tanh" input: "z" attr { key: "T" value { type: DT_FLOAT } } }
  )pb", &g));
  Values(TensorShape({8, 4}), 0.5f).AsProtoTensorContent(
      (*g.mutable_node(1)->mutable_attr())["value"].mutable_tensor());
  Values(TensorShape({4}), 0.3f).AsProtoTensorContent(
      (*g.mutable_node(2)->mutable_attr())["value"].mutable_tensor());
  request.y = {"y"};
  request.xs = {{"x"}, {"w"}};
  request.feeds.push_back({{"x"}, Values(TensorShape({2, 8}), 1.0f)});
  return request;
}

GradientResult Compute(GradientRequest* request, bool inline_gradients = true) {
  GradientOptions options;
  options.keep_backward_graph = true;
  options.inline_gradients = inline_gradients;
  GradientResult result;
  TF_CHECK_OK(ComputeGraphGradients(request, &result, options));
  return result;
}

void ExpectNear(const Tensor& got, const Tensor& want, float tolerance) {
  ASSERT_EQ(got.dtype(), DT_FLOAT);
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_GT(want.NumElements(), 0);
  for (int64_t i = 0; i < want.NumElements(); ++i) {
    EXPECT_NEAR(got.flat<float>()(i), want.flat<float>()(i), tolerance) << "element " << i;
  }
}

// Runs the export's "gradients" signature; outputs by key.
std::map<std::string, Tensor> RunExport(const std::string& dir, const Tensor& x) {
  SavedModelBundle bundle;
  TF_CHECK_OK(LoadSavedModel(SessionOptions(), RunOptions(), dir, {"serve"}, &bundle));
  const SignatureDef& sig = bundle.meta_graph_def.signature_def().at(kGradientsSignatureKey);
  std::vector<std::string> keys, names;
  for (const auto& [key, info] : sig.outputs()) {
    keys.push_back(key);
    names.push_back(info.name());
  }
  std::vector<Tensor> outs;
  TF_CHECK_OK(bundle.GetSession()->Run({{sig.inputs().at("x").name(), x}}, names, {}, &outs));
  std::map<std::string, Tensor> by_key;
  for (size_t i = 0; i < keys.size(); ++i) by_key[keys[i]] = outs[i];
  return by_key;
}

int CountOps(const std::string& dir, const std::string& op) {
  SavedModel saved_model;
  TF_CHECK_OK(ReadBinaryProto(Env::Default(), io::JoinPath(dir, "saved_model.pb"), &saved_model));
  int n = 0;
  for (const NodeDef& node : saved_model.meta_graphs(0).graph_def().node()) n += node.op() == op;
  return n;
}

TEST(ExportTest, LoadsAndGivesTheLibrarysGradients) {
  GradientRequest request = Request();
  GradientResult result = Compute(&request);
  const std::string dir = TempDir("export_round_trip");
  ExportOptions options;
  options.min_variable_elements = 4;  // w and b
  ExportStats stats;
  TF_EXT_ASSERT_OK(ExportGradientSavedModel(dir, request, &result, options, &stats));
  EXPECT_EQ(stats.variables, 2);
  EXPECT_EQ(stats.variable_bytes, (32 + 4) * 4);
  EXPECT_EQ(stats.input_keys, std::vector<std::string>({"x"}));
  EXPECT_EQ(stats.output_keys, std::vector<std::string>({"y", "d_x", "d_w"}));
  EXPECT_TRUE(stats.tf_ext_ops.empty());
  EXPECT_EQ(CountOps(dir, "VarHandleOp"), 2);
  auto out = RunExport(dir, request.feeds[0].second);
  ExpectNear(out.at("y"), result.y, 1e-6);
  ExpectNear(out.at("d_x"), result.grads[0], 1e-6);
  ExpectNear(out.at("d_w"), result.grads[1], 1e-6);
}

TEST(ExportTest, TheDefaultThresholdKeepsSmallConstants) {
  GradientRequest request = Request();
  GradientResult result = Compute(&request);
  const std::string dir = TempDir("export_default_threshold");
  ExportStats stats;
  TF_EXT_ASSERT_OK(ExportGradientSavedModel(dir, request, &result, {}, &stats));
  EXPECT_EQ(stats.variables, 1);  // w (32 elements); b (4) stays a Const
  EXPECT_EQ(CountOps(dir, "VarHandleOp"), 1);
  auto out = RunExport(dir, request.feeds[0].second);
  ExpectNear(out.at("d_w"), result.grads[1], 1e-6);
}

TEST(ExportTest, ConstantsTheRunFedBecomeVariables) {
  // GradientResult::constant_feeds: a weight the Session got as a feed of a Placeholder.
  GradientRequest request = Request();
  GradientResult result = Compute(&request);
  for (NodeDef& n : *result.backward_graph.mutable_node()) {
    if (n.name() != "w") continue;
    Tensor value;
    ASSERT_TRUE(value.FromProto(n.attr().at("value").tensor()));
    n.set_op("Placeholder");
    n.clear_attr();
    (*n.mutable_attr())["dtype"].set_type(DT_FLOAT);
    result.constant_feeds.push_back({"w:0", value});
  }
  const std::string dir = TempDir("export_fed_constants");
  ExportStats stats;
  TF_EXT_ASSERT_OK(ExportGradientSavedModel(dir, request, &result, {}, &stats));
  EXPECT_EQ(stats.variables, 1);
  EXPECT_EQ(CountOps(dir, "Placeholder"), 2);  // x and the saver's filename only
  auto out = RunExport(dir, request.feeds[0].second);
  ExpectNear(out.at("d_x"), result.grads[0], 1e-6);
  ExpectNear(out.at("d_w"), result.grads[1], 1e-6);
}

void ExpectNothingWritten(const std::string& parent) {
  std::vector<std::string> children;
  TF_EXT_ASSERT_OK(Env::Default()->GetChildren(parent, &children));
  EXPECT_TRUE(children.empty()) << absl::StrJoin(children, ", ");
}

TEST(ExportTest, SymbolicGradientNodesAreRefusedAndNothingIsLeft) {
  GradientRequest request = Request();
  GradientResult result = Compute(&request, /*inline_gradients=*/false);
  const std::string parent = TempDir("export_symbolic");
  TF_EXT_ASSERT_OK(Env::Default()->RecursivelyCreateDir(parent));
  const absl::Status s =
      ExportGradientSavedModel(io::JoinPath(parent, "model"), request, &result);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("SymbolicGradient"), std::string::npos) << s;
  ExpectNothingWritten(parent);  // neither the export nor its partial copy
}

TEST(ExportTest, WithoutTheBackwardGraphOrIntoANonEmptyDirectoryItIsRefused) {
  GradientRequest request = Request();
  GradientResult computed_without;
  TF_EXT_ASSERT_OK(ComputeGraphGradients(&request, &computed_without));  // keep_backward_graph off
  const std::string parent = TempDir("export_refused");
  TF_EXT_ASSERT_OK(Env::Default()->RecursivelyCreateDir(parent));
  absl::Status s = ExportGradientSavedModel(io::JoinPath(parent, "model"), request,
                                            &computed_without);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("keep_backward_graph"), std::string::npos) << s;
  ExpectNothingWritten(parent);

  request = Request();
  GradientResult result = Compute(&request);
  const std::string dir = io::JoinPath(parent, "model");
  TF_EXT_ASSERT_OK(Env::Default()->CreateDir(dir));
  TF_EXT_ASSERT_OK(WriteStringToFile(Env::Default(), io::JoinPath(dir, "mine"), "keep"));
  s = ExportGradientSavedModel(dir, request, &result);
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
  std::vector<std::string> children;
  TF_EXT_ASSERT_OK(Env::Default()->GetChildren(dir, &children));
  EXPECT_EQ(children, std::vector<std::string>({"mine"}));
}

}  // namespace
}  // namespace tensorflow::tf_ext
