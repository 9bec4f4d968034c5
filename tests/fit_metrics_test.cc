// The trainer's metrics (tf_ext/train/model/metrics.h) on their own: --metrics' names and Keras's keys,
// and each metric's state, update, result and reset run in a Session on the examples of Keras's
// docstrings (keras/src/metrics/*.py), unweighted and weighted, over one and two batches.
// tests/python/test_fit_metrics.py compares them with model.fit through tf_ext_train.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/graph/graph.h"
#include "tensorflow/core/graph/node_builder.h"
#include "tensorflow/core/public/session.h"
#include "tf_ext/train/model/metrics.h"

namespace tensorflow::tf_ext::train {
namespace {

std::vector<std::string> Keys(const std::vector<MetricSpec>& specs) {
  std::vector<std::string> keys;
  for (const MetricSpec& s : specs) keys.push_back(s.key);
  return keys;
}

TEST(ParseMetrics, KerasKeysInKerasOrder) {
  auto specs = ParseMetrics("accuracy, auc,weighted_mae,accuracy,weighted_auc,top_k_categorical_accuracy");
  ASSERT_TRUE(specs.ok()) << specs.status();
  // metrics first, then weighted_metrics; a repeat NAME_1; a weighted one whose name is taken
  // weighted_NAME, else NAME
  EXPECT_EQ(Keys(*specs), (std::vector<std::string>{"accuracy", "auc", "accuracy_1",
                                                    "top_k_categorical_accuracy", "mae",
                                                    "weighted_auc"}));
  EXPECT_FALSE((*specs)[0].weighted);
  EXPECT_TRUE((*specs)[4].weighted);
  EXPECT_EQ((*specs)[4].kind, MetricKind::kMeanAbsoluteError);
  auto none = ParseMetrics("");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(ParseMetrics, UnknownNameListsTheKnownOnes) {
  auto specs = ParseMetrics("accuracy,f1_score");
  ASSERT_FALSE(specs.ok());
  EXPECT_EQ(specs.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(specs.status().message());
  EXPECT_TRUE(absl::StrContains(message, "unknown metric 'f1_score'")) << message;
  for (const char* name : {"accuracy", "sparse_top_k_categorical_accuracy", "mae", "mse", "auc",
                           "precision", "recall", "weighted_NAME"}) {
    EXPECT_TRUE(absl::StrContains(message, name)) << message;
  }
}

// One metric in a Session: predictions [?, ...] as the signature declares them, float targets,
// optional per-example weights.
class MetricSession {
 public:
  MetricSession(const std::string& name, const PartialTensorShape& predictions_shape,
                const PartialTensorShape& targets_shape, bool weights) {
    auto specs = ParseMetrics(name);
    TF_CHECK_OK(specs.status());
    Graph g(OpRegistry::Global());
    auto placeholder = [&](const std::string& n) {
      Node* node = nullptr;
      TF_CHECK_OK(NodeBuilder(n, "Placeholder").Attr("dtype", DT_FLOAT).Finalize(&g, &node));
      return GraphTensor{node, 0};
    };
    GraphOps ops(&g, "m");
    TF_CHECK_OK(AddMetrics(&ops, *specs, placeholder("predictions"), predictions_shape,
                           placeholder("targets"), weights ? placeholder("weights") : GraphTensor{},
                           &nodes_));
    GraphDef def;
    g.ToGraphDef(&def);
    SessionOptions options;  // the trainer's Session is extended by the update as this one
    options.config.mutable_experimental()->set_disable_optimize_for_static_graph(true);
    session_.reset(NewSession(options));
    TF_CHECK_OK(session_->Create(def));
    auto update = MetricUpdateGraph(nodes_, targets_shape, &update_);
    TF_CHECK_OK(update.status());
    TF_CHECK_OK(session_->Extend(*update));
    Reset();
  }
  void Reset() { TF_CHECK_OK(session_->Run({}, {}, {nodes_.reset}, nullptr)); }
  void Update(const Tensor& targets, const Tensor& predictions, const Tensor& weights = Tensor()) {
    std::vector<std::pair<std::string, Tensor>> feeds = {{"predictions", predictions},
                                                         {"targets", targets}};
    if (!nodes_.weights.empty()) feeds.push_back({"weights", weights});
    TF_CHECK_OK(session_->Run(feeds, {}, {update_}, nullptr));
  }
  float Result() {
    std::vector<Tensor> out;
    TF_CHECK_OK(session_->Run({}, {nodes_.results[0] + ":0"}, {}, &out));
    return out[0].scalar<float>()();
  }

 private:
  MetricNodes nodes_;
  std::string update_;
  std::unique_ptr<Session> session_;
};

Tensor Matrix(std::vector<std::vector<float>> rows) {
  Tensor t(DT_FLOAT, TensorShape({static_cast<int64_t>(rows.size()),
                                  static_cast<int64_t>(rows[0].size())}));
  for (size_t i = 0; i < rows.size(); ++i) {
    for (size_t j = 0; j < rows[i].size(); ++j) t.matrix<float>()(i, j) = rows[i][j];
  }
  return t;
}

Tensor Vector(std::vector<float> values) {
  Tensor t(DT_FLOAT, TensorShape({static_cast<int64_t>(values.size())}));
  for (size_t i = 0; i < values.size(); ++i) t.vec<float>()(i) = values[i];
  return t;
}

PartialTensorShape Shape(std::vector<int64_t> dims) { return PartialTensorShape(dims); }

TEST(Metrics, BinaryAccuracy) {
  MetricSession m("binary_accuracy", Shape({-1, 1}), Shape({-1, 1}), false);
  m.Update(Matrix({{1}, {1}, {0}, {0}}), Matrix({{0.98f}, {1}, {0}, {0.6f}}));
  EXPECT_FLOAT_EQ(m.Result(), 0.75f);
  MetricSession w("weighted_binary_accuracy", Shape({-1, 1}), Shape({-1, 1}), true);
  w.Update(Matrix({{1}, {1}, {0}, {0}}), Matrix({{0.98f}, {1}, {0}, {0.6f}}), Vector({1, 0, 0, 1}));
  EXPECT_FLOAT_EQ(w.Result(), 0.5f);
}

TEST(Metrics, AccuracyIsResolvedByShapes) {
  // [?, 1] predictions: binary accuracy
  MetricSession binary("accuracy", Shape({-1, 1}), Shape({-1, 1}), false);
  binary.Update(Matrix({{1}, {1}, {0}, {0}}), Matrix({{0.98f}, {1}, {0}, {0.6f}}));
  EXPECT_FLOAT_EQ(binary.Result(), 0.75f);
  // class ids [?, 1] against [?, 3]: sparse categorical accuracy
  MetricSession sparse("accuracy", Shape({-1, 3}), Shape({-1, 1}), false);
  sparse.Update(Matrix({{2}, {1}}), Matrix({{0.1f, 0.6f, 0.3f}, {0.05f, 0.95f, 0}}));
  EXPECT_FLOAT_EQ(sparse.Result(), 0.5f);
  // one-hot [?, 3]: categorical accuracy
  MetricSession categorical("accuracy", Shape({-1, 3}), Shape({-1, 3}), false);
  categorical.Update(Matrix({{0, 0, 1}, {0, 1, 0}}), Matrix({{0.1f, 0.9f, 0.8f}, {0.05f, 0.95f, 0}}));
  EXPECT_FLOAT_EQ(categorical.Result(), 0.5f);
}

TEST(Metrics, CategoricalAccuracies) {
  MetricSession c("weighted_categorical_accuracy", Shape({-1, 3}), Shape({-1, 3}), true);
  c.Update(Matrix({{0, 0, 1}, {0, 1, 0}}), Matrix({{0.1f, 0.9f, 0.8f}, {0.05f, 0.95f, 0}}),
           Vector({0.7f, 0.3f}));
  EXPECT_FLOAT_EQ(c.Result(), 0.3f);
  MetricSession s("weighted_sparse_categorical_accuracy", Shape({-1, 3}), Shape({-1}), true);
  s.Update(Vector({2, 1}), Matrix({{0.1f, 0.6f, 0.3f}, {0.05f, 0.95f, 0}}), Vector({0.7f, 0.3f}));
  EXPECT_FLOAT_EQ(s.Result(), 0.3f);
}

TEST(Metrics, TopKIsTopFive) {
  const Tensor scores = Matrix({{0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f},
                                {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f}});
  MetricSession k("top_k_categorical_accuracy", Shape({-1, 7}), Shape({-1, 7}), false);
  Tensor one_hot = Matrix({{1, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 1}});
  k.Update(one_hot, scores);
  EXPECT_FLOAT_EQ(k.Result(), 0.5f);  // class 0 is 7th of 7, class 6 first
  MetricSession s("sparse_top_k_categorical_accuracy", Shape({-1, 7}), Shape({-1}), false);
  s.Update(Vector({0, 2}), scores);
  EXPECT_FLOAT_EQ(s.Result(), 0.5f);  // class 2 is 5th
}

TEST(Metrics, MeanErrorsAccumulateAndReset) {
  MetricSession mae("mae", Shape({-1, 2}), Shape({-1, 2}), false);
  mae.Update(Matrix({{0, 1}, {0, 0}}), Matrix({{1, 1}, {1, 0}}));
  EXPECT_FLOAT_EQ(mae.Result(), 0.5f);
  mae.Update(Matrix({{0, 0}}), Matrix({{3, 3}}));  // (0.5 + 0.5 + 3) / 3 examples
  EXPECT_FLOAT_EQ(mae.Result(), 4.0f / 3);
  mae.Reset();
  EXPECT_FLOAT_EQ(mae.Result(), 0.0f);
  MetricSession mse("weighted_mse", Shape({-1, 2}), Shape({-1, 2}), true);
  mse.Update(Matrix({{0, 1}, {0, 0}}), Matrix({{1, 1}, {1, 0}}), Vector({1, 0}));
  EXPECT_FLOAT_EQ(mse.Result(), 0.5f);
  mse.Update(Matrix({{0, 1}, {0, 0}}), Matrix({{1, 1}, {1, 0}}), Vector({0, 2}));
  EXPECT_FLOAT_EQ(mse.Result(), (0.5f + 2 * 0.5f) / 3);
}

TEST(Metrics, PrecisionAndRecall) {
  for (const char* name : {"precision", "recall"}) {
    MetricSession m(name, Shape({-1}), Shape({-1}), false);
    m.Update(Vector({0, 1, 1, 1}), Vector({1, 0, 1, 1}));
    EXPECT_FLOAT_EQ(m.Result(), 2.0f / 3) << name;
    MetricSession w(std::string("weighted_") + name, Shape({-1}), Shape({-1}), true);
    w.Update(Vector({0, 1, 1, 1}), Vector({1, 0, 1, 1}), Vector({0, 0, 1, 0}));
    EXPECT_FLOAT_EQ(w.Result(), 1.0f) << name;
  }
}

TEST(Metrics, AucHas200Thresholds) {
  // Keras 3.15.1's AUC() on the same batches
  MetricSession m("auc", Shape({-1}), Shape({-1}), false);
  m.Update(Vector({0, 0, 1, 1}), Vector({0, 0.5f, 0.3f, 0.9f}));
  EXPECT_FLOAT_EQ(m.Result(), 0.75f);
  m.Update(Vector({1, 0, 1}), Vector({0.2f, 0.7f, 0.65f}));
  EXPECT_FLOAT_EQ(m.Result(), 0.5833333134651184f);
  MetricSession w("weighted_auc", Shape({-1}), Shape({-1}), true);
  w.Update(Vector({0, 0, 1, 1}), Vector({0, 0.5f, 0.3f, 0.9f}), Vector({1, 2, 0.5f, 1}));
  EXPECT_FLOAT_EQ(w.Result(), 0.7777777910232544f);
}

}  // namespace
}  // namespace tensorflow::tf_ext::train
