// TfExt>SignSTE: registration and shape function.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tensorflow::tf_ext {

REGISTER_OP("TfExt>SignSTE")
    .Input("x: T")
    .Output("y: T")
    .Attr("T: {half, float, double}")
    .Attr("clip: float = 1.0")
    .SetShapeFn([](shape_inference::InferenceContext* c) -> absl::Status {
      // Same rule as the kernel, so a bad clip fails at graph construction already.
      float clip = 0;
      TF_RETURN_IF_ERROR(c->GetAttr("clip", &clip));
      if (!(std::isfinite(clip) && clip >= 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("TfExt>SignSTE: clip must be finite and >= 0, got ", clip));
      }
      return shape_inference::UnchangedShape(c);
    })
    .Doc(R"doc(
Sign with a straight-through gradient estimator (binarised networks).

x: any shape.
y: sign(x) like TensorFlow's Sign: -1, 0 or 1 (a zero keeps its sign bit, NaN stays NaN).
clip: finite, >= 0. The gradient is d(x) = d(y) where |x| <= clip, else 0 (also 0 at NaN).
)doc");

}  // namespace tensorflow::tf_ext
