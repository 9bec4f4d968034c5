// ZeroOutOp<Device, T>: the OpKernel of TfExt>ZeroOut.
#include "tf_ext/kernels/op_kernel_common.h"

#include "tf_ext/kernels/validation.h"
#include "tf_ext/ops/op_checks.h"
#include "tf_ext/kernels/zero_out_functor.h"
#include "tf_ext/ops/zero_out_ops.h"

namespace tensorflow::tf_ext {

template <typename Device, typename T>
class ZeroOutOp : public OpKernel {
 public:
  explicit ZeroOutOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ValidateZeroOutAttrs(ctx->def().op(), AttrSlice(ctx->def()), &attrs_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    const int64_t n = in.NumElements();
    OP_REQUIRES_OK(ctx, ValidateZeroOutShapes(type_string(), attrs_, Partial(in.shape())));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, in.shape(), &out));
    functor::ZeroOut<Device, T>()(ctx->eigen_device<Device>(), in.flat<T>().data(), n,
                                  attrs_.preserve_index, out->flat<T>().data());
  }

 private:
  ZeroOutAttrs attrs_;
};

TF_EXT_REGISTER_CPU_GPU_KERNEL("TfExt>ZeroOut", ZeroOutOp, float);
TF_EXT_REGISTER_CPU_GPU_KERNEL("TfExt>ZeroOut", ZeroOutOp, double);
TF_EXT_REGISTER_CPU_GPU_KERNEL("TfExt>ZeroOut", ZeroOutOp, int32);

}  // namespace tensorflow::tf_ext
