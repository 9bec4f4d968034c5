// GradientReversalOp: the OpKernel of TfExt>GradientReversal. The forward is the identity and
// hands the input buffer on (no copy, no functor: there is no work to do on any device).
#include <cmath>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/register_types.h"
#include "tensorflow/core/framework/tensor.h"
#include "tf_ext/kernels/kernel_registration.h"
#include "tf_ext/kernels/validation.h"
#include "tf_ext/ops/gradient_reversal_ops.h"

namespace tensorflow::tf_ext {

class GradientReversalOp : public OpKernel {
 public:
  explicit GradientReversalOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    // scale only shapes the gradient; rejecting inf/NaN here reports the bug where the op is
    // built instead of as NaN gradients later.
    GradientReversalAttrs a;
    OP_REQUIRES_OK(ctx,
                   ValidateGradientReversalAttrs(ctx->def().op(), AttrSlice(ctx->def()), &a));
  }

  void Compute(OpKernelContext* ctx) override {
    // y shares x's buffer (reference counted), like Identity: any shape, empty included.
    ctx->set_output(0, ctx->input(0));
  }
};

#define TF_EXT_REGISTER_GRADIENT_REVERSAL_CPU(T)                                \
  TF_EXT_REGISTER_KERNEL_BUILDER(                                                      \
      Name("TfExt>GradientReversal").Device(DEVICE_CPU).TypeConstraint<T>("T"), \
      GradientReversalOp);
TF_EXT_REGISTER_GRADIENT_REVERSAL_CPU(Eigen::half);
TF_EXT_REGISTER_GRADIENT_REVERSAL_CPU(float);
TF_EXT_REGISTER_GRADIENT_REVERSAL_CPU(double);
#undef TF_EXT_REGISTER_GRADIENT_REVERSAL_CPU

#if GOOGLE_CUDA
// The same kernel on the GPU: set_output hands the input's device buffer on, no copy.
#define TF_EXT_REGISTER_GRADIENT_REVERSAL_GPU(T)                                \
  TF_EXT_REGISTER_KERNEL_BUILDER(                                               \
      Name("TfExt>GradientReversal").Device(DEVICE_GPU).TypeConstraint<T>("T"), \
      GradientReversalOp);
TF_EXT_REGISTER_GRADIENT_REVERSAL_GPU(Eigen::half);
TF_EXT_REGISTER_GRADIENT_REVERSAL_GPU(float);
TF_EXT_REGISTER_GRADIENT_REVERSAL_GPU(double);
#undef TF_EXT_REGISTER_GRADIENT_REVERSAL_GPU
#endif  // GOOGLE_CUDA

}  // namespace tensorflow::tf_ext
