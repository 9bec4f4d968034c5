// Unifying TensorFlow's two C++ gradient registries.
//
// TensorFlow keeps C++ gradients in two disjoint registries:
//  * function gradients (gradient::RegisterOp / REGISTER_OP_GRADIENT, FDH creators): used by
//    SymbolicGradient, the graph-level AddSymbolicGradients and so by every Session and by
//    tf_ext_grad;
//  * client gradients (ops::GradOpRegistry / REGISTER_GRADIENT_OP): used by cc
//    AddSymbolicGradients and the C API's TF_AddGradients, hence the Java/Go/Rust bindings.
// Each registry lacks ops the other has (TF 2.21: 11 function-only, 111 client-only).
//
// UnifyGradientRegistries fills each registry from the other:
//  * client-only -> function: a creator that, for a node's attrs, builds the forward op in a
//    graph with one _Arg per input and per incoming gradient, runs the client gradient function
//    on it and converts that graph into the FunctionDef SymbolicGradient expects (inputs + dys
//    -> dxs). A client no-gradient op becomes a function no-gradient op (zeros).
//  * function-only -> client: the SymbolicGradient emitter tf_ext uses for its own ops.
// It never overrides an existing registration and is idempotent. The op library runs it when
// it is loaded; call it again (C++, C or Python) after loading other libraries whose ops have
// gradients in one registry only.
//
// Thread safety: TensorFlow's registries are plain maps. Unify before other threads build
// gradients (as at library load).
#ifndef TF_EXT_GRADS_UNIFY_H_
#define TF_EXT_GRADS_UNIFY_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tensorflow/core/framework/function.h"

namespace tensorflow::tf_ext {

// How the two registries cover the ops of OpRegistry::Global(). A no-gradient registration
// counts as an entry (it says how to differentiate: zeros).
struct RegistryCounts {
  int ops = 0;
  int both = 0;
  int function_only = 0;
  int client_only = 0;
  int neither = 0;
};

struct RegistryReport {
  RegistryCounts before, after;
  std::vector<std::string> added_function;    // ops given a function gradient (from client)
  std::vector<std::string> added_client;      // ops given a client gradient (from function)
  std::vector<std::string> lacking_function;  // after: ops with no function-registry entry
  std::vector<std::string> lacking_client;    // after: ops with no client-registry entry
  // A human-readable summary: counts before/after and the ops added. With `list_lacking`,
  // also every op still lacking in each registry.
  std::string ToString(bool list_lacking) const;
};

// Counts entries now; optionally lists the ops lacking in each registry.
RegistryCounts CountGradientRegistries(std::vector<std::string>* lacking_function = nullptr,
                                       std::vector<std::string>* lacking_client = nullptr);

// Fills each registry from the other (see above). Idempotent; never overrides.
absl::Status UnifyGradientRegistries(RegistryReport* report = nullptr);

}  // namespace tensorflow::tf_ext

extern "C" {
// UnifyGradientRegistries for C/FFI users. Returns 0 on success, else non-zero. The summary
// (RegistryReport::ToString(false)), or the error, is copied to `report` (NUL-terminated, at
// most report_len bytes) when report is not NULL.
int TfExtUnifyGradientRegistries(char* report, size_t report_len);
}

#endif  // TF_EXT_GRADS_UNIFY_H_
