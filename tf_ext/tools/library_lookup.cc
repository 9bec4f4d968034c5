#include "tf_ext/tools/library_lookup.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tensorflow::tf_ext::tools {

LibraryLookupContext LibraryLookupContext::FromProcess(const std::string& flag) {
  LibraryLookupContext c;
  c.flag = flag;
  if (const char* env = std::getenv(kLibraryEnv)) c.env = env;
  if (const char* runfiles = std::getenv("RUNFILES_DIR")) c.runfiles_dir = runfiles;
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) c.binary.assign(exe, n);
  return c;
}

std::vector<LibraryCandidate> LibraryCandidates(const LibraryLookupContext& context) {
  if (!context.flag.empty()) return {{context.flag, "--library"}};
  if (context.env.has_value() && !context.env->empty()) {
    return {{*context.env, absl::StrCat("$", kLibraryEnv)}};
  }
  // Runfiles paths are <workspace name>/<package>/<file>; the workspace is named tf_ext.
  const std::string in_runfiles = absl::StrCat("tf_ext/tf_ext/", kLibraryName);
  std::vector<LibraryCandidate> out;
  if (context.runfiles_dir.has_value() && !context.runfiles_dir->empty()) {
    out.push_back({absl::StrCat(*context.runfiles_dir, "/", in_runfiles), "runfiles"});
  }
  if (!context.binary.empty()) {
    out.push_back({absl::StrCat(context.binary, ".runfiles/", in_runfiles), "runfiles"});
    const size_t slash = context.binary.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : context.binary.substr(0, slash);
    out.push_back({absl::StrCat(dir, "/", kLibraryName), "next to the binary"});
    out.push_back({absl::StrCat(dir, "/../tf_ext/", kLibraryName), "next to the binary"});
  }
  return out;
}

absl::StatusOr<LibraryCandidate> LocateOpLibrary(const LibraryLookupContext& context) {
  const std::vector<LibraryCandidate> candidates = LibraryCandidates(context);
  std::vector<std::string> tried;
  for (const LibraryCandidate& c : candidates) {
    std::error_code error;
    if (std::filesystem::is_regular_file(c.path, error)) return c;
    tried.push_back(c.path);
  }
  const bool explicit_choice =
      !context.flag.empty() || (context.env.has_value() && !context.env->empty());
  if (explicit_choice) {
    return absl::NotFoundError(absl::StrCat("op library '", candidates[0].path, "' not found (from ",
                                            candidates[0].source, ")"));
  }
  return absl::NotFoundError(absl::StrCat(
      "op library ", kLibraryName, " not found; tried ", absl::StrJoin(tried, ", "),
      ". Build it (bazel build //tf_ext:_tf_ext_ops.so), or give --library=PATH or $",
      kLibraryEnv));
}

absl::StatusOr<std::string> FindOpLibrary(const LibraryLookupContext& context) {
  absl::StatusOr<LibraryCandidate> found = LocateOpLibrary(context);
  if (!found.ok()) return found.status();
  return found->path;
}

}  // namespace tensorflow::tf_ext::tools
