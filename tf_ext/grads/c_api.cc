#include "tf_ext/grads/c_api.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "tensorflow/core/framework/function.pb.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tf_ext/grads/registry.h"
#include "tf_ext/grads/specialize.h"

extern "C" {

int TfExtGradientFunctionDef(const void* node_def, size_t node_def_len, void** function_def,
                             size_t* function_def_len, char* error, size_t error_len) {
  auto fail = [&](const std::string& msg) {
    if (error != nullptr && error_len > 0) {
      std::strncpy(error, msg.c_str(), error_len - 1);
      error[error_len - 1] = '\0';
    }
    return 1;
  };
  if (function_def == nullptr || function_def_len == nullptr) {
    return fail("TfExtGradientFunctionDef: function_def and function_def_len must not be NULL");
  }
  *function_def = nullptr;
  *function_def_len = 0;
  if (node_def == nullptr && node_def_len > 0) {
    return fail("TfExtGradientFunctionDef: node_def is NULL but node_def_len is not 0");
  }
  // protobuf takes an int length: a larger buffer must not wrap around to a small one.
  if (node_def_len > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return fail("TfExtGradientFunctionDef: node_def_len is too large");
  }
  tensorflow::NodeDef node;
  if (!node.ParseFromArray(node_def, static_cast<int>(node_def_len))) {
    return fail("TfExtGradientFunctionDef: could not parse the NodeDef");
  }
  tensorflow::FunctionDef fdef;
  absl::Status s = tensorflow::tf_ext::SpecializedGradient(node, &fdef);
  if (!s.ok()) return fail(std::string(s.message()));
  std::string bytes = fdef.SerializeAsString();
  void* buf = std::malloc(bytes.size() + 1);
  if (buf == nullptr) return fail("TfExtGradientFunctionDef: out of memory");
  std::memcpy(buf, bytes.data(), bytes.size());
  *function_def = buf;
  *function_def_len = bytes.size();
  return 0;
}

void TfExtFree(void* p) { std::free(p); }

int TfExtGradientKind(const char* op_type, char* message, size_t message_len) {
  std::string text;
  if (op_type == nullptr) {
    if (message != nullptr && message_len > 0) {
      std::strncpy(message, "TfExtGradientKind: op_type is NULL", message_len - 1);
      message[message_len - 1] = '\0';
    }
    return -1;
  }
  const auto kind = tensorflow::tf_ext::LookupGradientKind(op_type, &text);
  if (message != nullptr && message_len > 0) {
    std::strncpy(message, text.c_str(), message_len - 1);
    message[message_len - 1] = '\0';
  }
  return static_cast<int>(kind);
}

}  // extern "C"
