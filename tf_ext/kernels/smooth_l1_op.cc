// SmoothL1Op<Device, T>: the OpKernel of TfExt>SmoothL1, on CPU and (CUDA builds) GPU.
#include "tf_ext/kernels/op_kernel_common.h"

#include "tf_ext/kernels/smooth_l1_functor.h"
#include "tf_ext/ops/smooth_l1_ops.h"

namespace tensorflow::tf_ext {

template <typename Device, typename T>
class SmoothL1Op : public OpKernel {
 public:
  explicit SmoothL1Op(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ValidateSmoothL1Attrs(type_string(), AttrSlice(ctx->def()), &attrs_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, x.shape(), &y));
    functor::SmoothL1<Device, T>()(ctx->eigen_device<Device>(), x.flat<T>().data(),
                                   x.NumElements(), attrs_.delta, y->flat<T>().data());
  }

 private:
  SmoothL1Attrs attrs_;
};

TF_EXT_REGISTER_CPU_GPU_KERNEL("TfExt>SmoothL1", SmoothL1Op, Eigen::half);
TF_EXT_REGISTER_CPU_GPU_KERNEL("TfExt>SmoothL1", SmoothL1Op, float);
TF_EXT_REGISTER_CPU_GPU_KERNEL("TfExt>SmoothL1", SmoothL1Op, double);

}  // namespace tensorflow::tf_ext
