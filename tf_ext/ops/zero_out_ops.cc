// TfExt>ZeroOut: registration and shape function.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tf_ext/ops/op_checks.h"
#include "tf_ext/ops/zero_out_ops.h"

namespace tensorflow::tf_ext {

absl::Status ValidateZeroOutAttrs(std::string_view op_type, const AttrSlice& attrs,
                                  ZeroOutAttrs* out) {
  TF_RETURN_IF_ERROR(ReadAttr(op_type, attrs, "preserve_index", &out->preserve_index));
  if (out->preserve_index < 0) {
    return OpInvalid(op_type, "preserve_index must be >= 0, got ", out->preserve_index);
  }
  return absl::OkStatus();
}

absl::Status ValidateZeroOutShapes(std::string_view op_type, const ZeroOutAttrs& a,
                                   const PartialTensorShape& to_zero) {
  if (!to_zero.IsFullyDefined()) return absl::OkStatus();
  if (a.preserve_index >= to_zero.num_elements()) {
    return OpInvalid(op_type, "preserve_index ", a.preserve_index,
                     " must be < the number of elements of to_zero (", to_zero.num_elements(),
                     "); to_zero has shape ", to_zero.DebugString());
  }
  return absl::OkStatus();
}

REGISTER_OP("TfExt>ZeroOut")
    .Input("to_zero: T")
    .Output("zeroed: T")
    .Attr("T: {float, double, int32}")
    .Attr("preserve_index: int >= 0 = 0")
    .SetShapeFn([](shape_inference::InferenceContext* c) -> absl::Status {
      TF_ASSIGN_OR_RETURN(const ZeroOutAttrs a,
                          ShapeFnValidAttrs(c, "TfExt>ZeroOut", ValidateZeroOutAttrs));
      TF_RETURN_IF_ERROR(ValidateZeroOutShapes("TfExt>ZeroOut", a, InputShape(c, 0)));
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
