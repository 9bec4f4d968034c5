// MedianPool2DOp<Device, T> and MedianPool2DGradOp<Device, T>: the OpKernels of
// TfExt>MedianPool2D and TfExt>MedianPool2DGrad.
#define EIGEN_USE_THREADS

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/register_types.h"
#include "tensorflow/core/framework/tensor.h"
#include "tf_ext/kernels/median_pool_functor.h"
#include "tf_ext/kernels/validation.h"

namespace tensorflow::tf_ext {

// Attrs and geometry shared by the forward and the backward kernel.
class MedianPool2DBase : public OpKernel {
 public:
  explicit MedianPool2DBase(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadWindowAttr(ctx, "ksize", &ksize_));
    OP_REQUIRES_OK(ctx, ReadWindowAttr(ctx, "strides", &strides_));
    std::string padding;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("padding", &padding));
    // The OpDef's enum admits only SAME and VALID; checked again so nothing else slips by.
    OP_REQUIRES(ctx, padding == "SAME" || padding == "VALID",
                OpError(ctx, "padding must be SAME or VALID, got ", padding));
    same_ = padding == "SAME";
  }

 protected:
  // Validates x (rank 4, NHWC) and fills the geometry for it.
  absl::Status Geometry(OpKernelContext* ctx, const Tensor& x,
                        functor::MedianPool2DParams* p) const {
    TF_RETURN_IF_ERROR(CheckRank(ctx, "x (NHWC)", x, 4));
    p->batch = x.dim_size(0);
    p->in_height = x.dim_size(1);
    p->in_width = x.dim_size(2);
    p->channels = x.dim_size(3);
    p->window_height = ksize_[0];
    p->window_width = ksize_[1];
    p->stride_height = strides_[0];
    p->stride_width = strides_[1];
    functor::MedianPoolOutputSize(p->in_height, ksize_[0], strides_[0], same_, &p->out_height,
                                  &p->pad_top);
    functor::MedianPoolOutputSize(p->in_width, ksize_[1], strides_[1], same_, &p->out_width,
                                  &p->pad_left);
    if (functor::median_pool_internal::MaxWindowElements(*p) >
        functor::median_pool_internal::kMaxWindowElements) {
      return OpError(ctx, "a window would hold ",
                     functor::median_pool_internal::MaxWindowElements(*p),
                     " in-image elements; at most 2^32-1 are supported (ksize [", ksize_[0], ", ",
                     ksize_[1], "], x shape ", x.shape().DebugString(), ")");
    }
    return absl::OkStatus();
  }

 private:
  static absl::Status ReadWindowAttr(OpKernelConstruction* ctx, const char* name,
                                     std::vector<int64_t>* v) {
    TF_RETURN_IF_ERROR(ctx->GetAttr(name, v));
    // The int32 bound keeps every window computation far from int64 overflow.
    bool ok = v->size() == 2;
    for (int64_t e : *v) ok = ok && e >= 1 && e <= INT32_MAX;
    if (ok) return absl::OkStatus();
    return OpError(ctx, name, " must be 2 values [height, width], each in [1, 2^31-1], got [",
                   absl::StrJoin(*v, ", "), "]");
  }

  std::vector<int64_t> ksize_, strides_;
  bool same_ = false;
};

template <typename Device, typename T>
class MedianPool2DOp : public MedianPool2DBase {
 public:
  using MedianPool2DBase::MedianPool2DBase;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    functor::MedianPool2DParams p;
    OP_REQUIRES_OK(ctx, Geometry(ctx, x, &p));
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            0, TensorShape({p.batch, p.out_height, p.out_width, p.channels}), &y));
    if (y->NumElements() == 0) return;
    functor::MedianPool2D<Device, T>()(ctx->eigen_device<Device>(), p, x.flat<T>().data(),
                                       y->flat<T>().data());
  }
};

template <typename Device, typename T>
class MedianPool2DGradOp : public MedianPool2DBase {
 public:
  using MedianPool2DBase::MedianPool2DBase;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& dy = ctx->input(1);
    functor::MedianPool2DParams p;
    OP_REQUIRES_OK(ctx, Geometry(ctx, x, &p));
    const TensorShape y_shape({p.batch, p.out_height, p.out_width, p.channels});
    OP_REQUIRES(ctx, dy.shape() == y_shape,
                OpError(ctx, "dy must have the forward output's shape ", y_shape.DebugString(),
                        " (x has shape ", x.shape().DebugString(), "), got ",
                        dy.shape().DebugString()));
    Tensor* dx = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &dx));
    if (dx->NumElements() == 0) return;
    Tensor argmedian;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(DT_INT64, TensorShape({dy.NumElements()}), &argmedian));
    functor::MedianPool2DGrad<Device, T>()(ctx->eigen_device<Device>(), p, x.flat<T>().data(),
                                           dy.flat<T>().data(), argmedian.flat<int64_t>().data(),
                                           dx->flat<T>().data());
  }
};

#define TF_EXT_REGISTER_MEDIAN_POOL_CPU(T)                                        \
  REGISTER_KERNEL_BUILDER(                                                       \
      Name("TfExt>MedianPool2D").Device(DEVICE_CPU).TypeConstraint<T>("T"),      \
      MedianPool2DOp<CPUDevice, T>);                                             \
  REGISTER_KERNEL_BUILDER(                                                       \
      Name("TfExt>MedianPool2DGrad").Device(DEVICE_CPU).TypeConstraint<T>("T"),  \
      MedianPool2DGradOp<CPUDevice, T>);
TF_EXT_REGISTER_MEDIAN_POOL_CPU(float);
TF_EXT_REGISTER_MEDIAN_POOL_CPU(double);
#undef TF_EXT_REGISTER_MEDIAN_POOL_CPU

}  // namespace tensorflow::tf_ext
