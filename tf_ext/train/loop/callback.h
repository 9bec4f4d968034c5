// What train::Fit (fit.h) calls while it trains, as Keras's callbacks: one interface, and a list
// that calls each of its callbacks in order. Fit's own (the history CSVs, TensorBoard,
// checkpoints, resuming, the best checkpoint, early stopping) are callbacks, and so is a front
// end's progress display.
//
// A run starts in two steps: OnRestore, where a callback that continues an earlier run (a
// checkpoint to resume from) moves the epoch training starts at; then, once every worker of a
// cluster has agreed on it (the chief's), OnTrainBegin with that epoch.
#ifndef TF_EXT_TRAIN_LOOP_CALLBACK_H_
#define TF_EXT_TRAIN_LOOP_CALLBACK_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "tf_ext/train/loop/logs.h"

namespace tensorflow::tf_ext::train {

// One training step, as its callbacks see it.
struct BatchEnd {
  int64_t epoch = 0;      // from 0
  int64_t step = 0;       // the optimizer's iterations before this step
  int64_t seen = 0;       // examples of this epoch so far, this batch's included
  int64_t examples = -1;  // examples per epoch; -1 when unknown before the epoch ends
  double loss = 0;        // this batch's loss
  // Keras's batch logs: the running loss and each metric's running value. Read only when a
  // callback asks for them (WantsBatchLogs); else the running loss alone.
  const Logs* logs = nullptr;
};

class Callback {
 public:
  virtual ~Callback() = default;
  // Before training: `initial_epoch` (from 0) is where training starts; a callback that
  // resumes a run sets it.
  virtual absl::Status OnRestore(int64_t* initial_epoch) { return absl::OkStatus(); }
  // Once the start is agreed: epochs [initial_epoch, epochs) follow.
  virtual absl::Status OnTrainBegin(int64_t initial_epoch) { return absl::OkStatus(); }
  // Whether OnTrainBatchEnd reads the metrics' running values (reading them costs a Session
  // run each step, so they are read only when some callback asks).
  virtual bool WantsBatchLogs() const { return false; }
  virtual absl::Status OnTrainBatchEnd(const BatchEnd& batch) { return absl::OkStatus(); }
  // After each epoch (`epoch` from 0), validation included: its logs. Setting *stop ends
  // training after this epoch (every callback still sees it).
  virtual absl::Status OnEpochEnd(int64_t epoch, const Logs& logs, bool* stop) {
    return absl::OkStatus();
  }
  // After the last epoch, stopped early or not.
  virtual absl::Status OnTrainEnd() { return absl::OkStatus(); }
};

// Calls each callback in the order they were added; the first error ends the call.
class CallbackList : public Callback {
 public:
  void Add(std::unique_ptr<Callback> callback);
  // A callback the caller owns (a front end's), kept for the list's lifetime.
  void AddUnowned(Callback* callback);
  bool empty() const { return callbacks_.empty(); }

  absl::Status OnRestore(int64_t* initial_epoch) override;
  absl::Status OnTrainBegin(int64_t initial_epoch) override;
  bool WantsBatchLogs() const override;
  absl::Status OnTrainBatchEnd(const BatchEnd& batch) override;
  absl::Status OnEpochEnd(int64_t epoch, const Logs& logs, bool* stop) override;
  absl::Status OnTrainEnd() override;

 private:
  std::vector<std::unique_ptr<Callback>> owned_;
  std::vector<Callback*> callbacks_;
};

}  // namespace tensorflow::tf_ext::train

#endif  // TF_EXT_TRAIN_LOOP_CALLBACK_H_
