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

#define TF_EXT_REGISTER_SMOOTH_L1(DEVICE_NAME, DeviceType, T)             \
  TF_EXT_REGISTER_KERNEL_BUILDER(                                         \
      Name("TfExt>SmoothL1").Device(DEVICE_NAME).TypeConstraint<T>("T"),  \
      SmoothL1Op<DeviceType, T>);
TF_EXT_REGISTER_SMOOTH_L1(DEVICE_CPU, CPUDevice, Eigen::half);
TF_EXT_REGISTER_SMOOTH_L1(DEVICE_CPU, CPUDevice, float);
TF_EXT_REGISTER_SMOOTH_L1(DEVICE_CPU, CPUDevice, double);
#if GOOGLE_CUDA
using GPUDevice = Eigen::GpuDevice;
TF_EXT_REGISTER_SMOOTH_L1(DEVICE_GPU, GPUDevice, Eigen::half);
TF_EXT_REGISTER_SMOOTH_L1(DEVICE_GPU, GPUDevice, float);
TF_EXT_REGISTER_SMOOTH_L1(DEVICE_GPU, GPUDevice, double);
#endif  // GOOGLE_CUDA
#undef TF_EXT_REGISTER_SMOOTH_L1

}  // namespace tensorflow::tf_ext
