#include "tf_ext/graph/engine/inline_calls.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/common_runtime/function_body.h"
#include "tensorflow/core/common_runtime/function_def_utils.h"
#include "tensorflow/core/common_runtime/inline_function_utils.h"
#include "tensorflow/core/framework/function.h"

namespace tensorflow::tf_ext {

absl::StatusOr<int> InlineFunctionCalls(Graph* g) {
  const FunctionLibraryDefinition& flib = g->flib_def();
  int inlined = 0;
  for (int depth = 0;; ++depth) {
    std::vector<Node*> calls;
    for (Node* n : g->op_nodes()) {
      if (n->IsPartitionedCall() || flib.Find(n->type_string()) != nullptr) calls.push_back(n);
    }
    if (calls.empty()) return inlined;
    if (depth == 100) {
      return absl::InvalidArgumentError("function calls nested over 100 deep (recursion?)");
    }
    for (Node* n : calls) {
      NameAttrList func;
      if (n->IsPartitionedCall()) {
        TF_RETURN_IF_ERROR(GetNodeAttr(n->attrs(), "f", &func));
      } else {
        func.set_name(n->type_string());
        for (const auto& [k, v] : n->attrs()) (*func.mutable_attr())[k] = v;
      }
      const FunctionDef* fdef = flib.Find(func.name());
      if (fdef == nullptr) {
        return absl::NotFoundError(absl::StrCat("node '", n->name(), "' calls function '",
                                                func.name(), "', which the graph's library lacks"));
      }
      std::unique_ptr<FunctionBody> body;
      TF_RETURN_IF_ERROR(FunctionDefToBodyHelper(*fdef, AttrSlice(&func.attr()), &flib, &body));
      InlineFunctionBodyOptions options;
      options.ignore_noinline = true;
      options.inline_impl_selection_group_functions = true;
      // Keep an IdentityN named like the call, so `--y`/`--x` may name its outputs.
      options.keep_caller_node = InlineFunctionBodyOptions::KeepCallerNode::kFetchable;
      if (n->IsPartitionedCall()) {
        options.output_control_src = InlineFunctionBodyOptions::OutputControlSource::kControlOutputs;
        options.inlined_function_body_placer = InlinedFunctionBodyPlacer::MultiDevice();
      }
      const std::string name = n->name();
      if (absl::Status s = InlineFunctionBody(flib, g, n, body.get(), options); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("cannot inline function '", func.name(),
                                                   "' called by node '", name, "': ", s.message()));
      }
      ++inlined;
    }
  }
}

}  // namespace tensorflow::tf_ext
