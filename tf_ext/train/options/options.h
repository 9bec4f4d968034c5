// The trainer's options as plain structs (TrainerOptions, the FitOptions, specs and
// distribution options it holds) and their checks, the room every other part of tf_ext/train/
// builds on. Each is declared once (options.cc's table): that table is what
// TfExtNewTrainer's (key, value) pairs are looked up in, what tf_ext_train declares as flags
// (parsing and --help), and what docs/training.md's flag table is checked against
// (tests/python/test_train.py). A key is the flag's name without "--".
//
// Adding an option: a field in TrainerOptions (or the spec it holds), whose initial value is the
// default, and one Field(...) line in options.cc naming it, with its value's name and help.
// Its type (string, double, int64_t, bool) chooses the parser.
#ifndef TF_EXT_TRAIN_OPTIONS_OPTIONS_H_
#define TF_EXT_TRAIN_OPTIONS_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tf_ext/graph/passes/rematerialize.h"

namespace tensorflow::tf_ext::train {

enum class LossKind {
  kMeanSquaredError,
  kMeanAbsoluteError,
  kBinaryCrossentropy,
  kCategoricalCrossentropy,
  kSparseCategoricalCrossentropy,
  kModelOutput,  // the model's output is the per-example (or scalar) loss itself
};

struct LossSpec {
  LossKind kind = LossKind::kMeanSquaredError;
  bool from_logits = false;
};

// "mse" (or "mean_squared_error"), "mae", "binary_crossentropy", "categorical_crossentropy",
// "sparse_categorical_crossentropy", each optionally ":from_logits"; "output". InvalidArgument
// naming the text otherwise.
absl::StatusOr<LossSpec> ParseLoss(const std::string& text);

struct OptimizerSpec {
  std::string name = "sgd";  // sgd, adam, adamw, rmsprop, adagrad
  double learning_rate = -1;  // < 0: Keras's default for the optimizer
  double momentum = 0;        // sgd, rmsprop
  bool nesterov = false;      // sgd
  double beta_1 = 0.9, beta_2 = 0.999;
  double epsilon = 1e-7;
  double weight_decay = -1;   // adamw (< 0: Keras's 0.004)
  double rho = 0.9;           // rmsprop
  bool centered = false;      // rmsprop
  double initial_accumulator_value = 0.1;  // adagrad
  // Gradient clipping before the update, as Keras: each gradient to norm at most clipnorm, or
  // all together to global norm at most global_clipnorm (<= 0: none; not both).
  double clipnorm = 0;
  double global_clipnorm = 0;
  // Learning-rate schedule: "constant", "exponential" (lr * decay_rate^(step / decay_steps)) or
  // "cosine" (lr * (0.5 (1 + cos(pi min(step, decay_steps) / decay_steps)))).
  std::string schedule = "constant";
  double decay_rate = 0;
  int64_t decay_steps = 0;
};

// InvalidArgument naming the value for an unknown optimizer or schedule, or values Keras refuses.
absl::Status ValidateOptimizer(const OptimizerSpec& spec);

// The options train/options/options.cc's table declares (TrainerOptions::distributed).
struct DistributedOptions {
  std::string cluster;        // host:port,...: the workers, task 0 the chief; empty: TF_CONFIG
  int64_t task_index = -1;    // this process's task in `cluster`
  double collective_timeout = 60;  // seconds any wait on a peer may take
  std::string communication_hint = "auto";  // CollectiveReduceV2's: auto, ring, nccl
  // "batch": each worker its slice of every global batch; "files": each worker whole TFRecord
  // files (i, i + N, ... of the sorted list), batch_size / N examples a step
  std::string shard_by = "batch";
  // The address this task's server listens on; empty: the task's own in the cluster (its
  // host); 0.0.0.0 or ::, every interface (TensorFlow's server alone always listens so).
  std::string listen_address;
};

}  // namespace tensorflow::tf_ext::train

namespace tensorflow::tf_ext {

// What train::Fit (fit.h) reads, trains on and writes: tf_ext_train's flags, the C API's keys.
struct FitOptions {
  std::string data, validation;  // an .npz, or TFRecord files (a list or glob)
  std::string inputs;            // KEY[:INPUT],...
  std::string targets, sample_weights;  // the data's keys; empty: none
  std::string features;          // NAME:DTYPE:SHAPE,... (TFRecord features' dtypes and shapes)
  std::string compression;       // TFRecord: "", GZIP, ZLIB
  int64_t batch_size = 32;
  int64_t epochs = 1;
  bool shuffle = false;          // .npz: a seeded permutation each epoch
  int64_t shuffle_buffer = 0;    // TFRecord: a seeded shuffle buffer of this many examples
  int64_t seed = 0;
  bool drop_remainder = false;
  // TFRecord: a file truncated inside a record or with a record failing its CRC is read up to
  // that record, with a warning, instead of stopping training with an error.
  bool skip_corrupt_records = false;
  std::string history;           // per-step CSV; its .epochs.csv beside it
  std::string tensorboard;       // a log directory, laid out as Keras's TensorBoard callback's
  std::string update_freq = "epoch";  // epoch, batch or N steps
  std::string checkpoint;        // DIR/NAME: DIR/NAME-<epoch> after each epoch
  int64_t keep_checkpoints = 1;
  std::string resume;            // a checkpoint prefix, or auto: the latest in --checkpoint's DIR
  std::string early_stopping;    // MONITOR:PATIENCE[:MIN_DELTA]
  bool restore_best_weights = false;
  std::string save_best;         // MONITOR: DIR/NAME-best holds the best epoch's checkpoint
  std::string save_weights;      // an .npz of the variables after training
  std::string export_dir;        // the trained SavedModel
  std::string step_stats;        // the first step's RunMetadata
};

// The fields tf_ext_train's flags and the C API's keys set are declared in train/options/options.h's
// table (their initial values here are the defaults).
struct TrainerOptions {
  // Empty: "train" when the SavedModel has that signature (tf_ext.export_for_training's
  // training-mode function), else "serving_default".
  std::string signature_key;
  std::string output_key;  // the signature output the loss reads; empty: its only output
  train::LossSpec loss;
  train::OptimizerSpec optimizer;
  bool sample_weights = false;  // each step feeds per-example weights
  // Keras's metric names, comma-separated (accuracy, mae, auc, ...): computed in the step graph.
  std::string metrics;
  // The step's backward pass recomputes forward tensors rather than keep them, so that its
  // estimated peak meets this budget (passes/rematerialize.h, docs/memory.md; none by default).
  // The estimate is sized with the signature's input shapes at the batch size.
  MemoryBudget memory_budget;
  std::string tag = "serve";
  FitOptions fit;
  // Data-parallel training over worker processes (distributed.h): a cluster, or TF_CONFIG's.
  train::DistributedOptions distributed;
  // Threads of the Session's kernels: intra-op and inter-op parallelism (0: TensorFlow's
  // default, one per core); the Session's CPU device gets a pool of its own of that size.
  int64_t threads = 0;
  // Keras's jit_compile: each training step (forward, backward, update, metrics) runs as one
  // must-compile XLA cluster (passes/xla_cluster.h), compiled at the first step and again for
  // a batch of another size (a last partial batch). Not with a memory budget or a cluster.
  bool jit_compile = false;
  // With jit_compile: the batch shapes compiled at most (XLA keeps each compiled program); a
  // step of another shape past them runs without XLA, with a warning once.
  int64_t jit_compile_cache = 16;
};

}  // namespace tensorflow::tf_ext

namespace tensorflow::tf_ext::train {

enum class OptionType { kString, kNumber, kInteger, kBool };

struct TrainerOption {
  std::string name;        // the C key; tf_ext_train's --name
  OptionType type = OptionType::kString;
  std::string value_name;  // --name=VALUE_NAME in usage and docs
  std::string help;        // one line
  std::vector<std::string> choices;  // the values allowed (empty: any)
  std::string default_text;          // as shown in --help ("" shows none)
  // Also a tf_ext_train flag. False where the tool sets the option from its own flags
  // (sample_weights: the tool's --sample_weights names the array instead).
  bool flag = true;
  // Parses `value` into the option; InvalidArgument (the value, what was expected) otherwise.
  std::function<absl::Status(absl::string_view value, TrainerOptions*)> set;
};

// Every option, in the order --help and the docs list them.
const std::vector<TrainerOption>& TrainerOptionTable();

// nullptr if `name` is no option.
const TrainerOption* FindTrainerOption(absl::string_view name);

// Sets one option by key: InvalidArgument "trainer option 'KEY': ..." for an unknown key
// ("unknown trainer option 'KEY'") or a value it refuses.
absl::Status SetTrainerOption(const std::string& key, const std::string& value,
                              TrainerOptions* options);

// "constant", "exponential:RATE:STEPS" or "cosine:STEPS" into the optimizer's schedule fields.
absl::Status ParseSchedule(absl::string_view text, OptimizerSpec* spec);

}  // namespace tensorflow::tf_ext::train

#endif  // TF_EXT_TRAIN_OPTIONS_OPTIONS_H_
