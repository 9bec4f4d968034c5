// Where tf_ext's C++ tools find the op library _tf_ext_ops.so when one is needed.
//
// The order is the one documented in docs/cpp.md, "Where the op library is found", shared with
// Python's tf_ext/_loader.py:
//   1. --library=PATH, if given;
//   2. $TF_EXT_LIBRARY, if set;
//   (Python only: the .so inside the installed package)
//   3. Bazel runfiles: $RUNFILES_DIR/tf_ext/tf_ext/_tf_ext_ops.so, then
//      <binary>.runfiles/tf_ext/tf_ext/_tf_ext_ops.so;
//   4. the build tree: next to the binary (bazel-bin/tf_ext/), then bazel-bin/tf_ext/ seen
//      from a binary in another package (bazel-bin/serving/ -> ../tf_ext/).
// An explicit choice (1 or 2) is the only candidate: a missing file there is an error, never
// silently replaced by another copy (two copies of the library in one process abort it).
#ifndef TF_EXT_TOOLS_LIBRARY_LOOKUP_H_
#define TF_EXT_TOOLS_LIBRARY_LOOKUP_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tensorflow::tf_ext::tools {

inline constexpr char kLibraryEnv[] = "TF_EXT_LIBRARY";
inline constexpr char kLibraryName[] = "_tf_ext_ops.so";

// What the lookup depends on; FromProcess fills it for the running binary, tests by hand.
struct LibraryLookupContext {
  std::string flag;                        // --library's value ("" = not given)
  std::optional<std::string> env;          // $TF_EXT_LIBRARY (unset or empty = not given)
  std::optional<std::string> runfiles_dir; // $RUNFILES_DIR
  std::string binary;                      // this binary's path (/proc/self/exe)

  static LibraryLookupContext FromProcess(const std::string& flag);
};

struct LibraryCandidate {
  std::string path;
  std::string source;  // "--library", "$TF_EXT_LIBRARY", "runfiles", "next to the binary"
};

// Every candidate, in lookup order (existing or not).
std::vector<LibraryCandidate> LibraryCandidates(const LibraryLookupContext& context);

// The first candidate that is a file, with how it was found. NotFound names the explicit
// choice, or lists every path tried and how to give one.
absl::StatusOr<LibraryCandidate> LocateOpLibrary(const LibraryLookupContext& context);

// LocateOpLibrary's path only.
absl::StatusOr<std::string> FindOpLibrary(const LibraryLookupContext& context);

}  // namespace tensorflow::tf_ext::tools

#endif  // TF_EXT_TOOLS_LIBRARY_LOOKUP_H_
