// SignSTEOp<Device, T> and SignSTEGradOp<Device, T>: the OpKernels of TfExt>SignSTE and
// TfExt>SignSTEGrad.
#include "tf_ext/kernels/op_kernel_common.h"

#include <cmath>

#include "tf_ext/kernels/sign_ste_functor.h"
#include "tf_ext/kernels/validation.h"
#include "tf_ext/ops/op_checks.h"
#include "tf_ext/ops/sign_ste_ops.h"

namespace tensorflow::tf_ext {

// Both kernels validate clip where the op is built: for the forward, clip only shapes the
// gradient, but a graph carrying a meaningless clip is a bug worth reporting there rather than
// as silently zero gradients.
template <typename T>
class SignSTEBase : public OpKernel {
 public:
  explicit SignSTEBase(OpKernelConstruction* ctx) : OpKernel(ctx) {
    SignSTEAttrs a;
    OP_REQUIRES_OK(ctx, ValidateSignSTEAttrs(ctx->def().op(), AttrSlice(ctx->def()), &a));
    clip_ = static_cast<T>(a.clip);  // as the stock-op gradient's Cast(clip) gave it
  }

 protected:
  T clip_;
};

template <typename Device, typename T>
class SignSTEOp : public SignSTEBase<T> {
 public:
  using SignSTEBase<T>::SignSTEBase;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, x.shape(), &y));
    functor::SignSTE<Device, T>()(ctx->eigen_device<Device>(), x.flat<T>().data(),
                                  x.NumElements(), y->flat<T>().data());
  }
};

template <typename Device, typename T>
class SignSTEGradOp : public SignSTEBase<T> {
 public:
  using SignSTEBase<T>::SignSTEBase;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& d_y = ctx->input(0);
    const Tensor& x = ctx->input(1);
    OP_REQUIRES_OK(ctx, ValidateSignSTEGradShapes(this->type_string(), Partial(d_y.shape()),
                                                  Partial(x.shape())));
    Tensor* d_x = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0, 1}, 0, x.shape(), &d_x));
    functor::SignSTEGrad<Device, T>()(ctx->eigen_device<Device>(), d_y.flat<T>().data(),
                                      x.flat<T>().data(), this->clip_, x.NumElements(),
                                      d_x->flat<T>().data());
  }
};

TF_EXT_REGISTER_CPU_GPU_KERNEL("TfExt>SignSTE", SignSTEOp, Eigen::half);
TF_EXT_REGISTER_CPU_GPU_KERNEL("TfExt>SignSTE", SignSTEOp, float);
TF_EXT_REGISTER_CPU_GPU_KERNEL("TfExt>SignSTE", SignSTEOp, double);
TF_EXT_REGISTER_CPU_GPU_KERNEL("TfExt>SignSTEGrad", SignSTEGradOp, Eigen::half);
TF_EXT_REGISTER_CPU_GPU_KERNEL("TfExt>SignSTEGrad", SignSTEGradOp, float);
TF_EXT_REGISTER_CPU_GPU_KERNEL("TfExt>SignSTEGrad", SignSTEGradOp, double);

}  // namespace tensorflow::tf_ext
