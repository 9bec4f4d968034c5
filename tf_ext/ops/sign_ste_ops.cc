// TfExt>SignSTE and its backward op TfExt>SignSTEGrad: registration and shape functions.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tf_ext/ops/op_checks.h"
#include "tf_ext/ops/sign_ste_ops.h"

namespace tensorflow::tf_ext {

absl::Status ValidateSignSTEAttrs(std::string_view op_type, const AttrSlice& attrs,
                                  SignSTEAttrs* out) {
  TF_RETURN_IF_ERROR(ReadAttr(op_type, attrs, "clip", &out->clip));
  // ReadAttr flushed a denormal to a signed zero, so -1e-45 is accepted as -0 (== 0) in every
  // mode, as the kernel has always seen it.
  if (!(std::isfinite(out->clip) && out->clip >= 0)) {
    return OpInvalid(op_type, "clip must be finite and >= 0, got ", out->clip);
  }
  out->clip = std::fabs(out->clip);  // -0 -> +0
  return absl::OkStatus();
}

absl::Status ValidateSignSTEGradShapes(std::string_view op_type, const PartialTensorShape& d_y,
                                       const PartialTensorShape& x) {
  return CheckCompatible(op_type, "d_y", d_y, x, "x's shape");
}

REGISTER_OP("TfExt>SignSTE")
    .Input("x: T")
    .Output("y: T")
    .Attr("T: {half, float, double}")
    .Attr("clip: float = 1.0")
    .SetShapeFn([](shape_inference::InferenceContext* c) -> absl::Status {
      TF_RETURN_IF_ERROR(ShapeFnValidAttrs(c, "TfExt>SignSTE", ValidateSignSTEAttrs).status());
      return shape_inference::UnchangedShape(c);
    })
    .Doc(R"doc(
Sign with a straight-through gradient estimator (binarised networks).

x: any shape.
y: sign(x) like TensorFlow's Sign: -1, 0 or 1 (a zero keeps its sign bit, NaN stays NaN; a
  denormal, which CPU kernels see as zero, gives a zero of its sign, as tf.sign does).
clip: finite, >= 0 after flushing denormals to zero. The gradient is d(x) = d(y) where |x| <= clip, else 0 (also 0 at NaN).
)doc");

REGISTER_OP("TfExt>SignSTEGrad")
    .Input("d_y: T")
    .Input("x: T")
    .Output("d_x: T")
    .Attr("T: {half, float, double}")
    .Attr("clip: float = 1.0")
    .SetShapeFn([](shape_inference::InferenceContext* c) -> absl::Status {
      constexpr char kOp[] = "TfExt>SignSTEGrad";
      TF_RETURN_IF_ERROR(ShapeFnValidAttrs(c, kOp, ValidateSignSTEAttrs).status());
      TF_RETURN_IF_ERROR(ValidateSignSTEGradShapes(kOp, InputShape(c, 0), InputShape(c, 1)));
      shape_inference::ShapeHandle d_x;
      TF_RETURN_IF_ERROR(c->Merge(c->input(0), c->input(1), &d_x));
      c->set_output(0, d_x);
      return absl::OkStatus();
    })
    .Doc(R"doc(
Backward pass of TfExt>SignSTE, the straight-through estimator, as one kernel.

d_y: gradient of the forward output y; the same shape as x.
x: the forward input.
d_x: d_y where |x| <= clip, else +0 (NaN x gives 0; an inf or NaN d_y outside the band gives 0
  too). x is compared after the CPU kernels' denormal flush, in T (a half compares against
  clip rounded to half).
clip: the forward's clip.
)doc");

}  // namespace tensorflow::tf_ext
