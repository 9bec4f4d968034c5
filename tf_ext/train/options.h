// Trainer options as text (key, value), for the C API and other front ends that pass strings:
// the keys are tf_ext_train's flag names without "--".
#ifndef TF_EXT_TRAIN_OPTIONS_H_
#define TF_EXT_TRAIN_OPTIONS_H_

#include <string>

#include "absl/status/status.h"
#include "tf_ext/train/trainer.h"

namespace tensorflow::tf_ext::train {

// Keys: signature, output, loss, optimizer, learning_rate, momentum, nesterov, beta_1, beta_2,
// epsilon, weight_decay, rho, centered, clipnorm, global_clipnorm, lr_schedule (constant | exponential:RATE:STEPS |
// cosine:STEPS), sample_weights (true/false). InvalidArgument naming the key or value otherwise.
absl::Status SetTrainerOption(const std::string& key, const std::string& value,
                              TrainerOptions* options);

// "constant", "exponential:RATE:STEPS" or "cosine:STEPS" into the optimizer's schedule fields.
absl::Status ParseSchedule(const std::string& text, OptimizerSpec* spec);

}  // namespace tensorflow::tf_ext::train

#endif  // TF_EXT_TRAIN_OPTIONS_H_
