// PsRoiAlignOp<Device, T> and PsRoiAlignGradOp<Device, T>: the OpKernels of TfExt>PsRoiAlign
// and TfExt>PsRoiAlignGrad.
#include "tf_ext/kernels/op_kernel_common.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "tensorflow/core/framework/tensor_shape.h"
#include "tf_ext/kernels/compute_buffers.h"
#include "tf_ext/kernels/device_copy.h"
#include "tf_ext/kernels/ps_roi_align_functor.h"
#include "tf_ext/kernels/validation.h"
#include "tf_ext/ops/op_checks.h"
#include "tf_ext/ops/roi_ops.h"

namespace tensorflow::tf_ext {

namespace {

// Validates the attrs once, at construction, with the op's one validation function.
void ReadPsRoiAlignAttrs(OpKernelConstruction* ctx, functor::PsRoiAlignShape* s) {
  PsRoiAlignAttrs a;
  OP_REQUIRES_OK(ctx, ValidatePsRoiAlignAttrs(ctx->def().op(), AttrSlice(ctx->def()), &a));
  s->pooled_height = a.pooled_height;
  s->pooled_width = a.pooled_width;
  s->spatial_scale = a.spatial_scale;
  s->sampling_ratio = a.sampling_ratio;
}

PsRoiAlignAttrs AttrsOf(const functor::PsRoiAlignShape& s) {
  return PsRoiAlignAttrs{s.pooled_height, s.pooled_width, s.spatial_scale, s.sampling_ratio};
}

// Fills the shape from features and rois (already validated) and checks the ROI rows' values.
absl::Status FillPsRoiAlignShape(OpKernelContext* ctx, const Tensor& features,
                                 const Tensor& rois, functor::PsRoiAlignShape* s) {
  TF_RETURN_IF_ERROR(CheckRois(ctx, rois, features.dim_size(0)));
  s->batch = features.dim_size(0);
  s->height = features.dim_size(1);
  s->width = features.dim_size(2);
  s->channels = features.dim_size(3);
  s->output_channels = s->channels / (s->pooled_height * s->pooled_width);
  s->num_rois = rois.dim_size(0);
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
    PartialTensorShape out_partial;
    OP_REQUIRES_OK(ctx, ValidatePsRoiAlignShapes(type_string(), AttrsOf(s), Partial(features.shape()),
                                                 Partial(rois.shape()), &out_partial));
    OP_REQUIRES_OK(ctx, FillPsRoiAlignShape(ctx, features, rois, &s));
    TensorShape out_shape;
    OP_REQUIRES(ctx, out_partial.AsTensorShape(&out_shape),
                OpError(ctx, "internal: output shape ", out_partial.DebugString(), " is partial"));
    Tensor* output = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, out_shape, &output));
    if (out_shape.num_elements() == 0) return;
    Tensor rois_on_device;
    OP_REQUIRES_OK(ctx, HostInput<Device>::ToDevice(ctx, rois, &rois_on_device));
    ComputeBuffers<Device, T> io(ctx);
    const ComputeType<T>* features_c = nullptr;
    ComputeType<T>* output_c = nullptr;
    OP_REQUIRES_OK(ctx, io.In(features, &features_c));
    OP_REQUIRES_OK(ctx, io.Out(output, &output_c));
    functor::PsRoiAlign<Device, ComputeType<T>>()(ctx->eigen_device<Device>(), s, features_c,
                                                  rois_on_device.flat<float>().data(), output_c);
    io.Finish();
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
    OP_REQUIRES_OK(ctx, ValidatePsRoiAlignGradShapes(type_string(), AttrsOf(s), Partial(features.shape()),
                                                     Partial(rois.shape()), Partial(d_output.shape())));
    OP_REQUIRES_OK(ctx, FillPsRoiAlignShape(ctx, features, rois, &s));
    Tensor* d_features = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, features.shape(), &d_features));
    if (features.NumElements() == 0) return;
    Tensor rois_on_device;
    OP_REQUIRES_OK(ctx, HostInput<Device>::ToDevice(ctx, rois, &rois_on_device));
    ComputeBuffers<Device, T> io(ctx);
    const ComputeType<T>* d_output_c = nullptr;
    ComputeType<T>* d_features_c = nullptr;
    OP_REQUIRES_OK(ctx, io.In(d_output, &d_output_c));
    OP_REQUIRES_OK(ctx, io.Out(d_features, &d_features_c));
    functor::PsRoiAlignGrad<Device, ComputeType<T>>()(ctx->eigen_device<Device>(), s,
                                                      rois_on_device.flat<float>().data(),
                                                      d_output_c, d_features_c);
    io.Finish();
  }

 private:
  functor::PsRoiAlignShape attrs_;
};

// GPU: `rois` stays in host memory, where the kernel validates it with the CPU kernel's own
// check before copying it to the device (device_copy.h): no CUDA kernel ever reads an
// unchecked ROI row.
// half: computed in float and rounded once (compute_buffers.h).
TF_EXT_REGISTER_CPU_GPU_KERNEL_WITH("TfExt>PsRoiAlign", PsRoiAlignOp, Eigen::half,
                                    .HostMemory("rois"));
TF_EXT_REGISTER_CPU_GPU_KERNEL_WITH("TfExt>PsRoiAlign", PsRoiAlignOp, float,
                                    .HostMemory("rois"));
TF_EXT_REGISTER_CPU_GPU_KERNEL_WITH("TfExt>PsRoiAlign", PsRoiAlignOp, double,
                                    .HostMemory("rois"));
TF_EXT_REGISTER_CPU_GPU_KERNEL_WITH("TfExt>PsRoiAlignGrad", PsRoiAlignGradOp, Eigen::half,
                                    .HostMemory("rois"));
TF_EXT_REGISTER_CPU_GPU_KERNEL_WITH("TfExt>PsRoiAlignGrad", PsRoiAlignGradOp, float,
                                    .HostMemory("rois"));
TF_EXT_REGISTER_CPU_GPU_KERNEL_WITH("TfExt>PsRoiAlignGrad", PsRoiAlignGradOp, double,
                                    .HostMemory("rois"));

}  // namespace tensorflow::tf_ext
