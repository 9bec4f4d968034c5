// Gradients of TensorFlow's array ops that no C++ registry has in TensorFlow 2.21 (Python's
// python/ops/array_grad.py has them). Each is registered in both C++ registries when the op
// library loads, unless TensorFlow has one already (TF_EXT_REGISTER_TF_GRADIENT).
//
// Checked against numeric Jacobians: tf_ext/tools/tf_core_gradcheck_spec.txt (`make gradcheck`).
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/function.h"
#include "tf_ext/grads/registry.h"

namespace tensorflow::tf_ext {
namespace {

// Frozen Keras graphs hold IdentityN (tf.custom_gradient, e.g. in swish and gelu).
absl::Status IdentityNGrad(const AttrSlice& attrs, FunctionDef* g) {
  // IdentityN(input: T) -> output: T, T a list of types. The gradient is concrete for the
  // node's T (one argument per list element, the flattened convention SymbolicGradient uses):
  // d(input_i) = d(output_i).
  std::vector<DataType> types;
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, "T", &types));
  std::vector<std::string> in_def, out_def;
  std::vector<FunctionDefHelper::Node> nodes;
  std::vector<std::pair<std::string, std::string>> ret;
  for (int i = 0; i < static_cast<int>(types.size()); ++i) {
    in_def.push_back(absl::StrCat("input_", i, ": ", DataTypeString(types[i])));
  }
  for (int i = 0; i < static_cast<int>(types.size()); ++i) {
    const std::string t = DataTypeString(types[i]);
    in_def.push_back(absl::StrCat("d_output_", i, ": ", t));
    out_def.push_back(absl::StrCat("d_input_", i, ": ", t));
    // d(input_i) = d(output_i)
    nodes.push_back({{absl::StrCat("dx_", i)}, "Identity", {absl::StrCat("d_output_", i)},
                     {{"T", types[i]}}});
    ret.push_back({absl::StrCat("d_input_", i), absl::StrCat("dx_", i, ":output:0")});
  }
  *g = FunctionDefHelper::Create("IdentityNGrad", in_def, out_def, {}, nodes, ret);
  return absl::OkStatus();
}

}  // namespace

TF_EXT_REGISTER_TF_GRADIENT("IdentityN", IdentityNGrad);

}  // namespace tensorflow::tf_ext
