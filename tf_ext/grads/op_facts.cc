#include "tf_ext/grads/op_facts.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_def.pb.h"

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

}  // namespace tensorflow::tf_ext
