// The manifest: every tf_ext op, declared once, beside its gradient (tf_ext/grads/foo_grad.cc):
//
//   TF_EXT_DECLARE_OP("TfExt>Foo")
//       .Doc("One line: what Foo computes.")
//       .Python("foo")
//       .Gradient(&FooGrad, "d(x) = ...")
//       .Types({DT_FLOAT, DT_DOUBLE})
//       .NotDifferentiable({"rois"})
//       .Reads({"x", "rois"})
//       .GradCheck("x=2x5x5x3@-1:1 attr.k=2")
//       .Xla()
//       .Register();
//
// The declaration registers the op's gradient facts in every C++ gradient registry when the
// library loads (a second copy of the library registers nothing; see single_copy.h), and is
// what GradBuilder (types, zeros for non-differentiable inputs, the inputs it may read), the
// tests parametrised over the manifest, tf_ext_gradcheck (the input spec), the README's op
// table (`make docs`) and the Python package (wrappers, docs; through TfExtManifestJson) read.
#ifndef TF_EXT_GRADS_MANIFEST_H_
#define TF_EXT_GRADS_MANIFEST_H_

#include <initializer_list>
#include <string>
#include <vector>

#include "tf_ext/grads/op_facts.h"

namespace tensorflow::tf_ext {

class OpDeclaration {
 public:
  explicit OpDeclaration(const char* op) { facts_.op = op; }

  OpDeclaration& Doc(const char* line);
  OpDeclaration& Python(const char* function);
  // An FDH gradient function and its maths.
  OpDeclaration& Gradient(GradientFn fn, const char* rule);
  // The dedicated backward op of `forward_op`: its own gradient is a second derivative that is
  // not implemented (differentiating it fails with BackwardOpMessage).
  OpDeclaration& BackwardOf(const char* forward_op);
  // Not differentiable at all (gradients stop here); `why` documents it.
  OpDeclaration& NotDifferentiableOp(const char* why);
  OpDeclaration& Types(std::initializer_list<DataType> types, const char* type_attr = "T");
  OpDeclaration& NotDifferentiable(std::initializer_list<const char*> inputs);
  // The forward inputs and outputs (by OpDef name) the gradient reads; GradBuilder checks it,
  // and the Python bridge keeps only these alive on an eager tape.
  OpDeclaration& Reads(std::initializer_list<const char*> inputs_and_outputs);
  OpDeclaration& IgnoresGradientOf(std::initializer_list<const char*> outputs);
  OpDeclaration& Surrogate(GradientFn fn);
  OpDeclaration& GradCheck(const char* spec);
  // For a TensorFlow op: TensorFlow's own gradient is defective as `defect` says, and the
  // declared Gradient replaces it in every C++ registry (OverrideGradient, registry.h).
  OpDeclaration& Overrides(const char* defect);
  // The op has an XLA kernel (tf_ext/xla/); `unchecked`: what it gives for the values its CPU
  // kernel rejects at run time ("" if none). Every tf_ext op declares one of these two.
  OpDeclaration& Xla(const char* unchecked = "");
  // The op has no XLA kernel, because `why`.
  OpDeclaration& NoXla(const char* why);

  // Adds the op to the manifest and registers it in every C++ gradient registry (unless this
  // is a second copy of the library). Returns whether it registered. (Without it, the
  // declaration macro's static bool does not compile.)
  bool Register() const;

 private:
  OpFacts facts_;
};

// Every declared tf_ext op, sorted by op type (not the overrides below).
std::vector<OpFacts> GradientManifest();
// Every TensorFlow op whose gradient tf_ext overrides (OpDeclaration::Overrides), sorted.
std::vector<OpFacts> GradientOverrides();
// The declaration of `op` (nullptr if it has none).
const OpFacts* FindOpFacts(const std::string& op);
// The manifest as JSON: [{"op": ..., "doc": ..., "python": ..., "differentiability": ...,
// "rule": ..., "types": [...], "not_differentiable": [...], "reads": [...],
// "ignored_output_grads": [...], "backward_of": ..., "gradcheck": ...,
// "has_surrogate": bool, "xla": bool, "xla_note": ...}, ...].
std::string ManifestJson();
// GradientOverrides as JSON (TfExtGradientOverridesJson).
std::string GradientOverridesJson();
// tf_ext_gradcheck's input specs of every op with a gradient, one line each
// ("OP SPEC nondiff=IN,..."; format: tf_ext/tools/gradcheck_spec.h).
std::string ManifestGradCheckSpecs();

}  // namespace tensorflow::tf_ext

// C entry point: the manifest as JSON. Writes at most len bytes (NUL-terminated, when len > 0)
// and returns the JSON's length; call with len 0 to size the buffer.
extern "C" size_t TfExtManifestJson(char* buffer, size_t len);
// The overrides as JSON: [{"op": ..., "defect": ..., "rule": ...}, ...] (same calling convention).
extern "C" size_t TfExtGradientOverridesJson(char* buffer, size_t len);
// The same for ManifestGradCheckSpecs (tf_ext_gradcheck reads it from a loaded library).
extern "C" size_t TfExtGradCheckSpecs(char* buffer, size_t len);

#define TF_EXT_DECLARE_OP(op) TF_EXT_DECLARE_OP_UNIQ_HELPER(__COUNTER__, op)
// Two levels so that __COUNTER__ is expanded before ## pastes it.
#define TF_EXT_DECLARE_OP_UNIQ_HELPER(ctr, op) TF_EXT_DECLARE_OP_UNIQ(ctr, op)
#define TF_EXT_DECLARE_OP_UNIQ(ctr, op)                    \
  static const bool tf_ext_op_declared_##ctr [[maybe_unused]] = \
      ::tensorflow::tf_ext::OpDeclaration(op)

#endif  // TF_EXT_GRADS_MANIFEST_H_
