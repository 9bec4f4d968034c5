#include "tf_ext/grads/registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "tensorflow/cc/framework/grad_op_registry.h"
#include "tensorflow/cc/framework/ops.h"
#include "tensorflow/cc/ops/array_ops.h"
#include "tensorflow/cc/ops/functional_ops.h"
#include "tensorflow/core/platform/logging.h"
#include "tensorflow/core/framework/function.pb.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/graph/graph.h"
#include "tf_ext/grads/client_gradient.h"
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/registry_access.h"
#include "tf_ext/grads/side_table.h"
#include "tf_ext/grads/specialize.h"

namespace tensorflow::tf_ext {
namespace {

// The message of an op registered with RegisterUnimplementedGradient (false if it is not).
bool FindUnimplemented(const std::string& op_type, std::string* message) {
  gradient::Creator marker;
  if (!UnimplementedGradients().Find(op_type, &marker)) return false;
  if (message != nullptr) {
    FunctionDef unused;
    *message = std::string(marker(AttrSlice(), &unused).message());
  }
  return true;
}

// The client registry's gradient for ops registered with RegisterUnimplementedGradient: fail
// while the gradient graph is built, with the registered message.
absl::Status UnimplementedClientGrad(const Scope&, const Operation& op,
                                     const std::vector<Output>&, std::vector<Output>*) {
  std::string message;
  FindUnimplemented(op.node()->type_string(), &message);
  return absl::UnimplementedError(message);
}

// The registered ops (sorted) that have an entry in `table`.
std::vector<std::string> OpsIn(const SideTable& table) {
  std::vector<OpDef> defs;
  OpRegistry::Global()->GetRegisteredOps(&defs);
  std::vector<std::string> out;
  gradient::Creator unused;
  for (const OpDef& d : defs) {
    if (table.Find(d.name(), &unused)) out.push_back(d.name());
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool HasAnyGradient(const std::string& op_type) {
  gradient::Creator existing;
  ops::GradFunc existing_cc;
  return gradient::GetOpGradientCreator(op_type, &existing).ok() ||
         ops::GradOpRegistry::Global()->Lookup(op_type, &existing_cc).ok();
}

bool AlreadyRegistered(const std::string& op_type) {
  if (HasAnyGradient(op_type)) {
    LOG(WARNING) << "tf_ext: a gradient for " << op_type
                 << " is already registered (is a second copy of the op library loaded?); "
                    "keeping the first one";
    return true;
  }
  return false;
}

}  // namespace

// The C++ client registry's gradient for every tf_ext-registered op: one SymbolicGradient node
// whose function is the op itself with the node's attrs, so the FDH creator does the work; for
// gradients that read forward outputs, a call of the gradient function taking them.
absl::Status SymbolicGradientClientGrad(const Scope& scope, const Operation& op,
                                        const std::vector<Output>& grad_inputs,
                                        std::vector<Output>* grad_outputs) {
  const Node* node = op.node();
  NameAttrList f;
  f.set_name(node->type_string());
  for (const auto& kv : node->attrs()) {
    if (!kv.first.empty() && kv.first[0] == '_') continue;  // placement/internal attrs
    (*f.mutable_attr())[kv.first] = kv.second;
  }
  const DataTypeVector grad_types = GradientTypes(*node);
  std::vector<Output> inputs;
  for (int i = 0; i < op.num_inputs(); ++i) inputs.push_back(op.input(i));
  for (int i = 0; i < op.num_outputs(); ++i) {
    // An output nobody differentiated arrives as NoGradient: its incoming gradient is zero.
    if (i < static_cast<int>(grad_inputs.size()) && grad_inputs[i].node() != nullptr) {
      inputs.push_back(grad_inputs[i]);
    } else {
      inputs.push_back(ops::ZerosLike(scope, op.output(i)).y);
    }
  }
  if (!ReadsForwardOutputs(node->type_string())) {
    ops::SymbolicGradient grad(scope, InputList(inputs), grad_types, f);
    TF_RETURN_IF_ERROR(scope.status());
    grad_outputs->assign(grad.output.begin(), grad.output.end());
    return absl::OkStatus();
  }
  // The gradient reads forward outputs, which this front end has: call the gradient function
  // that takes them (GradBuilder, "Forward outputs") instead of letting SymbolicGradient
  // recompute them. Its specialised FunctionDef joins the graph's library.
  FunctionDef fdef;
  TF_RETURN_IF_ERROR(ForwardOutputsGradient(*node, &fdef));
  FunctionDefLibrary library;
  *library.add_function() = fdef;
  TF_RETURN_IF_ERROR(scope.graph()->AddFunctionLibrary(library));
  std::vector<Output> args(inputs.begin(), inputs.begin() + op.num_inputs());
  for (int i = 0; i < op.num_outputs(); ++i) args.push_back(op.output(i));
  args.insert(args.end(), inputs.begin() + op.num_inputs(), inputs.end());
  NameAttrList call_f;
  call_f.set_name(fdef.signature().name());
  ops::PartitionedCall grad(scope, InputList(args), grad_types, call_f);
  TF_RETURN_IF_ERROR(scope.status());
  grad_outputs->assign(grad.output.begin(), grad.output.end());
  return absl::OkStatus();
}

absl::Status ForwardOutputsGradient(const Node& node, FunctionDef* fdef) {
  NodeDef forward;
  forward.set_op(node.type_string());
  for (const auto& [name, value] : node.attrs()) {
    if (!name.empty() && name[0] != '_') (*forward.mutable_attr())[name] = value;
  }
  (*forward.mutable_attr())[grad::kForwardOutputsAttr].set_b(true);
  return SpecializedGradient(forward, fdef);
}

DataTypeVector GradientTypes(const Node& node) {
  DataTypeVector types = node.input_types();
  for (DataType& t : types) {
    if (t == DT_RESOURCE) t = DT_FLOAT;
    t = BaseType(t);  // a reference input's gradient is a value (no attr holds a ref type)
  }
  return types;
}

// In a side table, not a static set: a tool that links the gradient library and loads the op
// library holds two copies of this file's statics, and must see the op library's declarations.
void DeclareReadsForwardOutputs(const std::string& op_type) {
  ForwardOutputReaders().Insert(op_type, [](const AttrSlice&, FunctionDef*) {
    return absl::OkStatus();
  });
}

void DeclareGradientReads(const std::string& op_type, const std::vector<std::string>& names) {
  // Kept as a creator whose FunctionDef's input args carry the names (side tables hold
  // creators).
  GradientReads().Insert(op_type, [names](const AttrSlice&, FunctionDef* f) {
    for (const std::string& name : names) f->mutable_signature()->add_input_arg()->set_name(name);
    return absl::OkStatus();
  });
}

bool ReadsForwardOutputs(const std::string& op_type) {
  gradient::Creator found;
  if (ForwardOutputReaders().Find(op_type, &found)) return true;
  const OpDef* def = nullptr;
  FunctionDef names;
  if (!GradientReads().Find(op_type, &found) || !found(AttrSlice(), &names).ok() ||
      !OpRegistry::Global()->LookUpOpDef(op_type, &def).ok()) {
    return false;
  }
  for (const OpDef::ArgDef& read : names.signature().input_arg()) {
    for (const OpDef::ArgDef& out : def->output_arg()) {
      if (out.name() == read.name()) return true;
    }
  }
  return false;
}

bool RegisterGradient(const std::string& op_type, gradient::Creator creator) {
  if (AlreadyRegistered(op_type)) return true;
  gradient::RegisterOp(op_type, std::move(creator));
  ops::GradOpRegistry::Global()->Register(op_type, &SymbolicGradientClientGrad);
  return true;
}

bool RegisterNoGradient(const std::string& op_type) {
  if (AlreadyRegistered(op_type)) return true;
  gradient::RegisterOp(op_type, nullptr);
  ops::GradOpRegistry::Global()->Register(op_type, nullptr);
  return true;
}

bool RegisterGradientIfMissing(const std::string& op_type, gradient::Creator creator) {
  if (HasAnyGradient(op_type)) return true;  // TensorFlow's own stays
  if (!creator) return RegisterNoGradient(op_type);
  AddedTfGradients().Insert(op_type, creator);
  return RegisterGradient(op_type, std::move(creator));
}

bool OverrideGradient(const std::string& op_type, gradient::Creator creator) {
  gradient::Creator done;
  if (OverriddenGradients().Find(op_type, &done)) return true;  // replaced already
  // Side tables, so that every copy of this code in the process sees the override.
  OverriddenGradients().Insert(op_type, [](const AttrSlice&, FunctionDef*) {
    return absl::OkStatus();
  });
  auto& functions = FunctionGradientMap();
  auto found = functions.find(op_type);
  auto& clients = ClientGradientMap();
  auto client = clients.find(op_type);
  if (found != functions.end() && found->second) {
    ReplacedTfGradients().Insert(op_type, found->second);
  } else if (client != clients.end() && client->second != nullptr &&
             client->second != &SymbolicGradientClientGrad) {
    // TensorFlow's only gradient is a client one (not yet converted, unify.h): kept converted.
    const ops::GradFunc fn = client->second;
    ReplacedTfGradients().Insert(op_type, [op_type, fn](const AttrSlice& attrs, FunctionDef* fdef) {
      return ClientGradientAsFunction(op_type, fn, attrs, fdef);
    });
  }
  functions[op_type] = std::move(creator);
  clients[op_type] = &SymbolicGradientClientGrad;
  return true;
}

std::vector<std::string> OverriddenTfGradientOps() { return OpsIn(OverriddenGradients()); }

bool FindReplacedTfGradient(const std::string& op_type, gradient::Creator* creator) {
  return ReplacedTfGradients().Find(op_type, creator);
}

std::vector<std::string> AddedTfGradientOps() { return OpsIn(AddedTfGradients()); }

bool RegisterUnimplementedGradient(const std::string& op_type, const std::string& message) {
  if (AlreadyRegistered(op_type)) return true;
  gradient::Creator fail = [message](const AttrSlice&, FunctionDef*) {
    return absl::UnimplementedError(message);
  };
  UnimplementedGradients().Insert(op_type, fail);
  gradient::RegisterOp(op_type, fail);
  ops::GradOpRegistry::Global()->Register(op_type, &UnimplementedClientGrad);
  return true;
}

GradientKind LookupGradientKind(const std::string& op_type, std::string* message) {
  if (FindUnimplemented(op_type, message)) return GradientKind::kUnimplemented;
  gradient::Creator creator;
  if (!gradient::GetOpGradientCreator(op_type, &creator).ok()) return GradientKind::kMissing;
  return creator ? GradientKind::kFunction : GradientKind::kNone;
}

bool RegisterSurrogateForward(const std::string& op_type, gradient::Creator creator) {
  SurrogateForwards().Insert(op_type, std::move(creator));  // the first one wins
  return true;
}

void RegisterOpFacts(const OpFacts& facts) {
  switch (facts.differentiability) {
    case Differentiability::kGradient: {
      if (!facts.overrides.empty()) {
        OverrideGradient(facts.op, facts.gradient);
      } else {
        RegisterGradient(facts.op, facts.gradient);
      }
      if (!facts.reads.empty()) DeclareGradientReads(facts.op, facts.reads);
      break;
    }
    case Differentiability::kNotDifferentiable:
      RegisterNoGradient(facts.op);
      break;
    case Differentiability::kBackwardOp:
      RegisterUnimplementedGradient(facts.op, BackwardOpMessage(facts));
      break;
  }
  if (facts.surrogate_forward != nullptr) {
    RegisterSurrogateForward(facts.op, facts.surrogate_forward);
  }
}

}  // namespace tensorflow::tf_ext

