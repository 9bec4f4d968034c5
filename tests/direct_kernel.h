// RunKernelDirect: runs one op's CPU kernel with no Session and no graph around it, for tests
// that must see what a Session hides: the kernel constructor's own validation (a Session runs
// the shape function first) and buffer identity (whether an output shares an input's buffer).
#ifndef TESTS_DIRECT_KERNEL_H_
#define TESTS_DIRECT_KERNEL_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tensorflow/core/framework/tensor.h"
#include "tf_ext/testing/gradient_checker.h"

namespace tensorflow::tf_ext::testing {

// Creates the CPU kernel of `op_type` with `attrs` (type attrs inferred from `inputs` when
// omitted, other attrs defaulted from the OpDef) and computes it once on `inputs`. The inputs
// are passed by reference to their buffers, so outputs can be compared by data() pointer. The
// CPU device has a multi-threaded intra-op pool, like a Session's.
absl::StatusOr<std::vector<Tensor>> RunKernelDirect(const std::string& op_type,
                                                    const OpAttrs& attrs,
                                                    const std::vector<Tensor>& inputs);

}  // namespace tensorflow::tf_ext::testing

#endif  // TESTS_DIRECT_KERNEL_H_
