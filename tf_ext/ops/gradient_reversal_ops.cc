// TfExt>GradientReversal: registration and shape function.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tensorflow::tf_ext {

REGISTER_OP("TfExt>GradientReversal")
    .Input("x: T")
    .Output("y: T")
    .Attr("T: {half, float, double}")
    .Attr("scale: float = 1.0")
    .SetShapeFn([](shape_inference::InferenceContext* c) -> absl::Status {
      // Same rule as the kernel, so a bad scale fails at graph construction already.
      float scale = 0;
      TF_RETURN_IF_ERROR(c->GetAttr("scale", &scale));
      if (!std::isfinite(scale)) {
        return absl::InvalidArgumentError(
            absl::StrCat("TfExt>GradientReversal: scale must be finite, got ", scale));
      }
      return shape_inference::UnchangedShape(c);
    })
    .Doc(R"doc(
Identity forward, gradient multiplied by -scale (domain-adversarial training, Ganin & Lempitsky
2015). The output shares the input's buffer.

x: any shape.
y: x.
scale: finite. d(x) = -scale * d(y).
)doc");

}  // namespace tensorflow::tf_ext
