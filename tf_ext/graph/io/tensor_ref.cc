#include "tf_ext/graph/io/tensor_ref.h"

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tensorflow::tf_ext {

std::string TensorRef::ToString() const { return absl::StrCat(node, ":", index); }

absl::StatusOr<TensorRef> TensorRef::Parse(const std::string& s) {
  TensorRef ref;
  const size_t colon = s.rfind(':');
  ref.node = s.substr(0, colon);
  if (colon != std::string::npos && !absl::SimpleAtoi(s.substr(colon + 1), &ref.index)) {
    return absl::InvalidArgumentError(absl::StrCat("bad tensor name '", s, "' (want node:index)"));
  }
  if (ref.node.empty()) return absl::InvalidArgumentError("empty tensor name");
  return ref;
}

}  // namespace tensorflow::tf_ext
