// The specs' own checks (options.h): a loss's name, an optimizer's values.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tf_ext/train/options/options.h"

namespace tensorflow::tf_ext::train {

absl::StatusOr<LossSpec> ParseLoss(const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  LossSpec spec;
  const std::string& name = parts[0];
  if (name == "mse" || name == "mean_squared_error") {
    spec.kind = LossKind::kMeanSquaredError;
  } else if (name == "mae" || name == "mean_absolute_error") {
    spec.kind = LossKind::kMeanAbsoluteError;
  } else if (name == "binary_crossentropy") {
    spec.kind = LossKind::kBinaryCrossentropy;
  } else if (name == "categorical_crossentropy") {
    spec.kind = LossKind::kCategoricalCrossentropy;
  } else if (name == "sparse_categorical_crossentropy") {
    spec.kind = LossKind::kSparseCategoricalCrossentropy;
  } else if (name == "output") {
    spec.kind = LossKind::kModelOutput;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "trainer: unknown loss '", text,
        "' (mse, mae, binary_crossentropy, categorical_crossentropy, "
        "sparse_categorical_crossentropy, each with an optional ':from_logits', or output)"));
  }
  if (parts.size() == 2 && parts[1] == "from_logits" &&
      (spec.kind == LossKind::kBinaryCrossentropy || spec.kind == LossKind::kCategoricalCrossentropy ||
       spec.kind == LossKind::kSparseCategoricalCrossentropy)) {
    spec.from_logits = true;
  } else if (parts.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("trainer: loss '", text, "': only the cross-entropies take ':from_logits'"));
  }
  return spec;
}

absl::Status ValidateOptimizer(const OptimizerSpec& spec) {
  const std::string& n = spec.name;
  if (n != "sgd" && n != "adam" && n != "adamw" && n != "rmsprop" && n != "adagrad") {
    return absl::InvalidArgumentError(absl::StrCat(
        "trainer: unknown optimizer '", n, "' (sgd, adam, adamw, rmsprop, adagrad)"));
  }
  if (spec.schedule != "constant" && spec.schedule != "exponential" && spec.schedule != "cosine") {
    return absl::InvalidArgumentError(absl::StrCat("trainer: unknown learning-rate schedule '",
                                                   spec.schedule,
                                                   "' (constant, exponential, cosine)"));
  }
  if (spec.schedule != "constant" && spec.decay_steps <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("trainer: schedule '", spec.schedule,
                                                   "' needs decay_steps > 0, got ",
                                                   spec.decay_steps));
  }
  auto finite = [](double v) { return std::isfinite(v); };
  if (!finite(spec.learning_rate) || !finite(spec.momentum) || !finite(spec.epsilon) ||
      !finite(spec.beta_1) || !finite(spec.beta_2) || !finite(spec.rho)) {
    return absl::InvalidArgumentError("trainer: optimizer hyperparameters must be finite");
  }
  if (spec.clipnorm > 0 && spec.global_clipnorm > 0) {
    return absl::InvalidArgumentError("trainer: give clipnorm or global_clipnorm, not both");
  }
  if (!finite(spec.clipnorm) || !finite(spec.global_clipnorm)) {
    return absl::InvalidArgumentError("trainer: clipnorm and global_clipnorm must be finite");
  }
  if (spec.momentum < 0 || spec.momentum > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("trainer: momentum must be in [0, 1], got ", spec.momentum));
  }
  return absl::OkStatus();
}

}  // namespace tensorflow::tf_ext::train
