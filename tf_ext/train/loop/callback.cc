#include "tf_ext/train/loop/callback.h"

#include <utility>

#include "tensorflow/core/platform/errors.h"

namespace tensorflow::tf_ext::train {

void CallbackList::Add(std::unique_ptr<Callback> callback) {
  callbacks_.push_back(callback.get());
  owned_.push_back(std::move(callback));
}

void CallbackList::AddUnowned(Callback* callback) { callbacks_.push_back(callback); }

absl::Status CallbackList::OnRestore(int64_t* initial_epoch) {
  for (Callback* c : callbacks_) TF_RETURN_IF_ERROR(c->OnRestore(initial_epoch));
  return absl::OkStatus();
}

absl::Status CallbackList::OnTrainBegin(int64_t initial_epoch) {
  for (Callback* c : callbacks_) TF_RETURN_IF_ERROR(c->OnTrainBegin(initial_epoch));
  return absl::OkStatus();
}

bool CallbackList::WantsBatchLogs() const {
  for (const Callback* c : callbacks_) {
    if (c->WantsBatchLogs()) return true;
  }
  return false;
}

absl::Status CallbackList::OnTrainBatchEnd(const BatchEnd& batch) {
  for (Callback* c : callbacks_) TF_RETURN_IF_ERROR(c->OnTrainBatchEnd(batch));
  return absl::OkStatus();
}

absl::Status CallbackList::OnEpochEnd(int64_t epoch, const Logs& logs, bool* stop) {
  for (Callback* c : callbacks_) TF_RETURN_IF_ERROR(c->OnEpochEnd(epoch, logs, stop));
  return absl::OkStatus();
}

absl::Status CallbackList::OnTrainEnd() {
  for (Callback* c : callbacks_) TF_RETURN_IF_ERROR(c->OnTrainEnd());
  return absl::OkStatus();
}

}  // namespace tensorflow::tf_ext::train
