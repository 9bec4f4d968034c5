// Process-wide side tables of the gradient library (tf_ext/grads), kept in TensorFlow's own
// function-gradient registry under keys no op type can have ("<op>/tf_ext:<table>"). That
// registry has one copy per process (in libtensorflow_framework), so every DSO that links
// tf_ext's gradient code - the op library, a tool, a third-party op library - sees the same
// entries, which a static map in each DSO would not give.
#ifndef TF_EXT_GRADS_SIDE_TABLE_H_
#define TF_EXT_GRADS_SIDE_TABLE_H_

#include <string>

#include "tensorflow/core/framework/function.h"

namespace tensorflow::tf_ext {

class SideTable {
 public:
  // `name` is the table's key suffix without the "/tf_ext:" prefix, e.g. "surrogate_forward".
  explicit SideTable(const char* name) : suffix_(std::string("/tf_ext:") + name) {}

  // Stores `creator` for op_type unless an entry exists already (the first one wins).
  void Insert(const std::string& op_type, gradient::Creator creator) const;
  // The entry for op_type (false, and *creator untouched, when there is none or it is null).
  bool Find(const std::string& op_type, gradient::Creator* creator) const;

 private:
  std::string Key(const std::string& op_type) const { return op_type + suffix_; }
  std::string suffix_;
};

// Surrogate forwards (see RegisterSurrogateForward in registry.h).
const SideTable& SurrogateForwards();
// Ops registered with RegisterUnimplementedGradient; each entry returns the op's message.
const SideTable& UnimplementedGradients();
// Ops whose gradient reads forward outputs (DeclareReadsForwardOutputs in registry.h); each
// entry is a creator that does nothing (only its presence counts).
const SideTable& ForwardOutputReaders();
// The forward inputs and outputs each op's gradient reads (DeclareGradientReads).
const SideTable& GradientReads();
// TensorFlow ops whose gradient tf_ext added (RegisterGradientIfMissing with a creator, while
// TensorFlow had none); each entry is the creator.
const SideTable& AddedTfGradients();
// TensorFlow ops whose gradient tf_ext replaced (OverrideGradient); each entry does nothing
// (only its presence counts).
const SideTable& OverriddenGradients();
// Of those, the ones TensorFlow had a gradient for; each entry is TensorFlow's creator.
const SideTable& ReplacedTfGradients();

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRADS_SIDE_TABLE_H_
