// TensorFlow's start-up notices kept off a command-line tool's stderr.
//
// Every process that links TensorFlow prints INFO lines before it does any work: oneDNN's
// "custom operations are on" (written while TensorFlow's libraries initialise, before main),
// cpu_feature_guard's list of unused instructions and MLIR's pass notice (at the first
// session). A tool's users read its stderr for its own errors. So in a program linked with
// this file, unless the user has set TF_CPP_MIN_LOG_LEVEL (then TensorFlow logs what they
// asked for, as it does by default): before any library initialises (the executable's
// .preinit_array), stderr is captured; main() calls QuietTensorFlowStartup first, which
// restores stderr, writes what TensorFlow wrote until then but its INFO lines, and sets absl's
// threshold (TensorFlow's logging) to warnings: warnings and errors still show.
// TF_CPP_MIN_LOG_LEVEL=0 shows everything.
#ifndef TF_EXT_TOOLS_QUIET_STARTUP_H_
#define TF_EXT_TOOLS_QUIET_STARTUP_H_

#include <string>

namespace tensorflow::tf_ext::tools {

// Call first in main(): stderr back, with the start-up lines worth showing.
void QuietTensorFlowStartup();

// What of a capture of TensorFlow's start-up stderr is shown: everything but its INFO records
// (glog-style "I0000 ..." lines and the lines that continue them) and absl's notice that logs
// go to stderr before absl::InitializeLog.
std::string StartupLinesToShow(const std::string& captured);

}  // namespace tensorflow::tf_ext::tools

#endif  // TF_EXT_TOOLS_QUIET_STARTUP_H_
