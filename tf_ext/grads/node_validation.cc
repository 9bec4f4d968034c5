#include "tf_ext/grads/node_validation.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_def.pb.h"
#include "tensorflow/core/framework/op_def_util.h"

namespace tensorflow::tf_ext {

absl::Status ValidateNodeForGradient(const NodeDef& node, NodeDef* full) {
  const std::string& op = node.op();
  if (op.empty()) return absl::InvalidArgumentError("the NodeDef has no op type");
  const OpDef* op_def = nullptr;
  if (!OpRegistry::Global()->LookUpOpDef(op, &op_def).ok()) {
    return absl::NotFoundError(absl::StrCat(op, ": op type is not registered"));
  }
  *full = NodeDef();
  full->set_name(node.name().empty() ? "node" : node.name());
  full->set_op(op);
  // Attrs one by one, before anything computes input counts from them (a huge N would make
  // that allocate N entries).
  for (const auto& [name, value] : node.attr()) {
    if (!name.empty() && name[0] == '_') continue;  // placement/internal attrs
    const OpDef::AttrDef* def = FindAttr(name, *op_def);
    if (def == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": attr '", name, "' is not an attr of ", op));
    }
    absl::Status s = ValidateAttrValue(value, *def);
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": attr '", name, "': ", s.message()));
    }
    (*full->mutable_attr())[name] = value;
  }
  AddDefaultsToNodeDef(*op_def, full);
  for (const auto& def : op_def->attr()) {
    const auto it = full->attr().find(def.name());
    if (it == full->attr().end()) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": attr '", def.name(), "' is missing"));
    }
    const AttrValue& v = it->second;
    if (def.type() == "int" && v.i() > kMaxGradientListLength) {
      bool is_number_attr = false;
      for (const auto& arg : op_def->input_arg()) is_number_attr |= arg.number_attr() == def.name();
      for (const auto& arg : op_def->output_arg()) is_number_attr |= arg.number_attr() == def.name();
      if (is_number_attr) {
        return absl::InvalidArgumentError(absl::StrCat(op, ": attr '", def.name(), "' = ", v.i(),
                                                       " exceeds the supported maximum ",
                                                       kMaxGradientListLength));
      }
    }
    if (v.has_list()) {
      const auto& l = v.list();
      const int64_t n = std::max({l.s_size(), l.i_size(), l.f_size(), l.b_size(), l.type_size(),
                                  l.shape_size(), l.tensor_size(), l.func_size()});
      if (n > kMaxGradientListLength) {
        return absl::InvalidArgumentError(absl::StrCat(op, ": list attr '", def.name(), "' has ", n,
                                                       " entries; at most ",
                                                       kMaxGradientListLength, " are supported"));
      }
    }
  }
  // Placeholder inputs, as many as the attrs imply, so that ValidateNodeDef checks the rest
  // (type constraints, list lengths against N, ...). Callers send attrs only.
  DataTypeVector inputs, outputs;
  absl::Status s = InOutTypesForNode(*full, *op_def, &inputs, &outputs);
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(op, ": ", s.message()));
  for (size_t i = 0; i < inputs.size(); ++i) full->add_input(absl::StrCat("input_", i));
  s = ValidateNodeDef(*full, *op_def);
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(op, ": ", s.message()));
  return absl::OkStatus();
}

}  // namespace tensorflow::tf_ext
