// The gradient manifest: the one list of every tf_ext op with its gradient rule.
#ifndef TF_EXT_GRADS_MANIFEST_H_
#define TF_EXT_GRADS_MANIFEST_H_

#include <vector>

#include "absl/status/status.h"
#include "tensorflow/core/framework/function.h"

namespace tensorflow::tf_ext {

using GradientFn = absl::Status (*)(const AttrSlice& attrs, FunctionDef* g);

// Why an op has no gradient function (gradient == nullptr).
enum class NoGradient {
  kNotDifferentiable,  // gradients stop here (zeros), e.g. a utility op on strings
  kUnimplemented,      // differentiating it fails with `rule` as the message, e.g. a dedicated
                       // backward op, whose gradient would be a second derivative
};

struct GradientManifestEntry {
  const char* op;                  // forward op type
  GradientFn gradient;             // FDH gradient; nullptr = not differentiable at all
  const char* rule;                // the maths, per differentiable input
  std::vector<const char*> non_differentiable_inputs;  // get zeros
  std::vector<const char*> ignored_output_grads;       // incoming gradients never read
  const char* differentiable_types;                    // e.g. "float, double"
  // For gradients that are by design not the forward's derivative (STE, reversal): a function
  // with the op's signature whose derivative is the gradient; see RegisterSurrogateForward.
  GradientFn surrogate_forward = nullptr;
  NoGradient no_gradient = NoGradient::kNotDifferentiable;  // with gradient == nullptr
};

// Every op this library registers, in registration order. Each is registered (with
// TF_EXT's one-call registration, see registry.h) when the library is loaded.
const std::vector<GradientManifestEntry>& GradientManifest();

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRADS_MANIFEST_H_
