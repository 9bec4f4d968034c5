// A deliberately flawed third-party op library for tf_ext_gradcheck's tests: one op with a
// wrong gradient, one with no gradient registered at all, one explicitly non-differentiable.
// It uses tf_ext's public gradient library as any other op library would.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/registry.h"
#include "tests/testlib/elementwise_op.h"

namespace tensorflow::tf_ext {
namespace {

REGISTER_OP("TfExtTest>BadScale").Input("x: T").Output("y: T").Attr("T: {float, double}")
    .SetShapeFn(shape_inference::UnchangedShape);
REGISTER_OP("TfExtTest>NoGradYet").Input("x: T").Output("y: T").Attr("T: {float, double}")
    .SetShapeFn(shape_inference::UnchangedShape);
REGISTER_OP("TfExtTest>Frozen").Input("x: T").Output("y: T").Attr("T: {float, double}")
    .SetShapeFn(shape_inference::UnchangedShape);

// y = 2 x, y = x, y = x.
TF_EXT_TEST_REGISTER_ELEMENTWISE_KERNEL("TfExtTest>BadScale", test::ScaleF<2>);
TF_EXT_TEST_REGISTER_ELEMENTWISE_KERNEL("TfExtTest>NoGradYet", test::ScaleF<1>);
TF_EXT_TEST_REGISTER_ELEMENTWISE_KERNEL("TfExtTest>Frozen", test::ScaleF<1>);

absl::Status BadScaleGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("TfExtTest>BadScale", attrs);
  // Wrong on purpose: dx = 3 dy (the truth is 2 dy).
  std::string three = b.TypedConst("three", 3.0);
  b.UnaryCwise({{{"dx"}, "Mul", {grad::GradName("y"), three}, b.PassAttrs({"T"})}});
  return b.Build(g);
}

TF_EXT_REGISTER_GRADIENT("TfExtTest>BadScale", BadScaleGrad);
TF_EXT_REGISTER_NO_GRADIENT("TfExtTest>Frozen");

}  // namespace
}  // namespace tensorflow::tf_ext
