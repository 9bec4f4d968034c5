// RoiPoolOp<Device, T> and RoiPoolGradOp<Device, T>: the OpKernels of TfExt>RoiPool and
// TfExt>RoiPoolGrad.
#include "tf_ext/kernels/op_kernel_common.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "tensorflow/core/framework/tensor_shape.h"
#include "tf_ext/kernels/compute_buffers.h"
#include "tf_ext/kernels/device_copy.h"
#include "tf_ext/kernels/roi_pool_functor.h"
#include "tf_ext/kernels/roi_util.h"
#include "tf_ext/kernels/validation.h"
#include "tf_ext/ops/op_checks.h"
#include "tf_ext/ops/roi_ops.h"

namespace tensorflow::tf_ext {

namespace {

// Validates the attrs once, at construction, with the op's one validation function.
void ReadRoiPoolAttrs(OpKernelConstruction* ctx, functor::RoiPoolShape* s) {
  RoiPoolAttrs a;
  OP_REQUIRES_OK(ctx, ValidateRoiPoolAttrs(ctx->def().op(), AttrSlice(ctx->def()), &a));
  s->pooled_height = a.pooled_height;
  s->pooled_width = a.pooled_width;
  s->spatial_scale = a.spatial_scale;
}

RoiPoolAttrs AttrsOf(const functor::RoiPoolShape& s) {
  return RoiPoolAttrs{s.pooled_height, s.pooled_width, s.spatial_scale};
}

// Fills the shape from data and rois (already validated) and checks the ROI rows' values.
absl::Status FillRoiPoolShape(OpKernelContext* ctx, const Tensor& data, const Tensor& rois,
                              functor::RoiPoolShape* s) {
  TF_RETURN_IF_ERROR(CheckRois(ctx, rois, data.dim_size(0)));
  s->batch = data.dim_size(0);
  s->height = data.dim_size(1);
  s->width = data.dim_size(2);
  s->channels = data.dim_size(3);
  s->num_rois = rois.dim_size(0);
  return absl::OkStatus();
}

}  // namespace

template <typename Device, typename T>
class RoiPoolOp : public OpKernel {
 public:
  explicit RoiPoolOp(OpKernelConstruction* ctx) : OpKernel(ctx) { ReadRoiPoolAttrs(ctx, &attrs_); }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& data = ctx->input(0);
    const Tensor& rois = ctx->input(1);
    functor::RoiPoolShape s = attrs_;
    PartialTensorShape pooled_partial;
    OP_REQUIRES_OK(ctx, ValidateRoiPoolShapes(type_string(), AttrsOf(s), Partial(data.shape()),
                                              Partial(rois.shape()), &pooled_partial));
    OP_REQUIRES_OK(ctx, FillRoiPoolShape(ctx, data, rois, &s));
    TensorShape out_shape;
    OP_REQUIRES(ctx, pooled_partial.AsTensorShape(&out_shape),
                OpError(ctx, "internal: pooled shape ", pooled_partial.DebugString(), " is partial"));
    Tensor* pooled = nullptr;
    Tensor* argmax = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, out_shape, &pooled));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, out_shape, &argmax));
    if (out_shape.num_elements() == 0) return;
    Tensor rois_on_device;
    OP_REQUIRES_OK(ctx, HostInput<Device>::ToDevice(ctx, rois, &rois_on_device));
    ComputeBuffers<Device, T> io(ctx);
    const ComputeType<T>* data_c = nullptr;
    ComputeType<T>* pooled_c = nullptr;
    OP_REQUIRES_OK(ctx, io.In(data, &data_c));
    OP_REQUIRES_OK(ctx, io.Out(pooled, &pooled_c));
    functor::RoiPool<Device, ComputeType<T>>()(ctx->eigen_device<Device>(), s, data_c,
                                               rois_on_device.flat<float>().data(), pooled_c,
                                               argmax->flat<int32_t>().data());
    io.Finish();
  }

 private:
  functor::RoiPoolShape attrs_;
};

template <typename Device, typename T>
class RoiPoolGradOp : public OpKernel {
 public:
  explicit RoiPoolGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    ReadRoiPoolAttrs(ctx, &attrs_);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& data = ctx->input(0);
    const Tensor& rois = ctx->input(1);
    const Tensor& argmax = ctx->input(2);
    const Tensor& d_pooled = ctx->input(3);
    functor::RoiPoolShape s = attrs_;
    OP_REQUIRES_OK(ctx, ValidateRoiPoolGradShapes(type_string(), AttrsOf(s), Partial(data.shape()),
                                                  Partial(rois.shape()), Partial(argmax.shape()),
                                                  Partial(d_pooled.shape())));
    OP_REQUIRES_OK(ctx, FillRoiPoolShape(ctx, data, rois, &s));
    // argmax normally comes from RoiPool, but the op is public: an out-of-range position
    // would be an out-of-bounds write.
    const int64_t hw = s.height * s.width;
    const auto arg = argmax.flat<int32_t>();
    // A parallel vectorised range check first; the scalar scan only names the culprit.
    if (!AllInRange(ctx->eigen_cpu_device(), arg.data(), arg.size(), -1,
                    static_cast<int32_t>(hw))) {
      for (int64_t k = 0; k < arg.size(); ++k) {
        OP_REQUIRES(ctx, arg(k) >= -1 && arg(k) < hw,
                    OpError(ctx, "argmax[", k, "] = ", arg(k), " is outside [-1, H * W = ", hw,
                            ")"));
      }
    }
    Tensor* d_data = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, data.shape(), &d_data));
    if (data.NumElements() == 0) return;
    Tensor rois_on_device, argmax_on_device;
    OP_REQUIRES_OK(ctx, HostInput<Device>::ToDevice(ctx, rois, &rois_on_device));
    OP_REQUIRES_OK(ctx, HostInput<Device>::ToDevice(ctx, argmax, &argmax_on_device));
    ComputeBuffers<Device, T> io(ctx);
    const ComputeType<T>* d_pooled_c = nullptr;
    ComputeType<T>* d_data_c = nullptr;
    OP_REQUIRES_OK(ctx, io.In(d_pooled, &d_pooled_c));
    OP_REQUIRES_OK(ctx, io.Out(d_data, &d_data_c));
    functor::RoiPoolGrad<Device, ComputeType<T>>()(ctx->eigen_device<Device>(), s,
                                                   rois_on_device.flat<float>().data(),
                                                   argmax_on_device.flat<int32_t>().data(),
                                                   d_pooled_c, d_data_c);
    io.Finish();
  }

 private:
  functor::RoiPoolShape attrs_;
};

// GPU: `rois` (and RoiPoolGrad's `argmax`) stay in host memory, where the kernel validates
// them with the CPU kernel's own checks before copying them to the device (device_copy.h):
// no CUDA kernel ever reads an unchecked ROI row.
// half: computed in float and rounded (compute_buffers.h): the max and argmax are exact, the
// gradient's sums are taken in float and rounded once.
TF_EXT_REGISTER_CPU_GPU_KERNEL_WITH("TfExt>RoiPool", RoiPoolOp, Eigen::half, .HostMemory("rois"));
TF_EXT_REGISTER_CPU_GPU_KERNEL_WITH("TfExt>RoiPool", RoiPoolOp, float, .HostMemory("rois"));
TF_EXT_REGISTER_CPU_GPU_KERNEL_WITH("TfExt>RoiPool", RoiPoolOp, double, .HostMemory("rois"));
TF_EXT_REGISTER_CPU_GPU_KERNEL_WITH("TfExt>RoiPoolGrad", RoiPoolGradOp, Eigen::half,
                                    .HostMemory("rois").HostMemory("argmax"));
TF_EXT_REGISTER_CPU_GPU_KERNEL_WITH("TfExt>RoiPoolGrad", RoiPoolGradOp, float,
                                    .HostMemory("rois").HostMemory("argmax"));
TF_EXT_REGISTER_CPU_GPU_KERNEL_WITH("TfExt>RoiPoolGrad", RoiPoolGradOp, double,
                                    .HostMemory("rois").HostMemory("argmax"));

}  // namespace tensorflow::tf_ext
