// One gradient registration for every TensorFlow C++ front end.
//
// TF_EXT_REGISTER_GRADIENT("TfExt>Foo", FooGrad) registers the FDH gradient function FooGrad
//  1. in the function registry (gradient::RegisterOp, what REGISTER_OP_GRADIENT does): used by
//     SymbolicGradient, the graph-level AddSymbolicGradients and so every Session; and
//  2. in the C++ client registry (ops::GradOpRegistry): a generic gradient that emits one
//     SymbolicGradient node calling (1). cc/framework's AddSymbolicGradients and the C API's
//     TF_AddGradients (and the language bindings built on it) use this registry.
// TF_EXT_REGISTER_NO_GRADIENT("TfExt>Foo") marks Foo non-differentiable in both.
// Python's registry lives in Python; python/tf_ext bridges it with SpecializedGradient
// (specialize.h; also reachable as the TfExt>GradientFunctionDef op and the C function
// TfExtGradientFunctionDef, c_api.h).
//
// Registering an op that already has a gradient logs a warning and keeps the first one
// (TensorFlow itself would abort the process). That alone does not make a second copy of an
// op library usable: TensorFlow would then hold two kernels per op and refuse to run any of
// them ("Multiple OpKernel registrations"). So tf_ext's own op library detects a second copy
// at load time and fails that load with an error naming both paths, registering neither
// kernels nor gradients (tf_ext/grads/single_copy.h); the first copy stays usable.
//
#ifndef TF_EXT_GRADS_REGISTRY_H_
#define TF_EXT_GRADS_REGISTRY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tensorflow/cc/framework/ops.h"
#include "tensorflow/cc/framework/scope.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/graph/graph.h"
#include "tf_ext/grads/op_facts.h"

namespace tensorflow::tf_ext {

// Registers `creator` as op_type's gradient in every C++ registry. Returns true (for use in
// static initialisers).
bool RegisterGradient(const std::string& op_type, gradient::Creator creator);

// Marks op_type's gradient as one that reads forward outputs (GradBuilder, "Forward
// outputs"): the client registry's gradient then passes the node's outputs to the gradient
// function taking them instead of a SymbolicGradient that recomputes them. RegisterOpFacts
// calls it from the declaration's Reads(...).
void DeclareReadsForwardOutputs(const std::string& op_type);
// The names of the forward inputs and outputs op_type's gradient reads (a declaration's
// Reads(...)). Whether any is an output can only be told once the op is registered: an op
// library's REGISTER_OPs are deferred until its load completes, after its static
// initialisers ran, so ReadsForwardOutputs compares them with the OpDef when asked.
void DeclareGradientReads(const std::string& op_type, const std::vector<std::string>& names);
bool ReadsForwardOutputs(const std::string& op_type);
// The gradient function of `node`'s op that takes the forward outputs (GradBuilder, "Forward
// outputs"), specialised to the node's attrs (internal ones, "_...", left out).
absl::Status ForwardOutputsGradient(const Node& node, FunctionDef* fdef);
// The types of `node`'s input gradients (Tout of its SymbolicGradient or gradient call): its
// inputs', a resource handle's being its value's (float), as TensorFlow's graph-level builder
// declares it (TensorArray handles), and a reference input's its base type's (a version 1
// TensorArray's handle, a v1 variable).
DataTypeVector GradientTypes(const Node& node);
// Marks op_type as having no gradient in every C++ registry: gradients stop there (zeros).
bool RegisterNoGradient(const std::string& op_type);

// For gradients of TensorFlow's own ops (tf_ext/grads/tf/, one file per op family): registers
// `creator` (nullptr: not differentiable) as RegisterGradient / RegisterNoGradient do, unless
// TensorFlow already has a gradient for op_type in either C++ registry (a newer release may add
// one): TensorFlow's then stays, silently. Returns true (for use in static initialisers).
bool RegisterGradientIfMissing(const std::string& op_type, gradient::Creator creator);
// The TensorFlow ops (sorted) whose gradient function RegisterGradientIfMissing added in this
// process (not the no-gradient registrations, not the ops where TensorFlow's own stayed): the
// "new gradients" that tf_ext_gradcheck --added_tf_gradients checks.
std::vector<std::string> AddedTfGradientOps();
// Replaces TensorFlow's own gradient of op_type, in both C++ registries, by `creator` (the
// function registry) and the SymbolicGradient emitter calling it (the client registry): an
// override of a defective TensorFlow gradient, declared in the manifest (OpDeclaration::
// Overrides, manifest.h) and listed in docs/registries.md. Every front end that looks the
// gradient up (a SymbolicGradient node anywhere, TF_AddGradients, AddSymbolicGradients, tf_ext's
// own) then gets the corrected one. Idempotent per process: a second call for op_type (a second
// copy of the gradient code) changes nothing. Returns true (for use in static initialisers).
bool OverrideGradient(const std::string& op_type, gradient::Creator creator);
// The TensorFlow ops (sorted) whose gradient OverrideGradient replaced in this process, and
// TensorFlow's replaced gradient of one as a function-gradient creator (its function gradient,
// or its client gradient converted by ClientGradientAsFunction; false when op_type was not
// overridden or TensorFlow had none): tests show the defect it had, and an override may build
// on it (GatherV2's normalises the axis, then runs TensorFlow's).
std::vector<std::string> OverriddenTfGradientOps();
bool FindReplacedTfGradient(const std::string& op_type, gradient::Creator* creator);
// op_type has a gradient that is not implemented (e.g. the dedicated backward op of another
// op: its gradient is a second derivative). Differentiating it fails with `message` in every
// registry, instead of silently giving zeros as a no-gradient op would.
bool RegisterUnimplementedGradient(const std::string& op_type, const std::string& message);

// The C++ client registry's gradient that RegisterGradient installs (and that
// UnifyGradientRegistries installs for function-only ops, see unify.h): one SymbolicGradient
// node whose function is the op itself with the node's attrs, so the op's function-registry
// gradient does the work. Outputs nobody differentiated get zeros as incoming gradients.
absl::Status SymbolicGradientClientGrad(const Scope& scope, const Operation& op,
                                        const std::vector<Output>& grad_inputs,
                                        std::vector<Output>* grad_outputs);

// Surrogate forwards. Some gradients are by design not the derivative of their op's forward
// (a straight-through estimator, gradient reversal). For those, the op may register a
// surrogate forward: a function with the op's own signature whose true derivative IS the
// registered gradient (e.g. clamp(x, -clip, clip) for a sign STE). Numeric checkers
// (CheckGradient, tf_ext_grad --check) difference the surrogate instead of the op, so the
// C++ gradient is still verified against finite differences.
bool RegisterSurrogateForward(const std::string& op_type, gradient::Creator creator);

// Registers `facts` in every C++ gradient registry: its gradient, its surrogate
// forward, a no-gradient, or an unimplemented gradient with BackwardOpMessage().
void RegisterOpFacts(const OpFacts& facts);

// Whether op_type has: a gradient creator / an explicit no-gradient / nothing / a gradient
// registered as not implemented (`message`, when given, receives its message).
enum class GradientKind { kFunction = 0, kNone = 1, kMissing = 2, kUnimplemented = 3 };
GradientKind LookupGradientKind(const std::string& op_type, std::string* message = nullptr);

}  // namespace tensorflow::tf_ext

#define TF_EXT_REGISTER_GRADIENT(op_type, fn) \
  TF_EXT_REGISTER_GRADIENT_UNIQ_HELPER(__COUNTER__, op_type, fn)
#define TF_EXT_REGISTER_NO_GRADIENT(op_type) \
  TF_EXT_REGISTER_GRADIENT_UNIQ_HELPER(__COUNTER__, op_type, nullptr)
// A TensorFlow op's gradient (or nullptr: not differentiable), unless TensorFlow has one.
#define TF_EXT_REGISTER_TF_GRADIENT(op_type, fn) \
  TF_EXT_REGISTER_TF_GRADIENT_UNIQ_HELPER(__COUNTER__, op_type, fn)
#define TF_EXT_REGISTER_TF_GRADIENT_UNIQ_HELPER(ctr, op_type, fn) \
  TF_EXT_REGISTER_TF_GRADIENT_UNIQ(ctr, op_type, fn)
#define TF_EXT_REGISTER_TF_GRADIENT_UNIQ(ctr, op_type, fn)            \
  static const bool tf_ext_tf_grad_registered_##ctr [[maybe_unused]] = \
      ::tensorflow::tf_ext::RegisterGradientIfMissing(op_type, (fn))
// Two levels so that __COUNTER__ is expanded before ## pastes it.
#define TF_EXT_REGISTER_GRADIENT_UNIQ_HELPER(ctr, op_type, fn) \
  TF_EXT_REGISTER_GRADIENT_UNIQ(ctr, op_type, fn)
#define TF_EXT_REGISTER_GRADIENT_UNIQ(ctr, op_type, fn)                       \
  static const bool tf_ext_grad_registered_##ctr [[maybe_unused]] =            \
      (fn) == nullptr ? ::tensorflow::tf_ext::RegisterNoGradient(op_type)      \
                      : ::tensorflow::tf_ext::RegisterGradient(op_type, (fn))

#endif  // TF_EXT_GRADS_REGISTRY_H_
