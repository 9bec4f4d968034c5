// Gradients of TensorFlow core ops that neither of TensorFlow's C++ registries has (2.21), but
// that real models need: frozen Keras graphs contain IdentityN (tf.custom_gradient, e.g. in
// swish/gelu) and Erfc (gelu). Each is registered in both C++ registries when the op library
// loads, unless TensorFlow has one already (a newer release may add them).
//
// Checked against numeric Jacobians: tests/core_grads_test.cc and
// tf_ext/tools/tf_core_gradcheck_spec.txt (`make gradcheck`).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "tensorflow/cc/framework/grad_op_registry.h"
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/gradients.h"
#include "tf_ext/grads/registry.h"

namespace tensorflow::tf_ext {

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

absl::Status ErfcGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("Erfc", attrs);
  b.RequireTypes("T", {DT_HALF, DT_BFLOAT16, DT_FLOAT, DT_DOUBLE});
  const grad::NodeAttrs t = b.PassAttrs({"T"});
  // erfc(x) = 1 - erf(x): d/dx = -2/sqrt(pi) * exp(-x^2)
  const std::string c = b.TypedConst("minus_two_over_sqrt_pi", -2.0 / std::sqrt(M_PI));
  b.UnaryCwise({
      {{"x2"}, "Square", {"x"}, t},                      // x^2
      {{"neg_x2"}, "Neg", {"x2"}, t},                    // -x^2
      {{"exp"}, "Exp", {"neg_x2"}, t},                   // exp(-x^2)
      {{"deriv"}, "Mul", {"exp", c}, t},                 // -2/sqrt(pi) exp(-x^2)
      {{"dx"}, "Mul", {grad::GradName("y"), "deriv"}, t},    // d(x) = d(y) * erfc'(x)
  });
  return b.Build(g);
}

namespace {

bool RegisterCoreGradients() {
  const std::pair<const char*, gradient::Creator> kGradients[] = {
      {"IdentityN", &IdentityNGrad},
      {"Erfc", &ErfcGrad},
  };
  for (const auto& [op, fn] : kGradients) {
    gradient::Creator existing_function;
    ops::GradFunc existing_client;
    if (gradient::GetOpGradientCreator(op, &existing_function).ok() ||
        ops::GradOpRegistry::Global()->Lookup(op, &existing_client).ok()) {
      continue;  // TensorFlow has one (a newer release): keep it
    }
    RegisterGradient(op, fn);
  }
  return true;
}

const bool core_gradients_registered [[maybe_unused]] = RegisterCoreGradients();

}  // namespace
}  // namespace tensorflow::tf_ext
