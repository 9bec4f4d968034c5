// PsRoiAlignOp<Device, T> and PsRoiAlignGradOp<Device, T>: the OpKernels of TfExt>PsRoiAlign
// and TfExt>PsRoiAlignGrad.
#define EIGEN_USE_THREADS

#include <cmath>
#include <cstdint>
#include <limits>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/register_types.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tf_ext/kernels/ps_roi_align_functor.h"
#include "tf_ext/kernels/validation.h"

namespace tensorflow::tf_ext {

namespace {

// Reads and checks the attrs shared by PsRoiAlign and PsRoiAlignGrad.
void ReadPsRoiAlignAttrs(OpKernelConstruction* ctx, functor::PsRoiAlignShape* s) {
  OP_REQUIRES_OK(ctx, ReadRoiGridAttrs(ctx, &s->pooled_height, &s->pooled_width,
                                       &s->spatial_scale));
  OP_REQUIRES_OK(ctx, ctx->GetAttr("sampling_ratio", &s->sampling_ratio));
  OP_REQUIRES(ctx, s->sampling_ratio >= 0,
              OpError(ctx, "sampling_ratio must be >= 0, got ", s->sampling_ratio));
}

// Checks features (rank 4, channels divisible into position-sensitive groups) and rois; fills
// the shape and the output shape [R, pooled_height, pooled_width, D].
absl::Status CheckPsRoiAlignInputs(OpKernelContext* ctx, const Tensor& features,
                                   const Tensor& rois, functor::PsRoiAlignShape* s,
                                   TensorShape* output_shape) {
  TF_RETURN_IF_ERROR(CheckRank(ctx, "features", features, 4));
  const int64_t bins = s->pooled_height * s->pooled_width;
  if (features.dim_size(3) % bins != 0) {
    return OpError(ctx, "the channel count of features (", features.dim_size(3),
                   ") must be divisible by pooled_height * pooled_width = ", bins,
                   "; features has shape ", features.shape().DebugString());
  }
  TF_RETURN_IF_ERROR(CheckRois(ctx, rois, features.dim_size(0)));
  s->batch = features.dim_size(0);
  s->height = features.dim_size(1);
  s->width = features.dim_size(2);
  s->channels = features.dim_size(3);
  s->output_channels = s->channels / bins;
  s->num_rois = rois.dim_size(0);
  absl::Status st = TensorShape::BuildTensorShape(
      {s->num_rois, s->pooled_height, s->pooled_width, s->output_channels}, output_shape);
  if (!st.ok()) return OpError(ctx, "output shape is too large: ", st.message());
  return absl::OkStatus();
}

}  // namespace

template <typename Device, typename T>
class PsRoiAlignOp : public OpKernel {
 public:
  explicit PsRoiAlignOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    ReadPsRoiAlignAttrs(ctx, &attrs_);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& features = ctx->input(0);
    const Tensor& rois = ctx->input(1);
    functor::PsRoiAlignShape s = attrs_;
    TensorShape out_shape;
    OP_REQUIRES_OK(ctx, CheckPsRoiAlignInputs(ctx, features, rois, &s, &out_shape));
    Tensor* output = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, out_shape, &output));
    if (out_shape.num_elements() == 0) return;
    functor::PsRoiAlign<Device, T>()(ctx->eigen_device<Device>(), s, features.flat<T>().data(),
                                     rois.flat<float>().data(), output->flat<T>().data());
  }

 private:
  functor::PsRoiAlignShape attrs_;
};

template <typename Device, typename T>
class PsRoiAlignGradOp : public OpKernel {
 public:
  explicit PsRoiAlignGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    ReadPsRoiAlignAttrs(ctx, &attrs_);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& features = ctx->input(0);
    const Tensor& rois = ctx->input(1);
    const Tensor& d_output = ctx->input(2);
    functor::PsRoiAlignShape s = attrs_;
    TensorShape out_shape;
    OP_REQUIRES_OK(ctx, CheckPsRoiAlignInputs(ctx, features, rois, &s, &out_shape));
    OP_REQUIRES(ctx, d_output.shape() == out_shape,
                OpError(ctx, "d_output must have shape [num_rois, pooled_height, pooled_width, D] = ",
                        out_shape.DebugString(), ", got ", d_output.shape().DebugString()));
    Tensor* d_features = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, features.shape(), &d_features));
    if (features.NumElements() == 0) return;
    functor::PsRoiAlignGrad<Device, T>()(ctx->eigen_device<Device>(), s,
                                         rois.flat<float>().data(), d_output.flat<T>().data(),
                                         d_features->flat<T>().data());
  }

 private:
  functor::PsRoiAlignShape attrs_;
};

#define TF_EXT_REGISTER_PS_ROI_ALIGN_CPU(T)                                      \
  REGISTER_KERNEL_BUILDER(                                                       \
      Name("TfExt>PsRoiAlign").Device(DEVICE_CPU).TypeConstraint<T>("T"),        \
      PsRoiAlignOp<CPUDevice, T>);                                               \
  REGISTER_KERNEL_BUILDER(                                                       \
      Name("TfExt>PsRoiAlignGrad").Device(DEVICE_CPU).TypeConstraint<T>("T"),    \
      PsRoiAlignGradOp<CPUDevice, T>);
TF_EXT_REGISTER_PS_ROI_ALIGN_CPU(float);
TF_EXT_REGISTER_PS_ROI_ALIGN_CPU(double);
#undef TF_EXT_REGISTER_PS_ROI_ALIGN_CPU

}  // namespace tensorflow::tf_ext
