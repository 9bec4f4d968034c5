// TfExtTest>CubeDedicated, y = x^3, whose C++ gradient is one TfExtTest>CubeDedicatedGrad
// node: an op with no gradient anywhere (neither C++ nor Python), so its first-order gradient
// works and a second-order one must fail with an error naming that op.
// (A separate file from cube_ops.cc: TF_EXT_REGISTER_GRADIENT can be used once per file.)
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/registry.h"

namespace tensorflow::tf_ext::testlib {

REGISTER_OP("TfExtTest>CubeDedicated")
    .Input("x: T")
    .Output("y: T")
    .Attr("T: {float, double}")
    .SetShapeFn(shape_inference::UnchangedShape);

REGISTER_OP("TfExtTest>CubeDedicatedGrad")
    .Input("x: T")
    .Input("dy: T")
    .Output("dx: T")
    .Attr("T: {float, double}")
    .SetShapeFn(shape_inference::UnchangedShape);

template <typename T>
class CubeDedicatedOp : public OpKernel {
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

template <typename T>
class CubeDedicatedGradOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& dy = ctx->input(1);
    OP_REQUIRES(ctx, x.shape() == dy.shape(),
                absl::InvalidArgumentError(absl::StrCat(
                    type_string(), ": x and dy shapes differ: ", x.shape().DebugString(),
                    " vs ", dy.shape().DebugString())));
    Tensor* dx = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &dx));
    auto in = x.flat<T>();
    auto g = dy.flat<T>();
    auto out = dx->flat<T>();
    for (int64_t i = 0; i < in.size(); ++i) out(i) = T(3) * in(i) * in(i) * g(i);
  }
};

#define TF_EXT_TEST_REGISTER(T)                                                        \
  REGISTER_KERNEL_BUILDER(                                                             \
      Name("TfExtTest>CubeDedicated").Device(DEVICE_CPU).TypeConstraint<T>("T"),       \
      CubeDedicatedOp<T>);                                                             \
  REGISTER_KERNEL_BUILDER(                                                             \
      Name("TfExtTest>CubeDedicatedGrad").Device(DEVICE_CPU).TypeConstraint<T>("T"),   \
      CubeDedicatedGradOp<T>);
TF_EXT_TEST_REGISTER(float);
TF_EXT_TEST_REGISTER(double);
#undef TF_EXT_TEST_REGISTER

absl::Status CubeDedicatedGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("TfExtTest>CubeDedicated", attrs);
  // d(x) = CubeDedicatedGrad(x, d(y)) = 3 x^2 d(y).
  b.DedicatedOp("TfExtTest>CubeDedicatedGrad", {"x", grad::GradName("y")}, {"T"}, {"x"});
  return b.Build(g);
}

TF_EXT_REGISTER_GRADIENT("TfExtTest>CubeDedicated", CubeDedicatedGrad);

}  // namespace tensorflow::tf_ext::testlib
