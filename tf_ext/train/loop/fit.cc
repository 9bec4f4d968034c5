#include "tf_ext/train/loop/fit.h"

#include <chrono>
#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tensorflow/core/framework/tensor_util.h"
#include "tensorflow/core/platform/env.h"
#include "tensorflow/core/protobuf/config.pb.h"
#include "tf_ext/graph/io/npy_io.h"
#include "tf_ext/graph/runtime/export.h"
#include "tf_ext/train/data/data.h"
#include "tf_ext/train/loop/callbacks.h"
#include "tf_ext/train/loop/history.h"
#include "tf_ext/train/loop/summary.h"
#include "tf_ext/train/model/optimizers.h"

namespace tensorflow::tf_ext::train {
namespace {

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

// A weighted running mean, as Keras's Mean metric with the batch size as weight.
struct RunningMean {
  double sum = 0;
  int64_t count = 0;
  void Add(double v, int64_t n) {
    sum += v * n;
    count += n;
  }
  double value() const { return count > 0 ? sum / count : 0; }
};

// This worker's rows of a global batch: rows [rank * n, (rank + 1) * n) of each tensor, n its
// share; the batch must split evenly over the workers (each step then takes exactly the
// examples one process would).
absl::Status TakeSlice(const Cluster& cluster, Batch* batch) {
  const int64_t workers = cluster.size();
  if (batch->size % workers != 0) {
    return Invalid(absl::StrCat("a batch of ", batch->size, " examples does not split over ", workers,
                                " workers (the data's last batch: use drop_remainder, or data whose "
                                "size the workers divide)"));
  }
  const int64_t n = batch->size / workers, begin = cluster.rank * n;
  auto slice = [&](Tensor* t) {
    if (t->dims() > 0 && t->dim_size(0) == batch->size) *t = tensor::DeepCopy(t->Slice(begin, begin + n));
  };
  for (auto& [name, t] : batch->inputs) slice(&t);
  slice(&batch->targets);
  slice(&batch->weights);
  return absl::OkStatus();
}

}  // namespace

namespace {

// The fit options Fit refuses before opening anything; clears what a non-chief worker does not
// write (it resumes from the chief's state, broadcast at the start).
absl::Status CheckFitOptions(const TrainerOptions& options, const Distributed* distributed,
                             FitOptions* f) {
  if (distributed != nullptr) {
    const int64_t workers = distributed->cluster().size();
    if (f->batch_size % workers != 0) {
      return Invalid(absl::StrCat("batch_size=", f->batch_size, " (the global batch) does not split over ",
                                  workers, " workers: use a multiple of ", workers));
    }
    if (!distributed->cluster().is_chief()) {
      // Only the chief writes; the others resume from the chief's state (broadcast below).
      for (std::string* written : {&f->history, &f->tensorboard, &f->checkpoint, &f->resume, &f->save_best,
                                   &f->save_weights, &f->export_dir, &f->step_stats}) {
        written->clear();
      }
    }
  }
  if (f->data.empty()) return Invalid("option 'data' (the training data) is required");
  if (f->inputs.empty()) return Invalid("option 'inputs' (the data's keys fed to the signature's inputs) is required");
  if (f->batch_size < 1) return Invalid(absl::StrCat("batch_size=", f->batch_size, " is not positive"));
  if (f->epochs < 1) return Invalid(absl::StrCat("epochs=", f->epochs, " is not positive"));
  if (f->shuffle_buffer < 0) {
    return Invalid(absl::StrCat("shuffle_buffer=", f->shuffle_buffer, " is negative"));
  }
  if (LossHasTargets(options.loss) && f->targets.empty()) {
    return Invalid("option 'targets' is required by this loss");
  }
  if (!f->export_dir.empty()) TF_RETURN_IF_ERROR(CheckExportTarget(f->export_dir));
  return absl::OkStatus();
}

// What the data feeds: inputs=KEY[:INPUT] (the data's KEY fed as INPUT, default KEY) resolved
// against the signature, targets, weights, features and batching.
absl::StatusOr<DataSpec> MakeDataSpec(Trainer* trainer, const TrainerOptions& options,
                                      const FitOptions& f) {
  DataSpec spec;
  std::vector<bool> named;  // KEY:INPUT (the input named), not KEY alone
  for (absl::string_view item : absl::StrSplit(f.inputs, ',')) {
    std::vector<std::string> parts = absl::StrSplit(item, absl::MaxSplits(':', 1));
    if (parts[0].empty() || (parts.size() == 2 && parts[1].empty())) {
      return Invalid(absl::StrCat("option 'inputs': '", item, "' is not KEY or KEY:INPUT"));
    }
    spec.input_keys.push_back(parts[0]);
    spec.input_names.push_back(parts.back());
    named.push_back(parts.size() == 2);
  }
  auto resolved = trainer->ResolveInputs(spec.input_names, named);
  if (!resolved.ok()) {
    return absl::Status(resolved.status().code(),
                        absl::StrCat(resolved.status().message(),
                                     " (inputs=KEY:INPUT feeds the data's KEY to the input INPUT)"));
  }
  for (const std::string& key : *resolved) {
    auto input = trainer->InputSpec(key);
    if (!input.ok()) return input.status();
    spec.input_specs.push_back(*input);
  }
  spec.targets_key = LossHasTargets(options.loss) ? f.targets : "";
  spec.weights_key = f.sample_weights;
  // Class ids are fed as int64, which the sparse loss takes.
  if (options.loss.kind == LossKind::kSparseCategoricalCrossentropy) spec.targets_dtype = DT_INT64;
  if (!f.features.empty()) {
    auto features = ParseFeatures(f.features);
    if (!features.ok()) {
      return absl::Status(features.status().code(),
                          absl::StrCat("option 'features': ", features.status().message()));
    }
    spec.features = *features;
  }
  spec.compression = f.compression;
  spec.batch_size = f.batch_size;
  spec.drop_remainder = f.drop_remainder;
  spec.skip_corrupt_records = f.skip_corrupt_records;
  spec.shuffle = f.shuffle;
  spec.shuffle_buffer = f.shuffle_buffer;
  spec.seed = f.seed;
  return spec;
}

// What an epoch of training reads and writes.
struct EpochLoop {
  Trainer* trainer;
  const FitOptions& f;
  CallbackList* callbacks;
  BatchSource* data;
  const Distributed* distributed;
  bool by_files;
  const std::vector<std::string>& metrics;
  // The metrics' running values are read after each step only when a callback shows them then
  // (the per-step CSV, a front end's progress, TensorBoard's batch summaries).
  bool batch_logs;
  FitResult* result;
  int64_t step;  // numbered as the optimizer counts them
};

// The next batch of this worker; false at the end of the epoch (for every worker when one
// worker's files run out, with shard_by=files).
absl::StatusOr<bool> NextBatch(EpochLoop* loop, Batch* batch) {
  auto more = loop->data->Next(batch);
  if (!more.ok()) {
    return absl::Status(more.status().code(), absl::StrCat(loop->data->description(), ": ", more.status().message()));
  }
  if (loop->by_files) {
    auto all = loop->trainer->AllWorkersHave(*more);
    if (!all.ok()) {
      return absl::Status(all.status().code(), absl::StrCat("step ", loop->step, ": ", all.status().message()));
    }
    if (!*all) return false;
  }
  if (!*more) return false;
  if (loop->distributed != nullptr && !loop->by_files) {
    if (absl::Status s = TakeSlice(loop->distributed->cluster(), batch); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("step ", loop->step, ": ", s.message()));
    }
  }
  return true;
}

// One training step on `batch`: its loss in `loss`, the metrics' running values in `values`
// when a callback reads them after each step, then the callbacks' OnTrainBatchEnd.
absl::Status TrainStep(EpochLoop* loop, int64_t epoch, const Batch& batch, RunningMean* loss,
                       std::vector<double>* values) {
  const FitOptions& f = loop->f;
  FitResult* result = loop->result;
  const int64_t step = loop->step;
  const auto started = std::chrono::steady_clock::now();
  RunMetadata trace;
  const bool traced = result->steps == 0 && !f.step_stats.empty();
  auto value = loop->trainer->Step(batch.inputs, batch.targets, batch.weights, traced ? &trace : nullptr);
  result->step_ms.push_back(
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count());
  if (!value.ok()) {
    return absl::Status(value.status().code(), absl::StrCat("step ", step, ": ", value.status().message()));
  }
  if (traced) {
    if (absl::Status s = WriteBinaryProto(Env::Default(), f.step_stats, trace); !s.ok()) {
      return Invalid(absl::StrCat("option 'step_stats': '", f.step_stats, "': ", s.message()));
    }
  }
  if (!std::isfinite(*value)) {
    return Invalid(absl::StrCat("step ", step, " (epoch ", epoch, "): the loss is ", *value, "; stopping"));
  }
  loss->Add(*value, batch.size);
  if (!loop->metrics.empty() && loop->batch_logs) {
    auto read = loop->trainer->MetricValues();
    if (!read.ok()) return read.status();
    *values = *read;
  }
  // Keras's batch logs: the running loss and metrics.
  Logs running = {{"loss", loss->value()}};
  for (size_t i = 0; i < values->size(); ++i) running.push_back({loop->metrics[i], (*values)[i]});
  BatchEnd end{epoch, step, loss->count, loop->data->examples(), *value, &running};
  ++loop->step;
  ++result->steps;
  return loop->callbacks->OnTrainBatchEnd(end);
}

// One epoch over the training data: its loss and metrics in `logs`.
absl::Status TrainEpoch(EpochLoop* loop, int64_t epoch, EpochLogs* logs) {
  TF_RETURN_IF_ERROR(loop->trainer->ResetMetrics());
  TF_RETURN_IF_ERROR(loop->data->StartEpoch(epoch));
  RunningMean loss;
  std::vector<double> values;  // the metrics' running values
  for (;;) {
    Batch batch;
    auto more = NextBatch(loop, &batch);
    if (!more.ok()) return more.status();
    if (!*more) break;
    TF_RETURN_IF_ERROR(TrainStep(loop, epoch, batch, &loss, &values));
  }
  if (!loop->metrics.empty() && !loop->batch_logs && loss.count > 0) {
    // Nothing reads the running values between steps: the epoch's, once.
    auto read = loop->trainer->MetricValues();
    if (!read.ok()) return read.status();
    values = *read;
  }
  if (loss.count == 0) {
    return Invalid(absl::StrCat(loop->data->description(), " gave no batch in epoch ", epoch,
                                loop->f.drop_remainder ? " (fewer examples than one batch, and drop_remainder)" : ""));
  }
  logs->epoch = epoch;
  logs->logs.push_back({"loss", loss.value()});
  for (size_t i = 0; i < values.size(); ++i) logs->logs.push_back({loop->metrics[i], values[i]});
  return absl::OkStatus();
}

// The validation data evaluated in inference mode: val_loss and val_<metric> added to `logs`.
absl::Status Validate(Trainer* trainer, BatchSource* validation,
                      const std::vector<std::string>& metrics, EpochLogs* logs) {
  TF_RETURN_IF_ERROR(trainer->ResetMetrics());
  TF_RETURN_IF_ERROR(validation->StartEpoch(0));
  RunningMean val_loss;
  for (;;) {
    Batch batch;
    auto more = validation->Next(&batch);
    if (!more.ok()) {
      return absl::Status(more.status().code(), absl::StrCat("validation: ", validation->description(), ": ",
                                                             more.status().message()));
    }
    if (!*more) break;
    auto value = trainer->Evaluate(batch.inputs, batch.targets, batch.weights);
    if (!value.ok()) {
      return absl::Status(value.status().code(), absl::StrCat("validation: ", value.status().message()));
    }
    val_loss.Add(*value, batch.size);
  }
  if (val_loss.count == 0) return Invalid(absl::StrCat("validation: ", validation->description(), " has no examples"));
  logs->logs.push_back({"val_loss", val_loss.value()});
  if (!metrics.empty()) {
    auto read = trainer->MetricValues();
    if (!read.ok()) return read.status();
    for (size_t i = 0; i < read->size(); ++i) logs->logs.push_back({"val_" + metrics[i], (*read)[i]});
  }
  return absl::OkStatus();
}

// After the last epoch: --export and --save_weights.
absl::Status WriteTrained(Trainer* trainer, const FitOptions& f,
                          const std::function<void(const std::string&)>& on_message) {
  if (!f.export_dir.empty()) {
    if (absl::Status s = trainer->Export(f.export_dir); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("option 'export': '", f.export_dir, "': ", s.message()));
    }
    if (on_message) on_message(absl::StrCat("exported the trained SavedModel to ", f.export_dir));
  }
  if (!f.save_weights.empty()) {
    auto values = trainer->VariableValues();
    if (!values.ok()) return values.status();
    if (absl::Status s = WriteNpz(f.save_weights, *values); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("option 'save_weights': ", s.message()));
    }
  }
  return absl::OkStatus();
}

// The options' callbacks and the front end's, in Fit's order (fit.h).
absl::StatusOr<std::unique_ptr<CallbackList>> MakeCallbacks(
    Trainer* trainer, const TrainerOptions& options, const FitOptions& f, bool validation,
    Callback* front_end, const std::function<void(const std::string&)>& on_message) {
  const std::vector<std::string>& metrics = trainer->metric_names();
  std::vector<std::string> log_names = {"loss"};
  for (const std::string& m : metrics) log_names.push_back(m);
  if (validation) {
    log_names.push_back("val_loss");
    for (const std::string& m : metrics) log_names.push_back("val_" + m);
  }
  auto checkpoints = CheckpointCallbacks(f, TrainerState(trainer), log_names, on_message);
  if (!checkpoints.ok()) return checkpoints.status();
  std::unique_ptr<TensorBoardLogger> tensorboard;
  if (!f.tensorboard.empty()) {
    auto logger = TensorBoardLogger::Create(f.tensorboard, f.update_freq);
    if (!logger.ok()) return logger.status();
    tensorboard = std::move(*logger);
  }
  auto list = std::make_unique<CallbackList>();
  if (!f.history.empty()) list->Add(std::make_unique<HistoryCsv>(f.history, metrics, validation));
  if (front_end != nullptr) list->AddUnowned(front_end);
  if (tensorboard) {
    list->Add(std::make_unique<TensorBoard>(std::move(tensorboard), trainer, options.optimizer));
  }
  for (auto& c : *checkpoints) list->Add(std::move(c));
  return list;
}

}  // namespace

absl::StatusOr<FitResult> Fit(Trainer* trainer, const TrainerOptions& options,
                              Callback* front_end,
                              std::function<void(const std::string&)> on_message) {
  FitOptions f = options.fit;
  const Distributed* distributed = trainer->distributed();
  TF_RETURN_IF_ERROR(CheckFitOptions(options, distributed, &f));
  auto spec = MakeDataSpec(trainer, options, f);
  if (!spec.ok()) return spec.status();
  // shard_by=files: this worker reads whole files (i, i + N, ... of the sorted list), its share
  // of the global batch a step, as tf.data's AutoShardPolicy.FILE.
  const bool by_files = distributed != nullptr && options.distributed.shard_by == "files";
  std::string data_path = f.data;
  if (by_files) {
    auto mine = WorkerFiles(f.data, distributed->cluster());
    if (!mine.ok()) return mine.status();
    data_path = *mine;
    spec->batch_size = f.batch_size / distributed->cluster().size();
  }
  auto data = OpenData(data_path, *spec);
  if (!data.ok()) return data.status();
  if ((*data)->examples() >= 0 && f.batch_size > (*data)->examples()) {
    return Invalid(absl::StrCat("batch_size=", f.batch_size, " is larger than the data (",
                                (*data)->examples(), " examples)"));
  }
  std::unique_ptr<BatchSource> validation;
  if (!f.validation.empty()) {
    DataSpec v = *spec;
    v.batch_size = f.batch_size;
    v.shuffle = false;
    v.shuffle_buffer = 0;
    v.drop_remainder = false;
    auto opened = OpenData(f.validation, v);
    if (!opened.ok()) return opened.status();
    validation = std::move(*opened);
  }

  const std::vector<std::string>& metrics = trainer->metric_names();
  auto callbacks = MakeCallbacks(trainer, options, f, validation != nullptr, front_end, on_message);
  if (!callbacks.ok()) return callbacks.status();
  FitResult result;
  TF_RETURN_IF_ERROR((*callbacks)->OnRestore(&result.initial_epoch));
  if (distributed != nullptr) {
    // A resumed chief's variables, optimizer state and epoch, on every worker.
    auto chief_epoch = trainer->BroadcastFromChief(result.initial_epoch);
    if (!chief_epoch.ok()) return chief_epoch.status();
    result.initial_epoch = *chief_epoch;
  }
  TF_RETURN_IF_ERROR((*callbacks)->OnTrainBegin(result.initial_epoch));

  auto iterations = trainer->Iterations();
  if (!iterations.ok()) return iterations.status();
  EpochLoop loop{trainer, f, callbacks->get(), data->get(), distributed, by_files, metrics,
                 (*callbacks)->WantsBatchLogs(), &result, *iterations};
  for (int64_t epoch = result.initial_epoch; epoch < f.epochs; ++epoch) {
    EpochLogs epoch_logs;
    TF_RETURN_IF_ERROR(TrainEpoch(&loop, epoch, &epoch_logs));
    if (validation) TF_RETURN_IF_ERROR(Validate(trainer, validation.get(), metrics, &epoch_logs));
    result.history.push_back(epoch_logs);
    bool stop = false;
    TF_RETURN_IF_ERROR((*callbacks)->OnEpochEnd(epoch, epoch_logs.logs, &stop));
    if (stop) {
      result.stopped_early = true;
      break;
    }
  }
  TF_RETURN_IF_ERROR((*callbacks)->OnTrainEnd());
  TF_RETURN_IF_ERROR(WriteTrained(trainer, f, on_message));
  return result;
}

}  // namespace tensorflow::tf_ext::train
