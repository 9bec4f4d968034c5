// Gradients of TensorFlow's Optional ops, which TensorFlow 2.21 has only in Python
// (python/ops/optional_grad.py). tf_ext's control-flow pass (tf_ext/graph/engine/control_flow.h)
// makes each branch of a conditional output the tensors its gradient reads as Optionals, so a
// second derivative through a conditional differentiates them:
//   OptionalFromValue(components) = an Optional holding components:
//     d(components) = OptionalGetValue(d(optional));
//   OptionalGetValue(optional) = its components:
//     d(optional) = OptionalFromValue(d(components)).
// Registered in both C++ registries when the op library loads, unless TensorFlow has them
// (TF_EXT_REGISTER_TF_GRADIENT). Tested by tests/c_gradients_test.c (a Hessian-vector
// product through a conditional, against central differences).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/attr_value_util.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tf_ext/grads/tf/tf_gradient.h"

namespace tensorflow::tf_ext {
namespace {

using FDH = FunctionDefHelper;

// The component types of an Optional op's attr `name`.
absl::Status ComponentTypes(const AttrSlice& attrs, const char* op, const char* name,
                            DataTypeVector* types) {
  TF_RETURN_IF_ERROR(GetNodeAttr(attrs, name, types));
  if (types->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " is empty"));
  }
  return absl::OkStatus();
}

std::vector<TensorShapeProto> UnknownShapes(size_t n) {
  TensorShapeProto unknown;
  unknown.set_unknown_rank(true);
  return std::vector<TensorShapeProto>(n, unknown);
}

// One FDH input/output per component ("<prefix>_<i>: <type>"), and ret "<prefix>_<i>" ->
// output i of the list output `out` of node `node`.
std::vector<std::string> Args(const std::string& prefix, const DataTypeVector& types) {
  std::vector<std::string> args;
  for (size_t i = 0; i < types.size(); ++i) {
    args.push_back(absl::StrCat(prefix, "_", i, ": ", DataTypeString(types[i])));
  }
  return args;
}

absl::Status OptionalFromValueGrad(const AttrSlice& attrs, FunctionDef* g) {
  DataTypeVector types;
  TF_RETURN_IF_ERROR(ComponentTypes(attrs, "OptionalFromValue", "Toutput_types", &types));
  std::vector<std::string> in = Args("components", types);
  in.push_back("d_optional: variant");
  std::vector<std::pair<std::string, std::string>> ret;
  for (size_t i = 0; i < types.size(); ++i) {
    ret.push_back({absl::StrCat("d_components_", i), absl::StrCat("value:components:", i)});
  }
  // d(components) = the components of d(optional)
  *g = FDH::Create("OptionalFromValueGrad", in, Args("d_components", types), {},
                   {{{"value"},
                     "OptionalGetValue",
                     {"d_optional"},
                     {{"output_types", types}, {"output_shapes", UnknownShapes(types.size())}}}},
                   ret);
  return absl::OkStatus();
}

absl::Status OptionalGetValueGrad(const AttrSlice& attrs, FunctionDef* g) {
  DataTypeVector types;
  TF_RETURN_IF_ERROR(ComponentTypes(attrs, "OptionalGetValue", "output_types", &types));
  std::vector<std::string> in = {"optional: variant"};
  std::vector<std::string> d_components;
  for (size_t i = 0; i < types.size(); ++i) {
    in.push_back(absl::StrCat("d_components_", i, ": ", DataTypeString(types[i])));
    d_components.push_back(absl::StrCat("d_components_", i));
  }
  // d(optional) = an Optional holding d(components)
  *g = FDH::Create("OptionalGetValueGrad", in, {"d_optional: variant"}, {},
                   {{{"wrapped"},
                     "OptionalFromValue",
                     d_components,
                     {{"Toutput_types", types}}}},
                   {{"d_optional", "wrapped:optional:0"}});
  return absl::OkStatus();
}

}  // namespace

TF_EXT_REGISTER_TF_GRADIENT("OptionalFromValue", OptionalFromValueGrad);
TF_EXT_REGISTER_TF_GRADIENT("OptionalGetValue", OptionalGetValueGrad);

}  // namespace tensorflow::tf_ext
