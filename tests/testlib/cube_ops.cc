// TfExtTest>Cube, y = x^3: an op of a second, independent op library (the fixture of
// tests/python/test_register_cpp_gradients.py). Its gradient is C++ only (FDH, registered with
// TF_EXT_REGISTER_GRADIENT) and made of stock ops, so it is differentiable again.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/registry.h"
#include "tests/testlib/elementwise_op.h"

namespace tensorflow::tf_ext::testlib {

REGISTER_OP("TfExtTest>Cube").Input("x: T").Output("y: T").Attr("T: {float, double}")
    .SetShapeFn(shape_inference::UnchangedShape);

TF_EXT_TEST_REGISTER_ELEMENTWISE_KERNEL("TfExtTest>Cube", test::CubeF);

absl::Status CubeGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("TfExtTest>Cube", attrs);
  const std::string three = b.TypedConst("three", 3.0);
  // d(x) = 3 x^2 d(y), from stock ops only (each has a Python gradient).
  b.UnaryCwise({
      {{"x2"}, "Square", {"x"}, {{"T", grad::Placeholder("T")}}},
      {{"x2_3"}, "Mul", {"x2", three}, {{"T", grad::Placeholder("T")}}},
      {{"dx"}, "Mul", {"x2_3", grad::GradName("y")}, {{"T", grad::Placeholder("T")}}},
  });
  return b.Build(g);
}

TF_EXT_REGISTER_GRADIENT("TfExtTest>Cube", CubeGrad);

}  // namespace tensorflow::tf_ext::testlib
