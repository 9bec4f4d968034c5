// tf_ext_train: trains a SavedModel from the command line, with no Python (tf_ext/train/model/trainer.h).
//
//   tf_ext_train --saved_model=DIR --data=FILE.npz|FILES.tfrecord --inputs=KEY[,KEY...]
//                --targets=KEY --loss=NAME[:from_logits] --optimizer=NAME --metrics=NAME,...
//                --batch_size=N --epochs=N [--history=FILE.csv] [--checkpoint=DIR/NAME] ...
//
// Every flag but --saved_model and --library is an entry of the trainer's option table
// (tf_ext/train/options/options.h); the loop is train::Fit (tf_ext/train/loop/fit.h), as model.fit: one line
// per epoch with its logs, a progress bar with the running logs between them on a terminal.
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
#include "tensorflow/core/platform/hash.h"
#include "tensorflow/c/c_api.h"
#include "tf_ext/tools/flags.h"
#include "tf_ext/tools/library_lookup.h"
#include "tf_ext/tools/quiet_startup.h"
#include "tf_ext/train/loop/fit.h"
#include "tf_ext/train/model/trainer.h"
#include "tf_ext/train/options/options.h"
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

// What tf_ext_train shows while it trains: on a terminal a progress bar with the running loss and
// metrics after each step, its line replaced by the epoch's summary; else the summary alone.
class Progress : public train::Callback {
 public:
  Progress(bool terminal, int64_t epochs) : terminal_(terminal), epochs_(epochs) {}
  bool WantsBatchLogs() const override { return terminal_; }
  absl::Status OnTrainBatchEnd(const train::BatchEnd& batch) override {
    if (!terminal_) return absl::OkStatus();
    std::vector<std::string> parts;
    for (const auto& [name, v] : *batch.logs) parts.push_back(absl::StrFormat("%s %.6g", name, v));
    std::string bar;
    if (batch.examples > 0) {
      constexpr int kWidth = 30;
      const int done = static_cast<int>(kWidth * std::min(batch.seen, batch.examples) / batch.examples);
      bar = absl::StrFormat(" [%s%s] %d/%d", std::string(done, '='), std::string(kWidth - done, ' '),
                            batch.seen, batch.examples);
    } else {
      bar = absl::StrFormat(" %d examples", batch.seen);
    }
    std::printf("\repoch %d/%d%s %s", static_cast<int>(batch.epoch + 1), static_cast<int>(epochs_),
                bar.c_str(), absl::StrJoin(parts, " ").c_str());
    std::fflush(stdout);
    return absl::OkStatus();
  }
  absl::Status OnEpochEnd(int64_t epoch, const train::Logs& logs, bool* stop) override {
    std::printf("%s%s\n", terminal_ ? "\r\033[K" : "", train::EpochSummary(epoch, epochs_, logs).c_str());
    std::fflush(stdout);
    return absl::OkStatus();
  }

 private:
  bool terminal_;
  int64_t epochs_;
};

// The flags of TrainerOptions' fields, from train/options/options.h's table, set into `options`.
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
  std::string saved_model;
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
  std::string library;
  parser.String("library", &library, "the op library (default: found as tf_ext_grad finds it)");
  if (absl::Status s = parser.Parse(argc, argv); !s.ok()) {
    return Fail(parser.ErrorLine(s.message()));
  }
  if (parser.help_requested()) {
    std::printf("%s", parser.Usage().c_str());
    return 0;
  }
  if (options.fit.data.empty()) return Fail(parser.ErrorLine("--data is required"));
  if (options.fit.inputs.empty()) return Fail(parser.ErrorLine("--inputs is required"));
  // The op library: tf_ext's ops and its gradients of TensorFlow ops Python alone differentiates.
  auto found = tools::FindOpLibrary(tools::LibraryLookupContext::FromProcess(library));
  if (!found.ok()) return Fail(std::string(found.status().message()));
  void* handle = nullptr;
  if (absl::Status s = Env::Default()->LoadDynamicLibrary(found->c_str(), &handle); !s.ok()) {
    return Fail(absl::StrCat("cannot load op library '", *found, "': ", s.message()));
  }
  if (!options.fit.export_dir.empty()) {
    // Refused before training, not after it.
    if (absl::Status s = CheckExportTarget(options.fit.export_dir); !s.ok()) return Fail(std::string(s.message()));
  }
  if (train::LossHasTargets(options.loss) && options.fit.targets.empty()) {
    return Fail("--targets is required by this loss");
  }

  auto trainer = Trainer::Create(saved_model, options);
  if (!trainer.ok()) return Fail(std::string(trainer.status().message()));
  std::printf("training signature '%s' in %s mode", (*trainer)->signature_key().c_str(),
              (*trainer)->training_mode() ? "training" : "inference");
  if (!options.fit.validation.empty()) {
    // Keras validates in inference mode: a training-mode signature's inference twin, if any.
    std::printf("; validation with '%s' in %s mode", (*trainer)->evaluation_signature_key().c_str(),
                (*trainer)->evaluation_training_mode() ? "training" : "inference");
  }
  std::printf("\n");
  if (const MemoryPlan* memory = (*trainer)->memory_plan(); memory != nullptr) {
    // The builder's estimate (passes/rematerialize.h), as tf_ext_grad prints it, for this
    // process's batch (its share of the global one with a cluster).
    const train::Distributed* d = (*trainer)->distributed();
    const int64_t batch = options.fit.batch_size / (d != nullptr ? d->cluster().size() : 1);
    std::printf("estimated peak: %.1f MB above the feeds (the step's forward, loss and backward "
                "at batch %lld; the variables' reads share their buffers and are not counted)\n",
                memory->estimated_peak_bytes / 1048576.0, static_cast<long long>(batch));
    if (memory->budget_bytes > 0) std::printf("%s\n", DescribeBudget(*memory).c_str());
  }
  for (const std::string& w : (*trainer)->warnings()) std::fprintf(stderr, "tf_ext_train: warning: %s\n", w.c_str());
  // Read from the device the kernels run on: --threads, or TensorFlow's default.
  std::printf("kernel threads: %d intra-op\n", (*trainer)->kernel_threads());
  if (const train::Distributed* d = (*trainer)->distributed(); d != nullptr) {
    const train::Distributed::AllReduceSize& a = d->step_all_reduce();
    std::printf("all-reduce: %lld tensors in %lld packs, %lld bytes a step\n", static_cast<long long>(a.tensors),
                static_cast<long long>(a.packs), static_cast<long long>(a.bytes));
  }
  std::fflush(stdout);

  // On a terminal a progress bar, redrawn in place; else one line per epoch.
  Progress progress(isatty(fileno(stdout)) != 0, options.fit.epochs);
  auto result = train::Fit(trainer->get(), options, &progress, [](const std::string& message) {
    std::printf("%s\n", message.c_str());
    std::fflush(stdout);
  });
  if (!result.ok()) return Fail(std::string(result.status().message()));
  if (result->step_ms.size() > 1) {
    // The first step builds the Session's executors: left out.
    std::vector<double> steady(result->step_ms.begin() + 1, result->step_ms.end());
    std::sort(steady.begin(), steady.end());
    std::printf("steady state over %zu steps: median %.3f ms per step\n", steady.size(),
                steady[steady.size() / 2]);
  }
  // The optimizer's step count (Keras's optimizer.iterations): a resumed run's count includes
  // the checkpoint's.
  auto iterations = (*trainer)->Iterations();
  if (!iterations.ok()) return Fail(std::string(iterations.status().message()));
  std::printf("optimizer iterations: %lld\n", static_cast<long long>(*iterations));
  if (options.jit_compile) {
    const std::vector<std::string>& shapes = (*trainer)->xla_compiled_shapes();
    std::printf("XLA: the step's %d nodes compiled as one cluster in %.2f s, for %zu batch "
                "shape%s (%s)\n", (*trainer)->xla_cluster_nodes(), (*trainer)->xla_compile_seconds(),
                shapes.size(), shapes.size() == 1 ? "" : "s: XLA compiles each anew",
                absl::StrJoin(shapes, ", ").c_str());
    const std::vector<std::string>& others = (*trainer)->xla_uncompiled_shapes();
    if (!others.empty()) {
      std::printf("XLA: %zu batch shape%s past --jit_compile_cache ran without XLA (%s)\n",
                  others.size(), others.size() == 1 ? "" : "s", absl::StrJoin(others, ", ").c_str());
    }
  }
  if ((*trainer)->distributed() != nullptr) {
    // Every worker ends with the same variables: a fingerprint of their bytes to compare.
    auto values = (*trainer)->VariableValues();
    if (!values.ok()) return Fail(std::string(values.status().message()));
    uint64_t fingerprint = 0;
    for (const auto& [name, value] : *values) {
      fingerprint = Hash64Combine(fingerprint, Hash64(value.tensor_data().data(), value.tensor_data().size()));
    }
    std::printf("variables fingerprint: %016llx\n", static_cast<unsigned long long>(fingerprint));
  }
  return 0;
}

}  // namespace
}  // namespace tensorflow::tf_ext

int main(int argc, char** argv) {
  tensorflow::tf_ext::tools::QuietTensorFlowStartup();
  return tensorflow::tf_ext::Main(argc, argv);
}
