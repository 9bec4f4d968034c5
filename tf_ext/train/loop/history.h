// --history=PATH as a callback (callback.h): the per-step CSV (step,epoch,loss,metrics...) and
// beside it PATH.epochs.csv, one row per epoch (epoch,loss,metrics...,val_loss,val_...), each
// value with 9 significant digits. A resumed run appends to the files an earlier run wrote.
#ifndef TF_EXT_TRAIN_LOOP_HISTORY_H_
#define TF_EXT_TRAIN_LOOP_HISTORY_H_

#include <fstream>
#include <string>
#include <vector>

#include "tf_ext/train/loop/callback.h"

namespace tensorflow::tf_ext::train {

// The epochs' CSV beside the per-step one: DIR/h.csv -> DIR/h.epochs.csv.
std::string EpochsCsvPath(const std::string& history);

class HistoryCsv : public Callback {
 public:
  // `metrics`: the metrics' names, in the logs' order; `validation`: the epochs carry val_ logs.
  HistoryCsv(std::string path, std::vector<std::string> metrics, bool validation);

  // Opens both files: appended to when training starts after epoch 0 and they exist, else
  // written anew with their header. InvalidArgument naming a file that cannot be written.
  absl::Status OnTrainBegin(int64_t initial_epoch) override;
  bool WantsBatchLogs() const override { return true; }
  absl::Status OnTrainBatchEnd(const BatchEnd& batch) override;
  // The epoch's row; both files flushed, so a killed run keeps its rows up to its last epoch.
  absl::Status OnEpochEnd(int64_t epoch, const Logs& logs, bool* stop) override;

 private:
  std::string path_;
  std::vector<std::string> metrics_;
  bool validation_;
  std::ofstream steps_, epochs_;
};

}  // namespace tensorflow::tf_ext::train

#endif  // TF_EXT_TRAIN_LOOP_HISTORY_H_
