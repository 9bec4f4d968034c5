// ThirdParty>Swish, y = x * sigmoid(x): an op of a library that lives outside tf_ext's
// workspace. Its gradient is one C++ FDH function registered with TF_EXT_REGISTER_GRADIENT
// (from @tf_ext//tf_ext:grad_lib), which puts it in TensorFlow's function registry
// (SymbolicGradient, every Session) and in the C++ client registry (AddSymbolicGradients,
// TF_AddGradients); Python reaches it through tf_ext.register_cpp_gradients.
#include <cmath>

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/registry.h"

namespace tensorflow::tf_ext::example {

REGISTER_OP("ThirdParty>Swish")
    .Input("x: T")
    .Output("y: T")
    .Attr("T: {float, double}")
    .SetShapeFn(shape_inference::UnchangedShape);

template <typename T>
class SwishOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    auto in = x.flat<T>();
    auto out = y->flat<T>();
    for (int64_t i = 0; i < in.size(); ++i) out(i) = in(i) / (T(1) + std::exp(-in(i)));
  }
};

REGISTER_KERNEL_BUILDER(
    Name("ThirdParty>Swish").Device(DEVICE_CPU).TypeConstraint<float>("T"), SwishOp<float>);
REGISTER_KERNEL_BUILDER(
    Name("ThirdParty>Swish").Device(DEVICE_CPU).TypeConstraint<double>("T"), SwishOp<double>);

absl::Status SwishGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("ThirdParty>Swish", attrs);
  const auto t = grad::Placeholder("T");
  const std::string one = b.TypedConst("one", 1.0);
  // s = sigmoid(x), y = x s:  dy/dx = s + x s (1 - s) = s + y (1 - s).
  // d(x) = d(y) * (s + y * (1 - s)), from stock ops only (so it is differentiable again).
  b.UnaryCwise({
      {{"s"}, "Sigmoid", {"x"}, {{"T", t}}},
      {{"one_minus_s"}, "Sub", {one, "s"}, {{"T", t}}},
      {{"y_one_minus_s"}, "Mul", {"y", "one_minus_s"}, {{"T", t}}},
      {{"slope"}, "AddV2", {"s", "y_one_minus_s"}, {{"T", t}}},
      {{"dx"}, "Mul", {grad::GradName("y"), "slope"}, {{"T", t}}},
  });
  return b.Build(g);
}

TF_EXT_REGISTER_GRADIENT("ThirdParty>Swish", SwishGrad);

}  // namespace tensorflow::tf_ext::example
