// RoiPoolOp<Device, T> and RoiPoolGradOp<Device, T>: the OpKernels of TfExt>RoiPool and
// TfExt>RoiPoolGrad.
#define EIGEN_USE_THREADS

#include <cmath>
#include <cstdint>
#include <limits>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/register_types.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tf_ext/kernels/roi_pool_functor.h"
#include "tf_ext/kernels/validation.h"

namespace tensorflow::tf_ext {

namespace {

// Reads and checks the attrs shared by RoiPool and RoiPoolGrad.
void ReadRoiPoolAttrs(OpKernelConstruction* ctx, functor::RoiPoolShape* s) {
  OP_REQUIRES_OK(ctx, ReadRoiGridAttrs(ctx, &s->pooled_height, &s->pooled_width,
                                       &s->spatial_scale));
}

// Checks data (rank 4, positions that fit argmax's int32) and rois; fills the shape.
absl::Status CheckRoiPoolInputs(OpKernelContext* ctx, const Tensor& data, const Tensor& rois,
                                functor::RoiPoolShape* s) {
  TF_RETURN_IF_ERROR(CheckRank(ctx, "data", data, 4));
  TF_RETURN_IF_ERROR(CheckRois(ctx, rois, data.dim_size(0)));
  s->batch = data.dim_size(0);
  s->height = data.dim_size(1);
  s->width = data.dim_size(2);
  s->channels = data.dim_size(3);
  s->num_rois = rois.dim_size(0);
  // Division, not H * W, which could overflow when C == 0 lets H and W both be huge.
  if (s->height > 0 && s->width > std::numeric_limits<int32_t>::max() / s->height) {
    return OpError(ctx, "H * W must fit argmax's int32, but data has shape ",
                   data.shape().DebugString());
  }
  return absl::OkStatus();
}

// [R, pooled_height, pooled_width, C], failing (not crashing) if its size overflows.
absl::Status PooledShape(OpKernelContext* ctx, const functor::RoiPoolShape& s,
                         TensorShape* shape) {
  absl::Status st = TensorShape::BuildTensorShape(
      {s.num_rois, s.pooled_height, s.pooled_width, s.channels}, shape);
  if (!st.ok()) return OpError(ctx, "output shape is too large: ", st.message());
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
    OP_REQUIRES_OK(ctx, CheckRoiPoolInputs(ctx, data, rois, &s));
    TensorShape out_shape;
    OP_REQUIRES_OK(ctx, PooledShape(ctx, s, &out_shape));
    Tensor* pooled = nullptr;
    Tensor* argmax = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, out_shape, &pooled));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, out_shape, &argmax));
    if (out_shape.num_elements() == 0) return;
    functor::RoiPool<Device, T>()(ctx->eigen_device<Device>(), s, data.flat<T>().data(),
                                  rois.flat<float>().data(), pooled->flat<T>().data(),
                                  argmax->flat<int32_t>().data());
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
    OP_REQUIRES_OK(ctx, CheckRoiPoolInputs(ctx, data, rois, &s));
    TensorShape pooled_shape;
    OP_REQUIRES_OK(ctx, PooledShape(ctx, s, &pooled_shape));
    OP_REQUIRES(ctx, argmax.shape() == pooled_shape,
                OpError(ctx, "argmax must have shape [num_rois, pooled_height, pooled_width, C] = ",
                        pooled_shape.DebugString(), ", got ", argmax.shape().DebugString()));
    OP_REQUIRES(ctx, d_pooled.shape() == pooled_shape,
                OpError(ctx, "d_pooled must have shape [num_rois, pooled_height, pooled_width, C] = ",
                        pooled_shape.DebugString(), ", got ", d_pooled.shape().DebugString()));
    // argmax normally comes from RoiPool, but the op is public: an out-of-range position
    // would be an out-of-bounds write.
    const int64_t hw = s.height * s.width;
    const auto arg = argmax.flat<int32_t>();
    for (int64_t k = 0; k < arg.size(); ++k) {
      OP_REQUIRES(ctx, arg(k) >= -1 && arg(k) < hw,
                  OpError(ctx, "argmax[", k, "] = ", arg(k), " is outside [-1, H * W = ", hw,
                          ")"));
    }
    Tensor* d_data = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, data.shape(), &d_data));
    if (data.NumElements() == 0) return;
    functor::RoiPoolGrad<Device, T>()(ctx->eigen_device<Device>(), s, rois.flat<float>().data(),
                                      arg.data(), d_pooled.flat<T>().data(),
                                      d_data->flat<T>().data());
  }

 private:
  functor::RoiPoolShape attrs_;
};

#define TF_EXT_REGISTER_ROI_POOL_CPU(T)                                          \
  REGISTER_KERNEL_BUILDER(                                                       \
      Name("TfExt>RoiPool").Device(DEVICE_CPU).TypeConstraint<T>("T"),           \
      RoiPoolOp<CPUDevice, T>);                                                  \
  REGISTER_KERNEL_BUILDER(                                                       \
      Name("TfExt>RoiPoolGrad").Device(DEVICE_CPU).TypeConstraint<T>("T"),       \
      RoiPoolGradOp<CPUDevice, T>);
TF_EXT_REGISTER_ROI_POOL_CPU(float);
TF_EXT_REGISTER_ROI_POOL_CPU(double);
#undef TF_EXT_REGISTER_ROI_POOL_CPU

}  // namespace tensorflow::tf_ext
