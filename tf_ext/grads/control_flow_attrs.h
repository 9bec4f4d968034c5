// The attrs tf_ext's control-flow pass (tf_ext/graph/engine/control_flow.h) records on each loop or
// conditional it rewrites for its gradient, read by the pass, by tf_ext's backward builder and
// by the registered gradients of While/If/Case (tf_ext/grads/tf/control_flow_grad.cc).
#ifndef TF_EXT_GRADS_CONTROL_FLOW_ATTRS_H_
#define TF_EXT_GRADS_CONTROL_FLOW_ATTRS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/types.h"

namespace tensorflow::tf_ext::control_flow {

// While: [backward body, backward cond]; If/Case: the branches' gradient functions.
inline constexpr char kFunctions[] = "_tf_ext_grad_functions";
// The loop variables / branch inputs (If/Case: without the predicate) with a gradient.
inline constexpr char kInputs[] = "_tf_ext_grad_inputs";
// If/Case: the outputs with an incoming gradient.
inline constexpr char kOutputs[] = "_tf_ext_grad_outputs";
// While: the loop invariants the gradient reads.
inline constexpr char kCaptures[] = "_tf_ext_grad_captures";
// The node's outputs before the rewrite (they come first).
inline constexpr char kNumOutputs[] = "_tf_ext_grad_num_outputs";
// While: accumulators after the iteration count; If/Case: saved outputs (Optionals).
inline constexpr char kNumSaved[] = "_tf_ext_grad_num_saved";
// The pass that rewrote the node (its name prefix).
inline constexpr char kPass[] = "_tf_ext_grad_pass";
// While: the positions in kInputs of the TensorList loop variables whose gradient the backward
// body writes once per element (FunctionGradient::fresh_lists): the backward loop starts each
// from a list of uninitialised elements (TensorListReserve of the incoming gradient's length and
// element shape) and its result is AddN(incoming gradient, the loop's output).
inline constexpr char kFreshLists[] = "_tf_ext_grad_fresh_lists";
// While: the element dtype of each kFreshLists list.
inline constexpr char kFreshListTypes[] = "_tf_ext_grad_fresh_list_types";

// A rewritten While's kFreshLists and kFreshListTypes: position in kInputs (`num_inputs` of
// them) -> element dtype. `op` names the node in errors.
inline absl::StatusOr<std::map<int, DataType>> FreshLists(const AttrSlice& attrs,
                                                         const std::string& op,
                                                         int num_inputs) {
  std::vector<int> positions;
  DataTypeVector types;
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, kFreshLists, &positions));
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, kFreshListTypes, &types));
  const std::string inconsistent =
      absl::StrCat(op, ": inconsistent ", kFreshLists, " / ", kFreshListTypes);
  if (types.size() != positions.size()) return absl::InvalidArgumentError(inconsistent);
  std::map<int, DataType> fresh;
  for (size_t f = 0; f < positions.size(); ++f) {
    if (positions[f] < 0 || positions[f] >= num_inputs) {
      return absl::InvalidArgumentError(inconsistent);
    }
    fresh[positions[f]] = types[f];
  }
  return fresh;
}

}  // namespace tensorflow::tf_ext::control_flow

#endif  // TF_EXT_GRADS_CONTROL_FLOW_ATTRS_H_
