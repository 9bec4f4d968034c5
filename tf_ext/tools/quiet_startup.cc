#include "tf_ext/tools/quiet_startup.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/base/log_severity.h"
#include "absl/log/globals.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace tensorflow::tf_ext::tools {
namespace {

constexpr char kLogLevelEnv[] = "TF_CPP_MIN_LOG_LEVEL";

// The real stderr while start-up writes to the capture; -1 when not capturing.
int real_stderr = -1;

// Whether `envp` sets TF_CPP_MIN_LOG_LEVEL.
bool SetsLogLevel(char** envp) {
  const size_t n = sizeof(kLogLevelEnv) - 1;
  for (char** e = envp; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, kLogLevelEnv, n) == 0 && (*e)[n] == '=') return true;
  }
  return false;
}

// Runs before every library's initializers (the executable's .preinit_array): no C++ runtime,
// no TensorFlow, and libc's own initializer has not run yet either (getenv does not see the
// environment, and what setenv writes is replaced), so it reads the environment it is passed.
void CaptureStartup(int, char**, char** envp) {
  if (SetsLogLevel(envp)) return;  // the user chose what TensorFlow logs
  const int capture = ::memfd_create("tf_ext_startup_stderr", MFD_CLOEXEC);
  if (capture < 0) return;
  const int real = ::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
  if (real < 0 || ::dup2(capture, STDERR_FILENO) < 0) {
    if (real >= 0) ::close(real);
    ::close(capture);
    return;
  }
  ::close(capture);
  real_stderr = real;
}

__attribute__((section(".preinit_array"), used)) void (*const capture_startup)(int, char**,
                                                                               char**) =
    &CaptureStartup;

// A log record's first line: severity letter, MMDD, a space ("I0000 00:00:...", "W1202 ...").
bool IsRecordHeader(absl::string_view line) {
  if (line.size() < 6 || line[5] != ' ') return false;
  if (line[0] != 'I' && line[0] != 'W' && line[0] != 'E' && line[0] != 'F') return false;
  for (int i = 1; i < 5; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(line[i]))) return false;
  }
  return true;
}

void WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

std::string ReadFromStart(int fd) {
  std::string text;
  if (::lseek(fd, 0, SEEK_SET) != 0) return text;
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(fd, buffer, sizeof(buffer))) > 0) text.append(buffer, n);
  return text;
}

}  // namespace

std::string StartupLinesToShow(const std::string& captured) {
  std::string shown;
  bool in_info = false;
  for (absl::string_view line : absl::StrSplit(captured, '\n')) {
    if (IsRecordHeader(line)) {
      in_info = line[0] == 'I';
    } else if (absl::StartsWith(line, "WARNING: All log messages before absl::InitializeLog()")) {
      continue;
    }
    if (in_info || line.empty()) continue;
    shown.append(line.data(), line.size());
    shown.push_back('\n');
  }
  return shown;
}

void QuietTensorFlowStartup() {
  if (real_stderr < 0) return;
  // TensorFlow logs through absl: INFO off from here on, as TF_CPP_MIN_LOG_LEVEL=1 would.
  absl::SetMinLogLevel(absl::LogSeverityAtLeast::kWarning);
  std::fflush(stderr);
  const std::string captured = ReadFromStart(STDERR_FILENO);
  ::dup2(real_stderr, STDERR_FILENO);
  ::close(real_stderr);
  real_stderr = -1;
  WriteAll(STDERR_FILENO, StartupLinesToShow(captured));
}

}  // namespace tensorflow::tf_ext::tools
