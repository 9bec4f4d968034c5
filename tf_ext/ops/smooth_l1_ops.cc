// TfExt>SmoothL1: registration, shape function and the op's one validation.
#include <cmath>

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tf_ext/ops/op_checks.h"
#include "tf_ext/ops/smooth_l1_ops.h"

namespace tensorflow::tf_ext {

absl::Status ValidateSmoothL1Attrs(std::string_view op_type, const AttrSlice& attrs,
                                   SmoothL1Attrs* out) {
  // ReadAttr flushes a denormal delta to zero, which is then rejected in every mode alike.
  TF_RETURN_IF_ERROR(ReadAttr(op_type, attrs, "delta", &out->delta));
  if (!(std::isfinite(out->delta) && out->delta > 0)) {
    return OpInvalid(op_type, "delta must be finite and > 0 (denormals count as 0), got ",
                     out->delta);
  }
  return absl::OkStatus();
}

REGISTER_OP("TfExt>SmoothL1")
    .Input("x: T")
    .Output("y: T")
    .Attr("T: {half, float, double}")
    .Attr("delta: float = 1.0")
    .SetShapeFn([](shape_inference::InferenceContext* c) -> absl::Status {
      TF_RETURN_IF_ERROR(ShapeFnValidAttrs(c, "TfExt>SmoothL1", ValidateSmoothL1Attrs).status());
      return shape_inference::UnchangedShape(c);
    })
    .Doc(R"doc(
Elementwise smooth L1 (Huber) penalty, as in Fast R-CNN's box regression loss.

x: any shape.
y: 0.5 * x^2 / delta where |x| < delta, else |x| - 0.5 * delta (NaN stays NaN). half is
  computed in float.
delta: finite, > 0 (after flushing denormals to zero). The gradient is
  d(x) = d(y) * clip(x / delta, -1, 1).
)doc");

}  // namespace tensorflow::tf_ext
