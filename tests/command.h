// Runs a command line for the end-to-end tests of tf_ext's binaries.
#ifndef TF_EXT_TESTS_COMMAND_H_
#define TF_EXT_TESTS_COMMAND_H_

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace tensorflow::tf_ext::test {

struct CommandResult {
  int code = -1;       // exit status; -1 if the command could not run or was killed
  std::string output;  // stdout and stderr together
};

inline CommandResult RunCommand(const std::string& command) {
  CommandResult r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf;
  while (fgets(buf.data(), buf.size(), pipe) != nullptr) r.output += buf.data();
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace tensorflow::tf_ext::test

#endif  // TF_EXT_TESTS_COMMAND_H_
