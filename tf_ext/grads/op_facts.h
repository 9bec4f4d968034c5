// What an op's gradient is, as data: the facts an op declaration states once (see
// tf_ext/grads/manifest.h) and that registration, GradBuilder, the checkers, the docs and the
// Python package read.
#ifndef TF_EXT_GRADS_OP_FACTS_H_
#define TF_EXT_GRADS_OP_FACTS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/types.pb.h"

namespace tensorflow::tf_ext {

using GradientFn = absl::Status (*)(const AttrSlice& attrs, FunctionDef* g);

// One word per case, everywhere (C++, Python, docs).
enum class Differentiability {
  kGradient,           // an FDH gradient function
  kNotDifferentiable,  // gradients stop here (zeros), e.g. a utility op
  kBackwardOp,         // the dedicated backward op of another op: differentiating it (a second
                       // derivative of that op) fails with BackwardOpMessage()
};

struct OpFacts {
  std::string op;                                 // op type, e.g. "TfExt>RoiPool"
  std::string doc;                                // one line: what the op computes
  std::string python;                             // its Python function (empty: none)
  Differentiability differentiability = Differentiability::kNotDifferentiable;
  GradientFn gradient = nullptr;                  // kGradient
  std::string rule;                               // the maths, per differentiable input
  std::string type_attr = "T";                    // the attr `types` constrains
  std::vector<DataType> types;                    // dtypes with a gradient (kGradient)
  std::vector<std::string> not_differentiable;    // inputs whose gradient is zero
  std::vector<std::string> reads;                 // forward inputs and outputs the gradient
                                                  // reads
  std::vector<std::string> ignored_output_grads;  // outputs whose incoming gradient is unused
  // For gradients that are by design not the forward's derivative (STE, reversal): a function
  // with the op's signature whose derivative is the gradient (RegisterSurrogateForward).
  GradientFn surrogate_forward = nullptr;
  std::string backward_of;                        // kBackwardOp: the forward op
  std::string gradcheck;                          // tf_ext_gradcheck input spec (no op name;
                                                  // format: tf_ext/tools/gradcheck_spec.h)
  // Non-empty for a TensorFlow op whose own gradient is defective: what is wrong with it. The
  // declared gradient then replaces TensorFlow's in every registry (OverrideGradient).
  std::string overrides;
  // Whether the op has an XLA kernel (tf_ext/xla/), and: with one, what it gives for values its
  // CPU kernel rejects at run time, which a compiled kernel cannot raise on (empty: nothing to
  // say); without one, why not.
  bool xla = false;
  std::string xla_note;
};

// "TfExt>FooGrad is the backward op of TfExt>Foo; second-order gradients of TfExt>Foo are not
// implemented": the one wording of that fact.
std::string BackwardOpMessage(const OpFacts& facts);

// "gradient", "not differentiable", "backward op".
const char* DifferentiabilityName(Differentiability d);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRADS_OP_FACTS_H_
