// TensorBoard event files of a training run, laid out, tagged and encoded as Keras 3's
// keras.callbacks.TensorBoard writes them, by TensorFlow's own summary kernels (the ops
// tf.summary runs: SummaryWriter, CreateSummaryFileWriter, WriteSummary, FlushSummaryWriter,
// CloseSummaryWriter) in a small Session of the logger's own, beside the trainer's.
//
// DIR/train holds the training curves, DIR/validation the validation curves (created when the
// first validation logs arrive), each an events.out.tfevents.<time>.<host>.<pid>.<n>.v2 file.
// Every value is what tf.summary.scalar writes: a float32 scalar tensor whose metadata names
// the "scalars" plugin (not a legacy simple_value), so TensorBoard shows both alike.
//
//   DIR/train       epoch_<name>   each training log of the epoch ("loss", each metric), step
//                                  the epoch (from 0)
//                   epoch_learning_rate  the optimizer's learning rate at the epoch's end
//                   batch_<name>   Keras's batch logs (running loss and metrics) every
//                                  update_freq steps, step the optimizer iterations after
//                                  the batch (1, 2, ...)
//   DIR/validation  evaluation_<name>_vs_iterations  each val_<name>, step the optimizer
//                                  iterations at the epoch's end
//                   epoch_<name>   each val_<name>, step the epoch
//
// One difference from Keras, kept on purpose: with update_freq=N Keras leaves out an epoch's
// epoch_* and evaluation_* values when its running batch count (training, resp. validation) is
// not a multiple of N (its record_if condition of the last batch is still in force); this
// logger writes every epoch. Keras's "keras" model-config summary (write_graph) is not
// written: a SavedModel holds no Keras config. Not thread-safe.
// Tested by //tests:fit_summary_test (the events read back) and //tests:fit_tensorboard_py_test
// (against the files Keras's callback writes for the same model and data).
#ifndef TF_EXT_TRAIN_LOOP_SUMMARY_H_
#define TF_EXT_TRAIN_LOOP_SUMMARY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/public/session.h"
#include "tf_ext/train/loop/callback.h"
#include "tf_ext/train/loop/logs.h"
#include "tf_ext/train/model/trainer.h"

namespace tensorflow::tf_ext::train {

// "epoch" -> 0 (epoch summaries only), "batch" -> 1, "N" (a positive integer) -> N: how often
// TensorBoardLogger writes batch summaries. InvalidArgument naming the value otherwise.
absl::StatusOr<int64_t> ParseUpdateFreq(const std::string& update_freq);

class TensorBoardLogger {
 public:
  // DIR/train and DIR/validation, as Keras's TensorBoard callback; update_freq "epoch", "batch"
  // or a positive integer N (steps), InvalidArgument naming the value otherwise. DIR/train is
  // created now (an error names it when it cannot be).
  static absl::StatusOr<std::unique_ptr<TensorBoardLogger>> Create(const std::string& dir,
                                                                    const std::string& update_freq);
  ~TensorBoardLogger();
  TensorBoardLogger(const TensorBoardLogger&) = delete;
  TensorBoardLogger& operator=(const TensorBoardLogger&) = delete;

  // After each training step: `step` is the global step from 0 (optimizer iterations before
  // the step), `logs` Keras's batch logs (running loss and metrics). Writes batch_<name> at
  // step + 1 when that is a multiple of the update frequency (never for "epoch").
  absl::Status OnTrainBatchEnd(int64_t step, const Logs& logs);
  // After each epoch (validation included): `logs` the epoch's logs (loss, metrics, val_...),
  // `learning_rate` the optimizer's learning rate at the epoch's end, `iterations` the
  // optimizer iterations at the epoch's end. Flushes both files, so a killed run keeps its
  // curves up to its last epoch.
  absl::Status OnEpochEnd(int64_t epoch, const Logs& logs, double learning_rate,
                          int64_t iterations);
  // Flushes and closes the files; a later write fails. Also called by the destructor.
  absl::Status Close();

  int64_t update_freq() const { return update_freq_; }  // 0: "epoch"
  const std::string& train_dir() const { return train_.dir; }
  const std::string& validation_dir() const { return validation_.dir; }

 private:
  // One file writer: its nodes in the logger's graph, run by name.
  struct Writer {
    std::string dir;
    std::string create, write, flush, close;  // node names
    bool open = false;
  };

  TensorBoardLogger() = default;
  absl::Status Open(Writer* w);
  absl::Status Scalar(Writer* w, const std::string& tag, double value, int64_t step);
  absl::Status Run(const std::string& target, const std::vector<std::pair<std::string, Tensor>>& feeds);

  int64_t update_freq_ = 0;
  std::unique_ptr<Session> session_;
  std::string step_, value_, tag_;  // the placeholders every write feeds
  Writer train_, validation_;
  bool closed_ = false;
};

// --tensorboard=DIR as a callback (callback.h): the logger's batch summaries each step, its epoch
// summaries with the optimizer's learning rate and iterations at the epoch's end (read from
// `trainer`), the files closed when training ends.
class TensorBoard : public Callback {
 public:
  TensorBoard(std::unique_ptr<TensorBoardLogger> logger, Trainer* trainer, OptimizerSpec optimizer)
      : logger_(std::move(logger)), trainer_(trainer), optimizer_(std::move(optimizer)) {}
  bool WantsBatchLogs() const override { return logger_->update_freq() > 0; }
  absl::Status OnTrainBatchEnd(const BatchEnd& batch) override;
  absl::Status OnEpochEnd(int64_t epoch, const Logs& logs, bool* stop) override;
  absl::Status OnTrainEnd() override { return logger_->Close(); }

 private:
  std::unique_ptr<TensorBoardLogger> logger_;
  Trainer* trainer_;
  OptimizerSpec optimizer_;
};

}  // namespace tensorflow::tf_ext::train

#endif  // TF_EXT_TRAIN_LOOP_SUMMARY_H_
