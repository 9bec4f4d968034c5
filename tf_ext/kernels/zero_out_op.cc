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

#define TF_EXT_REGISTER_ZERO_OUT_CPU(T)                                      \
  TF_EXT_REGISTER_KERNEL_BUILDER(                                                   \
      Name("TfExt>ZeroOut").Device(DEVICE_CPU).TypeConstraint<T>("T"),       \
      ZeroOutOp<CPUDevice, T>);
TF_EXT_REGISTER_ZERO_OUT_CPU(float);
TF_EXT_REGISTER_ZERO_OUT_CPU(double);
TF_EXT_REGISTER_ZERO_OUT_CPU(int32);
#undef TF_EXT_REGISTER_ZERO_OUT_CPU

#if GOOGLE_CUDA
using GPUDevice = Eigen::GpuDevice;
#define TF_EXT_REGISTER_ZERO_OUT_GPU(T)                                      \
  TF_EXT_REGISTER_KERNEL_BUILDER(                                                   \
      Name("TfExt>ZeroOut").Device(DEVICE_GPU).TypeConstraint<T>("T"),       \
      ZeroOutOp<GPUDevice, T>);
TF_EXT_REGISTER_ZERO_OUT_GPU(float);
TF_EXT_REGISTER_ZERO_OUT_GPU(double);
TF_EXT_REGISTER_ZERO_OUT_GPU(int32);
#undef TF_EXT_REGISTER_ZERO_OUT_GPU
#endif  // GOOGLE_CUDA

}  // namespace tensorflow::tf_ext
