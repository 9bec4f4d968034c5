// tf_ext_train: trains a SavedModel from the command line, with no Python (tf_ext/train/trainer.h).
//
//   tf_ext_train --saved_model=DIR --data=FILE.npz --inputs=KEY[,KEY...] --targets=KEY
//                --loss=NAME[:from_logits] --optimizer=sgd|adam|adamw|rmsprop|adagrad
//                --learning_rate=F --batch_size=N --epochs=N [--history=FILE.csv] ...
//
// Batches are taken in file order; one line per epoch (its mean step loss, as Keras's history),
// with a progress bar and the running loss between them on a terminal.
// --save_weights writes the trained variables to an .npz (by the object graph's names); --export
// writes the trained SavedModel (same signatures), only once training has succeeded.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tensorflow/core/framework/tensor_util.h"
#include "tf_ext/graph/runtime/export.h"
#include "tf_ext/graph/io/npy_io.h"
#include "tensorflow/core/platform/env.h"
#include "tensorflow/c/c_api.h"
#include "tf_ext/tools/flags.h"
#include "tf_ext/tools/library_lookup.h"
#include "tf_ext/train/options.h"
#include "tf_ext/train/trainer.h"
#include "tf_ext/version.h"

namespace tensorflow::tf_ext {
namespace {

constexpr char kDescription[] =
    "Trains a SavedModel's signature function with Keras 3's losses and optimizers, entirely in\n"
    "C++: its 'train' signature when it has one (tf_ext.export_for_training: BatchNorm and dropout\n"
    "in training mode), else 'serving_default'. It prints which, and in which mode.\n"
    "--version prints tf_ext's release and the release of the TensorFlow library it runs on.\n";

int Fail(const std::string& message) {
  std::fprintf(stderr, "tf_ext_train: %s\n", message.c_str());
  return 1;
}

const Tensor* Find(const std::vector<std::pair<std::string, Tensor>>& arrays, const std::string& key) {
  for (const auto& [k, v] : arrays) {
    if (k == key) return &v;
  }
  return nullptr;
}

// Arrays of one .npz file: the inputs (by key, in --inputs order), targets, weights.
struct Dataset {
  std::vector<std::pair<std::string, Tensor>> inputs;
  Tensor targets, weights;
  bool has_targets = false, has_weights = false;
  int64_t examples = 0;
};

struct Batch {
  std::vector<std::pair<std::string, Tensor>> inputs;
  Tensor targets, weights;
  int64_t size = 0;
};

absl::Status LoadDataset(const std::string& path, const std::vector<std::string>& input_keys,
                         const std::string& targets_key, const std::string& weights_key,
                         const train::LossSpec& loss, Dataset* out) {
  auto arrays = ReadNpz(path);
  if (!arrays.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", arrays.status().message()));
  std::vector<std::pair<std::string, const Tensor*>> columns;
  for (const std::string& key : input_keys) columns.push_back({key, Find(*arrays, key)});
  if (!targets_key.empty()) columns.push_back({targets_key, Find(*arrays, targets_key)});
  if (!weights_key.empty()) columns.push_back({weights_key, Find(*arrays, weights_key)});
  int64_t examples = -1;
  for (const auto& [key, t] : columns) {
    if (t == nullptr) return absl::InvalidArgumentError(absl::StrCat(path, " has no array '", key, "'"));
    if (t->dims() < 1) return absl::InvalidArgumentError(absl::StrCat("array '", key, "' has no examples axis"));
    if (examples >= 0 && t->dim_size(0) != examples) {
      return absl::InvalidArgumentError(absl::StrCat("array '", key, "' has ", t->dim_size(0),
                                                     " examples; the first has ", examples));
    }
    examples = t->dim_size(0);
  }
  if (examples == 0) return absl::InvalidArgumentError(absl::StrCat(path, " has no examples"));
  out->examples = examples;
  for (size_t i = 0; i < input_keys.size(); ++i) out->inputs.push_back({input_keys[i], *columns[i].second});
  if (!targets_key.empty()) {
    out->has_targets = true;
    out->targets = *columns[input_keys.size()].second;
    // class ids as int64, which the sparse loss takes
    if (loss.kind == train::LossKind::kSparseCategoricalCrossentropy && out->targets.dtype() == DT_INT32) {
      Tensor cast(DT_INT64, out->targets.shape());
      auto from = out->targets.flat<int32>();
      auto to = cast.flat<int64_t>();
      for (int64_t i = 0; i < from.size(); ++i) to(i) = from(i);
      out->targets = cast;
    }
  }
  if (!weights_key.empty()) {
    out->has_weights = true;
    out->weights = *columns.back().second;
  }
  return absl::OkStatus();
}

// `t`'s rows in `order`.
Tensor Rows(const Tensor& t, const std::vector<int64_t>& order) {
  Tensor out(t.dtype(), t.shape());
  const int64_t row = t.TotalBytes() / t.dim_size(0);
  const char* from = t.tensor_data().data();
  char* to = const_cast<char*>(out.tensor_data().data());
  for (size_t i = 0; i < order.size(); ++i) std::memcpy(to + i * row, from + order[i] * row, row);
  return out;
}

Dataset Permuted(const Dataset& d, const std::vector<int64_t>& order) {
  Dataset out = d;
  for (auto& [key, t] : out.inputs) t = Rows(t, order);
  if (d.has_targets) out.targets = Rows(d.targets, order);
  if (d.has_weights) out.weights = Rows(d.weights, order);
  return out;
}

// Calls `f` on each batch in order (the last may be smaller); stops when f returns false.
bool ForEachBatch(const Dataset& d, int64_t batch_size, const std::function<bool(const Batch&)>& f) {
  for (int64_t start = 0; start < d.examples; start += batch_size) {
    const int64_t limit = std::min(d.examples, start + batch_size);
    auto slice = [&](const Tensor& t) { return tensor::DeepCopy(t.Slice(start, limit)); };
    Batch b;
    b.size = limit - start;
    for (const auto& [key, t] : d.inputs) b.inputs.push_back({key, slice(t)});
    if (d.has_targets) b.targets = slice(d.targets);
    if (d.has_weights) b.weights = slice(d.weights);
    if (!f(b)) return false;
  }
  return true;
}

// The flags of TrainerOptions' fields, from train/options.h's table, set into `options`.
void DeclareTrainerFlags(tools::FlagParser* parser, TrainerOptions* options) {
  using Type = tools::FlagParser::Type;
  for (const train::TrainerOption& o : train::TrainerOptionTable()) {
    if (!o.flag) continue;
    const Type type = o.type == train::OptionType::kBool     ? Type::kBool
                      : o.type == train::OptionType::kNumber ? Type::kDouble
                      : o.type == train::OptionType::kInteger ? Type::kInt
                                                              : Type::kString;
    auto& flag = parser->Custom(o.name, type, o.help, o.default_text,
                                [&o, options](absl::string_view text, std::string* why) {
                                  absl::Status s = o.set(text, options);
                                  if (!s.ok()) *why = std::string(s.message());
                                  return s.ok();
                                });
    flag.ValueName(o.value_name);
    if (!o.choices.empty()) flag.Choices(o.choices);
  }
}

// The C API's option keys (every option of the table), for --help.
std::string TrainerKeys() {
  std::vector<std::string> keys;
  for (const train::TrainerOption& o : train::TrainerOptionTable()) keys.push_back(o.name);
  return absl::StrJoin(keys, ", ");
}

int Main(int argc, char** argv) {
  std::string saved_model, data, inputs, targets_key, weights_key, history, save_weights;
  int64_t batch_size = 32, epochs = 1;
  // Before parsing: --version needs none of the required flags.
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--version") == 0) {
      std::printf("tf_ext_train %s (TensorFlow %s)\n", TF_EXT_VERSION_STRING, TF_Version());
      return 0;
    }
  }
  tools::FlagParser parser(
      "tf_ext_train",
      absl::StrCat(kDescription, "The trainer's options (TfExtNewTrainer's keys, flags without '--'): ",
                   TrainerKeys(), ".\n"));
  TrainerOptions options;
  parser.String("saved_model", &saved_model, "the SavedModel directory").Required();
  DeclareTrainerFlags(&parser, &options);
  parser.String("data", &data, "training data: an .npz file").Required();
  parser.String("inputs", &inputs,
                "the .npz arrays fed to the signature's inputs, comma-separated: KEY feeds the "
                "input named KEY, or the only input whatever its name; KEY:INPUT feeds INPUT")
      .ValueName("KEY[:INPUT],...")
      .Required();
  parser.String("targets", &targets_key, "the .npz key of the targets");
  parser.String("sample_weights", &weights_key, "the .npz key of per-example weights");
  parser.Int("batch_size", &batch_size, "examples per step", int64_t{1});
  parser.Int("epochs", &epochs, "passes over the data", int64_t{1});
  parser.String("history", &history, "a CSV of step,epoch,loss (one row per step)");
  parser.String("save_weights", &save_weights,
                "an .npz of the model's variables after training (non-trainable ones too)");
  bool shuffle = false;
  int64_t seed = 0;
  parser.Bool("shuffle", &shuffle, "a new order of the examples each epoch (seeded; not Keras's order)")
      .ImplicitValue("true");
  parser.Int("seed", &seed, "the shuffle's seed", int64_t{0});
  std::string checkpoint, resume;
  parser.String("checkpoint", &checkpoint,
                "write an object-based checkpoint here after every epoch (the model under 'root', "
                "the optimizer's state)");
  parser.String("resume", &resume, "start from this checkpoint (model and optimizer state)");
  std::string validation;
  parser.String("validation", &validation,
                "an .npz with the same keys: its loss after each epoch (printed, and written to "
                "<history>.validation.csv as epoch,val_loss)");
  std::string export_dir;
  parser.String("export", &export_dir,
                "write the trained SavedModel here (same signatures, the trained variables)");
  std::string step_stats;
  parser.String("step_stats", &step_stats,
                "write the first training step's tensorflow.RunMetadata here (binary; its "
                "step_stats give every node's time and output shapes)");
  std::string library;
  parser.String("library", &library, "the op library (default: found as tf_ext_grad finds it)");
  if (absl::Status s = parser.Parse(argc, argv); !s.ok()) {
    return Fail(absl::StrCat(s.message(), "\n", parser.Usage()));
  }
  if (parser.help_requested()) {
    std::printf("%s", parser.Usage().c_str());
    return 0;
  }
  // The op library: tf_ext's ops and its gradients of TensorFlow ops Python alone differentiates.
  auto found = tools::FindOpLibrary(tools::LibraryLookupContext::FromProcess(library));
  if (!found.ok()) return Fail(std::string(found.status().message()));
  void* handle = nullptr;
  if (absl::Status s = Env::Default()->LoadDynamicLibrary(found->c_str(), &handle); !s.ok()) {
    return Fail(absl::StrCat("cannot load op library '", *found, "': ", s.message()));
  }
  if (!export_dir.empty()) {
    // Refused before training, not after it.
    if (absl::Status s = CheckExportTarget(export_dir); !s.ok()) return Fail(std::string(s.message()));
  }
  const bool has_targets = train::LossHasTargets(options.loss);
  if (has_targets && targets_key.empty()) return Fail("--targets is required by this loss");
  options.sample_weights = !weights_key.empty();

  // The data (and validation data): every array must have the same number of examples.
  // --inputs=KEY[:INPUT]: the array KEY, fed as INPUT (default: KEY).
  std::vector<std::string> input_keys, input_names;
  for (absl::string_view item : absl::StrSplit(inputs, ',')) {
    std::vector<std::string> parts = absl::StrSplit(item, absl::MaxSplits(':', 1));
    if (parts[0].empty() || (parts.size() == 2 && parts[1].empty())) {
      return Fail(absl::StrCat("--inputs: '", item, "' is not KEY or KEY:INPUT"));
    }
    input_keys.push_back(parts[0]);
    input_names.push_back(parts.back());
  }
  Dataset train_data, validation_data;
  if (absl::Status s = LoadDataset(data, input_keys, has_targets ? targets_key : "", weights_key,
                                   options.loss, &train_data);
      !s.ok()) {
    return Fail(std::string(s.message()));
  }
  if (!validation.empty()) {
    if (absl::Status s = LoadDataset(validation, input_keys, has_targets ? targets_key : "",
                                     weights_key, options.loss, &validation_data);
        !s.ok()) {
      return Fail(std::string(s.message()));
    }
  }
  const int64_t examples = train_data.examples;
  if (batch_size > examples) {
    return Fail(absl::StrCat("--batch_size=", batch_size, " is larger than the data (", examples, " examples)"));
  }

  auto trainer = Trainer::Create(saved_model, options);
  if (!trainer.ok()) return Fail(std::string(trainer.status().message()));
  std::printf("training signature '%s' in %s mode\n", (*trainer)->signature_key().c_str(),
              (*trainer)->training_mode() ? "training" : "inference");
  for (const std::string& w : (*trainer)->warnings()) std::fprintf(stderr, "tf_ext_train: warning: %s\n", w.c_str());
  std::fflush(stdout);
  if (absl::Status s = (*trainer)->ResolveInputs(input_names).status(); !s.ok()) {
    return Fail(absl::StrCat(s.message(), " (--inputs=KEY:INPUT feeds the array KEY to the input INPUT)"));
  }
  // The batches' inputs by the names the trainer resolves.
  for (Dataset* d : {&train_data, &validation_data}) {
    for (size_t i = 0; i < d->inputs.size(); ++i) d->inputs[i].first = input_names[i];
  }
  if (!resume.empty()) {
    if (absl::Status s = (*trainer)->RestoreCheckpoint(resume); !s.ok()) return Fail(std::string(s.message()));
  }
  std::ofstream csv, validation_csv;
  if (!history.empty()) {
    csv.open(history);
    if (!csv) return Fail(absl::StrCat("--history=", history, ": cannot write"));
    csv << "step,epoch,loss\n";
    if (!validation.empty()) {
      validation_csv.open(history + ".validation.csv");
      if (!validation_csv) return Fail(absl::StrCat("cannot write ", history, ".validation.csv"));
      validation_csv << "epoch,val_loss\n";
    }
  }
  int64_t step = 0;
  const bool terminal = isatty(fileno(stdout)) != 0;  // else one line per epoch
  std::vector<double> step_ms;  // each Step's wall time
  std::mt19937_64 rng(static_cast<uint64_t>(seed));
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    const Dataset* epoch_data = &train_data;
    Dataset shuffled;
    if (shuffle) {
      std::vector<int64_t> order(examples);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      shuffled = Permuted(train_data, order);
      epoch_data = &shuffled;
    }
    double loss_sum = 0;
    int64_t seen = 0;
    std::string error;
    const bool ok = ForEachBatch(*epoch_data, batch_size, [&](const Batch& b) {
      const auto started = std::chrono::steady_clock::now();
      RunMetadata trace;
      const bool traced = step == 0 && !step_stats.empty();
      auto loss_value = (*trainer)->Step(b.inputs, b.targets, b.weights, traced ? &trace : nullptr);
      if (traced && loss_value.ok()) {
        if (absl::Status s = WriteBinaryProto(Env::Default(), step_stats, trace); !s.ok()) {
          error = absl::StrCat("--step_stats=", step_stats, ": ", s.message());
          return false;
        }
      }
      step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count());
      if (!loss_value.ok()) {
        error = absl::StrCat("step ", step, ": ", loss_value.status().message());
        return false;
      }
      if (!std::isfinite(*loss_value)) {
        error = absl::StrCat("step ", step, " (epoch ", epoch, "): the loss is ", *loss_value, "; stopping");
        return false;
      }
      if (csv.is_open()) csv << step << "," << epoch << "," << absl::StrFormat("%.9g", *loss_value) << "\n";
      // Keras's epoch loss: the mean of the step losses weighted by batch size
      loss_sum += *loss_value * b.size;
      seen += b.size;
      if (terminal) {
        // A progress bar with the running loss, redrawn in place.
        constexpr int kWidth = 30;
        const int done = static_cast<int>(kWidth * seen / examples);
        std::printf("\repoch %d/%d [%s%s] %lld/%lld loss %.6g", static_cast<int>(epoch + 1),
                    static_cast<int>(epochs), std::string(done, '=').c_str(),
                    std::string(kWidth - done, ' ').c_str(), static_cast<long long>(seen),
                    static_cast<long long>(examples), loss_sum / seen);
        std::fflush(stdout);
      }
      ++step;
      return true;
    });
    if (!ok) return Fail(error);
    std::string line = absl::StrFormat("epoch %d/%d: loss %.6g", epoch + 1, epochs, loss_sum / seen);
    if (!validation.empty()) {
      double val_sum = 0;
      int64_t val_seen = 0;
      const bool val_ok = ForEachBatch(validation_data, batch_size, [&](const Batch& b) {
        auto loss_value = (*trainer)->Evaluate(b.inputs, b.targets, b.weights);
        if (!loss_value.ok()) {
          error = absl::StrCat("validation: ", loss_value.status().message());
          return false;
        }
        val_sum += *loss_value * b.size;
        val_seen += b.size;
        return true;
      });
      if (!val_ok) return Fail(error);
      absl::StrAppendFormat(&line, ", val_loss %.6g", val_sum / val_seen);
      if (validation_csv.is_open()) {
        validation_csv << epoch << "," << absl::StrFormat("%.9g", val_sum / val_seen) << "\n";
      }
    }
    // On a terminal the bar's line is replaced by the epoch's summary.
    std::printf("%s%s\n", terminal ? "\r\033[K" : "", line.c_str());
    std::fflush(stdout);
    if (!checkpoint.empty()) {
      if (absl::Status s = (*trainer)->SaveCheckpoint(checkpoint); !s.ok()) {
        return Fail(absl::StrCat("--checkpoint=", checkpoint, ": ", s.message()));
      }
    }
  }
  if (step_ms.size() > 1) {
    // The first step builds the Session's executors: left out.
    std::vector<double> steady(step_ms.begin() + 1, step_ms.end());
    std::sort(steady.begin(), steady.end());
    std::printf("steady state over %zu steps: median %.3f ms per step\n", steady.size(),
                steady[steady.size() / 2]);
  }
  // The optimizer's step count (Keras's optimizer.iterations): a resumed run's count includes
  // the checkpoint's.
  auto iterations = (*trainer)->Iterations();
  if (!iterations.ok()) return Fail(std::string(iterations.status().message()));
  std::printf("optimizer iterations: %lld\n", static_cast<long long>(*iterations));
  if (!export_dir.empty()) {
    if (absl::Status s = (*trainer)->Export(export_dir); !s.ok()) {
      return Fail(absl::StrCat("--export=", export_dir, ": ", s.message()));
    }
    std::printf("exported the trained SavedModel to %s\n", export_dir.c_str());
  }
  if (!save_weights.empty()) {
    auto values = (*trainer)->VariableValues();
    if (!values.ok()) return Fail(std::string(values.status().message()));
    if (absl::Status s = WriteNpz(save_weights, *values); !s.ok()) return Fail(std::string(s.message()));
  }
  return 0;
}

}  // namespace
}  // namespace tensorflow::tf_ext

int main(int argc, char** argv) { return tensorflow::tf_ext::Main(argc, argv); }
