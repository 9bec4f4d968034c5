// TfExt>GradientFunctionDef: exposes the C++ gradient registry to any front end that can run
// an op (the Python bridge uses it from eager mode).
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_def_builder.h"
#include "tf_ext/grads/single_copy.h"

namespace tensorflow::tf_ext {

// Registered by hand rather than with REGISTER_OP: this registration is also the op
// library's single-copy guard. In a second copy of the library (another path), it fails, and
// TensorFlow's library loader then fails that load with the message naming both paths.
const bool gradient_function_def_registered [[maybe_unused]] = [] {
  OpRegistry::Global()->Register([](OpRegistrationData* op_reg_data) -> absl::Status {
    TF_RETURN_IF_ERROR(CheckSingleCopy());
    return OpDefBuilder("TfExt>GradientFunctionDef")
        .Input("node_def: string")
        .Output("function_def: string")
        .SetShapeFn(shape_inference::ScalarShape)
        .Doc(R"doc(
Returns the C++ gradient of a node's op as a FunctionDef specialised to the node's attrs.

node_def: scalar, a serialized NodeDef (op type + attrs; inputs are ignored).
function_def: scalar, the serialized FunctionDef (no attr placeholders; inputs are the op's
  inputs then one incoming gradient per output, outputs one gradient per input).
)doc")
        .Finalize(op_reg_data);
  });
  return true;
}();

}  // namespace tensorflow::tf_ext
