#include "tf_ext/grads/op_facts.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_def.pb.h"
#include "tf_ext/grads/registry.h"

namespace tensorflow::tf_ext {

std::string BackwardOpMessage(const OpFacts& facts) {
  return absl::StrCat(facts.op, " is the backward op of ", facts.backward_of,
                      "; second-order gradients of ", facts.backward_of, " are not implemented");
}

const char* DifferentiabilityName(Differentiability d) {
  switch (d) {
    case Differentiability::kGradient:
      return "gradient";
    case Differentiability::kNotDifferentiable:
      return "not differentiable";
    case Differentiability::kBackwardOp:
      return "backward op";
  }
  return "?";
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
