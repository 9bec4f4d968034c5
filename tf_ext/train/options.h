// The trainer's options, each declared once (options.cc's table): that table is what
// TfExtNewTrainer's (key, value) pairs are looked up in, what tf_ext_train declares as flags
// (parsing and --help), and what docs/training.md's flag table is checked against
// (tests/python/test_train.py). A key is the flag's name without "--".
//
// Adding an option: a field in TrainerOptions (or the spec it holds), whose initial value is the
// default, and one Field(...) line in options.cc naming it, with its value's name and help.
// Its type (string, double, int64_t, bool) chooses the parser.
#ifndef TF_EXT_TRAIN_OPTIONS_H_
#define TF_EXT_TRAIN_OPTIONS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "tf_ext/train/trainer.h"

namespace tensorflow::tf_ext::train {

enum class OptionType { kString, kNumber, kInteger, kBool };

struct TrainerOption {
  std::string name;        // the C key; tf_ext_train's --name
  OptionType type = OptionType::kString;
  std::string value_name;  // --name=VALUE_NAME in usage and docs
  std::string help;        // one line
  std::vector<std::string> choices;  // the values allowed (empty: any)
  std::string default_text;          // as shown in --help ("" shows none)
  // Also a tf_ext_train flag. False where the tool sets the option from its own flags
  // (sample_weights: the tool's --sample_weights names the array instead).
  bool flag = true;
  // Parses `value` into the option; InvalidArgument (the value, what was expected) otherwise.
  std::function<absl::Status(absl::string_view value, TrainerOptions*)> set;
};

// Every option, in the order --help and the docs list them.
const std::vector<TrainerOption>& TrainerOptionTable();

// nullptr if `name` is no option.
const TrainerOption* FindTrainerOption(absl::string_view name);

// Sets one option by key: InvalidArgument "trainer option 'KEY': ..." for an unknown key
// ("unknown trainer option 'KEY'") or a value it refuses.
absl::Status SetTrainerOption(const std::string& key, const std::string& value,
                              TrainerOptions* options);

// "constant", "exponential:RATE:STEPS" or "cosine:STEPS" into the optimizer's schedule fields.
absl::Status ParseSchedule(absl::string_view text, OptimizerSpec* spec);

}  // namespace tensorflow::tf_ext::train

#endif  // TF_EXT_TRAIN_OPTIONS_H_
