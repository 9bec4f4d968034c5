// What train::Fit (fit.h) does about checkpoints and stopping, as Keras's callbacks and
// tf.train.CheckpointManager do it: the callbacks CheckpointCallbacks makes (callback.h), and the
// checkpoint files' format they share. Tested by //tests:fit_callbacks_test (the decisions against
// hand-derived sequences, the files a run leaves, a run killed at each step of a write) and
// //tests:fit_checkpoints_py_test (tf_ext_train against Python's tf.train.latest_checkpoint,
// Keras's EarlyStopping and ModelCheckpoint(save_best_only=True), and SIGKILL at random moments).
//
// Files, for --checkpoint=DIR/NAME:
//   DIR/NAME-<epoch>  after each epoch (epochs completed, from 1, as Keras's ModelCheckpoint
//                     {epoch} and CheckpointManager number them): Trainer::SaveCheckpoint's
//                     object-based checkpoint (the model and the optimizer's state). The last
//                     --keep_checkpoints of them are kept; older ones are deleted.
//   DIR/checkpoint    the CheckpointState text proto CheckpointManager writes (relative
//                     model_checkpoint_path, all_model_checkpoint_paths and their timestamps),
//                     read by Python's tf.train.latest_checkpoint(DIR) and LatestCheckpoint.
//   DIR/NAME-best     with --save_best: the checkpoint of the best epoch so far, and beside it
//   DIR/NAME-best.state  the monitor, its best value and that epoch (so a resumed run compares
//                     against the best before it, and --resume=DIR/NAME-best knows its epoch).
//
// A run killed at any moment (SIGKILL) leaves nothing a reader or --resume=auto misreads:
// - A checkpoint's files are complete before anything names them: TensorFlow's BundleWriter
//   writes its data and index under temporary names and renames the data, then the index, into
//   place; a prefix is a checkpoint only once its .index exists.
// - The state file is written to a temporary file and renamed over DIR/checkpoint only after the
//   epoch's checkpoint is complete, so it always names complete checkpoints. As CheckpointManager,
//   it is written with the new checkpoint first, then the old ones beyond the kept number are
//   deleted (index first: a prefix without its index is no checkpoint), then it is rewritten
//   without them.
// - A checkpoint about to be overwritten (a prefix a killed run left, or an older run's of the
//   same epoch) is first dropped from the state file and its index deleted, so a reader never sees
//   an old index beside new data.
// - NAME-best is replaced by a swap: NAME-best-tmp (its .state, then the checkpoint) is written
//   completely; then NAME-best.index is deleted (from here no NAME-best exists), then its data;
//   NAME-best-tmp's data and .state are renamed to NAME-best's, NAME-best-tmp.index last. The next
//   run finishes an interrupted swap (NAME-best-tmp.index present, NAME-best.index absent: the
//   renames go on) or abandons an unstarted one (NAME-best.index present: NAME-best-tmp is
//   deleted), then deletes data files with no index (a write or deletion cut short).
// Only one run at a time may write a DIR/NAME.
//
// A resumed run starts at the checkpoint's epoch (Keras's initial_epoch): --epochs=5 resumed from
// NAME-3 trains epochs 4 and 5. Early stopping starts afresh in each run, as a new EarlyStopping
// in model.fit(initial_epoch=...) does (its patience counts from the resumed epoch); --save_best
// goes on from NAME-best.state's value.
#ifndef TF_EXT_TRAIN_LOOP_CALLBACKS_H_
#define TF_EXT_TRAIN_LOOP_CALLBACKS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tf_ext/train/loop/callback.h"
#include "tf_ext/train/loop/logs.h"
#include "tf_ext/train/model/trainer.h"

namespace tensorflow::tf_ext::train {

// Keras's MonitorCallback: whether a monitored value improves on a reference. Mode "auto" as
// Keras 3's: "loss" and "val_loss" fall, a metric rises or falls as Keras's metric of that name
// (accuracy, auc, precision, ... rise; mae, mse, crossentropies, hinge, ... fall); any other name
// is refused. min_delta is taken absolute; an improvement is current - min_delta > best (rising)
// or current + min_delta < best (falling), and any value improves on no reference yet.
class Monitor {
 public:
  // `flag` names the option in errors (e.g. "--early_stopping=val_auc:2").
  static absl::StatusOr<Monitor> Create(const std::string& name, double min_delta,
                                        const std::string& flag);
  bool IsImprovement(double current, std::optional<double> reference) const;
  const std::string& name() const { return name_; }
  bool rises() const { return rises_; }

 private:
  std::string name_;
  bool rises_ = false;
  double min_delta_ = 0;  // absolute
};

// keras.callbacks.EarlyStopping's decisions (baseline None, start_from_epoch 0), epoch by epoch.
class EarlyStopping {
 public:
  EarlyStopping(Monitor monitor, int64_t patience) : monitor_(std::move(monitor)), patience_(patience) {}
  struct Decision {
    bool snapshot = false;  // these weights are now the best (restore_best_weights keeps them)
    bool stop = false;
  };
  // `epoch` from 0, counting the epochs before a resume (Keras's epoch index).
  Decision OnEpochEnd(int64_t epoch, double current);
  const Monitor& monitor() const { return monitor_; }
  int64_t patience() const { return patience_; }
  std::optional<double> best() const { return best_; }
  int64_t best_epoch() const { return best_epoch_; }
  int64_t wait() const { return wait_; }
  bool has_snapshot() const { return has_snapshot_; }

 private:
  Monitor monitor_;
  int64_t patience_;
  int64_t wait_ = 0;
  std::optional<double> best_;
  int64_t best_epoch_ = 0;
  bool has_snapshot_ = false;
};

// The CheckpointState proto tf.train.CheckpointManager keeps in DIR/checkpoint.
struct CheckpointState {
  std::string model_checkpoint_path;  // as written: relative to DIR, or absolute
  std::vector<std::string> all_model_checkpoint_paths;  // oldest first
  std::vector<double> all_model_checkpoint_timestamps;  // seconds since 1970, one per path
  double last_preserved_timestamp = 0;
};
// The text proto, as Python's text_format writes it.
std::string CheckpointStateText(const CheckpointState& state);
absl::StatusOr<CheckpointState> ParseCheckpointState(const std::string& text);
// DIR/checkpoint; NotFound when absent.
absl::StatusOr<CheckpointState> ReadCheckpointState(const std::string& dir);
// Writes DIR/checkpoint atomically: a temporary file beside it, synced, renamed over it.
absl::Status WriteCheckpointState(const std::string& dir, const CheckpointState& state);

// The prefix tf.train.latest_checkpoint(dir) returns, "" when none: the state file's
// model_checkpoint_path (joined to dir when relative) if its .index exists. A state file that
// cannot be parsed is an error (Python logs it and returns None).
absl::StatusOr<std::string> LatestCheckpoint(const std::string& dir);

// What the callbacks save and restore of the model being trained: a Trainer's checkpoints and
// variables (TrainerState below), or a test's stand-in.
class TrainingState {
 public:
  virtual ~TrainingState() = default;
  // The model and the optimizer's state (Trainer::SaveCheckpoint / RestoreCheckpoint).
  virtual absl::Status SaveCheckpoint(const std::string& prefix) = 0;
  virtual absl::Status RestoreCheckpoint(const std::string& prefix) = 0;
  // The model's variables alone (Trainer::SaveModelVariables / RestoreModelVariables): what
  // Keras's restore_best_weights sets.
  virtual absl::Status SaveWeights(const std::string& prefix) = 0;
  virtual absl::Status RestoreWeights(const std::string& prefix) = 0;
};
std::shared_ptr<TrainingState> TrainerState(Trainer* trainer);

// The callbacks (callback.h) of the checkpoint and stopping options, only those the options ask
// for, in the order train::Fit runs them:
//   ModelCheckpoint  --checkpoint, --keep_checkpoints: OnRestore finishes or clears what a killed
//                    run left in DIR; each epoch's end writes DIR/NAME-<epoch+1> and the state
//                    file and deletes the checkpoints beyond keep_checkpoints
//   Resume           --resume (a prefix, or auto: the latest in DIR): OnRestore restores it and
//                    moves the initial epoch to the one it ends
//   SaveBest         --save_best: replaces NAME-best when the monitor improved (a resumed run
//                    compares with NAME-best.state's value)
//   EarlyStopping    --early_stopping, --restore_best_weights: sets stop as Keras's
//                    EarlyStopping; OnTrainEnd sets the best epoch's weights
// `log_names`: the keys each epoch's logs will have (Fit's order); a monitor not among them is
// refused here, before training (val_loss without --validation). `message`: a line for the user
// (checkpoint written, resumed, stopped early); may be empty. Flag errors are InvalidArgument
// naming the flag and its value.
absl::StatusOr<std::vector<std::unique_ptr<Callback>>> CheckpointCallbacks(
    const FitOptions& options, std::shared_ptr<TrainingState> state,
    const std::vector<std::string>& log_names, std::function<void(const std::string&)> message);

}  // namespace tensorflow::tf_ext::train

#endif  // TF_EXT_TRAIN_LOOP_CALLBACKS_H_
