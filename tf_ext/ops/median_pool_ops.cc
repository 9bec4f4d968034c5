// TfExt>MedianPool2D and its backward op TfExt>MedianPool2DGrad: registration and shape
// functions.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/padding.h"
#include "tf_ext/kernels/median_pool_functor.h"

namespace tensorflow::tf_ext {
namespace {

using shape_inference::DimensionHandle;
using shape_inference::InferenceContext;
using shape_inference::ShapeHandle;

// The same attr rules as the kernels (median_pool_op.cc), so bad graphs fail at construction.
absl::Status CheckWindowAttr(const std::string& op, const char* name,
                             const std::vector<int64_t>& v) {
  bool ok = v.size() == 2;
  for (int64_t e : v) ok = ok && e >= 1 && e <= INT32_MAX;
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": ", name, " must be 2 values [height, width], each in [1, 2^31-1], got [",
                   absl::StrJoin(v, ", "), "]"));
}

// out = [N, out_h, out_w, C] of x (rank 4, NHWC) under the op's attrs.
absl::Status PooledShape(InferenceContext* c, const std::string& op, ShapeHandle x,
                         ShapeHandle* out) {
  std::vector<int64_t> ksize, strides;
  std::string padding;
  TF_RETURN_IF_ERROR(c->GetAttr("ksize", &ksize));
  TF_RETURN_IF_ERROR(c->GetAttr("strides", &strides));
  TF_RETURN_IF_ERROR(c->GetAttr("padding", &padding));
  TF_RETURN_IF_ERROR(CheckWindowAttr(op, "ksize", ksize));
  TF_RETURN_IF_ERROR(CheckWindowAttr(op, "strides", strides));
  if (c->RankKnown(x) && c->Rank(x) != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": x must have rank 4 (NHWC), got shape ", c->DebugString(x)));
  }
  TF_RETURN_IF_ERROR(c->WithRank(x, 4, &x));
  std::vector<DimensionHandle> dims = {c->Dim(x, 0), c->UnknownDim(), c->UnknownDim(),
                                       c->Dim(x, 3)};
  for (int i = 0; i < 2; ++i) {
    DimensionHandle in = c->Dim(x, 1 + i);
    if (!c->ValueKnown(in)) continue;
    int64_t size = 0, pad = 0;
    functor::MedianPoolOutputSize(c->Value(in), ksize[i], strides[i], padding == "SAME", &size,
                                  &pad);
    dims[1 + i] = c->MakeDim(size);
  }
  *out = c->MakeShape(dims);
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("TfExt>MedianPool2D")
    .Input("x: T")
    .Output("y: T")
    .Attr("T: {float, double}")
    .Attr("ksize: list(int)")
    .Attr("strides: list(int)")
    .Attr(GetPaddingAttrString())
    .SetShapeFn([](InferenceContext* c) -> absl::Status {
      ShapeHandle y;
      TF_RETURN_IF_ERROR(PooledShape(c, "TfExt>MedianPool2D", c->input(0), &y));
      c->set_output(0, y);
      return absl::OkStatus();
    })
    .Doc(R"doc(
Median pooling over NHWC images: each output is the lower median of its window's in-image
elements (padding never counts), so it is always one of the input values.

x: [batch, height, width, channels].
y: [batch, out_height, out_width, channels]; sizes follow MaxPool (VALID: ceil((in-k+1)/s), or
  0 when the window is larger than the image, giving an empty output; SAME: ceil(in/s)).
ksize: [window_height, window_width], each >= 1.
strides: [stride_height, stride_width], each >= 1.
padding: SAME pads (with nothing: padded places are skipped) as MaxPool does; VALID does not.
The window is sorted stably by value (equal values keep row-major window order, NaN sorts
after every number) and its element of rank (count-1)/2 is taken: the median, or the lower of
the two middle values for an even count. The gradient routes d(y) to exactly that element
(see TfExt>MedianPool2DGrad).
)doc");

REGISTER_OP("TfExt>MedianPool2DGrad")
    .Input("x: T")
    .Input("dy: T")
    .Output("dx: T")
    .Attr("T: {float, double}")
    .Attr("ksize: list(int)")
    .Attr("strides: list(int)")
    .Attr(GetPaddingAttrString())
    .SetShapeFn([](InferenceContext* c) -> absl::Status {
      const std::string op = "TfExt>MedianPool2DGrad";
      ShapeHandle y, dy;
      TF_RETURN_IF_ERROR(PooledShape(c, op, c->input(0), &y));
      if (!c->Merge(y, c->input(1), &dy).ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            op, ": dy must have the forward output's shape ", c->DebugString(y), ", got ",
            c->DebugString(c->input(1))));
      }
      ShapeHandle x;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &x));
      c->set_output(0, x);
      return absl::OkStatus();
    })
    .Doc(R"doc(
Backward pass of TfExt>MedianPool2D: dx = scatter-add of dy onto each window's median element
(recomputed from x with the forward's tie and NaN rules).

x: the forward input, [batch, height, width, channels].
dy: gradient of the forward output, [batch, out_height, out_width, channels].
dx: like x.
)doc");

}  // namespace tensorflow::tf_ext
