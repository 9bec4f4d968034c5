#include "tf_ext/tools/flags.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tensorflow::tf_ext::tools {
namespace {

// Help text starts in this column unless the --name=VALUE part is longer (then on the next
// line), so that one long flag does not push every help text to the right.
constexpr size_t kMaxHelpColumn = 24;

}  // namespace

FlagParser::Flag& FlagParser::Flag::ValueName(std::string name) {
  value_name_ = std::move(name);
  return *this;
}

FlagParser::Flag& FlagParser::Flag::DefaultText(std::string text) {
  default_text_ = std::move(text);
  return *this;
}

FlagParser::Flag& FlagParser::Flag::ImplicitValue(std::string value) {
  has_implicit_ = true;
  implicit_ = std::move(value);
  return *this;
}

FlagParser::Flag& FlagParser::Flag::Choices(std::vector<std::string> choices) {
  choices_ = std::move(choices);
  return *this;
}

FlagParser::Flag& FlagParser::Flag::Required() {
  required_ = true;
  return *this;
}

FlagParser::FlagParser(std::string program, std::string description)
    : program_(std::move(program)), description_(std::move(description)) {}

FlagParser::Flag& FlagParser::Add(const std::string& name, Type type, std::string help,
                                  std::string default_text) {
  if (name.empty() || name == "help" || absl::StrContains(name, '=') || Find(name) != nullptr) {
    // A declaration bug of the binary itself, not a user error.
    std::cerr << program_ << ": internal error: flag '" << name << "' declared twice or invalid\n";
    std::abort();
  }
  auto flag = std::make_unique<Flag>();
  flag->name_ = name;
  flag->type_ = type;
  flag->help_ = std::move(help);
  flag->default_text_ = std::move(default_text);
  flag->value_name_ = type == Type::kInt || type == Type::kDouble ? "N" : "VALUE";
  flags_.push_back(std::move(flag));
  return *flags_.back();
}

FlagParser::Flag& FlagParser::String(const std::string& name, std::string* value,
                                     std::string help) {
  Flag& f = Add(name, Type::kString, std::move(help), *value);
  f.set_ = [value](absl::string_view text, std::string*) {
    *value = std::string(text);
    return true;
  };
  return f;
}

FlagParser::Flag& FlagParser::Double(const std::string& name, double* value, std::string help) {
  Flag& f = Add(name, Type::kDouble, std::move(help), absl::StrCat(*value));
  f.set_ = [value](absl::string_view text, std::string* why) {
    if (absl::SimpleAtod(text, value)) return true;
    *why = absl::StrCat("'", text, "' is not a number");
    return false;
  };
  return f;
}

FlagParser::Flag& FlagParser::Bool(const std::string& name, bool* value, std::string help) {
  Flag& f = Add(name, Type::kBool, std::move(help), *value ? "true" : "");
  f.set_ = [value](absl::string_view text, std::string* why) {
    if (absl::SimpleAtob(text, value)) return true;
    *why = absl::StrCat("'", text, "' is not true or false");
    return false;
  };
  return f;
}

FlagParser::Flag& FlagParser::Custom(const std::string& name, Type type, std::string help,
                                     std::string default_text,
                                     std::function<bool(absl::string_view, std::string*)> set) {
  Flag& f = Add(name, type, std::move(help), std::move(default_text));
  f.set_ = std::move(set);
  return f;
}

FlagParser::Flag& FlagParser::Repeated(const std::string& name, std::vector<std::string>* values,
                                       std::string help) {
  Flag& f = Add(name, Type::kRepeated, std::move(help), absl::StrJoin(*values, " "));
  Flag* self = &f;
  f.set_ = [values, self](absl::string_view text, std::string*) {
    if (!self->seen_) values->clear();  // given values replace the defaults
    values->push_back(std::string(text));
    return true;
  };
  return f;
}

FlagParser::Flag* FlagParser::Find(absl::string_view name) {
  for (auto& f : flags_) {
    if (f->name_ == name) return f.get();
  }
  return nullptr;
}

const FlagParser::Flag* FlagParser::Find(absl::string_view name) const {
  for (const auto& f : flags_) {
    if (f->name_ == name) return f.get();
  }
  return nullptr;
}

bool FlagParser::IsSet(const std::string& name) const {
  const Flag* f = Find(name);
  return f != nullptr && f->seen_;
}

absl::Status FlagParser::Parse(int argc, const char* const* argv) {
  return Parse(std::vector<std::string>(argv + std::min(argc, 1), argv + argc));
}

absl::Status FlagParser::Parse(const std::vector<std::string>& args) {
  help_requested_ = false;
  for (auto& f : flags_) f->seen_ = false;
  for (const std::string& arg : args) {
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      return absl::OkStatus();
    }
  }
  for (const std::string& arg : args) {
    if (!absl::StartsWith(arg, "--") || arg == "--") {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", arg, "' (flags are --name=value; see --help)"));
    }
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    Flag* f = Find(name);
    if (f == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown argument '", arg, "' (no flag --", name, "; see --help)"));
    }
    if (f->seen_ && f->type_ != Type::kRepeated) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " given more than once (it takes one value)"));
    }
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (f->type_ == Type::kBool) {
      value = "true";
    } else if (f->has_implicit_) {
      value = f->implicit_;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " needs a value: --", name, "=", f->value_name_));
    }
    if (!f->choices_.empty() &&
        std::find(f->choices_.begin(), f->choices_.end(), value) == f->choices_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("bad --", name, ": '", value,
                                                     "' is not one of ",
                                                     absl::StrJoin(f->choices_, ", ")));
    }
    std::string why;
    if (!f->set_(value, &why)) {
      return absl::InvalidArgumentError(absl::StrCat("bad --", name, ": ", why));
    }
    f->seen_ = true;
  }
  for (const auto& f : flags_) {
    if (f->required_ && !f->seen_) {
      return absl::InvalidArgumentError(
          absl::StrCat("missing required flag --", f->name_, "=", f->value_name_));
    }
  }
  return absl::OkStatus();
}

std::string FlagParser::ErrorLine(absl::string_view message) const {
  if (absl::StrContains(message, "see --help")) return std::string(message);
  return absl::StrCat(message, " (see ", program_, " --help)");
}

std::string FlagParser::Usage() const {
  std::string out = absl::StrCat("usage: ", program_, " [flags]\n");
  if (!description_.empty()) {
    absl::StrAppend(&out, description_, absl::EndsWith(description_, "\n") ? "" : "\n");
  }
  absl::StrAppend(&out, "flags:\n");
  std::vector<std::string> heads;
  size_t column = 0;
  for (const auto& f : flags_) {
    std::string head = absl::StrCat("  --", f->name_);
    if (f->type_ != Type::kBool) {
      absl::StrAppend(&head, f->has_implicit_ ? "[=" : "=", f->value_name_,
                      f->has_implicit_ ? "]" : "");
    }
    heads.push_back(head);
    if (head.size() + 2 <= kMaxHelpColumn) column = std::max(column, head.size() + 2);
  }
  const std::string indent(column, ' ');
  for (size_t i = 0; i < flags_.size(); ++i) {
    const Flag& f = *flags_[i];
    std::string help = f.help_;
    if (f.type_ == Type::kRepeated) absl::StrAppend(&help, " (repeatable)");
    if (f.required_) absl::StrAppend(&help, " (required)");
    if (!f.choices_.empty()) {
      absl::StrAppend(&help, " (one of: ", absl::StrJoin(f.choices_, ", "), ")");
    }
    if (!f.default_text_.empty()) absl::StrAppend(&help, " (default: ", f.default_text_, ")");
    std::string line = heads[i];
    if (line.size() + 1 > column) {
      absl::StrAppend(&out, line, "\n");
      line = indent;
    } else {
      line.resize(column, ' ');
    }
    bool first = true;
    for (absl::string_view part : absl::StrSplit(help, '\n')) {
      absl::StrAppend(&out, first ? line : indent, part, "\n");
      first = false;
    }
  }
  std::string help_head = "  --help";
  help_head.resize(std::max(column, help_head.size() + 1), ' ');
  absl::StrAppend(&out, help_head, "this text\n");
  return out;
}

}  // namespace tensorflow::tf_ext::tools
