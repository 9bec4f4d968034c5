// TfExt>GradientReversal: registration and shape function.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tf_ext/ops/gradient_reversal_ops.h"
#include "tf_ext/ops/op_checks.h"

namespace tensorflow::tf_ext {

absl::Status ValidateGradientReversalAttrs(std::string_view op_type, const AttrSlice& attrs,
                                           GradientReversalAttrs* out) {
  TF_RETURN_IF_ERROR(ReadAttr(op_type, attrs, "scale", &out->scale));  // denormals flushed
  if (!std::isfinite(out->scale)) {
    return OpInvalid(op_type, "scale must be finite, got ", out->scale);
  }
  return absl::OkStatus();
}

REGISTER_OP("TfExt>GradientReversal")
    .Input("x: T")
    .Output("y: T")
    .Attr("T: {half, float, double}")
    .Attr("scale: float = 1.0")
    .SetShapeFn([](shape_inference::InferenceContext* c) -> absl::Status {
      TF_RETURN_IF_ERROR(
          ShapeFnValidAttrs(c, "TfExt>GradientReversal", ValidateGradientReversalAttrs).status());
      return shape_inference::UnchangedShape(c);
    })
    .Doc(R"doc(
Identity forward, gradient multiplied by -scale (domain-adversarial training, Ganin & Lempitsky
2015). The output shares the input's buffer.

x: any shape.
y: x.
scale: finite (a denormal counts as 0). d(x) = -scale * d(y).
)doc");

}  // namespace tensorflow::tf_ext
