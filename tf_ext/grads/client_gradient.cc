#include "tf_ext/grads/client_gradient.h"

#include <cctype>

#include "absl/strings/str_cat.h"
#include "tensorflow/cc/framework/ops.h"
#include "tensorflow/cc/framework/scope.h"
#include "tensorflow/cc/ops/array_ops.h"
#include "tensorflow/core/framework/graph_to_functiondef.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_def_util.h"
#include "tensorflow/core/graph/graph.h"
#include "tensorflow/core/graph/node_builder.h"

namespace tensorflow::tf_ext {
namespace {

absl::Status OpError(const std::string& op_type, absl::string_view what, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(op_type, ": cannot turn its C++ client gradient into "
                                                      "a function gradient: ", what, ": ",
                                             s.message()));
}

// Adds an _Arg node of type `type` at position `index` to the scope's graph (and its shape
// to the scope's refiner, so ops the client gradient builds on it pass shape inference).
absl::StatusOr<Node*> AddArg(const Scope& scope, const std::string& name, DataType type,
                             int index) {
  Node* node = nullptr;
  TF_RETURN_IF_ERROR(NodeBuilder(name, FunctionLibraryDefinition::kArgOp)
                         .Attr("T", type)
                         .Attr("index", index)
                         .Finalize(scope.graph(), &node));
  TF_RETURN_IF_ERROR(scope.DoShapeInference(node));
  return node;
}

}  // namespace

absl::Status ClientGradientAsFunction(const std::string& op_type, ops::GradFunc grad_fn,
                                      const AttrSlice& attrs, FunctionDef* fdef) {
  const OpDef* op_def = nullptr;
  TF_RETURN_IF_ERROR(OpRegistry::Global()->LookUpOpDef(op_type, &op_def));
  // The forward node: the attrs SymbolicGradient passes, plus the OpDef's defaults.
  NodeDef forward;
  forward.set_name("forward");
  forward.set_op(op_type);
  for (const auto& [name, value] : attrs) {
    if (!name.empty() && name[0] != '_') (*forward.mutable_attr())[name] = value;
  }
  AddDefaultsToNodeDef(*op_def, &forward);
  DataTypeVector in_types, out_types;
  if (absl::Status s = InOutTypesForNode(forward, *op_def, &in_types, &out_types); !s.ok()) {
    return OpError(op_type, "attrs", s);
  }
  for (DataType t : in_types) {
    if (IsRefType(t)) {
      return absl::InvalidArgumentError(
          absl::StrCat(op_type, ": has reference-typed inputs; no gradient function"));
    }
  }
  NameRangeMap in_ranges, out_ranges;
  TF_RETURN_IF_ERROR(NameRangesForNode(forward, *op_def, &in_ranges, &out_ranges));

  // Built with static shapes where the arguments' unknown shapes allow (some client gradients
  // read them); an op whose shape function needs a computed input's value or rank
  // (SpaceToBatchND's block_shape: "block_shape must have rank 1") is built again with shape
  // inference off, which the function runtime redoes with the real shapes.
  bool forward_shapes_failed = false;
  auto build = [&](Scope scope) -> absl::Status {
    // x_i: the forward inputs, flattened (a list argument contributes one _Arg per element).
    std::vector<Node*> xs;
    for (int i = 0; i < static_cast<int>(in_types.size()); ++i) {
      auto arg = AddArg(scope, absl::StrCat("x_", i), in_types[i], i);
      if (!arg.ok()) return OpError(op_type, "inputs", arg.status());
      xs.push_back(*arg);
    }
    NodeBuilder builder("forward", op_type);
    for (const OpDef::ArgDef& arg : op_def->input_arg()) {
      const auto range = in_ranges.at(arg.name());
      if (!arg.number_attr().empty() || !arg.type_list_attr().empty()) {
        std::vector<NodeBuilder::NodeOut> list;
        for (int i = range.first; i < range.second; ++i) list.emplace_back(xs[i], 0);
        builder.Input(list);
      } else {
        builder.Input(xs[range.first], 0);
      }
    }
    for (const auto& [name, value] : forward.attr()) builder.Attr(name, value);
    Node* node = nullptr;
    if (absl::Status s = builder.Finalize(scope.graph(), &node); !s.ok()) {
      return OpError(op_type, "building the forward node", s);
    }
    if (absl::Status s = scope.DoShapeInference(node); !s.ok()) {
      forward_shapes_failed = true;
      return OpError(op_type, "forward shape inference", s);
    }
    // dy_j: one incoming gradient per forward output.
    std::vector<Output> dys;
    for (int j = 0; j < static_cast<int>(out_types.size()); ++j) {
      auto arg = AddArg(scope, absl::StrCat("dy_", j), out_types[j],
                        static_cast<int>(in_types.size()) + j);
      if (!arg.ok()) return OpError(op_type, "incoming gradients", arg.status());
      dys.push_back(Output(*arg, 0));
    }
    std::vector<Output> dxs;
    const Scope grad_scope = scope.NewSubScope("grad");
    if (absl::Status s = grad_fn(grad_scope, Operation(node), dys, &dxs); !s.ok()) {
      return OpError(op_type, "running the client gradient", s);
    }
    if (dxs.size() != in_types.size()) {
      return absl::InternalError(absl::StrCat(op_type, ": the client gradient returned ", dxs.size(),
                                              " gradients for ", in_types.size(), " inputs"));
    }
    // dx_i. A client gradient returns NoGradient() (no node) for inputs it does not
    // differentiate; SymbolicGradient needs a tensor there: zeros like the input.
    for (int i = 0; i < static_cast<int>(dxs.size()); ++i) {
      Output dx = dxs[i];
      if (dx.node() == nullptr) dx = ops::ZerosLike(grad_scope.WithOpName(absl::StrCat("zeros_", i)),
                                                    Output(xs[i], 0));
      Node* ret = nullptr;
      TF_RETURN_IF_ERROR(NodeBuilder(absl::StrCat("dx_", i), FunctionLibraryDefinition::kRetOp)
                             .Input(dx.node(), dx.index())
                             .Attr("T", in_types[i])
                             .Attr("index", i)
                             .Finalize(scope.graph(), &ret));
    }
    if (!scope.status().ok()) return OpError(op_type, "building the gradient", scope.status());
    std::string name;
    for (char c : op_type) name.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
    if (absl::Status s = GraphToFunctionDef(*scope.graph(), name + "_client_grad", fdef); !s.ok()) {
      return OpError(op_type, "converting the graph", s);
    }
    return absl::OkStatus();
  };
  absl::Status s = build(Scope::NewRootScope());
  if (!s.ok() && forward_shapes_failed) {
    fdef->Clear();
    s = build(Scope::DisabledShapeInferenceScope());
  }
  return s;
}

}  // namespace tensorflow::tf_ext
