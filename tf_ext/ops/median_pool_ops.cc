// TfExt>MedianPool2D and its backward op TfExt>MedianPool2DGrad: registration and shape
// functions.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/padding.h"
#include "tf_ext/ops/median_pool_geometry.h"
#include "tf_ext/ops/median_pool_ops.h"
#include "tf_ext/ops/op_checks.h"

namespace tensorflow::tf_ext {

namespace {

constexpr char kMedianPool2D[] = "TfExt>MedianPool2D";
constexpr char kMedianPool2DGrad[] = "TfExt>MedianPool2DGrad";

absl::Status ReadWindowAttr(std::string_view op, const AttrSlice& attrs, const char* name,
                            int64_t out[2]) {
  std::vector<int64_t> v;
  TF_RETURN_IF_ERROR(ReadAttr(op, attrs, name, &v));
  // The int32 bound keeps every window computation far from int64 overflow.
  bool ok = v.size() == 2;
  for (int64_t e : v) ok = ok && e >= 1 && e <= std::numeric_limits<int32_t>::max();
  if (!ok) {
    return OpInvalid(op, name, " must be 2 values [height, width], each in [1, 2^31-1], got [",
                     absl::StrJoin(v, ", "), "]");
  }
  out[0] = v[0];
  out[1] = v[1];
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateMedianPool2DAttrs(std::string_view op, const AttrSlice& attrs,
                                       MedianPool2DAttrs* out) {
  TF_RETURN_IF_ERROR(ReadWindowAttr(op, attrs, "ksize", out->ksize));
  TF_RETURN_IF_ERROR(ReadWindowAttr(op, attrs, "strides", out->strides));
  std::string padding;
  TF_RETURN_IF_ERROR(ReadAttr(op, attrs, "padding", &padding));
  if (padding != "SAME" && padding != "VALID") {
    return OpInvalid(op, "padding must be SAME or VALID, got ", padding);
  }
  out->same = padding == "SAME";
  return absl::OkStatus();
}

absl::Status ValidateMedianPool2DShapes(std::string_view op, const MedianPool2DAttrs& a,
                                        const PartialTensorShape& x, PartialTensorShape* y) {
  TF_RETURN_IF_ERROR(CheckRank(op, "x", x, 4, "NHWC"));
  std::vector<int64_t> dims = {DimOf(x, 0), -1, -1, DimOf(x, 3)};
  int64_t window = 1;  // largest number of in-image elements of a window
  bool window_known = true;
  for (int i = 0; i < 2; ++i) {
    const int64_t in = DimOf(x, 1 + i);
    if (in < 0) {
      window_known = false;
      continue;
    }
    int64_t pad = 0;
    MedianPoolOutputSize(in, a.ksize[i], a.strides[i], a.same, &dims[1 + i], &pad);
    // Both factors < 2^31 after min(), so the product cannot overflow.
    window *= std::min(a.ksize[i], in);
  }
  if (window_known && window > kMaxMedianPoolWindowElements) {
    return OpInvalid(op, "a window would hold ", window,
                     " in-image elements; at most 2^32-1 are supported (ksize [", a.ksize[0],
                     ", ", a.ksize[1], "], x shape ", x.DebugString(), ")");
  }
  TF_RETURN_IF_ERROR(MakeShape(op, "y", dims, y));
  if (window_known && y->IsFullyDefined()) {
    int64_t visits = 0;
    if (__builtin_mul_overflow(y->num_elements(), window, &visits) ||
        visits > kMaxMedianPoolWindowVisits) {
      return OpInvalid(op, "too much work: ", y->num_elements(), " outputs of windows of up to ",
                       window, " elements exceed the cap of 2^36 element visits (ksize [",
                       a.ksize[0], ", ", a.ksize[1], "], strides [", a.strides[0], ", ",
                       a.strides[1], "], x shape ", x.DebugString(), ")");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateMedianPool2DGradShapes(std::string_view op, const MedianPool2DAttrs& a,
                                            const PartialTensorShape& x,
                                            const PartialTensorShape& dy) {
  PartialTensorShape y;
  TF_RETURN_IF_ERROR(ValidateMedianPool2DShapes(op, a, x, &y));
  return CheckCompatible(op, "d_y", dy, y, "the forward output's shape");
}

namespace {

using shape_inference::InferenceContext;

absl::Status MedianPool2DShapeFn(InferenceContext* c) {
  TF_ASSIGN_OR_RETURN(const MedianPool2DAttrs a,
                      ShapeFnValidAttrs(c, kMedianPool2D, ValidateMedianPool2DAttrs));
  PartialTensorShape y;
  TF_RETURN_IF_ERROR(ValidateMedianPool2DShapes(kMedianPool2D, a, InputShape(c, 0), &y));
  return SetOutputShape(c, 0, y);
}

absl::Status MedianPool2DGradShapeFn(InferenceContext* c) {
  TF_ASSIGN_OR_RETURN(const MedianPool2DAttrs a,
                      ShapeFnValidAttrs(c, kMedianPool2DGrad, ValidateMedianPool2DAttrs));
  TF_RETURN_IF_ERROR(
      ValidateMedianPool2DGradShapes(kMedianPool2DGrad, a, InputShape(c, 0), InputShape(c, 1)));
  // dx has x's shape; x is 4-D (validated above), so an unknown-rank x still gives rank 4.
  shape_inference::ShapeHandle dx;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &dx));
  c->set_output(0, dx);
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("TfExt>MedianPool2D")
    .Input("x: T")
    .Output("y: T")
    .Attr("T: {half, float, double}")
    .Attr("ksize: list(int)")
    .Attr("strides: list(int)")
    .Attr(GetPaddingAttrString())
    .SetShapeFn(MedianPool2DShapeFn)
    .Doc(R"doc(
Median pooling over NHWC images: each output is the lower median of its window's in-image
elements (padding never counts), so it is always one of the input values.

x: [batch, height, width, channels].
y: [batch, out_height, out_width, channels]; sizes follow MaxPool (VALID: ceil((in-k+1)/s), or
  0 when the window is larger than the image, giving an empty output; SAME: ceil(in/s)).
ksize: [window_height, window_width], each in [1, 2^31-1]. Windows are clipped to the image;
  outputs times the largest clipped window must stay <= 2^36 (a cost check, rejected up front).
strides: [stride_height, stride_width], each in [1, 2^31-1].
padding: SAME pads (with nothing: padded places are skipped) as MaxPool does; VALID does not.
The window is sorted stably by value (equal values keep row-major window order, NaN sorts
after every number) and its element of rank (count-1)/2 is taken: the median, or the lower of
the two middle values for an even count. The gradient routes d(y) to exactly that element
(see TfExt>MedianPool2DGrad).
)doc");

REGISTER_OP("TfExt>MedianPool2DGrad")
    .Input("x: T")
    .Input("d_y: T")
    .Output("d_x: T")
    .Attr("T: {half, float, double}")
    .Attr("ksize: list(int)")
    .Attr("strides: list(int)")
    .Attr(GetPaddingAttrString())
    .SetShapeFn(MedianPool2DGradShapeFn)
    .Doc(R"doc(
Backward pass of TfExt>MedianPool2D: d_x = scatter-add of d_y onto each window's median
element (recomputed from x with the forward's tie and NaN rules).

x: the forward input, [batch, height, width, channels].
d_y: gradient of the forward output, [batch, out_height, out_width, channels].
d_x: like x.
)doc");

}  // namespace tensorflow::tf_ext
