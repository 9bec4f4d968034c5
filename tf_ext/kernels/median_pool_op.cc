// MedianPool2DOp<Device, T> and MedianPool2DGradOp<Device, T>: the OpKernels of
// TfExt>MedianPool2D and TfExt>MedianPool2DGrad.
#include "tf_ext/kernels/op_kernel_common.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "tf_ext/kernels/compute_buffers.h"
#include "tf_ext/kernels/median_pool_functor.h"
#include "tf_ext/kernels/validation.h"
#include "tf_ext/ops/op_checks.h"
#include "tf_ext/ops/median_pool_ops.h"

namespace tensorflow::tf_ext {

// Attrs and geometry shared by the forward and the backward kernel.
class MedianPool2DBase : public OpKernel {
 public:
  explicit MedianPool2DBase(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ValidateMedianPool2DAttrs(ctx->def().op(), AttrSlice(ctx->def()), &a_));
  }

 protected:
  const MedianPool2DAttrs& attrs() const { return a_; }

  // Fills the geometry for x, which ValidateMedianPool2DShapes has accepted.
  void Geometry(const Tensor& x, functor::MedianPool2DParams* p) const {
    const int64_t dims[4] = {x.dim_size(0), x.dim_size(1), x.dim_size(2), x.dim_size(3)};
    *p = functor::MedianPool2DGeometry(dims, a_.ksize, a_.strides, a_.same);
  }

 private:
  MedianPool2DAttrs a_;
};

template <typename Device, typename T>
class MedianPool2DOp : public MedianPool2DBase {
 public:
  using MedianPool2DBase::MedianPool2DBase;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    PartialTensorShape y_shape;
    OP_REQUIRES_OK(ctx, ValidateMedianPool2DShapes(type_string(), attrs(), Partial(x.shape()), &y_shape));
    functor::MedianPool2DParams p;
    Geometry(x, &p);
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            0, TensorShape({p.batch, p.out_height, p.out_width, p.channels}), &y));
    if (y->NumElements() == 0) return;
    ComputeBuffers<Device, T> io(ctx);
    const ComputeType<T>* xs = nullptr;
    ComputeType<T>* ys = nullptr;
    OP_REQUIRES_OK(ctx, io.In(x, &xs));
    OP_REQUIRES_OK(ctx, io.Out(y, &ys));
    functor::MedianPool2D<Device, ComputeType<T>>()(ctx->eigen_device<Device>(), p, xs, ys);
    io.Finish();
  }
};

template <typename Device, typename T>
class MedianPool2DGradOp : public MedianPool2DBase {
 public:
  using MedianPool2DBase::MedianPool2DBase;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& dy = ctx->input(1);
    OP_REQUIRES_OK(ctx, ValidateMedianPool2DGradShapes(type_string(), attrs(), Partial(x.shape()),
                                                       Partial(dy.shape())));
    functor::MedianPool2DParams p;
    Geometry(x, &p);
    Tensor* dx = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &dx));
    if (dx->NumElements() == 0) return;
    Tensor argmedian;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(DT_INT64, TensorShape({dy.NumElements()}), &argmedian));
    ComputeBuffers<Device, T> io(ctx);
    const ComputeType<T>* xs = nullptr;
    const ComputeType<T>* dys = nullptr;
    ComputeType<T>* dxs = nullptr;
    OP_REQUIRES_OK(ctx, io.In(x, &xs));
    OP_REQUIRES_OK(ctx, io.In(dy, &dys));
    OP_REQUIRES_OK(ctx, io.Out(dx, &dxs));
    functor::MedianPool2DGrad<Device, ComputeType<T>>()(ctx->eigen_device<Device>(), p, xs, dys,
                                                        argmedian.flat<int64_t>().data(), dxs);
    io.Finish();
  }
};

// half: computed in float and rounded (compute_buffers.h); the median is one of the inputs, so
// exact.
TF_EXT_REGISTER_CPU_GPU_KERNEL("TfExt>MedianPool2D", MedianPool2DOp, Eigen::half);
TF_EXT_REGISTER_CPU_GPU_KERNEL("TfExt>MedianPool2D", MedianPool2DOp, float);
TF_EXT_REGISTER_CPU_GPU_KERNEL("TfExt>MedianPool2D", MedianPool2DOp, double);
TF_EXT_REGISTER_CPU_GPU_KERNEL("TfExt>MedianPool2DGrad", MedianPool2DGradOp, Eigen::half);
TF_EXT_REGISTER_CPU_GPU_KERNEL("TfExt>MedianPool2DGrad", MedianPool2DGradOp, float);
TF_EXT_REGISTER_CPU_GPU_KERNEL("TfExt>MedianPool2DGrad", MedianPool2DGradOp, double);

}  // namespace tensorflow::tf_ext
