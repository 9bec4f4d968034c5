// A deliberately flawed third-party op library for tf_ext_gradcheck's tests: one op with a
// wrong gradient, one with no gradient registered at all, one explicitly non-differentiable.
// It uses tf_ext's public gradient library as any other op library would.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/registry.h"

namespace tensorflow::tf_ext {
namespace {

REGISTER_OP("TfExtTest>BadScale").Input("x: T").Output("y: T").Attr("T: {float, double}")
    .SetShapeFn(shape_inference::UnchangedShape);
REGISTER_OP("TfExtTest>NoGradYet").Input("x: T").Output("y: T").Attr("T: {float, double}")
    .SetShapeFn(shape_inference::UnchangedShape);
REGISTER_OP("TfExtTest>Frozen").Input("x: T").Output("y: T").Attr("T: {float, double}")
    .SetShapeFn(shape_inference::UnchangedShape);

// y = factor * x
template <typename T, int kFactor>
class ScaleOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, ctx->input(0).shape(), &y));
    auto x = ctx->input(0).flat<T>();
    for (int64_t i = 0; i < x.size(); ++i) y->flat<T>()(i) = T(kFactor) * x(i);
  }
};

#define REGISTER(T)                                                                          \
  REGISTER_KERNEL_BUILDER(                                                                   \
      Name("TfExtTest>BadScale").Device(DEVICE_CPU).TypeConstraint<T>("T"), ScaleOp<T, 2>);  \
  REGISTER_KERNEL_BUILDER(                                                                   \
      Name("TfExtTest>NoGradYet").Device(DEVICE_CPU).TypeConstraint<T>("T"), ScaleOp<T, 1>); \
  REGISTER_KERNEL_BUILDER(                                                                   \
      Name("TfExtTest>Frozen").Device(DEVICE_CPU).TypeConstraint<T>("T"), ScaleOp<T, 1>);
REGISTER(float);
REGISTER(double);

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
