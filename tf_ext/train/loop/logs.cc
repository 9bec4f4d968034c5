#include "tf_ext/train/loop/logs.h"

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace tensorflow::tf_ext::train {

const double* FindLog(const Logs& logs, const std::string& name) {
  for (const auto& [k, v] : logs) {
    if (k == name) return &v;
  }
  return nullptr;
}

std::string EpochSummary(int64_t epoch, int64_t epochs, const Logs& logs) {
  std::vector<std::string> parts;
  for (const auto& [name, v] : logs) parts.push_back(absl::StrFormat("%s %.6g", name, v));
  return absl::StrFormat("epoch %d/%d: %s", epoch + 1, epochs, absl::StrJoin(parts, ", "));
}

}  // namespace tensorflow::tf_ext::train
