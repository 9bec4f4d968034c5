// TfExtTest>Cube, y = x^3: an op of a second, independent op library (the fixture of
// tests/python/test_register_cpp_gradients.py). Its gradient is C++ only (FDH, registered with
// TF_EXT_REGISTER_GRADIENT) and made of stock ops, so it is differentiable again.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/registry.h"

namespace tensorflow::tf_ext::testlib {

REGISTER_OP("TfExtTest>Cube")
    .Input("x: T")
    .Output("y: T")
    .Attr("T: {float, double}")
    .SetShapeFn(shape_inference::UnchangedShape);

template <typename T>
class CubeOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    auto in = x.flat<T>();
    auto out = y->flat<T>();
    for (int64_t i = 0; i < in.size(); ++i) out(i) = in(i) * in(i) * in(i);
  }
};

REGISTER_KERNEL_BUILDER(Name("TfExtTest>Cube").Device(DEVICE_CPU).TypeConstraint<float>("T"),
                        CubeOp<float>);
REGISTER_KERNEL_BUILDER(Name("TfExtTest>Cube").Device(DEVICE_CPU).TypeConstraint<double>("T"),
                        CubeOp<double>);

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
