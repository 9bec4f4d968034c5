#include "tf_ext/grads/single_copy.h"

#include <dlfcn.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/function.h"

namespace tensorflow::tf_ext {
namespace {

// A key no op can have, in TensorFlow's own gradient registry (one per process, in
// libtensorflow_framework, so every copy of this library sees the same entry); its creator
// returns the first copy's path as its message.
constexpr char kFirstCopyKey[] = "/tf_ext:op_library_path";

// The file this code was loaded from: the op library's .so, or the binary it is linked into.
std::string ThisLibraryPath() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&ThisLibraryPath), &info) != 0 && info.dli_fname != nullptr) {
    return info.dli_fname;
  }
  return "<unknown path>";
}

absl::Status Decide() {
  const std::string self = ThisLibraryPath();
  gradient::Creator first;
  if (gradient::GetOpGradientCreator(kFirstCopyKey, &first).ok() && first) {
    FunctionDef unused;
    const std::string first_path(first(AttrSlice(), &unused).message());
    return absl::FailedPreconditionError(absl::StrCat(
        "tf_ext: not loading a second copy of the tf_ext op library from ", self,
        ": it is already loaded from ", first_path,
        ". Two copies would register every kernel twice and leave the ops unusable; load one "
        "copy, from one path (the first copy stays usable)."));
  }
  gradient::RegisterOp(kFirstCopyKey, [self](const AttrSlice&, FunctionDef*) {
    return absl::CancelledError(self);
  });
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckSingleCopy() {
  // Decided by the first caller among this copy's static initialisers (dlopen runs them on
  // one thread; TensorFlow's library loading is serialised).
  static const absl::Status* status = new absl::Status(Decide());
  return *status;
}

}  // namespace tensorflow::tf_ext
