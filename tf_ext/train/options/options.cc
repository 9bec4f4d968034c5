#include "tf_ext/train/options/options.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tensorflow::tf_ext::train {
namespace {

// A field's value as the docs and --help show a default (a template: the table need not use
// every field type, e.g. no integer option yet).
template <typename T>
std::string Text(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "";
  } else if constexpr (std::is_same_v<T, double>) {
    return absl::StrFormat("%g", v);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v;
  } else {
    return absl::StrCat(v);
  }
}

// An option stored in the field `field(options)` returns (a generic lambda: `[](auto& o) ->
// auto& { return o.optimizer.rho; }`); its default is that field's initial value unless
// `default_text` is given.
template <typename Access>
TrainerOption Field(std::string name, std::string value_name, std::string help, Access field,
                    std::vector<std::string> choices = {}, const char* default_text = nullptr) {
  using T = std::decay_t<decltype(field(std::declval<TrainerOptions&>()))>;
  TrainerOption o;
  o.name = std::move(name);
  o.value_name = std::move(value_name);
  o.help = std::move(help);
  o.choices = std::move(choices);
  const TrainerOptions defaults;
  o.default_text = default_text != nullptr ? default_text : Text(field(defaults));
  std::vector<std::string> allowed = o.choices;
  if constexpr (std::is_same_v<T, std::string>) {
    o.type = OptionType::kString;
    o.set = [field, allowed](absl::string_view v, TrainerOptions* out) -> absl::Status {
      if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), v) == allowed.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", v, "' is not one of ", absl::StrJoin(allowed, ", ")));
      }
      field(*out) = std::string(v);
      return absl::OkStatus();
    };
  } else if constexpr (std::is_same_v<T, double>) {
    o.type = OptionType::kNumber;
    o.set = [field](absl::string_view v, TrainerOptions* out) -> absl::Status {
      if (!absl::SimpleAtod(v, &field(*out))) {
        return absl::InvalidArgumentError(absl::StrCat("'", v, "' is not a number"));
      }
      return absl::OkStatus();
    };
  } else if constexpr (std::is_same_v<T, int64_t>) {
    o.type = OptionType::kInteger;
    o.set = [field](absl::string_view v, TrainerOptions* out) -> absl::Status {
      if (!absl::SimpleAtoi(v, &field(*out))) {
        return absl::InvalidArgumentError(absl::StrCat("'", v, "' is not an integer"));
      }
      return absl::OkStatus();
    };
  } else {
    static_assert(std::is_same_v<T, bool>, "an option is a string, double, int64_t or bool");
    o.type = OptionType::kBool;
    o.set = [field](absl::string_view v, TrainerOptions* out) -> absl::Status {
      if (!absl::SimpleAtob(v, &field(*out))) {
        return absl::InvalidArgumentError(absl::StrCat("'", v, "' is not true or false"));
      }
      return absl::OkStatus();
    };
  }
  return o;
}

// An option parsed by `parse` (text into TrainerOptions) rather than stored as text.
TrainerOption Parsed(std::string name, std::string value_name, std::string help,
                     std::string default_text,
                     std::function<absl::Status(absl::string_view, TrainerOptions*)> parse) {
  TrainerOption o;
  o.name = std::move(name);
  o.value_name = std::move(value_name);
  o.help = std::move(help);
  o.default_text = std::move(default_text);
  o.set = std::move(parse);
  return o;
}

// `o`, refusing an integer below `least` (an integer option).
TrainerOption AtLeast(int64_t least, TrainerOption o) {
  o.set = [least, set = std::move(o.set)](absl::string_view v, TrainerOptions* out) -> absl::Status {
    int64_t n = 0;
    if (absl::SimpleAtoi(v, &n) && n < least) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", v, "' is ", least == 0 ? "negative" : absl::StrCat("below ", least)));
    }
    return set(v, out);
  };
  return o;
}

// The field an option stores into, for Field: works on TrainerOptions and const TrainerOptions.
#define TF_EXT_OPTION_FIELD(path) [](auto& o) -> auto& { return o.path; }

std::vector<TrainerOption> MakeTable() {
  std::vector<TrainerOption> t = {
      Field("signature", "KEY",
            "the signature whose function is trained (default: 'train' when the SavedModel has "
            "one, as tf_ext.export_for_training writes, else 'serving_default')",
            TF_EXT_OPTION_FIELD(signature_key)),
      Field("output", "KEY", "the signature output the loss reads (default: the only one)",
            TF_EXT_OPTION_FIELD(output_key)),
      Parsed("loss", "NAME",
             "mse, mae, binary_crossentropy, categorical_crossentropy, "
             "sparse_categorical_crossentropy (each cross-entropy with ':from_logits'), or output "
             "(the model's output is the loss)",
             "mse",
             [](absl::string_view v, TrainerOptions* out) -> absl::Status {
               auto loss = ParseLoss(std::string(v));
               if (!loss.ok()) return loss.status();
               out->loss = *loss;
               return absl::OkStatus();
             }),
      Field("optimizer", "NAME", "the optimizer, as Keras's", TF_EXT_OPTION_FIELD(optimizer.name),
            {"sgd", "adam", "adamw", "rmsprop", "adagrad"}),
      Field("learning_rate", "F", "the (initial) learning rate",
            TF_EXT_OPTION_FIELD(optimizer.learning_rate), {}, "Keras's for the optimizer"),
      Field("momentum", "F", "sgd, rmsprop", TF_EXT_OPTION_FIELD(optimizer.momentum)),
      Field("nesterov", "BOOL", "sgd: Nesterov momentum", TF_EXT_OPTION_FIELD(optimizer.nesterov)),
      Field("beta_1", "F", "adam, adamw", TF_EXT_OPTION_FIELD(optimizer.beta_1)),
      Field("beta_2", "F", "adam, adamw", TF_EXT_OPTION_FIELD(optimizer.beta_2)),
      Field("epsilon", "F", "adam, adamw, rmsprop, adagrad", TF_EXT_OPTION_FIELD(optimizer.epsilon)),
      Field("weight_decay", "F", "adamw", TF_EXT_OPTION_FIELD(optimizer.weight_decay), {}, "0.004"),
      Field("rho", "F", "rmsprop", TF_EXT_OPTION_FIELD(optimizer.rho)),
      Field("centered", "BOOL", "rmsprop: centered", TF_EXT_OPTION_FIELD(optimizer.centered)),
      Field("initial_accumulator_value", "F", "adagrad: the accumulators' starting value",
            TF_EXT_OPTION_FIELD(optimizer.initial_accumulator_value)),
      Field("clipnorm", "F", "clip each gradient to this norm (Keras's clipnorm; 0: none)",
            TF_EXT_OPTION_FIELD(optimizer.clipnorm)),
      Field("global_clipnorm", "F",
            "clip all gradients together to this global norm (Keras's global_clipnorm; 0: none)",
            TF_EXT_OPTION_FIELD(optimizer.global_clipnorm)),
      Parsed("lr_schedule", "SCHEDULE",
             "constant, exponential:RATE:STEPS or cosine:STEPS (Keras's ExponentialDecay, "
             "CosineDecay)",
             "constant",
             [](absl::string_view v, TrainerOptions* out) { return ParseSchedule(v, &out->optimizer); }),
      Field("metrics", "NAME,...",
            "Keras's metrics, computed in the step graph: accuracy, sparse_categorical_accuracy, "
            "categorical_accuracy, binary_accuracy, top_k_categorical_accuracy, mae, mse, auc, "
            "precision, recall",
            TF_EXT_OPTION_FIELD(metrics)),
      Parsed("memory_budget", "B",
             "the step's backward pass recomputes forward tensors rather than keep them, to fit "
             "the estimated peak in B: a fraction in (0, 1] of the estimate without a budget "
             "(0.5), or bytes with an optional K/M/G suffix (512M); as tf_ext_grad's",
             "",
             [](absl::string_view v, TrainerOptions* out) -> absl::Status {
               if (v.empty()) {  // none, as tf_ext_grad's empty --memory_budget
                 out->memory_budget = MemoryBudget();
                 return absl::OkStatus();
               }
               auto budget = ParseMemoryBudget(v);
               if (!budget.ok()) return budget.status();
               out->memory_budget = *budget;
               return absl::OkStatus();
             }),
      Field("jit_compile", "BOOL",
            "Keras's jit_compile: each training step runs as one XLA cluster, compiled at the "
            "first step (and again for a partial batch); not with --memory_budget or a cluster",
            TF_EXT_OPTION_FIELD(jit_compile)),
      AtLeast(1, Field("jit_compile_cache", "N",
                       "with --jit_compile: the batch shapes compiled at most; a step of another "
                       "shape past them runs without XLA (a warning once)",
                       TF_EXT_OPTION_FIELD(jit_compile_cache))),
      // The data and the loop (train::Fit, fit.h).
      Field("data", "PATH",
            "training data: an .npz file, or TFRecord files of tf.train.Example (a comma-separated "
            "list or glob of files ending in .tfrecord or .tfrecords)",
            TF_EXT_OPTION_FIELD(fit.data)),
      Field("validation", "PATH",
            "validation data, as --data: after each epoch its loss and metrics (val_loss, "
            "val_<metric>)",
            TF_EXT_OPTION_FIELD(fit.validation)),
      Field("inputs", "KEY[:INPUT],...",
            "the data's arrays or features fed to the signature's inputs: KEY feeds the input "
            "named KEY, or the only input whatever its name; KEY:INPUT feeds the input INPUT "
            "(one of the signature's)",
            TF_EXT_OPTION_FIELD(fit.inputs)),
      Field("targets", "KEY", "the data's targets (required by every loss but output)",
            TF_EXT_OPTION_FIELD(fit.targets)),
      Parsed("sample_weights", "KEY", "the data's per-example weights (each step feeds them)", "",
             [](absl::string_view v, TrainerOptions* out) -> absl::Status {
               out->fit.sample_weights = std::string(v);
               out->sample_weights = !v.empty();
               return absl::OkStatus();
             }),
      Field("features", "NAME:DTYPE:SHAPE,...",
            "TFRecord features' dtypes and per-example shapes (SHAPE as 6 or 8x8x3, empty for a "
            "scalar: y:int64:); required for targets and weights, and for an input stored with "
            "another dtype or shape than the signature's",
            TF_EXT_OPTION_FIELD(fit.features)),
      Field("compression", "TYPE", "the TFRecord files' compression", TF_EXT_OPTION_FIELD(fit.compression),
            {"", "GZIP", "ZLIB"}, "none"),
      Field("batch_size", "N", "examples per step", TF_EXT_OPTION_FIELD(fit.batch_size)),
      Field("epochs", "N", "passes over the data (a resumed run stops at the same epoch)",
            TF_EXT_OPTION_FIELD(fit.epochs)),
      Field("shuffle", "BOOL",
            ".npz: a new order of the examples each epoch (seeded; not Keras's order)",
            TF_EXT_OPTION_FIELD(fit.shuffle)),
      Field("shuffle_buffer", "N",
            "TFRecord: shuffle through a buffer of N examples, seeded, reshuffled each epoch "
            "(0: records in file order)",
            TF_EXT_OPTION_FIELD(fit.shuffle_buffer)),
      Field("seed", "N", "the shuffle's seed", TF_EXT_OPTION_FIELD(fit.seed)),
      Field("drop_remainder", "BOOL", "drop each epoch's last batch when it is partial",
            TF_EXT_OPTION_FIELD(fit.drop_remainder)),
      Field("skip_corrupt_records", "BOOL",
            "TFRecord: a file truncated inside a record, or with a record failing its CRC, is read "
            "up to that record and the rest skipped, with a warning (default: an error)",
            TF_EXT_OPTION_FIELD(fit.skip_corrupt_records)),
      Field("history", "FILE.csv",
            "one row per step: step,epoch,loss (that batch's) and each metric's running value; "
            "FILE.epochs.csv beside it: one row per epoch, as model.fit's history",
            TF_EXT_OPTION_FIELD(fit.history)),
      Field("tensorboard", "DIR",
            "TensorBoard event files in DIR/train and DIR/validation, as Keras's TensorBoard "
            "callback writes them",
            TF_EXT_OPTION_FIELD(fit.tensorboard)),
      Field("update_freq", "WHEN", "TensorBoard: epoch, batch, or every N steps",
            TF_EXT_OPTION_FIELD(fit.update_freq)),
      Field("checkpoint", "DIR/NAME",
            "after every epoch, an object-based checkpoint DIR/NAME-<epoch> (the model under "
            "'root', the optimizer's state) and DIR/checkpoint, which tf.train.latest_checkpoint "
            "reads",
            TF_EXT_OPTION_FIELD(fit.checkpoint)),
      Field("keep_checkpoints", "N", "the checkpoints kept (the latest N)",
            TF_EXT_OPTION_FIELD(fit.keep_checkpoints)),
      Field("resume", "PREFIX|auto",
            "start from this checkpoint (model and optimizer state) at its epoch; auto: the "
            "latest in --checkpoint's DIR, or from scratch when there is none",
            TF_EXT_OPTION_FIELD(fit.resume)),
      Field("early_stopping", "MONITOR:PATIENCE[:MIN_DELTA]",
            "stop when MONITOR (loss, val_loss, a metric) has not improved by MIN_DELTA for "
            "PATIENCE epochs, as Keras's EarlyStopping",
            TF_EXT_OPTION_FIELD(fit.early_stopping)),
      Field("restore_best_weights", "BOOL",
            "with --early_stopping: end with the best epoch's weights, as Keras's",
            TF_EXT_OPTION_FIELD(fit.restore_best_weights)),
      Field("save_best", "MONITOR",
            "keep the best epoch's checkpoint by MONITOR as DIR/NAME-best (with --checkpoint)",
            TF_EXT_OPTION_FIELD(fit.save_best)),
      Field("save_weights", "FILE.npz",
            "the model's variables after training (non-trainable ones too), by the object "
            "graph's names",
            TF_EXT_OPTION_FIELD(fit.save_weights)),
      Field("export", "DIR",
            "write the trained SavedModel here (same signatures, the trained variables); "
            "refused before training if DIR is not empty",
            TF_EXT_OPTION_FIELD(fit.export_dir)),
      Field("step_stats", "FILE",
            "the first training step's tensorflow.RunMetadata (binary; its step_stats give every "
            "node's time and output shapes)",
            TF_EXT_OPTION_FIELD(fit.step_stats)),
      AtLeast(0, Field("threads", "N",
                        "threads of the training Session's kernels (intra-op and inter-op "
                        "parallelism; 0: TensorFlow's default, one per core)",
                        TF_EXT_OPTION_FIELD(threads))),
      Field("cluster", "HOST:PORT,...",
            "data-parallel workers, task 0 the chief (default: TF_CONFIG's cluster, else one process)",
            TF_EXT_OPTION_FIELD(distributed.cluster)),
      Field("task_index", "N", "this process's task in --cluster", TF_EXT_OPTION_FIELD(distributed.task_index), {},
            ""),
      Field("collective_timeout", "SECONDS",
            "the longest wait on a peer (start-up, the chief's broadcast, each step's all-reduce)",
            TF_EXT_OPTION_FIELD(distributed.collective_timeout)),
      Field("communication_hint", "HINT", "the all-reduce's implementation, as CollectiveReduceV2's",
            TF_EXT_OPTION_FIELD(distributed.communication_hint), {"auto", "ring", "nccl"}),
      Field("shard_by", "HOW",
            "what each worker takes: batch, its slice of every global batch; files, whole "
            "TFRecord files (i, i+N, ... sorted), batch_size/N examples a step",
            TF_EXT_OPTION_FIELD(distributed.shard_by), {"batch", "files"}),
      Field("listen_address", "HOST",
            "the address this task's server listens on (default: its host in the cluster; "
            "0.0.0.0: every interface)",
            TF_EXT_OPTION_FIELD(distributed.listen_address)),
  };
  return t;
}

#undef TF_EXT_OPTION_FIELD

}  // namespace

absl::Status ParseSchedule(absl::string_view text, OptimizerSpec* spec) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  double rate = 0;
  int64_t steps = 0;
  if (parts[0] == "constant" && parts.size() == 1) {
  } else if (parts[0] == "exponential" && parts.size() == 3 && absl::SimpleAtod(parts[1], &rate) &&
             absl::SimpleAtoi(parts[2], &steps)) {
  } else if (parts[0] == "cosine" && parts.size() == 2 && absl::SimpleAtoi(parts[1], &steps)) {
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "': expected constant, exponential:RATE:STEPS or cosine:STEPS"));
  }
  spec->schedule = parts[0];
  spec->decay_rate = rate;
  spec->decay_steps = steps;
  return absl::OkStatus();
}

const std::vector<TrainerOption>& TrainerOptionTable() {
  static const auto* table = new std::vector<TrainerOption>(MakeTable());
  return *table;
}

const TrainerOption* FindTrainerOption(absl::string_view name) {
  for (const TrainerOption& o : TrainerOptionTable()) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

absl::Status SetTrainerOption(const std::string& key, const std::string& value,
                              TrainerOptions* options) {
  const TrainerOption* o = FindTrainerOption(key);
  if (o == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown trainer option '", key, "'"));
  if (absl::Status s = o->set(value, options); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("trainer option '", key, "': ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace tensorflow::tf_ext::train
