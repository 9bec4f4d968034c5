// Keras's model.fit for tf_ext::Trainer, with no Python: epochs of batches from data.h's
// sources (an .npz in memory, TFRecord files through tf.data), the loss and metrics per step and
// per epoch (history CSVs equal to model.fit(...).history), validation after each epoch,
// TensorBoard event files laid out as Keras's callback writes them, checkpoints each epoch with
// --resume=auto, early stopping and the best epoch's checkpoint, then the trained weights and
// SavedModel. tf_ext_train and the C API's TfExtTrainerFit both call Fit; every setting is an
// entry of the trainer's one option table (options.h), held in TrainerOptions::fit.
#ifndef TF_EXT_TRAIN_LOOP_FIT_H_
#define TF_EXT_TRAIN_LOOP_FIT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tf_ext/train/loop/logs.h"
#include "tf_ext/train/model/trainer.h"

namespace tensorflow::tf_ext::train {

// What a front end shows while Fit runs; each may be empty.
struct FitCallbacks {
  // After each training step: the epoch (from 0), the examples seen in it, its examples (-1
  // when unknown before the epoch ends), and Keras's batch logs (the running loss and metrics).
  std::function<void(int64_t epoch, int64_t seen, int64_t examples, const Logs& running)> on_batch_end;
  // After each epoch: its logs and the one-line summary Fit prints ("epoch 2/5: loss 0.31, ...").
  std::function<void(const EpochLogs& logs, const std::string& line)> on_epoch_end;
  // Anything else worth a line (a checkpoint written, early stopping, a resumed epoch).
  std::function<void(const std::string& message)> on_message;
};

struct FitResult {
  std::vector<EpochLogs> history;  // the epochs this call ran
  int64_t initial_epoch = 0;       // > 0 when resumed from a checkpoint
  int64_t steps = 0;               // training steps this call ran
  bool stopped_early = false;
  std::vector<double> step_ms;     // each step's wall time
};

// Trains `trainer` as options.fit says (trainer was created with the same `options`).
absl::StatusOr<FitResult> Fit(Trainer* trainer, const TrainerOptions& options,
                              const FitCallbacks& callbacks = {});

}  // namespace tensorflow::tf_ext::train

#endif  // TF_EXT_TRAIN_LOOP_FIT_H_
