#include "tf_ext/train/c_trainer.h"

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tensorflow/c/tf_status_helper.h"
#include "tensorflow/c/tf_tensor_helper.h"
#include "tf_ext/train/loop/fit.h"
#include "tf_ext/train/model/trainer.h"
#include "tf_ext/train/options/options.h"

struct TfExtTrainer {
  std::unique_ptr<tensorflow::tf_ext::Trainer> trainer;
  std::string warnings;  // joined, for TfExtTrainerWarnings
  tensorflow::tf_ext::TrainerOptions options;  // as created: what TfExtTrainerFit runs
  std::string last_logs;  // TfExtTrainerLastLogs
};

namespace {

void SetStatus(TF_Status* status, const absl::Status& s) {
  tensorflow::Set_TF_Status_from_Status(status, s);
}

absl::Status ToTensor(TF_Tensor* t, const std::string& what, tensorflow::Tensor* out) {
  absl::Status s = tensorflow::TF_TensorToTensor(t, out);
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("trainer: ", what, ": ", s.message()));
  return absl::OkStatus();
}

}  // namespace

extern "C" {

TfExtTrainer* TfExtNewTrainer(const char* export_dir, const char* const* option_keys,
                              const char* const* option_values, int num_options, TF_Status* status) {
  namespace tfx = tensorflow::tf_ext;
  if (export_dir == nullptr || num_options < 0 ||
      (num_options > 0 && (option_keys == nullptr || option_values == nullptr))) {
    SetStatus(status, absl::InvalidArgumentError("trainer: export_dir and the options are required"));
    return nullptr;
  }
  tfx::TrainerOptions options;
  for (int i = 0; i < num_options; ++i) {
    if (option_keys[i] == nullptr || option_values[i] == nullptr) {
      SetStatus(status, absl::InvalidArgumentError(absl::StrCat("trainer: option ", i, " is NULL")));
      return nullptr;
    }
    if (absl::Status s = tfx::train::SetTrainerOption(option_keys[i], option_values[i], &options);
        !s.ok()) {
      SetStatus(status, s);
      return nullptr;
    }
  }
  auto trainer = tfx::Trainer::Create(export_dir, options);
  if (!trainer.ok()) {
    SetStatus(status, trainer.status());
    return nullptr;
  }
  SetStatus(status, absl::OkStatus());
  std::string warnings = absl::StrJoin((*trainer)->warnings(), "\n");
  return new TfExtTrainer{std::move(*trainer), std::move(warnings), options, ""};
}

double TfExtTrainerStep(TfExtTrainer* trainer, const char* const* input_names,
                        TF_Tensor* const* inputs, int num_inputs, TF_Tensor* targets,
                        TF_Tensor* weights, TF_Status* status) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (trainer == nullptr || num_inputs < 0 ||
      (num_inputs > 0 && (input_names == nullptr || inputs == nullptr))) {
    SetStatus(status, absl::InvalidArgumentError("trainer: trainer and inputs are required"));
    return nan;
  }
  std::vector<std::pair<std::string, tensorflow::Tensor>> feeds;
  for (int i = 0; i < num_inputs; ++i) {
    if (input_names[i] == nullptr || inputs[i] == nullptr) {
      SetStatus(status, absl::InvalidArgumentError(absl::StrCat("trainer: input ", i, " is NULL")));
      return nan;
    }
    tensorflow::Tensor t;
    if (absl::Status s = ToTensor(inputs[i], absl::StrCat("input '", input_names[i], "'"), &t); !s.ok()) {
      SetStatus(status, s);
      return nan;
    }
    feeds.push_back({input_names[i], std::move(t)});
  }
  tensorflow::Tensor target_tensor, weight_tensor;
  if (targets != nullptr) {
    if (absl::Status s = ToTensor(targets, "targets", &target_tensor); !s.ok()) {
      SetStatus(status, s);
      return nan;
    }
  }
  if (weights != nullptr) {
    if (absl::Status s = ToTensor(weights, "weights", &weight_tensor); !s.ok()) {
      SetStatus(status, s);
      return nan;
    }
  }
  auto loss = trainer->trainer->Step(feeds, target_tensor, weight_tensor);
  if (!loss.ok()) {
    SetStatus(status, loss.status());
    return nan;
  }
  SetStatus(status, absl::OkStatus());
  return *loss;
}

int64_t TfExtTrainerFit(TfExtTrainer* trainer, TF_Status* status) {
  if (trainer == nullptr) {
    SetStatus(status, absl::InvalidArgumentError("trainer: trainer is required"));
    return -1;
  }
  auto result = tensorflow::tf_ext::train::Fit(trainer->trainer.get(), trainer->options);
  if (!result.ok()) {
    SetStatus(status, result.status());
    return -1;
  }
  trainer->last_logs.clear();
  if (!result->history.empty()) {
    for (const auto& [name, value] : result->history.back().logs) {
      absl::StrAppend(&trainer->last_logs, name, "=", absl::StrFormat("%.9g", value), "\n");
    }
  }
  SetStatus(status, absl::OkStatus());
  return static_cast<int64_t>(result->history.size());
}

const char* TfExtTrainerLastLogs(const TfExtTrainer* trainer) {
  return trainer == nullptr ? "" : trainer->last_logs.c_str();
}

void TfExtTrainerExport(TfExtTrainer* trainer, const char* dir, TF_Status* status) {
  if (trainer == nullptr || dir == nullptr) {
    SetStatus(status, absl::InvalidArgumentError("trainer: trainer and dir are required"));
    return;
  }
  SetStatus(status, trainer->trainer->Export(dir));
}

const char* TfExtTrainerSignature(const TfExtTrainer* trainer) {
  return trainer == nullptr ? "" : trainer->trainer->signature_key().c_str();
}

int TfExtTrainerTrainingMode(const TfExtTrainer* trainer) {
  return trainer != nullptr && trainer->trainer->training_mode() ? 1 : 0;
}

const char* TfExtTrainerWarnings(const TfExtTrainer* trainer) {
  return trainer == nullptr ? "" : trainer->warnings.c_str();
}

void TfExtDeleteTrainer(TfExtTrainer* trainer) { delete trainer; }

}  // extern "C"
