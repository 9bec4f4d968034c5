#include "tf_ext/train/options.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tensorflow::tf_ext::train {

absl::Status ParseSchedule(const std::string& text, OptimizerSpec* spec) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  spec->schedule = parts[0];
  if (parts[0] == "constant" && parts.size() == 1) return absl::OkStatus();
  if (parts[0] == "exponential" && parts.size() == 3 &&
      absl::SimpleAtod(parts[1], &spec->decay_rate) && absl::SimpleAtoi(parts[2], &spec->decay_steps)) {
    return absl::OkStatus();
  }
  if (parts[0] == "cosine" && parts.size() == 2 && absl::SimpleAtoi(parts[1], &spec->decay_steps)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "lr_schedule '", text, "': expected constant, exponential:RATE:STEPS or cosine:STEPS"));
}

absl::Status SetTrainerOption(const std::string& key, const std::string& value,
                              TrainerOptions* options) {
  OptimizerSpec& o = options->optimizer;
  auto number = [&](double* out) -> absl::Status {
    if (!absl::SimpleAtod(value, out)) {
      return absl::InvalidArgumentError(
          absl::StrCat("trainer option '", key, "': '", value, "' is not a number"));
    }
    return absl::OkStatus();
  };
  auto boolean = [&](bool* out) -> absl::Status {
    if (!absl::SimpleAtob(value, out)) {
      return absl::InvalidArgumentError(
          absl::StrCat("trainer option '", key, "': '", value, "' is not true or false"));
    }
    return absl::OkStatus();
  };
  if (key == "signature") {
    options->signature_key = value;
  } else if (key == "output") {
    options->output_key = value;
  } else if (key == "loss") {
    auto loss = ParseLoss(value);
    if (!loss.ok()) return loss.status();
    options->loss = *loss;
  } else if (key == "optimizer") {
    o.name = value;
  } else if (key == "learning_rate") {
    return number(&o.learning_rate);
  } else if (key == "momentum") {
    return number(&o.momentum);
  } else if (key == "nesterov") {
    return boolean(&o.nesterov);
  } else if (key == "beta_1") {
    return number(&o.beta_1);
  } else if (key == "beta_2") {
    return number(&o.beta_2);
  } else if (key == "epsilon") {
    return number(&o.epsilon);
  } else if (key == "weight_decay") {
    return number(&o.weight_decay);
  } else if (key == "rho") {
    return number(&o.rho);
  } else if (key == "centered") {
    return boolean(&o.centered);
  } else if (key == "clipnorm") {
    return number(&o.clipnorm);
  } else if (key == "global_clipnorm") {
    return number(&o.global_clipnorm);
  } else if (key == "lr_schedule") {
    return ParseSchedule(value, &o);
  } else if (key == "sample_weights") {
    return boolean(&options->sample_weights);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown trainer option '", key, "'"));
  }
  return absl::OkStatus();
}

}  // namespace tensorflow::tf_ext::train
