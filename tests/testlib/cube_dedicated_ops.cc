// TfExtTest>CubeDedicated, y = x^3, whose C++ gradient is one TfExtTest>CubeDedicatedGrad
// node: an op with no gradient anywhere (neither C++ nor Python), so its first-order gradient
// works and a second-order one must fail with an error naming that op.
// (A separate file from cube_ops.cc: TF_EXT_REGISTER_GRADIENT can be used once per file.)
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/registry.h"
#include "tests/testlib/elementwise_op.h"

namespace tensorflow::tf_ext::testlib {

REGISTER_OP("TfExtTest>CubeDedicated").Input("x: T").Output("y: T").Attr("T: {float, double}")
    .SetShapeFn(shape_inference::UnchangedShape);
REGISTER_OP("TfExtTest>CubeDedicatedGrad").Input("x: T").Input("dy: T").Output("dx: T")
    .Attr("T: {float, double}").SetShapeFn(shape_inference::UnchangedShape);

TF_EXT_TEST_REGISTER_ELEMENTWISE_KERNEL("TfExtTest>CubeDedicated", test::CubeF);
TF_EXT_TEST_REGISTER_ELEMENTWISE_KERNEL("TfExtTest>CubeDedicatedGrad", test::CubeGradF);

absl::Status CubeDedicatedGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("TfExtTest>CubeDedicated", attrs);
  // d(x) = CubeDedicatedGrad(x, d(y)) = 3 x^2 d(y).
  b.DedicatedOp("TfExtTest>CubeDedicatedGrad", {"x", grad::GradName("y")}, {"T"}, {"x"});
  return b.Build(g);
}

TF_EXT_REGISTER_GRADIENT("TfExtTest>CubeDedicated", CubeDedicatedGrad);

}  // namespace tensorflow::tf_ext::testlib
