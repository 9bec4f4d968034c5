#include "tf_ext/train/options.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tensorflow::tf_ext::train {
namespace {

// A field's value as the docs and --help show a default (a template: the table need not use
// every field type, e.g. no integer option yet).
template <typename T>
std::string Text(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "";
  } else if constexpr (std::is_same_v<T, double>) {
    return absl::StrFormat("%g", v);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v;
  } else {
    return absl::StrCat(v);
  }
}

// An option stored in the field `field(options)` returns (a generic lambda: `[](auto& o) ->
// auto& { return o.optimizer.rho; }`); its default is that field's initial value unless
// `default_text` is given.
template <typename Access>
TrainerOption Field(std::string name, std::string value_name, std::string help, Access field,
                    std::vector<std::string> choices = {}, const char* default_text = nullptr) {
  using T = std::decay_t<decltype(field(std::declval<TrainerOptions&>()))>;
  TrainerOption o;
  o.name = std::move(name);
  o.value_name = std::move(value_name);
  o.help = std::move(help);
  o.choices = std::move(choices);
  const TrainerOptions defaults;
  o.default_text = default_text != nullptr ? default_text : Text(field(defaults));
  std::vector<std::string> allowed = o.choices;
  if constexpr (std::is_same_v<T, std::string>) {
    o.type = OptionType::kString;
    o.set = [field, allowed](absl::string_view v, TrainerOptions* out) -> absl::Status {
      if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), v) == allowed.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", v, "' is not one of ", absl::StrJoin(allowed, ", ")));
      }
      field(*out) = std::string(v);
      return absl::OkStatus();
    };
  } else if constexpr (std::is_same_v<T, double>) {
    o.type = OptionType::kNumber;
    o.set = [field](absl::string_view v, TrainerOptions* out) -> absl::Status {
      if (!absl::SimpleAtod(v, &field(*out))) {
        return absl::InvalidArgumentError(absl::StrCat("'", v, "' is not a number"));
      }
      return absl::OkStatus();
    };
  } else if constexpr (std::is_same_v<T, int64_t>) {
    o.type = OptionType::kInteger;
    o.set = [field](absl::string_view v, TrainerOptions* out) -> absl::Status {
      if (!absl::SimpleAtoi(v, &field(*out))) {
        return absl::InvalidArgumentError(absl::StrCat("'", v, "' is not an integer"));
      }
      return absl::OkStatus();
    };
  } else {
    static_assert(std::is_same_v<T, bool>, "an option is a string, double, int64_t or bool");
    o.type = OptionType::kBool;
    o.set = [field](absl::string_view v, TrainerOptions* out) -> absl::Status {
      if (!absl::SimpleAtob(v, &field(*out))) {
        return absl::InvalidArgumentError(absl::StrCat("'", v, "' is not true or false"));
      }
      return absl::OkStatus();
    };
  }
  return o;
}

// An option parsed by `parse` (text into TrainerOptions) rather than stored as text.
TrainerOption Parsed(std::string name, std::string value_name, std::string help,
                     std::string default_text,
                     std::function<absl::Status(absl::string_view, TrainerOptions*)> parse) {
  TrainerOption o;
  o.name = std::move(name);
  o.value_name = std::move(value_name);
  o.help = std::move(help);
  o.default_text = std::move(default_text);
  o.set = std::move(parse);
  return o;
}

TrainerOption NotAFlag(TrainerOption o) {
  o.flag = false;
  return o;
}

// The field an option stores into, for Field: works on TrainerOptions and const TrainerOptions.
#define TF_EXT_OPTION_FIELD(path) [](auto& o) -> auto& { return o.path; }

std::vector<TrainerOption> MakeTable() {
  std::vector<TrainerOption> t = {
      Field("signature", "KEY",
            "the signature whose function is trained (default: 'train' when the SavedModel has "
            "one, as tf_ext.export_for_training writes, else 'serving_default')",
            TF_EXT_OPTION_FIELD(signature_key)),
      Field("output", "KEY", "the signature output the loss reads (default: the only one)",
            TF_EXT_OPTION_FIELD(output_key)),
      Parsed("loss", "NAME",
             "mse, mae, binary_crossentropy, categorical_crossentropy, "
             "sparse_categorical_crossentropy (each cross-entropy with ':from_logits'), or output "
             "(the model's output is the loss)",
             "mse",
             [](absl::string_view v, TrainerOptions* out) -> absl::Status {
               auto loss = ParseLoss(std::string(v));
               if (!loss.ok()) return loss.status();
               out->loss = *loss;
               return absl::OkStatus();
             }),
      Field("optimizer", "NAME", "the optimizer, as Keras's", TF_EXT_OPTION_FIELD(optimizer.name),
            {"sgd", "adam", "adamw", "rmsprop", "adagrad"}),
      Field("learning_rate", "F", "the (initial) learning rate",
            TF_EXT_OPTION_FIELD(optimizer.learning_rate), {}, "Keras's for the optimizer"),
      Field("momentum", "F", "sgd, rmsprop", TF_EXT_OPTION_FIELD(optimizer.momentum)),
      Field("nesterov", "BOOL", "sgd: Nesterov momentum", TF_EXT_OPTION_FIELD(optimizer.nesterov)),
      Field("beta_1", "F", "adam, adamw", TF_EXT_OPTION_FIELD(optimizer.beta_1)),
      Field("beta_2", "F", "adam, adamw", TF_EXT_OPTION_FIELD(optimizer.beta_2)),
      Field("epsilon", "F", "adam, adamw, rmsprop, adagrad", TF_EXT_OPTION_FIELD(optimizer.epsilon)),
      Field("weight_decay", "F", "adamw", TF_EXT_OPTION_FIELD(optimizer.weight_decay), {}, "0.004"),
      Field("rho", "F", "rmsprop", TF_EXT_OPTION_FIELD(optimizer.rho)),
      Field("centered", "BOOL", "rmsprop: centered", TF_EXT_OPTION_FIELD(optimizer.centered)),
      Field("initial_accumulator_value", "F", "adagrad: the accumulators' starting value",
            TF_EXT_OPTION_FIELD(optimizer.initial_accumulator_value)),
      Field("clipnorm", "F", "clip each gradient to this norm (Keras's clipnorm; 0: none)",
            TF_EXT_OPTION_FIELD(optimizer.clipnorm)),
      Field("global_clipnorm", "F",
            "clip all gradients together to this global norm (Keras's global_clipnorm; 0: none)",
            TF_EXT_OPTION_FIELD(optimizer.global_clipnorm)),
      Parsed("lr_schedule", "SCHEDULE",
             "constant, exponential:RATE:STEPS or cosine:STEPS (Keras's ExponentialDecay, "
             "CosineDecay)",
             "constant",
             [](absl::string_view v, TrainerOptions* out) { return ParseSchedule(v, &out->optimizer); }),
      // tf_ext_train's --sample_weights names the array instead, and sets this.
      NotAFlag(Field("sample_weights", "BOOL", "each step feeds per-example weights",
                     TF_EXT_OPTION_FIELD(sample_weights))),
  };
  return t;
}

#undef TF_EXT_OPTION_FIELD

}  // namespace

absl::Status ParseSchedule(absl::string_view text, OptimizerSpec* spec) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  double rate = 0;
  int64_t steps = 0;
  if (parts[0] == "constant" && parts.size() == 1) {
  } else if (parts[0] == "exponential" && parts.size() == 3 && absl::SimpleAtod(parts[1], &rate) &&
             absl::SimpleAtoi(parts[2], &steps)) {
  } else if (parts[0] == "cosine" && parts.size() == 2 && absl::SimpleAtoi(parts[1], &steps)) {
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "': expected constant, exponential:RATE:STEPS or cosine:STEPS"));
  }
  spec->schedule = parts[0];
  spec->decay_rate = rate;
  spec->decay_steps = steps;
  return absl::OkStatus();
}

const std::vector<TrainerOption>& TrainerOptionTable() {
  static const auto* table = new std::vector<TrainerOption>(MakeTable());
  return *table;
}

const TrainerOption* FindTrainerOption(absl::string_view name) {
  for (const TrainerOption& o : TrainerOptionTable()) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

absl::Status SetTrainerOption(const std::string& key, const std::string& value,
                              TrainerOptions* options) {
  const TrainerOption* o = FindTrainerOption(key);
  if (o == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown trainer option '", key, "'"));
  if (absl::Status s = o->set(value, options); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("trainer option '", key, "': ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace tensorflow::tf_ext::train
