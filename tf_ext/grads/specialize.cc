#include "tf_ext/grads/specialize.h"

#include "tf_ext/grads/grad_builder.h"

#include <cctype>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/function.pb.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/op.h"
#include "tf_ext/grads/node_validation.h"
#include "tf_ext/grads/side_table.h"

namespace tensorflow::tf_ext {
namespace {

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

absl::Status SpecializedSurrogateForward(const NodeDef& node, FunctionDef* fdef) {
  gradient::Creator creator;
  if (!SurrogateForwards().Find(node.op(), &creator)) {
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
  // The two signatures (with and without the forward outputs) must not share a name.
  const bool with_outputs = grad::WantsForwardOutputs(AttrSlice(node));
  if (with_outputs) (*full.mutable_attr())[grad::kForwardOutputsAttr].set_b(true);
  return Specialize(creator, full, with_outputs ? "grad_with_outputs" : "grad", fdef);
}

}  // namespace tensorflow::tf_ext
