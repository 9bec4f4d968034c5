#include "tf_ext/train/fit.h"

#include <chrono>
#include <cmath>
#include <fstream>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tensorflow/core/framework/tensor_util.h"
#include "tensorflow/core/platform/env.h"
#include "tensorflow/core/protobuf/config.pb.h"
#include "tf_ext/graph/io/npy_io.h"
#include "tf_ext/graph/runtime/export.h"
#include "tf_ext/train/callbacks.h"
#include "tf_ext/train/data.h"
#include "tf_ext/train/optimizers.h"
#include "tf_ext/train/summary.h"

namespace tensorflow::tf_ext::train {
namespace {

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

// The epochs' CSV beside the per-step one: DIR/h.csv -> DIR/h.epochs.csv.
std::string EpochsCsvPath(const std::string& history) {
  if (absl::EndsWith(history, ".csv")) {
    return absl::StrCat(history.substr(0, history.size() - 4), ".epochs.csv");
  }
  return absl::StrCat(history, ".epochs.csv");
}

std::string Number(double v) { return absl::StrFormat("%.9g", v); }

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

// Appends (when resuming a run whose file exists) or creates a CSV with `header`.
absl::Status OpenCsv(const std::string& path, const std::string& header, bool append,
                     std::ofstream* out) {
  const bool exists = append && Env::Default()->FileExists(path).ok();
  out->open(path, exists ? std::ios::app : std::ios::trunc);
  if (!*out) return Invalid(absl::StrCat("cannot write '", path, "'"));
  if (!exists) *out << header << "\n";
  return absl::OkStatus();
}

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

absl::StatusOr<std::string> WorkerFiles(const std::string& data, const Cluster& cluster) {
  if (!IsTFRecordPath(data)) {
    return Invalid(absl::StrCat("option 'shard_by': 'files' shards TFRecord files over the workers; '",
                                data, "' is not TFRecord data (use shard_by=batch)"));
  }
  auto files = ExpandTFRecordFiles(data);
  if (!files.ok()) return files.status();
  if (static_cast<int64_t>(files->size()) < cluster.size()) {
    return Invalid(absl::StrCat("option 'shard_by': 'files' needs at least one file per worker; '", data,
                                "' has ", files->size(), " for ", cluster.size(),
                                " workers (use shard_by=batch)"));
  }
  std::vector<std::string> mine;
  for (size_t i = cluster.rank; i < files->size(); i += cluster.size()) mine.push_back((*files)[i]);
  return absl::StrJoin(mine, ",");
}

const double* FindLog(const Logs& logs, const std::string& name) {
  for (const auto& [k, v] : logs) {
    if (k == name) return &v;
  }
  return nullptr;
}

absl::StatusOr<FitResult> Fit(Trainer* trainer, const TrainerOptions& options,
                              const FitCallbacks& callbacks) {
  FitOptions f = options.fit;
  const Distributed* distributed = trainer->distributed();
  if (distributed != nullptr) {
    const int64_t workers = distributed->cluster().size();
    if (f.batch_size % workers != 0) {
      return Invalid(absl::StrCat("batch_size=", f.batch_size, " (the global batch) does not split over ",
                                  workers, " workers: use a multiple of ", workers));
    }
    if (!distributed->cluster().is_chief()) {
      // Only the chief writes; the others resume from the chief's state (broadcast below).
      for (std::string* written : {&f.history, &f.tensorboard, &f.checkpoint, &f.resume, &f.save_best,
                                   &f.save_weights, &f.export_dir, &f.step_stats}) {
        written->clear();
      }
    }
  }
  if (f.data.empty()) return Invalid("option 'data' (the training data) is required");
  if (f.inputs.empty()) return Invalid("option 'inputs' (the data's keys fed to the signature's inputs) is required");
  if (f.batch_size < 1) return Invalid(absl::StrCat("batch_size=", f.batch_size, " is not positive"));
  if (f.epochs < 1) return Invalid(absl::StrCat("epochs=", f.epochs, " is not positive"));
  if (f.shuffle_buffer < 0) {
    return Invalid(absl::StrCat("shuffle_buffer=", f.shuffle_buffer, " is negative"));
  }
  const bool has_targets = LossHasTargets(options.loss);
  if (has_targets && f.targets.empty()) return Invalid("option 'targets' is required by this loss");
  if (!f.export_dir.empty()) TF_RETURN_IF_ERROR(CheckExportTarget(f.export_dir));

  // inputs=KEY[:INPUT]: the data's KEY fed as INPUT (default: KEY).
  DataSpec spec;
  for (absl::string_view item : absl::StrSplit(f.inputs, ',')) {
    std::vector<std::string> parts = absl::StrSplit(item, absl::MaxSplits(':', 1));
    if (parts[0].empty() || (parts.size() == 2 && parts[1].empty())) {
      return Invalid(absl::StrCat("option 'inputs': '", item, "' is not KEY or KEY:INPUT"));
    }
    spec.input_keys.push_back(parts[0]);
    spec.input_names.push_back(parts.back());
  }
  auto resolved = trainer->ResolveInputs(spec.input_names);
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
  spec.targets_key = has_targets ? f.targets : "";
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
  spec.shuffle = f.shuffle;
  spec.shuffle_buffer = f.shuffle_buffer;
  spec.seed = f.seed;
  // shard_by=files: this worker reads whole files (i, i + N, ... of the sorted list), its share
  // of the global batch a step, as tf.data's AutoShardPolicy.FILE.
  const bool by_files = distributed != nullptr && options.distributed.shard_by == "files";
  std::string data_path = f.data;
  if (by_files) {
    auto mine = WorkerFiles(f.data, distributed->cluster());
    if (!mine.ok()) return mine.status();
    data_path = *mine;
    spec.batch_size = f.batch_size / distributed->cluster().size();
  }
  auto data = OpenData(data_path, spec);
  if (!data.ok()) return data.status();
  if ((*data)->examples() >= 0 && f.batch_size > (*data)->examples()) {
    return Invalid(absl::StrCat("batch_size=", f.batch_size, " is larger than the data (",
                                (*data)->examples(), " examples)"));
  }
  std::unique_ptr<BatchSource> validation;
  if (!f.validation.empty()) {
    DataSpec v = spec;
    v.batch_size = f.batch_size;
    v.shuffle = false;
    v.shuffle_buffer = 0;
    v.drop_remainder = false;
    auto opened = OpenData(f.validation, v);
    if (!opened.ok()) return opened.status();
    validation = std::move(*opened);
  }

  const std::vector<std::string>& metrics = trainer->metric_names();
  std::vector<std::string> log_names = {"loss"};
  for (const std::string& m : metrics) log_names.push_back(m);
  if (validation) {
    log_names.push_back("val_loss");
    for (const std::string& m : metrics) log_names.push_back("val_" + m);
  }
  auto epoch_callbacks = EpochCallbacks::Create(f, trainer, log_names, callbacks.on_message);
  if (!epoch_callbacks.ok()) return epoch_callbacks.status();
  std::unique_ptr<TensorBoardLogger> tensorboard;
  if (!f.tensorboard.empty()) {
    auto logger = TensorBoardLogger::Create(f.tensorboard, f.update_freq);
    if (!logger.ok()) return logger.status();
    tensorboard = std::move(*logger);
  }
  FitResult result;
  auto initial_epoch = (*epoch_callbacks)->OnTrainBegin();
  if (!initial_epoch.ok()) return initial_epoch.status();
  result.initial_epoch = *initial_epoch;
  if (distributed != nullptr) {
    // A resumed chief's variables, optimizer state and epoch, on every worker.
    auto chief_epoch = trainer->BroadcastFromChief(result.initial_epoch);
    if (!chief_epoch.ok()) return chief_epoch.status();
    result.initial_epoch = *chief_epoch;
  }

  // --history: one row per step; its .epochs.csv one row per epoch.
  std::ofstream steps_csv, epochs_csv;
  if (!f.history.empty()) {
    const bool append = result.initial_epoch > 0;
    std::string header = "step,epoch,loss";
    for (const std::string& m : metrics) absl::StrAppend(&header, ",", m);
    TF_RETURN_IF_ERROR(OpenCsv(f.history, header, append, &steps_csv));
    std::string epochs_header = "epoch,loss";
    for (const std::string& m : metrics) absl::StrAppend(&epochs_header, ",", m);
    if (validation) {
      absl::StrAppend(&epochs_header, ",val_loss");
      for (const std::string& m : metrics) absl::StrAppend(&epochs_header, ",val_", m);
    }
    TF_RETURN_IF_ERROR(OpenCsv(EpochsCsvPath(f.history), epochs_header, append, &epochs_csv));
  }

  auto iterations = trainer->Iterations();
  if (!iterations.ok()) return iterations.status();
  int64_t step = *iterations;  // numbered as the optimizer counts them
  // The metrics' running values are read after each step only when something shows them then:
  // the per-step CSV, a front end's batch callback, TensorBoard's batch summaries.
  const bool batch_summaries = tensorboard != nullptr && tensorboard->update_freq() > 0;
  const bool per_step_logs = steps_csv.is_open() || callbacks.on_batch_end || batch_summaries;
  for (int64_t epoch = result.initial_epoch; epoch < f.epochs; ++epoch) {
    TF_RETURN_IF_ERROR(trainer->ResetMetrics());
    TF_RETURN_IF_ERROR((*data)->StartEpoch(epoch));
    RunningMean loss;
    std::vector<double> values;  // the metrics' running values
    Logs running;
    for (;;) {
      Batch batch;
      auto more = (*data)->Next(&batch);
      if (!more.ok()) {
        return absl::Status(more.status().code(), absl::StrCat((*data)->description(), ": ", more.status().message()));
      }
      if (by_files) {
        // The epoch ends for every worker when one worker's files run out.
        auto all = trainer->AllWorkersHave(*more);
        if (!all.ok()) {
          return absl::Status(all.status().code(), absl::StrCat("step ", step, ": ", all.status().message()));
        }
        if (!*all) break;
      }
      if (!*more) break;
      if (distributed != nullptr && !by_files) {
        if (absl::Status s = TakeSlice(distributed->cluster(), &batch); !s.ok()) {
          return absl::Status(s.code(), absl::StrCat("step ", step, ": ", s.message()));
        }
      }
      const auto started = std::chrono::steady_clock::now();
      RunMetadata trace;
      const bool traced = result.steps == 0 && !f.step_stats.empty();
      auto value = trainer->Step(batch.inputs, batch.targets, batch.weights, traced ? &trace : nullptr);
      result.step_ms.push_back(
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
      loss.Add(*value, batch.size);
      if (!metrics.empty() && per_step_logs) {
        auto read = trainer->MetricValues();
        if (!read.ok()) return read.status();
        values = *read;
      }
      if (steps_csv.is_open()) {
        steps_csv << step << "," << epoch << "," << Number(*value);
        for (double v : values) steps_csv << "," << Number(v);
        steps_csv << "\n";
      }
      ++step;
      ++result.steps;
      if (callbacks.on_batch_end || batch_summaries) {
        // Keras's batch logs: the running loss and metrics.
        running = {{"loss", loss.value()}};
        for (size_t i = 0; i < values.size(); ++i) running.push_back({metrics[i], values[i]});
        if (callbacks.on_batch_end) callbacks.on_batch_end(epoch, loss.count, (*data)->examples(), running);
        if (tensorboard) TF_RETURN_IF_ERROR(tensorboard->OnTrainBatchEnd(step - 1, running));
      }
    }
    if (!metrics.empty() && !per_step_logs && loss.count > 0) {
      // Nothing reads the running values between steps: the epoch's, once.
      auto read = trainer->MetricValues();
      if (!read.ok()) return read.status();
      values = *read;
    }
    if (loss.count == 0) {
      return Invalid(absl::StrCat((*data)->description(), " gave no batch in epoch ", epoch,
                                  f.drop_remainder ? " (fewer examples than one batch, and drop_remainder)" : ""));
    }
    EpochLogs epoch_logs;
    epoch_logs.epoch = epoch;
    epoch_logs.logs.push_back({"loss", loss.value()});
    for (size_t i = 0; i < values.size(); ++i) epoch_logs.logs.push_back({metrics[i], values[i]});
    if (validation) {
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
      epoch_logs.logs.push_back({"val_loss", val_loss.value()});
      if (!metrics.empty()) {
        auto read = trainer->MetricValues();
        if (!read.ok()) return read.status();
        for (size_t i = 0; i < read->size(); ++i) epoch_logs.logs.push_back({"val_" + metrics[i], (*read)[i]});
      }
    }
    std::vector<std::string> parts;
    for (const auto& [name, v] : epoch_logs.logs) parts.push_back(absl::StrFormat("%s %.6g", name, v));
    const std::string line = absl::StrFormat("epoch %d/%d: %s", epoch + 1, f.epochs, absl::StrJoin(parts, ", "));
    if (epochs_csv.is_open()) {
      epochs_csv << epoch;
      for (const auto& [name, v] : epoch_logs.logs) epochs_csv << "," << Number(v);
      epochs_csv << "\n";
      epochs_csv.flush();
      steps_csv.flush();
    }
    result.history.push_back(epoch_logs);
    if (callbacks.on_epoch_end) callbacks.on_epoch_end(epoch_logs, line);
    if (tensorboard) {
      auto done = trainer->Iterations();
      if (!done.ok()) return done.status();
      TF_RETURN_IF_ERROR(tensorboard->OnEpochEnd(epoch, epoch_logs.logs,
                                                 LearningRateAt(options.optimizer, *done), *done));
    }
    auto stop = (*epoch_callbacks)->OnEpochEnd(epoch, epoch_logs.logs);
    if (!stop.ok()) return stop.status();
    if (*stop) {
      result.stopped_early = true;
      break;
    }
  }
  TF_RETURN_IF_ERROR((*epoch_callbacks)->OnTrainEnd());
  if (tensorboard) TF_RETURN_IF_ERROR(tensorboard->Close());
  if (!f.export_dir.empty()) {
    if (absl::Status s = trainer->Export(f.export_dir); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("option 'export': '", f.export_dir, "': ", s.message()));
    }
    if (callbacks.on_message) callbacks.on_message(absl::StrCat("exported the trained SavedModel to ", f.export_dir));
  }
  if (!f.save_weights.empty()) {
    auto values = trainer->VariableValues();
    if (!values.ok()) return values.status();
    if (absl::Status s = WriteNpz(f.save_weights, *values); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("option 'save_weights': ", s.message()));
    }
  }
  return result;
}

}  // namespace tensorflow::tf_ext::train
