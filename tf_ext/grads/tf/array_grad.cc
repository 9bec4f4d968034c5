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
#include "tf_ext/grads/grad_builder.h"
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

// Ops that pass their input through (Python's _IdGrad): d(input) = d(output). `in` and `out`
// are the OpDef's argument names.
absl::Status PassThroughGrad(const std::string& op, const char* in, const char* out,
                             const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(op, attrs);
  b.Return(in, b.Add({{"dx"}, "Identity", {grad::GradName(out)}, {{"T", b.TypeOf(in)}}}));
  return b.Build(g);
}

// CheckNumericsV2(tensor, message) = tensor, failing on NaN or Inf: its gradient is checked
// too, d(tensor) = CheckNumericsV2(d(output)), with Python's message.
absl::Status CheckNumericsV2Grad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("CheckNumericsV2", attrs);
  const std::string message = b.GetAttr<std::string>("message");
  b.Return("tensor",
           b.Add({{"dx"},
                  "CheckNumericsV2",
                  {grad::GradName("output")},
                  {{"T", b.TypeOf("tensor")},
                   {"message", absl::StrCat("Not a number (NaN) or infinity (Inf) values "
                                            "detected in gradient. ",
                                            message)}}}));
  return b.Build(g);
}

// PreventGradient: as in Python, asking for its gradient is an error, with the op's message.
absl::Status PreventGradientGrad(const AttrSlice& attrs, FunctionDef*) {
  std::string message;
  (void)GetNodeAttr(attrs, "message", &message);
  return absl::InvalidArgumentError(
      absl::StrCat("PreventGradient: gradient explicitly disabled. Reason: ", message));
}

}  // namespace

TF_EXT_REGISTER_TF_GRADIENT("IdentityN", IdentityNGrad);
TF_EXT_REGISTER_TF_GRADIENT("PlaceholderWithDefault", [](const AttrSlice& a, FunctionDef* g) {
  return PassThroughGrad("PlaceholderWithDefault", "input", "output", a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("EnsureShape", [](const AttrSlice& a, FunctionDef* g) {
  return PassThroughGrad("EnsureShape", "input", "output", a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("CheckNumericsV2", CheckNumericsV2Grad);
TF_EXT_REGISTER_TF_GRADIENT("PreventGradient", PreventGradientGrad);

}  // namespace tensorflow::tf_ext
