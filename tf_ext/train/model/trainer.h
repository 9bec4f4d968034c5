// Training a SavedModel with no Python: tf_ext::Trainer.
//
// Create() loads the SavedModel with the library's loader (tf_ext/graph/runtime/saved_model.h: TensorFlow's
// LoadSavedModel, whose Session holds the restored variables), takes a signature's function
// (by default "train", the training-mode function tf_ext.export_for_training adds, when there is
// one; else "serving_default", the inference function of Keras 3's model.export or of
// tf.saved_model.save, which is all a model without BatchNorm or dropout needs: with
// BatchNorm, warnings() says so), finds its
// trainable variables from the SavedModel's object graph, and adds one step graph to the
// loader's Session: the forward (function calls inlined; the variables read once per step), the
// loss (losses.h), the gradients of the loss with respect to the values read (a SymbolicGradient
// cannot return a float gradient for a resource; summed over every read of a variable), the
// optimizer's updates of the variables themselves (optimizers.h) and, when metrics are asked
// for, their state and updates (metrics.h). Step() is one Session::Run.
//
// A loop whose body reads trainable variables (a Keras LSTM), or a conditional whose branches
// read them (tf.cond), takes their values, read before the node (tf_ext/graph/passes/loop_variables.h). A variable only gathered by rows (a read whose uses are
// GatherV2 on axis 0 and shapes, as Keras 3's Embedding; or ResourceGather) gets a sparse
// gradient: the gathered rows' gradient at their ids (optimizers.h's Gradient), never a
// [vocab, ...] tensor. Variables used otherwise (assigned in a branch, passed on to another
// function) are not trainable yet: Create refuses them, naming the variable.
#ifndef TF_EXT_TRAIN_MODEL_TRAINER_H_
#define TF_EXT_TRAIN_MODEL_TRAINER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tensorflow/cc/saved_model/loader.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.pb.h"
#include "tensorflow/core/graph/graph.h"
#include "tensorflow/core/protobuf/config.pb.h"
#include "tf_ext/graph/passes/rematerialize.h"
#include "tf_ext/train/distribute/distributed.h"
#include "tf_ext/train/model/losses.h"
#include "tf_ext/train/model/metrics.h"
#include "tf_ext/train/model/optimizers.h"
#include "tf_ext/train/options/options.h"

namespace tensorflow::tf_ext {

struct PipelineOptions;  // graph/pipeline/gradient_pipeline.h
struct OptimizedRunSpec;  // graph/runtime/grappler_stages.h
namespace train {
struct StepModel;  // what Trainer::Create's phases share (trainer.cc)
}  // namespace train

class Trainer {
 public:
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const std::string& export_dir,
                                                         const TrainerOptions& options);
  ~Trainer();

  // One step on a batch: the signature's inputs by key, the targets (ignored by the "output"
  // loss; may be an empty Tensor then) and, with sample_weights, one weight per example.
  // Returns the batch's loss before the update (as Keras's train_step).
  // With `trace`, the step runs traced (RunOptions FULL_TRACE) and its RunMetadata, with every
  // node's output shapes in step_stats, is written there.
  absl::StatusOr<double> Step(const std::vector<std::pair<std::string, Tensor>>& inputs,
                              const Tensor& targets, const Tensor& weights = Tensor(),
                              RunMetadata* trace = nullptr);

  // The loss on a batch without training (a validation batch), updating the metrics' state and
  // no variable. When the trained function runs in training mode and the SavedModel's
  // "serving_default" signature is its inference function (tf_ext.export_for_training's), that
  // function is evaluated, as Keras's model.evaluate and model.fit's validation run the model
  // with training=False: BatchNormalization on its moving statistics, no dropout.
  absl::StatusOr<double> Evaluate(const std::vector<std::pair<std::string, Tensor>>& inputs,
                                  const Tensor& targets, const Tensor& weights = Tensor());
  // The signature Evaluate runs and whether it runs in training mode.
  const std::string& evaluation_signature_key() const {
    return eval_.has_value() ? eval_->signature_key : signature_key_;
  }
  bool evaluation_training_mode() const { return !eval_.has_value() && training_mode_; }

  // The trainable variables' current values, by the object graph's names, in the order found.
  absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> TrainableValues();
  // An object-based checkpoint (checkpoint.h): the SavedModel's variables under "root" (so
  // tf.train.Checkpoint(root=tf.saved_model.load(dir)).restore(prefix) works in Python) and the
  // optimizer's state. Restore sets both, so training resumes as if uninterrupted.
  absl::Status SaveCheckpoint(const std::string& prefix);
  absl::Status RestoreCheckpoint(const std::string& prefix);

  // Every variable the signature's function captures (trainable or not: BatchNormalization's
  // moving statistics too), by the object graph's names.
  absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> VariableValues();
  absl::StatusOr<int64_t> Iterations();

  // Writes the SavedModel as loaded (same graph, signatures and endpoints, assets) with the
  // variables' current values, by the SavedModel's own saver, so tf.saved_model.load and every
  // SavedModel loader read it. `dir` must not exist or be empty; the export is written beside it
  // and renamed into place, so a failed export leaves nothing.
  absl::Status Export(const std::string& dir);
  const std::vector<std::string>& input_keys() const { return input_keys_; }
  // A signature input's dtype and shape (the shape's first dimension is the batch's).
  absl::StatusOr<std::pair<DataType, PartialTensorShape>> InputSpec(const std::string& key) const;
  // The signature's inputs as "name: dtype [shape]", comma-separated (for messages).
  std::string InputsText() const;
  // The signature input each feed name goes to: the input of that name; with one input, any
  // single name that was not named as an input (`named[i]` false: a data key fed to "the"
  // input). InvalidArgument listing the inputs (dtypes, shapes) otherwise, or when an input is
  // fed twice or not at all.
  absl::StatusOr<std::vector<std::string>> ResolveInputs(const std::vector<std::string>& names,
                                                         const std::vector<bool>& named = {}) const;

  // The signature trained (options' or the default), and whether its function runs in
  // training mode (it updates variables, as BatchNormalization's moving statistics, or draws
  // random numbers, as dropout): what a front end reports before training.
  const std::string& signature_key() const { return signature_key_; }
  bool training_mode() const { return training_mode_; }
  // What the user should know before training: BatchNormalization run in inference mode.
  const std::vector<std::string>& warnings() const { return warnings_; }
  const std::vector<std::string>& trainable_names() const { return trainable_names_; }
  // With a memory budget: the step's estimated peak (forward, loss and backward above the
  // variables and feeds: a variable's read shares its buffer) and what the backward pass
  // recomputes to meet it; null without one.
  const MemoryPlan* memory_plan() const {
    return memory_plan_.has_value() ? &*memory_plan_ : nullptr;
  }

  // The metrics (TrainerOptions::metrics, Keras's names: metrics.h), computed in the step graph:
  // Step (from the batch's predictions before the update, as Keras's train_step) and Evaluate
  // update each metric's state (its running value over the batches since the last ResetMetrics,
  // as Keras's stateful metrics), MetricValues reads them in metric_names' order (Keras's keys).
  // The update is built on the first batch, for its targets' shape ("accuracy" is resolved by
  // it, as Keras does); a later batch whose targets have another shape is refused. With no
  // metrics the step graph has no metric node.
  const std::vector<std::string>& metric_names() const { return metric_names_; }
  absl::StatusOr<std::vector<double>> MetricValues();
  absl::Status ResetMetrics();

  // The SavedModel's variables alone (no optimizer state), written at `prefix` by its own saver
  // and read back by its restore function: what restoring the best epoch's weights sets.
  absl::Status SaveModelVariables(const std::string& prefix);
  absl::Status RestoreModelVariables(const std::string& prefix);

  // With jit_compile: the nodes of the step's XLA cluster (0 before the first step) and the
  // seconds XLA has spent compiling it (once per batch shape).
  int xla_cluster_nodes() const { return jit_.nodes; }
  double xla_compile_seconds() const { return jit_.compile_seconds; }
  // The batch shapes the step was compiled for ("[8,8,8,2]", ...), at most jit_compile_cache,
  // and those that ran without XLA past them.
  const std::vector<std::string>& xla_compiled_shapes() const { return jit_.shapes; }
  const std::vector<std::string>& xla_uncompiled_shapes() const { return jit_.uncompiled; }

  // With a cluster (TrainerOptions::distributed or TF_CONFIG): this worker's part, else null.
  // Create checks that every worker loaded the same model with the same batch size and cluster,
  // and sets every variable to the chief's; Step's gradients and loss are the workers' means.
  const train::Distributed* distributed() const { return distributed_.get(); }
  // The intra-op threads of the CPU device the training step's kernels run on, read from the
  // device (TrainerOptions::threads when set).
  int kernel_threads() const { return kernel_threads_; }
  // Sets every variable and the optimizer's state to the chief's, and returns the chief's
  // `value` (a resumed run's epoch); without a cluster, returns `value`.
  absl::StatusOr<int64_t> BroadcastFromChief(int64_t value);
  // Whether every worker `has` (its next batch: shard_by=files), by a collective every worker
  // runs as often; without a cluster, `has`.
  absl::StatusOr<bool> AllWorkersHave(bool has);

 private:
  Trainer() = default;
  absl::StatusOr<double> Run(const std::vector<std::pair<std::string, Tensor>>& inputs,
                             const Tensor& targets, const Tensor& weights, bool train,
                             RunMetadata* trace = nullptr);
  SavedModelBundle bundle_;
  std::string export_dir_;  // the SavedModel trained
  // Assignments the loaded graph makes of other variables from captured ones (Keras 3's export
  // tracks each variable twice, the second set initialized from the first): rerun before saving.
  std::vector<std::string> sync_ops_;
  // The optimizer's state: names, reads, and placeholder -> assign pairs to restore it.
  std::vector<std::string> state_names_, state_reads_, state_feeds_, state_assigns_;
  std::vector<std::string> input_keys_;
  std::map<std::string, std::string> input_specs_;  // key -> "dtype [shape]"
  std::map<std::string, std::pair<DataType, PartialTensorShape>> input_types_;
  std::vector<std::string> metric_names_;
  // The metrics' state, results and reset (metrics.h); their update, once the first batch's
  // targets give its shape.
  train::MetricNodes metrics_;
  std::string metric_update_;
  // With a cluster: metric_update_ adds the increments summed over the workers; this one, this
  // worker's own (Evaluate's, when no inference function is evaluated).
  std::string metric_update_local_;
  PartialTensorShape metric_targets_shape_;
  // `inference`: Evaluate's update, from the inference forward's output.
  absl::Status AddMetricUpdate(const Tensor& targets, bool inference);
  // What Evaluate runs when the trained function runs in training mode and the SavedModel's
  // "serving_default" signature is its inference function (the same inputs, the output the loss
  // reads, no variable updated, no random number drawn): that forward, renamed apart, on the same
  // variables, with its own feeds, loss and metric update into the same metric state.
  struct EvalNodes {
    std::string signature_key;
    std::map<std::string, std::string> inputs;  // key -> placeholder
    std::string targets, weights, loss;
    train::MetricNodes metrics;  // metrics_ but for the predictions, targets and weights read
    std::string metric_update;
  };
  std::optional<EvalNodes> eval_;
  absl::Status AddEvaluation(const TrainerOptions& options, const std::string& output_key);
  // The backward pipeline's options for options.memory_budget: the feeds' shapes at the batch
  // size, the budget, and the nodes that read variables kept.
  absl::Status BudgetOptions(const TrainerOptions& options, const Graph& g,
                             PipelineOptions* out) const;
  // Create's phases, in order (trainer.cc): the SavedModel loaded (with a cluster, agreed on),
  // the forward's mode noted, feeds, loss and metrics added, the workers' gradients averaged,
  // the state's reads and restores added, the step added to the session.
  absl::Status LoadModel(const std::string& export_dir, const TrainerOptions& options);
  void NoteTrainingMode(const train::StepModel& m);
  absl::Status AddFeedsLossAndMetrics(const TrainerOptions& options,
                                      const std::vector<train::MetricSpec>& metric_specs,
                                      train::StepModel* m);
  absl::Status AllReduceGradients(train::StepModel* m,
                                  const std::vector<train::TrainableVariable>& variables,
                                  std::vector<train::Gradient>* grads, GraphTensor* step_loss);
  absl::Status AddStateIO(const train::OptimizerGraph& opt, train::StepModel* m);
  absl::Status ExtendSession(const TrainerOptions& options, const train::OptimizerGraph& opt,
                             OptimizedRunSpec* step_run, train::StepModel* m);
  std::string signature_key_;
  bool training_mode_ = false;
  std::vector<std::string> warnings_;
  std::optional<MemoryPlan> memory_plan_;
  // The Session's configuration before a budget made it run Grappler's remapper alone: the
  // one the graphs added to it are optimized with first (runtime/grappler_stages.h).
  ConfigProto stage1_config_;
  std::map<std::string, std::string> input_tensors_;  // key -> the step graph's placeholder
  std::string targets_tensor_, weights_tensor_, loss_tensor_, step_op_;
  std::vector<std::string> trainable_names_, trainable_reads_;
  std::vector<std::string> variable_names_, variable_reads_;
  bool has_targets_ = true;
  // The output's static shape and whether the loss takes class ids: MatchTargetsRank.
  PartialTensorShape output_shape_;
  bool sparse_targets_ = false;
  // `targets` reshaped to the rank Keras's losses bring them to (a trailing 1 added or removed).
  Tensor MatchTargetsRank(const Tensor& targets) const;
  bool sample_weights_ = false;
  std::unique_ptr<train::Distributed> distributed_;
  train::Distributed::Broadcast broadcast_;
  std::string step_loss_tensor_;  // Step's loss: the workers' mean with a cluster
  int kernel_threads_ = 0;
  // jit_compile: the graphs the step runs (the step's, then the metrics' update), from which
  // the first step builds the XLA cluster it then runs (loss fetched, target run instead).
  struct JitStep {
    bool enabled = false;
    GraphDef graph;
    std::string loss, target;
    int nodes = 0;
    double compile_seconds = 0;
    int64_t cache = 0;
    std::vector<std::string> shapes, uncompiled;
  } jit_;
  // Whether a training step fed `inputs` runs the step's XLA cluster (noting its batch shape).
  bool JitRuns(const std::vector<std::pair<std::string, Tensor>>& inputs);
  absl::Status BuildStepCluster();
};

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_TRAIN_MODEL_TRAINER_H_
