#include "tf_ext/train/loop/history.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tensorflow/core/platform/env.h"

namespace tensorflow::tf_ext::train {
namespace {

std::string Number(double v) { return absl::StrFormat("%.9g", v); }

// Appends (when resuming a run whose file exists) or creates a CSV with `header`.
absl::Status OpenCsv(const std::string& path, const std::string& header, bool append,
                     std::ofstream* out) {
  const bool exists = append && Env::Default()->FileExists(path).ok();
  out->open(path, exists ? std::ios::app : std::ios::trunc);
  if (!*out) return absl::InvalidArgumentError(absl::StrCat("cannot write '", path, "'"));
  if (!exists) *out << header << "\n";
  return absl::OkStatus();
}

}  // namespace

std::string EpochsCsvPath(const std::string& history) {
  if (absl::EndsWith(history, ".csv")) {
    return absl::StrCat(history.substr(0, history.size() - 4), ".epochs.csv");
  }
  return absl::StrCat(history, ".epochs.csv");
}

HistoryCsv::HistoryCsv(std::string path, std::vector<std::string> metrics, bool validation)
    : path_(std::move(path)), metrics_(std::move(metrics)), validation_(validation) {}

absl::Status HistoryCsv::OnTrainBegin(int64_t initial_epoch) {
  const bool append = initial_epoch > 0;
  std::string header = "step,epoch,loss";
  for (const std::string& m : metrics_) absl::StrAppend(&header, ",", m);
  TF_RETURN_IF_ERROR(OpenCsv(path_, header, append, &steps_));
  std::string epochs_header = "epoch,loss";
  for (const std::string& m : metrics_) absl::StrAppend(&epochs_header, ",", m);
  if (validation_) {
    absl::StrAppend(&epochs_header, ",val_loss");
    for (const std::string& m : metrics_) absl::StrAppend(&epochs_header, ",val_", m);
  }
  return OpenCsv(EpochsCsvPath(path_), epochs_header, append, &epochs_);
}

absl::Status HistoryCsv::OnTrainBatchEnd(const BatchEnd& batch) {
  steps_ << batch.step << "," << batch.epoch << "," << Number(batch.loss);
  // The running metrics: the batch logs after the running loss.
  for (size_t i = 1; i < batch.logs->size(); ++i) steps_ << "," << Number((*batch.logs)[i].second);
  steps_ << "\n";
  return absl::OkStatus();
}

absl::Status HistoryCsv::OnEpochEnd(int64_t epoch, const Logs& logs, bool* stop) {
  epochs_ << epoch;
  for (const auto& [name, v] : logs) epochs_ << "," << Number(v);
  epochs_ << "\n";
  epochs_.flush();
  steps_.flush();
  return absl::OkStatus();
}

}  // namespace tensorflow::tf_ext::train
