// TfExt>SignSTE: registration and shape function.
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

}  // namespace tensorflow::tf_ext
