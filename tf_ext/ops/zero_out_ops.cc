// TfExt>ZeroOut: registration and shape function.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tensorflow::tf_ext {

REGISTER_OP("TfExt>ZeroOut")
    .Input("to_zero: T")
    .Output("zeroed: T")
    .Attr("T: {float, double, int32}")
    .Attr("preserve_index: int >= 0 = 0")
    .SetShapeFn([](shape_inference::InferenceContext* c) -> absl::Status {
      // When the element count is known statically, reject an out-of-range index at graph
      // construction time as well as in the kernel.
      int64_t preserve_index = 0;
      TF_RETURN_IF_ERROR(c->GetAttr("preserve_index", &preserve_index));
      shape_inference::ShapeHandle in = c->input(0);
      if (c->RankKnown(in)) {
        shape_inference::DimensionHandle n = c->NumElements(in);
        if (c->ValueKnown(n) && preserve_index >= c->Value(n)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "TfExt>ZeroOut: preserve_index ", preserve_index,
              " must be < the number of elements of to_zero (", c->Value(n), ")"));
        }
      }
      return shape_inference::UnchangedShape(c);
    })
    .Doc(R"doc(
Zeroes every element of `to_zero` except the one at flat index `preserve_index`.

to_zero: any shape; must have more than `preserve_index` elements (so an empty tensor is
  rejected: there is nothing to preserve).
zeroed: same shape and type as `to_zero`.
preserve_index: flat (row-major) index of the element that keeps its value.
)doc");

}  // namespace tensorflow::tf_ext
