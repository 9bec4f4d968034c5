// Command-line flags of tf_ext's tools: --name=value.
#ifndef TF_EXT_TOOLS_FLAGS_H_
#define TF_EXT_TOOLS_FLAGS_H_

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tensorflow::tf_ext::tools {

// True (and *value set) when `arg` is --name=value.
inline bool FlagValue(const std::string& arg, const char* name, std::string* value) {
  const std::string prefix = absl::StrCat("--", name, "=");
  if (!absl::StartsWith(arg, prefix)) return false;
  *value = arg.substr(prefix.size());
  return true;
}

}  // namespace tensorflow::tf_ext::tools

#endif  // TF_EXT_TOOLS_FLAGS_H_
