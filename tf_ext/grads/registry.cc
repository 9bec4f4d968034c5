#include "tf_ext/grads/registry.h"

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "tensorflow/cc/framework/grad_op_registry.h"
#include "tensorflow/cc/framework/ops.h"
#include "tensorflow/cc/ops/array_ops.h"
#include "tensorflow/cc/ops/functional_ops.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/function.pb.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/graph/graph.h"
#include "tensorflow/core/platform/logging.h"
#include "tf_ext/grads/node_validation.h"

namespace tensorflow::tf_ext {
namespace {

// Process-wide side tables live in TensorFlow's own gradient registry (one copy, in
// libtensorflow_framework), under keys no op can have: every DSO that links tf_ext's registry
// code - the op library, a tool, a third-party library - sees the same entries.
constexpr char kSurrogateKey[] = "/tf_ext:surrogate_forward";
constexpr char kUnimplementedKey[] = "/tf_ext:unimplemented";

// The message of an op registered with RegisterUnimplementedGradient (false if it is not).
bool FindUnimplemented(const std::string& op_type, std::string* message) {
  gradient::Creator marker;
  if (!gradient::GetOpGradientCreator(op_type + kUnimplementedKey, &marker).ok() || !marker) {
    return false;
  }
  if (message != nullptr) {
    FunctionDef unused;
    *message = std::string(marker(AttrSlice(), &unused).message());
  }
  return true;
}

// The client registry's gradient for ops registered with RegisterUnimplementedGradient: fail
// while the gradient graph is built, with the registered message.
absl::Status UnimplementedClientGrad(const Scope&, const Operation& op,
                                     const std::vector<Output>&, std::vector<Output>*) {
  std::string message;
  FindUnimplemented(op.node()->type_string(), &message);
  return absl::UnimplementedError(message);
}

bool AlreadyRegistered(const std::string& op_type) {
  gradient::Creator existing;
  ops::GradFunc existing_cc;
  const bool in_function = gradient::GetOpGradientCreator(op_type, &existing).ok();
  const bool in_client = ops::GradOpRegistry::Global()->Lookup(op_type, &existing_cc).ok();
  if (in_function || in_client) {
    LOG(WARNING) << "tf_ext: a gradient for " << op_type
                 << " is already registered (is a second copy of the op library loaded?); "
                    "keeping the first one";
    return true;
  }
  return false;
}

// Stable across processes and builds (unlike std::hash), so names are reproducible.
uint64_t Fnv1a64(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

absl::Status Substitute(const AttrSlice& attrs, AttrValue* value) {
  if (!value->placeholder().empty()) {
    const AttrValue* v = attrs.Find(value->placeholder());
    if (v == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("attr placeholder $", value->placeholder(), " has no value"));
    }
    *value = *v;
  } else if (value->has_func()) {
    for (auto& kv : *value->mutable_func()->mutable_attr()) {
      TF_RETURN_IF_ERROR(Substitute(attrs, &kv.second));
    }
  }
  return absl::OkStatus();
}

absl::Status SpecializeArg(const AttrSlice& attrs, OpDef::ArgDef* arg) {
  if (!arg->type_attr().empty()) {
    DataType t;
    TF_RETURN_IF_ERROR(GetNodeAttr(attrs, arg->type_attr(), &t));
    arg->set_type(t);
    arg->clear_type_attr();
  }
  if (!arg->number_attr().empty() || !arg->type_list_attr().empty()) {
    return absl::UnimplementedError(
        absl::StrCat("specialising list argument '", arg->name(), "' is not supported"));
  }
  return absl::OkStatus();
}

}  // namespace

// The C++ client registry's gradient for every tf_ext-registered op: one SymbolicGradient node
// whose function is the op itself with the node's attrs, so the FDH creator does the work.
absl::Status SymbolicGradientClientGrad(const Scope& scope, const Operation& op,
                                        const std::vector<Output>& grad_inputs,
                                        std::vector<Output>* grad_outputs) {
  const Node* node = op.node();
  NameAttrList f;
  f.set_name(node->type_string());
  for (const auto& kv : node->attrs()) {
    if (!kv.first.empty() && kv.first[0] == '_') continue;  // placement/internal attrs
    (*f.mutable_attr())[kv.first] = kv.second;
  }
  std::vector<Output> inputs;
  for (int i = 0; i < op.num_inputs(); ++i) inputs.push_back(op.input(i));
  for (int i = 0; i < op.num_outputs(); ++i) {
    // An output nobody differentiated arrives as NoGradient: its incoming gradient is zero.
    if (i < static_cast<int>(grad_inputs.size()) && grad_inputs[i].node() != nullptr) {
      inputs.push_back(grad_inputs[i]);
    } else {
      inputs.push_back(ops::ZerosLike(scope, op.output(i)).y);
    }
  }
  ops::SymbolicGradient grad(scope, InputList(inputs), node->input_types(), f);
  TF_RETURN_IF_ERROR(scope.status());
  grad_outputs->assign(grad.output.begin(), grad.output.end());
  return absl::OkStatus();
}

bool RegisterGradient(const std::string& op_type, gradient::Creator creator) {
  if (AlreadyRegistered(op_type)) return true;
  gradient::RegisterOp(op_type, std::move(creator));
  ops::GradOpRegistry::Global()->Register(op_type, &SymbolicGradientClientGrad);
  return true;
}

bool RegisterNoGradient(const std::string& op_type) {
  if (AlreadyRegistered(op_type)) return true;
  gradient::RegisterOp(op_type, nullptr);
  ops::GradOpRegistry::Global()->Register(op_type, nullptr);
  return true;
}

bool RegisterUnimplementedGradient(const std::string& op_type, const std::string& message) {
  if (AlreadyRegistered(op_type)) return true;
  gradient::Creator fail = [message](const AttrSlice&, FunctionDef*) {
    return absl::UnimplementedError(message);
  };
  gradient::RegisterOp(op_type + kUnimplementedKey, fail);
  gradient::RegisterOp(op_type, fail);
  ops::GradOpRegistry::Global()->Register(op_type, &UnimplementedClientGrad);
  return true;
}

GradientKind LookupGradientKind(const std::string& op_type, std::string* message) {
  if (FindUnimplemented(op_type, message)) return GradientKind::kUnimplemented;
  gradient::Creator creator;
  if (!gradient::GetOpGradientCreator(op_type, &creator).ok()) return GradientKind::kMissing;
  return creator ? GradientKind::kFunction : GradientKind::kNone;
}

namespace {

// `creator`'s FunctionDef for `node`, with every attr placeholder replaced by the node's value
// (defaults filled in) and a deterministic name unique per (op, attrs, kind).
absl::Status Specialize(const gradient::Creator& creator, const NodeDef& node,
                        const std::string& kind, FunctionDef* fdef) {
  const OpDef* op_def = nullptr;
  TF_RETURN_IF_ERROR(OpRegistry::Global()->LookUpOpDef(node.op(), &op_def));
  NodeDef full = node;
  AddDefaultsToNodeDef(*op_def, &full);
  AttrSlice attrs(full);

  FunctionDef generic;
  TF_RETURN_IF_ERROR(creator(attrs, &generic));
  *fdef = generic;
  OpDef* sig = fdef->mutable_signature();
  sig->clear_attr();
  for (auto& arg : *sig->mutable_input_arg()) TF_RETURN_IF_ERROR(SpecializeArg(attrs, &arg));
  for (auto& arg : *sig->mutable_output_arg()) TF_RETURN_IF_ERROR(SpecializeArg(attrs, &arg));
  for (auto& n : *fdef->mutable_node_def()) {
    for (auto& kv : *n.mutable_attr()) TF_RETURN_IF_ERROR(Substitute(attrs, &kv.second));
  }
  // Unique, deterministic name per (op, attrs): the Python bridge caches by it.
  std::map<std::string, std::string> sorted;  // protobuf maps iterate in no fixed order
  for (const auto& kv : full.attr()) {
    if (!kv.first.empty() && kv.first[0] != '_') sorted[kv.first] = kv.second.SerializeAsString();
  }
  std::string attr_key;
  for (const auto& kv : sorted) absl::StrAppend(&attr_key, kv.first, "=", kv.second, ";");
  std::string base;
  for (char c : node.op()) base.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  sig->set_name(absl::StrCat(base, "_", kind, "_", absl::Hex(Fnv1a64(attr_key))));
  return absl::OkStatus();
}

}  // namespace

bool RegisterSurrogateForward(const std::string& op_type, gradient::Creator creator) {
  gradient::Creator existing;
  if (gradient::GetOpGradientCreator(op_type + kSurrogateKey, &existing).ok()) return true;
  gradient::RegisterOp(op_type + kSurrogateKey, std::move(creator));  // first one wins
  return true;
}

absl::Status SpecializedSurrogateForward(const NodeDef& node, FunctionDef* fdef) {
  gradient::Creator creator;
  if (!gradient::GetOpGradientCreator(node.op() + kSurrogateKey, &creator).ok() || !creator) {
    return absl::NotFoundError(absl::StrCat(node.op(), " has no surrogate forward"));
  }
  return Specialize(creator, node, "surrogate", fdef);
}

absl::Status SpecializedGradient(const NodeDef& node, FunctionDef* fdef) {
  // Gradient creators (TensorFlow's own included) trust their attrs: none may see a NodeDef
  // that does not match its OpDef.
  NodeDef full;
  TF_RETURN_IF_ERROR(ValidateNodeForGradient(node, &full));
  gradient::Creator creator;
  if (!gradient::GetOpGradientCreator(full.op(), &creator).ok()) {
    return absl::NotFoundError(absl::StrCat("no C++ gradient is registered for op ", full.op()));
  }
  if (!creator) {
    return absl::InvalidArgumentError(
        absl::StrCat(full.op(), " is registered as not differentiable"));
  }
  full.clear_input();
  return Specialize(creator, full, "grad", fdef);
}

}  // namespace tensorflow::tf_ext

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
