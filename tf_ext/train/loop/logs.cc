#include "tf_ext/train/loop/logs.h"

namespace tensorflow::tf_ext::train {

const double* FindLog(const Logs& logs, const std::string& name) {
  for (const auto& [k, v] : logs) {
    if (k == name) return &v;
  }
  return nullptr;
}

}  // namespace tensorflow::tf_ext::train
