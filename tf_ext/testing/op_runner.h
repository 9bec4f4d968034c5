// RunOp: runs one op on the CPU, in a fresh Session (the path C++ serving binaries take) or as
// its bare kernel, for tests and tools. RunSymbolicGradient: its registered gradient.
#ifndef TF_EXT_TESTING_OP_RUNNER_H_
#define TF_EXT_TESTING_OP_RUNNER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tensorflow/core/framework/tensor.h"
#include "tf_ext/testing/gradient_checker.h"

namespace tensorflow::tf_ext::test {

// Each path reaches a different first line of validation.
enum class RunPath {
  // A Session; inputs fed through Placeholders of unknown shape, so the shape function sees
  // no shapes and the kernel's own checks decide.
  kSessionFed,
  // A Session; inputs as Const nodes, so the shape function sees the static shapes and
  // rejects bad ones when the graph is built.
  kSessionConstants,
  // The CPU kernel alone, no Session and no graph: reaches the kernel constructor's
  // validation (which a Session's shape function would pre-empt) and shows buffer identity
  // (inputs are passed by reference, so outputs can be compared by data() pointer). The CPU
  // device has a multi-threaded intra-op pool, like a Session's.
  kKernel,
};

// Every path, for tests that expect the same outcome on each.
inline constexpr RunPath kAllRunPaths[] = {RunPath::kSessionFed, RunPath::kSessionConstants,
                                           RunPath::kKernel};

struct RunOpOptions {
  RunPath path = RunPath::kSessionFed;
};

// Outputs of `op_type` with `attrs` applied to `inputs`. Type attrs bound to inputs are
// inferred from them when omitted, other attrs default from the OpDef; a list argument
// (N * T, or a type list) takes as many consecutive inputs as its length attr says.
absl::StatusOr<std::vector<Tensor>> RunOp(const std::string& op_type, const OpAttrs& attrs,
                                          const std::vector<Tensor>& inputs,
                                          const RunOpOptions& options = {});

// Gradients of `op_type` w.r.t. every input, through one SymbolicGradient node in a Session,
// given one incoming gradient per output.
absl::StatusOr<std::vector<Tensor>> RunSymbolicGradient(const std::string& op_type,
                                                        const OpAttrs& attrs,
                                                        const std::vector<Tensor>& inputs,
                                                        const std::vector<Tensor>& output_grads);

}  // namespace tensorflow::tf_ext::test

#endif  // TF_EXT_TESTING_OP_RUNNER_H_
