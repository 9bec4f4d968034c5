// TfExt>GradientFunctionDef: exposes the C++ gradient registry to any front end that can run
// an op (the Python bridge uses it from eager mode).
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"

namespace tensorflow::tf_ext {

REGISTER_OP("TfExt>GradientFunctionDef")
    .Input("node_def: string")
    .Output("function_def: string")
    .SetShapeFn(shape_inference::ScalarShape)
    .Doc(R"doc(
Returns the C++ gradient of a node's op as a FunctionDef specialised to the node's attrs.

node_def: scalar, a serialized NodeDef (op type + attrs; inputs are ignored).
function_def: scalar, the serialized FunctionDef (no attr placeholders; inputs are the op's
  inputs then one incoming gradient per output, outputs one gradient per input).
)doc");

}  // namespace tensorflow::tf_ext
