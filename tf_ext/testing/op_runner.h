// RunOp: runs one op in a fresh Session (the path C++ serving binaries take), for tests/tools.
#ifndef TF_EXT_TESTING_OP_RUNNER_H_
#define TF_EXT_TESTING_OP_RUNNER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tensorflow/core/framework/tensor.h"
#include "tf_ext/testing/gradient_checker.h"

namespace tensorflow::tf_ext::testing {

struct RunOpOptions {
  // Feed inputs through Placeholders of unknown shape (exercises the kernel's validation), or
  // as Const nodes (exercises the shape function with static shapes too).
  bool inputs_as_constants = false;
};

// Outputs of `op_type` with `attrs` (type attrs inferred from inputs) applied to `inputs`.
absl::StatusOr<std::vector<Tensor>> RunOp(const std::string& op_type, const OpAttrs& attrs,
                                          const std::vector<Tensor>& inputs,
                                          const RunOpOptions& options = {});

// Gradients of `op_type` w.r.t. every input, through one SymbolicGradient node, given one
// incoming gradient per output.
absl::StatusOr<std::vector<Tensor>> RunSymbolicGradient(const std::string& op_type,
                                                        const OpAttrs& attrs,
                                                        const std::vector<Tensor>& inputs,
                                                        const std::vector<Tensor>& output_grads);

}  // namespace tensorflow::tf_ext::testing

#endif  // TF_EXT_TESTING_OP_RUNNER_H_
