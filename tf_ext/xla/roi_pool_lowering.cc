// XLA lowering of RoiPool and RoiPoolGrad (see lowerings.h).
//
// RoiPool: the bin edges are the CPU kernel's (roi_pool_functor.h, RoiPoolBinWindow: the same
// float operations, a division kept a division), computed per ROI and bin row / column. A loop
// then visits window offset (dh, dw) of every bin at once, in row-major order, up to the
// largest bin's extent: each step gathers one pixel's channels per bin (rows of the image
// that exist by construction; offsets outside a bin are masked) and keeps it where its order
// key is strictly greater than the best so far, so the first maximum in row-major order wins
// and a NaN beats every number, as in the CPU kernel. Cost: (largest bin area) x bins x C
// element reads, against the CPU kernel's sum of bin areas x C (docs/xla.md).
//
// RoiPoolGrad: each entry of d_pooled goes to its bin's argmax; the sums are
// DeterministicScatterSum's (integer scatters only).
#include <cstdint>
#include <utility>
#include <vector>

#include "tf_ext/xla/lowering_util.h"
#include "tf_ext/xla/lowerings.h"
#include "tf_ext/xla/roi_lowering_util.h"
#include "xla/hlo/builder/lib/arithmetic.h"
#include "xla/hlo/builder/lib/constants.h"
#include "xla/shape.h"
#include "xla/shape_util.h"

namespace tensorflow::tf_ext::lowering {

namespace {

using xla::XlaOp;

// The clipped windows of every bin along one axis: start and end, S32 [R, pooled].
struct BinEdges {
  XlaOp start, end;
};

// roi_pool_functor.h's RoiPoolClip: NaN and negatives to 0, above `hi` to hi.
XlaOp Clip(XlaOp v, int64_t hi) {
  XlaOp positive = xla::Select(xla::Ge(v, xla::ZerosLike(v)), v, xla::ZerosLike(v));
  return xla::ConvertElementType(xla::Min(positive, xla::ScalarLike(v, static_cast<double>(hi))),
                                 xla::S32);
}

// RoiPoolBinWindow along one axis: lo / hi are the ROI's two corners (columns of rois),
// `pooled` bins, `size` pixels.
BinEdges Edges(XlaOp lo, XlaOp hi, float scale, int64_t num_rois, int64_t pooled, int64_t size) {
  xla::XlaBuilder* b = lo.builder();
  XlaOp first = xla::Round(xla::Mul(lo, xla::ScalarLike(lo, scale)));
  XlaOp last = xla::Round(xla::Mul(hi, xla::ScalarLike(hi, scale)));
  XlaOp extent = xla::Max(xla::Add(xla::Sub(last, first), xla::ScalarLike(lo, 1)),
                          xla::ScalarLike(lo, 1));
  XlaOp bin = xla::Div(extent, OpaqueScalar(b, xla::F32, static_cast<double>(pooled)));
  const std::vector<int64_t> dims = {num_rois, pooled};
  XlaOp index = xla::BroadcastInDim(xla::Iota(b, xla::F32, pooled), dims, {1});
  XlaOp bins = xla::BroadcastInDim(bin, dims, {0});
  XlaOp origin = xla::BroadcastInDim(first, dims, {0});
  XlaOp start = xla::Add(xla::Floor(xla::Mul(index, bins)), origin);
  XlaOp end = xla::Add(xla::Ceil(xla::Mul(xla::Add(index, xla::ScalarLike(index, 1)), bins)), origin);
  return {Clip(start, size), Clip(end, size)};
}

// The largest end - start over bins of accepted ROIs (0 if none), S32 scalar.
XlaOp LargestExtent(const BinEdges& e, XlaOp valid, int64_t num_rois, int64_t pooled) {
  xla::XlaBuilder* b = valid.builder();
  XlaOp extent = xla::Max(xla::Sub(e.end, e.start), xla::ZerosLike(e.start));
  extent = xla::Select(xla::BroadcastInDim(valid, {num_rois, pooled}, {0}), extent,
                       xla::ZerosLike(extent));
  return xla::Reduce(extent, IntConst(b, xla::S32, 0), xla::CreateScalarMaxComputation(xla::S32, b),
                     {0, 1});
}

}  // namespace

absl::StatusOr<std::pair<XlaOp, XlaOp>> RoiPool(XlaOp data, XlaOp rois,
                                                const functor::RoiPoolShape& s) {
  xla::XlaBuilder* b = data.builder();
  TF_ASSIGN_OR_RETURN(xla::Shape shape, b->GetShape(data));
  const xla::PrimitiveType type = shape.element_type();
  const FloatLayout l = LayoutOf(type);
  const int64_t R = s.num_rois, PH = s.pooled_height, PW = s.pooled_width, C = s.channels;
  const std::vector<int64_t> out_dims = {R, PH, PW, C};
  const int64_t pixels = s.batch * s.height * s.width;
  if (R * PH * PW * C == 0 || pixels == 0) {  // nothing to read: every bin is empty
    return std::make_pair(xla::Broadcast(xla::Zero(b, type), out_dims),
                          xla::Broadcast(IntConst(b, xla::S32, -1), out_dims));
  }
  const CheckedRois checked = CheckRois(rois, R, s.batch);
  const BinEdges rows = Edges(RoiColumn(rois, R, 2), RoiColumn(rois, R, 4), s.spatial_scale, R,
                              PH, s.height);
  const BinEdges cols = Edges(RoiColumn(rois, R, 1), RoiColumn(rois, R, 3), s.spatial_scale, R,
                              PW, s.width);
  XlaOp max_w = LargestExtent(cols, checked.valid, R, PW);
  XlaOp trips = xla::Mul(LargestExtent(rows, checked.valid, R, PH), max_w);
  const xla::PrimitiveType index_type = IndexTypeFor(pixels);
  XlaOp table = xla::Reshape(data, {pixels, C});
  const xla::PrimitiveType k = LayoutOf(ComputeTypeOf(type)).bits_type;  // OrderedKey's type
  std::vector<XlaOp> state = {
      xla::Broadcast(IntConst(b, k, OrderedKeyLow(k)), out_dims),      // best key
      xla::Broadcast(IntConst(b, l.bits_type, 0), out_dims),           // its bits
      xla::Broadcast(IntConst(b, xla::S32, -1), out_dims),             // its position
      table, rows.start, rows.end, cols.start, cols.end, checked.valid, checked.image, max_w};
  auto step = [&](XlaOp i, absl::Span<const XlaOp> v,
                  xla::XlaBuilder* sb) -> absl::StatusOr<std::vector<XlaOp>> {
    const XlaOp &best_key = v[0], &best_bits = v[1], &best_pos = v[2], &tab = v[3];
    XlaOp dh = xla::Div(i, v[10]), dw = xla::Rem(i, v[10]);
    XlaOp h = xla::Add(v[4], dh), w = xla::Add(v[6], dw);  // [R, PH], [R, PW]
    const std::vector<int64_t> bins = {R, PH, PW};
    XlaOp inside = xla::And(xla::BroadcastInDim(xla::Lt(h, v[5]), bins, {0, 1}),
                            xla::BroadcastInDim(xla::Lt(w, v[7]), bins, {0, 2}));
    inside = xla::And(inside, xla::BroadcastInDim(v[8], bins, {0}));
    XlaOp pos = xla::Add(xla::Mul(xla::BroadcastInDim(h, bins, {0, 1}), IntConst(sb, xla::S32, s.width)),
                         xla::BroadcastInDim(w, bins, {0, 2}));
    XlaOp row = xla::Add(
        xla::Mul(xla::BroadcastInDim(xla::ConvertElementType(v[9], index_type), bins, {0}),
                 IntConst(sb, index_type, s.height * s.width)),
        xla::ConvertElementType(pos, index_type));
    row = xla::Select(inside, row, xla::ZerosLike(row));  // a pixel that exists; masked below
    TF_ASSIGN_OR_RETURN(XlaOp value, GatherRows(tab, row));
    XlaOp key = OrderedKey(Widen(value, type));
    XlaOp take = xla::And(xla::BroadcastInDim(inside, out_dims, {0, 1, 2}),
                          xla::Or(xla::Eq(best_pos, IntConst(sb, xla::S32, -1)), xla::Gt(key, best_key)));
    std::vector<XlaOp> next(v.begin(), v.end());
    next[0] = xla::Select(take, key, best_key);
    next[1] = xla::Select(take, xla::BitcastConvertType(value, l.bits_type), best_bits);
    next[2] = xla::Select(take, xla::BroadcastInDim(pos, out_dims, {0, 1, 2}), best_pos);
    return next;
  };
  TF_ASSIGN_OR_RETURN(std::vector<XlaOp> result, CountedLoop(trips, state, step, "roi_pool", b));
  XlaOp pooled = xla::BitcastConvertType(result[1], type);  // 0 for an empty bin
  if (type == xla::F16) pooled = CanonicalHalfNaN(pooled);
  return std::make_pair(pooled, result[2]);
}

absl::StatusOr<XlaOp> RoiPoolGrad(XlaOp rois, XlaOp argmax, XlaOp d_pooled,
                                  const functor::RoiPoolShape& s) {
  xla::XlaBuilder* b = rois.builder();
  TF_ASSIGN_OR_RETURN(xla::Shape shape, b->GetShape(d_pooled));
  const xla::PrimitiveType type = shape.element_type();
  const int64_t R = s.num_rois, C = s.channels, HW = s.height * s.width;
  const int64_t elements = s.batch * HW * C;
  const std::vector<int64_t> in_dims = {s.batch, s.height, s.width, C};
  const int64_t terms = R * s.pooled_height * s.pooled_width * C;
  if (elements == 0 || terms == 0) return xla::Broadcast(xla::Zero(b, type), in_dims);
  const CheckedRois checked = CheckRois(rois, R, s.batch);
  const xla::PrimitiveType index_type = IndexTypeFor(elements);
  const std::vector<int64_t> dims = {R, s.pooled_height, s.pooled_width, C};
  XlaOp image = xla::BroadcastInDim(xla::ConvertElementType(checked.image, index_type), dims, {0});
  XlaOp channel = xla::Iota(b, xla::ShapeUtil::MakeShape(index_type, dims), 3);
  XlaOp at = xla::ConvertElementType(argmax, index_type);
  XlaOp dest = xla::Add(xla::Mul(xla::Add(xla::Mul(image, IntConst(b, index_type, HW)), at),
                                 IntConst(b, index_type, C)),
                        channel);
  XlaOp adds = xla::And(xla::BroadcastInDim(checked.valid, dims, {0}),
                        xla::And(xla::Ge(argmax, IntConst(b, xla::S32, 0)),
                                 xla::Lt(argmax, IntConst(b, xla::S32, HW))));
  dest = xla::Select(adds, dest, xla::FullLike(dest, -1));
  // Every entry of one channel of one image can land on the same element: at most R * PH * PW.
  TF_ASSIGN_OR_RETURN(XlaOp sum, DeterministicScatterSum(
                                     xla::Reshape(Widen(d_pooled, type), {terms}),
                                     xla::Reshape(dest, {terms}), elements,
                                     R * s.pooled_height * s.pooled_width));
  return Narrow(xla::Reshape(sum, in_dims), type);
}

}  // namespace tensorflow::tf_ext::lowering
