// Keras's model.fit for tf_ext::Trainer, with no Python: epochs of batches from data.h's
// sources (an .npz in memory, TFRecord files through tf.data), the loss and metrics per step and
// per epoch (history CSVs equal to model.fit(...).history), validation after each epoch,
// TensorBoard event files laid out as Keras's callback writes them, checkpoints each epoch with
// --resume=auto, early stopping and the best epoch's checkpoint, then the trained weights and
// SavedModel, each a callback. tf_ext_train and the C API's TfExtTrainerFit both call Fit; every setting is an
// entry of the trainer's one option table (options.h), held in TrainerOptions::fit.
#ifndef TF_EXT_TRAIN_LOOP_FIT_H_
#define TF_EXT_TRAIN_LOOP_FIT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tf_ext/train/loop/callback.h"
#include "tf_ext/train/loop/logs.h"
#include "tf_ext/train/model/trainer.h"

namespace tensorflow::tf_ext::train {

struct FitResult {
  std::vector<EpochLogs> history;  // the epochs this call ran
  int64_t initial_epoch = 0;       // > 0 when resumed from a checkpoint
  int64_t steps = 0;               // training steps this call ran
  bool stopped_early = false;
  std::vector<double> step_ms;     // each step's wall time
};

// Trains `trainer` as options.fit says (trainer was created with the same `options`): a loop
// over epochs and batches that calls a CallbackList (callback.h) of the options' callbacks, in
// this order: the history CSVs (history.h), `front_end` (a progress display, may be null),
// TensorBoard (summary.h), then the checkpoint and stopping callbacks (callbacks.h).
// `on_message` receives the lines those say (a checkpoint written, a resumed epoch, early
// stopping) and the export's; may be empty.
absl::StatusOr<FitResult> Fit(Trainer* trainer, const TrainerOptions& options,
                              Callback* front_end = nullptr,
                              std::function<void(const std::string&)> on_message = {});

}  // namespace tensorflow::tf_ext::train

#endif  // TF_EXT_TRAIN_LOOP_FIT_H_
