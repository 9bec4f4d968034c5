// Keras 3's compiled metrics (model.compile(metrics=[...], weighted_metrics=[...])) in the
// trainer's step graph, with the formulas of keras/src/metrics/ and Keras's stateful semantics:
// each metric keeps float32 state variables (a Mean's total and count, Precision's true and false
// positives, AUC's four confusion counts at 200 thresholds), a batch's update adds to them, the
// result reads them, a reset zeroes them. The state is the trainer's own (never trainable, never
// in a checkpoint or an export).
//
// As Keras, the metrics see the model's output as it is (probabilities, or logits with a
// from_logits loss: binary_accuracy, precision and recall then threshold logits at 0.5, as
// Keras's do) and the targets as fed. "accuracy" (or "acc") becomes binary, sparse categorical or
// categorical accuracy by the output's and the targets' shapes, as compile_utils.get_metric
// decides; the update is therefore built for the targets' shape of the first batch
// (MetricUpdateGraph). Listed metrics are unweighted, as Keras's `metrics=`; "weighted_NAME" is
// NAME among Keras's `weighted_metrics=`, weighted by the per-example weights.
// tests/python/test_fit_metrics.py compares every metric with model.fit's history and batch logs.
#ifndef TF_EXT_TRAIN_MODEL_METRICS_H_
#define TF_EXT_TRAIN_MODEL_METRICS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/partial_tensor_shape.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tf_ext/train/model/graph_ops.h"

namespace tensorflow::tf_ext::train {

enum class MetricKind {
  kAccuracy,  // resolved to one of the next three by the shapes
  kBinaryAccuracy,
  kCategoricalAccuracy,
  kSparseCategoricalAccuracy,
  kTopKCategoricalAccuracy,        // k = 5, one-hot targets
  kSparseTopKCategoricalAccuracy,  // k = 5, class ids
  kMeanAbsoluteError,
  kMeanSquaredError,
  kAuc,        // ROC, 200 thresholds, interpolation
  kPrecision,  // threshold 0.5
  kRecall,     // threshold 0.5
};

struct MetricSpec {
  std::string name;  // Keras's identifier, as listed (without "weighted_")
  MetricKind kind = MetricKind::kAccuracy;
  bool weighted = false;  // one of Keras's weighted_metrics
  std::string key;        // its key in Keras's logs and history
};

// Comma-separated names: accuracy, acc, binary_accuracy, categorical_accuracy,
// sparse_categorical_accuracy, top_k_categorical_accuracy, sparse_top_k_categorical_accuracy,
// mae (mean_absolute_error), mse (mean_squared_error), auc, precision, recall, each optionally
// "weighted_NAME". In Keras's order (the unweighted ones, then the weighted ones, each as
// listed), keyed as Keras keys them: the name; a repeated name NAME_1, NAME_2, ...; a weighted
// one whose name is taken, weighted_NAME. InvalidArgument naming the known names otherwise.
absl::StatusOr<std::vector<MetricSpec>> ParseMetrics(const std::string& text);

// A Trainer's metrics in its Session's graph, by node name (each an op's output 0).
struct MetricNodes {
  std::vector<MetricSpec> specs;
  std::string predictions;  // the model's output, as the metrics see it
  DataType predictions_type = DT_FLOAT;
  PartialTensorShape predictions_shape;  // the signature's (Keras decides by static shapes)
  std::string targets, weights;          // placeholders; weights empty: none
  DataType targets_type = DT_FLOAT, weights_type = DT_FLOAT;
  std::vector<std::vector<std::string>> state;  // each metric's variables (float32 handles)
  std::vector<std::string> results;             // each metric's value, a float32 scalar
  std::string reset;                            // zeroes every state variable
};

// Adds the metrics' state variables, results and reset op; `predictions` is the output the
// loss reads, `weights` null when there are none. The update comes with the first batch.
absl::Status AddMetrics(GraphOps* ops, const std::vector<MetricSpec>& specs, GraphTensor predictions,
                        const PartialTensorShape& predictions_shape, GraphTensor targets,
                        GraphTensor weights, MetricNodes* nodes);

// The update of every metric's state from a batch whose targets have `targets_shape` (its first
// dimension is the batch's, free): a GraphDef whose nodes read `nodes`' by name, to extend the
// Session's graph with, and the name of the NoOp that runs every update.
// With `sum_over_workers` (a cluster: Distributed::AllReduceSum), every state increment passes
// through it before it is added, so each worker's state is the global batch's, as Keras's
// SUM-aggregated metric variables read under a strategy.
using StateReducer = std::function<absl::Status(Graph* g, std::vector<GraphTensor>* increments)>;
absl::StatusOr<GraphDef> MetricUpdateGraph(const MetricNodes& nodes,
                                           const PartialTensorShape& targets_shape,
                                           std::string* update,
                                           const StateReducer& sum_over_workers = nullptr);

}  // namespace tensorflow::tf_ext::train

#endif  // TF_EXT_TRAIN_MODEL_METRICS_H_
