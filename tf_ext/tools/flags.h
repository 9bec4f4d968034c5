// The one command-line parser of tf_ext's binaries (tf_ext_grad, tf_ext_gradcheck,
// tf_ext_serve).
//
// Each flag is declared once, bound to a variable whose current value is its default:
//
//   FlagParser flags("tf_ext_serve", "runs the signatures of a SavedModel from C++");
//   flags.String("saved_model", &saved_model, "SavedModel directory").Required();
//   flags.Int("seed", &seed, "random seed");
//   flags.Bool("check", &check, "also compare with finite differences");
//   flags.Repeated("feed", &feeds, "a placeholder value (repeatable)");
//   absl::Status s = flags.Parse(argc, argv);
//   if (flags.help_requested()) { std::cout << flags.Usage(); return 0; }
//
// Accepted forms: --name=value, and a bare --name for bool flags (true) and for flags given
// an ImplicitValue. --help / -h anywhere asks for the generated usage. Everything else - an
// unknown flag, a positional argument, a missing or malformed value, a second occurrence of a
// non-repeated flag, a missing Required flag - is an InvalidArgument error naming the flag.
// Declaration mistakes (two flags of one name) are programming errors and abort.
#ifndef TF_EXT_TOOLS_FLAGS_H_
#define TF_EXT_TOOLS_FLAGS_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace tensorflow::tf_ext::tools {

class FlagParser {
 public:
  enum class Type { kString, kInt, kDouble, kBool, kRepeated };

  // One declared flag; the setters return *this so that they chain after a declaration.
  class Flag {
   public:
    // Shown in the usage as --name=VALUE_NAME (default: "VALUE", "N" for numbers).
    Flag& ValueName(std::string name);
    // Replaces the default shown in the usage ("" shows none); the default itself is always
    // the bound variable's value before Parse.
    Flag& DefaultText(std::string text);
    // A bare --name (no '=') sets this value instead of being an error.
    Flag& ImplicitValue(std::string value);
    // The value must be one of these (checked for string flags, implicit value included).
    Flag& Choices(std::vector<std::string> choices);
    // Parse fails unless the flag is given.
    Flag& Required();

   private:
    friend class FlagParser;
    std::string name_, help_, value_name_, default_text_;
    Type type_ = Type::kString;
    bool has_implicit_ = false, required_ = false, seen_ = false;
    std::string implicit_;
    std::vector<std::string> choices_;
    // Stores a value; false (and *why set) when it is malformed.
    std::function<bool(absl::string_view, std::string* why)> set_;
  };

  // `program` names the binary in usage and errors; `description` follows the usage line
  // (may be several lines, e.g. the synopsis of the other modes).
  FlagParser(std::string program, std::string description);
  FlagParser(const FlagParser&) = delete;
  FlagParser& operator=(const FlagParser&) = delete;

  Flag& String(const std::string& name, std::string* value, std::string help);
  Flag& Double(const std::string& name, double* value, std::string help);
  Flag& Bool(const std::string& name, bool* value, std::string help);
  // Every occurrence appends; the only kind of flag that may be given more than once.
  Flag& Repeated(const std::string& name, std::vector<std::string>* values, std::string help);
  // A flag parsed by `set` (false and *why when the value is malformed): the front end of an
  // option table declared elsewhere (tf_ext/train/options/options.h). kBool: a bare --name is
  // "true".
  Flag& Custom(const std::string& name, Type type, std::string help, std::string default_text,
               std::function<bool(absl::string_view, std::string* why)> set);
  // Any integer type; values outside [min, numeric_limits<T>::max()] are errors.
  template <typename T>
  Flag& Int(const std::string& name, T* value, std::string help,
            T min = std::numeric_limits<T>::min()) {
    Flag& f = Add(name, Type::kInt, std::move(help), absl::StrCat(*value));
    f.set_ = [value, min](absl::string_view text, std::string* why) {
      T parsed;
      if (!absl::SimpleAtoi(text, &parsed)) {
        *why = absl::StrCat("'", text, "' is not ",
                            std::numeric_limits<T>::is_signed ? "an" : "a non-negative",
                            " integer (or is out of range)");
        return false;
      }
      if (parsed < min) {
        *why = absl::StrCat(parsed, " is below the minimum ", min);
        return false;
      }
      *value = parsed;
      return true;
    };
    return f;
  }

  // Parses argv[1..argc). An error's message names the flag (or the argument); the caller
  // prefixes its program name. --help anywhere returns OK with help_requested() set, without
  // further checks.
  absl::Status Parse(int argc, const char* const* argv);
  absl::Status Parse(const std::vector<std::string>& args);

  bool help_requested() const { return help_requested_; }
  // Whether --name appeared on the command line (the value may still equal the default).
  bool IsSet(const std::string& name) const;
  // "usage: program [flags]\n" + description + one aligned entry per flag, in declaration
  // order, with its help text, choices and default.
  std::string Usage() const;
  // The one line a tool prints for a command line it refuses (an error of Parse or of its own
  // checks): the message, and where the flags are described unless it says so already.
  std::string ErrorLine(absl::string_view message) const;

 private:
  Flag& Add(const std::string& name, Type type, std::string help, std::string default_text);
  Flag* Find(absl::string_view name);
  const Flag* Find(absl::string_view name) const;

  std::string program_, description_;
  std::vector<std::unique_ptr<Flag>> flags_;
  bool help_requested_ = false;
};

}  // namespace tensorflow::tf_ext::tools

#endif  // TF_EXT_TOOLS_FLAGS_H_
