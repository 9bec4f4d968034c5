// The XlaOpKernels of every tf_ext op but TfExt>GradientFunctionDef (its manifest entry says
// why): each validates its attrs at construction and its static shapes at compile time with the
// op's own validation functions (ops/*.h), so a bad attr or shape fails the compile with the
// CPU kernel's message, then builds the op's lowering (lowerings.h). One file for all of them:
// xla_op_kernel.h takes most of a minute to compile, the lowerings only need xla_builder.h.
#include <cstdint>
#include <utility>

#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tf_ext/ops/gradient_reversal_ops.h"
#include "tf_ext/ops/median_pool_ops.h"
#include "tf_ext/ops/op_checks.h"
#include "tf_ext/ops/roi_ops.h"
#include "tf_ext/ops/sign_ste_ops.h"
#include "tf_ext/ops/smooth_l1_ops.h"
#include "tf_ext/ops/zero_out_ops.h"
#include "tf_ext/xla/lowerings.h"
#include "tf_ext/xla/xla_registration.h"

namespace tensorflow::tf_ext {

namespace {

// Output i from a lowering, or the lowering's error as the compile's status.
void SetOutput(XlaOpKernelContext* ctx, int i, absl::StatusOr<xla::XlaOp> lowered) {
  OP_REQUIRES_OK(ctx, lowered.status());
  ctx->SetOutput(i, *std::move(lowered));
}

// A kernel whose attrs struct A is read by the op's validation function at construction.
template <typename A, absl::Status (*kValidate)(std::string_view, const AttrSlice&, A*)>
class XlaKernelWithAttrs : public XlaOpKernel {
 public:
  explicit XlaKernelWithAttrs(OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, kValidate(ctx->def().op(), AttrSlice(ctx->def()), &attrs_));
  }

 protected:
  A attrs_;
};

class ZeroOutXlaOp : public XlaKernelWithAttrs<ZeroOutAttrs, ValidateZeroOutAttrs> {
 public:
  using XlaKernelWithAttrs::XlaKernelWithAttrs;
  void Compile(XlaOpKernelContext* ctx) override {
    OP_REQUIRES_OK(ctx, ValidateZeroOutShapes(type_string(), attrs_, Partial(ctx->InputShape(0))));
    SetOutput(ctx, 0, lowering::ZeroOut(ctx->Input(0), attrs_.preserve_index));
  }
};

class SmoothL1XlaOp : public XlaKernelWithAttrs<SmoothL1Attrs, ValidateSmoothL1Attrs> {
 public:
  using XlaKernelWithAttrs::XlaKernelWithAttrs;
  void Compile(XlaOpKernelContext* ctx) override {
    SetOutput(ctx, 0, lowering::SmoothL1(ctx->Input(0), attrs_.delta));
  }
};

class SignSTEXlaOp : public XlaKernelWithAttrs<SignSTEAttrs, ValidateSignSTEAttrs> {
 public:
  using XlaKernelWithAttrs::XlaKernelWithAttrs;
  void Compile(XlaOpKernelContext* ctx) override {
    SetOutput(ctx, 0, lowering::SignSTE(ctx->Input(0)));
  }
};

class SignSTEGradXlaOp : public XlaKernelWithAttrs<SignSTEAttrs, ValidateSignSTEAttrs> {
 public:
  using XlaKernelWithAttrs::XlaKernelWithAttrs;
  void Compile(XlaOpKernelContext* ctx) override {
    OP_REQUIRES_OK(ctx, ValidateSignSTEGradShapes(type_string(), Partial(ctx->InputShape(0)),
                                                  Partial(ctx->InputShape(1))));
    SetOutput(ctx, 0, lowering::SignSTEGrad(ctx->Input(0), ctx->Input(1), attrs_.clip));
  }
};

// The identity: XLA passes the input through (the gradient is the stock ops' -scale * d(y)).
class GradientReversalXlaOp
    : public XlaKernelWithAttrs<GradientReversalAttrs, ValidateGradientReversalAttrs> {
 public:
  using XlaKernelWithAttrs::XlaKernelWithAttrs;
  void Compile(XlaOpKernelContext* ctx) override { ctx->SetOutput(0, ctx->Input(0)); }
};

class MedianPool2DXlaBase
    : public XlaKernelWithAttrs<MedianPool2DAttrs, ValidateMedianPool2DAttrs> {
 public:
  using XlaKernelWithAttrs::XlaKernelWithAttrs;

 protected:
  functor::MedianPool2DParams Geometry(const TensorShape& x) const {
    const int64_t dims[4] = {x.dim_size(0), x.dim_size(1), x.dim_size(2), x.dim_size(3)};
    return functor::MedianPool2DGeometry(dims, attrs_.ksize, attrs_.strides, attrs_.same);
  }
};

class MedianPool2DXlaOp : public MedianPool2DXlaBase {
 public:
  using MedianPool2DXlaBase::MedianPool2DXlaBase;
  void Compile(XlaOpKernelContext* ctx) override {
    PartialTensorShape y;
    OP_REQUIRES_OK(ctx, ValidateMedianPool2DShapes(type_string(), attrs_,
                                                   Partial(ctx->InputShape(0)), &y));
    SetOutput(ctx, 0, lowering::MedianPool2D(ctx->Input(0), Geometry(ctx->InputShape(0))));
  }
};

class MedianPool2DGradXlaOp : public MedianPool2DXlaBase {
 public:
  using MedianPool2DXlaBase::MedianPool2DXlaBase;
  void Compile(XlaOpKernelContext* ctx) override {
    OP_REQUIRES_OK(ctx, ValidateMedianPool2DGradShapes(type_string(), attrs_,
                                                       Partial(ctx->InputShape(0)),
                                                       Partial(ctx->InputShape(1))));
    SetOutput(ctx, 0, lowering::MedianPool2DGrad(ctx->Input(0), ctx->Input(1),
                                                 Geometry(ctx->InputShape(0))));
  }
};

// The ROI ops' attrs in their functor's shape struct, completed from an image tensor's shape
// [N, H, W, C] and the rois' [R, 5].
template <typename Shape, typename A>
Shape RoiGeometry(const A& attrs, const TensorShape& image, const TensorShape& rois) {
  Shape s;
  s.pooled_height = attrs.pooled_height;
  s.pooled_width = attrs.pooled_width;
  s.spatial_scale = attrs.spatial_scale;
  s.batch = image.dim_size(0);
  s.height = image.dim_size(1);
  s.width = image.dim_size(2);
  s.channels = image.dim_size(3);
  s.num_rois = rois.dim_size(0);
  return s;
}

functor::RoiPoolShape RoiShapeOf(const RoiPoolAttrs& attrs, const TensorShape& data,
                                 const TensorShape& rois) {
  return RoiGeometry<functor::RoiPoolShape>(attrs, data, rois);
}

functor::PsRoiAlignShape RoiShapeOf(const PsRoiAlignAttrs& attrs, const TensorShape& features,
                                    const TensorShape& rois) {
  auto s = RoiGeometry<functor::PsRoiAlignShape>(attrs, features, rois);
  s.sampling_ratio = attrs.sampling_ratio;
  s.output_channels = s.channels / (s.pooled_height * s.pooled_width);
  return s;
}

template <typename A, absl::Status (*kValidate)(std::string_view, const AttrSlice&, A*)>
class RoiXlaBase : public XlaKernelWithAttrs<A, kValidate> {
 public:
  using XlaKernelWithAttrs<A, kValidate>::XlaKernelWithAttrs;

 protected:
  // The lowering's shape struct from inputs 0 (the image) and 1 (the rois).
  auto Shape(XlaOpKernelContext* ctx) const {
    return RoiShapeOf(this->attrs_, ctx->InputShape(0), ctx->InputShape(1));
  }
};

using RoiPoolXlaBase = RoiXlaBase<RoiPoolAttrs, ValidateRoiPoolAttrs>;
using PsRoiAlignXlaBase = RoiXlaBase<PsRoiAlignAttrs, ValidatePsRoiAlignAttrs>;

class RoiPoolXlaOp : public RoiPoolXlaBase {
 public:
  using RoiPoolXlaBase::RoiPoolXlaBase;
  void Compile(XlaOpKernelContext* ctx) override {
    PartialTensorShape pooled;
    OP_REQUIRES_OK(ctx, ValidateRoiPoolShapes(type_string(), attrs_, Partial(ctx->InputShape(0)),
                                              Partial(ctx->InputShape(1)), &pooled));
    auto lowered = lowering::RoiPool(ctx->Input(0), ctx->Input(1),
                                     Shape(ctx));
    OP_REQUIRES_OK(ctx, lowered.status());
    ctx->SetOutput(0, lowered->first);
    ctx->SetOutput(1, lowered->second);
  }
};

class RoiPoolGradXlaOp : public RoiPoolXlaBase {
 public:
  using RoiPoolXlaBase::RoiPoolXlaBase;
  void Compile(XlaOpKernelContext* ctx) override {
    OP_REQUIRES_OK(ctx, ValidateRoiPoolGradShapes(
                            type_string(), attrs_, Partial(ctx->InputShape(0)),
                            Partial(ctx->InputShape(1)), Partial(ctx->InputShape(2)),
                            Partial(ctx->InputShape(3))));
    SetOutput(ctx, 0, lowering::RoiPoolGrad(ctx->Input(1), ctx->Input(2), ctx->Input(3),
                                            Shape(ctx)));
  }
};

class PsRoiAlignXlaOp : public PsRoiAlignXlaBase {
 public:
  using PsRoiAlignXlaBase::PsRoiAlignXlaBase;
  void Compile(XlaOpKernelContext* ctx) override {
    PartialTensorShape output;
    OP_REQUIRES_OK(ctx, ValidatePsRoiAlignShapes(type_string(), attrs_,
                                                 Partial(ctx->InputShape(0)),
                                                 Partial(ctx->InputShape(1)), &output));
    SetOutput(ctx, 0, lowering::PsRoiAlign(ctx->Input(0), ctx->Input(1),
                                           Shape(ctx)));
  }
};

class PsRoiAlignGradXlaOp : public PsRoiAlignXlaBase {
 public:
  using PsRoiAlignXlaBase::PsRoiAlignXlaBase;
  void Compile(XlaOpKernelContext* ctx) override {
    OP_REQUIRES_OK(ctx, ValidatePsRoiAlignGradShapes(type_string(), attrs_,
                                                     Partial(ctx->InputShape(0)),
                                                     Partial(ctx->InputShape(1)),
                                                     Partial(ctx->InputShape(2))));
    SetOutput(ctx, 0, lowering::PsRoiAlignGrad(ctx->Input(1), ctx->Input(2),
                                               Shape(ctx)));
  }
};

}  // namespace

TF_EXT_XLA_KERNEL("TfExt>ZeroOut", ZeroOutXlaOp);
TF_EXT_XLA_KERNEL("TfExt>SmoothL1", SmoothL1XlaOp);
TF_EXT_XLA_KERNEL("TfExt>SignSTE", SignSTEXlaOp);
TF_EXT_XLA_KERNEL("TfExt>SignSTEGrad", SignSTEGradXlaOp);
TF_EXT_XLA_KERNEL("TfExt>GradientReversal", GradientReversalXlaOp);
TF_EXT_XLA_KERNEL("TfExt>MedianPool2D", MedianPool2DXlaOp);
TF_EXT_XLA_KERNEL("TfExt>MedianPool2DGrad", MedianPool2DGradXlaOp);
TF_EXT_XLA_KERNEL("TfExt>RoiPool", RoiPoolXlaOp);
TF_EXT_XLA_KERNEL("TfExt>RoiPoolGrad", RoiPoolGradXlaOp);
TF_EXT_XLA_KERNEL("TfExt>PsRoiAlign", PsRoiAlignXlaOp);
TF_EXT_XLA_KERNEL("TfExt>PsRoiAlignGrad", PsRoiAlignGradXlaOp);

}  // namespace tensorflow::tf_ext
