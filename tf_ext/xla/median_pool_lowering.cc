// XLA lowering of MedianPool2D and MedianPool2DGrad (see lowerings.h).
//
// Every window position (slot) that some output's window can reach is a strided slice of the
// input, padded so that out-of-image slots hold OrderedKeyHigh; a slot's key is the CPU
// kernel's order key. Up to kMaxNetworkSlots slots, the CPU kernel's own comparator network
// (median_pool_functor.h, MedianNetwork) selects the median key, out-of-image slots split into
// low and high keys so that the network's rank is the window's rank (m-1)/2; a row-major scan
// then picks the element of that key and rank among equals, which is exactly the CPU kernel's
// element. Larger windows sort the slot keys (with the slot as the tie-break) instead.
//
// The gradient loops over the slots, from the last to the first, adding d_y of the outputs whose
// median is that slot at the slot's place in the input grid: for any input element that is
// output-pixel order, the CPU kernel's order, so the sums are its sums bit for bit. No scatter,
// no dot.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "tf_ext/xla/lowering_util.h"
#include "tf_ext/xla/lowerings.h"
#include "xla/hlo/builder/lib/arithmetic.h"
#include "xla/hlo/builder/lib/constants.h"
#include "xla/hlo/builder/lib/loops.h"
#include "xla/shape.h"
#include "xla/shape_util.h"

namespace tensorflow::tf_ext::lowering {

namespace {

using xla::XlaOp;
namespace mpi = functor::median_pool_internal;

// The window offsets d in [lo, lo + count) along one axis that put some output's window
// element inside the image; the input padded by pad_low before (pad_high after; negative:
// cropped) so that slot t of output o is padded element o * stride + t.
struct AxisSlots {
  int64_t lo = 0, count = 0, pad_low = 0, pad_high = 0, padded = 0;
};

AxisSlots SlotsOf(int64_t in, int64_t out, int64_t window, int64_t stride, int64_t pad_before) {
  AxisSlots a;
  a.lo = std::max<int64_t>(0, pad_before - (out - 1) * stride);
  const int64_t hi = std::min<int64_t>(window, pad_before + in);
  a.count = hi - a.lo;
  a.pad_low = pad_before - a.lo;
  a.padded = (out - 1) * stride + a.count;
  a.pad_high = a.padded - a.pad_low - in;
  return a;
}

struct Slots {
  AxisSlots h, w;
  int64_t count() const { return h.count * w.count; }
};

Slots SlotsOf(const functor::MedianPool2DParams& p) {
  return {SlotsOf(p.in_height, p.out_height, p.window_height, p.stride_height, p.pad_top),
          SlotsOf(p.in_width, p.out_width, p.window_width, p.stride_width, p.pad_left)};
}

// Slot t = (th, tw) of a padded [N, Hp, Wp, C] tensor: [N, out_h, out_w, C].
XlaOp SlotSlice(XlaOp padded, const functor::MedianPool2DParams& p, int64_t th, int64_t tw) {
  return xla::Slice(padded, {0, th, tw, 0},
                    {p.batch, th + (p.out_height - 1) * p.stride_height + 1,
                     tw + (p.out_width - 1) * p.stride_width + 1, p.channels},
                    {1, p.stride_height, p.stride_width, 1});
}

XlaOp PadSpatial(XlaOp x, XlaOp value, const Slots& s) {
  xla::PaddingConfig config;
  for (int d = 0; d < 4; ++d) {
    auto* dim = config.add_dimensions();
    if (d == 1) {
      dim->set_edge_padding_low(s.h.pad_low);
      dim->set_edge_padding_high(s.h.pad_high);
    } else if (d == 2) {
      dim->set_edge_padding_low(s.w.pad_low);
      dim->set_edge_padding_high(s.w.pad_high);
    }
  }
  return xla::Pad(x, value, config);
}

// The in-image elements of each output's window, m, as S32 [N, out_h, out_w, C].
XlaOp WindowCounts(xla::XlaBuilder* b, const functor::MedianPool2DParams& p) {
  auto axis = [b](int64_t in, int64_t out, int64_t k, int64_t s, int64_t pad) {
    XlaOp start = xla::Sub(xla::Mul(xla::Iota(b, xla::S64, out), IntConst(b, xla::S64, s)),
                           IntConst(b, xla::S64, pad));
    // min(start + k, in) without forming start + k (k may be near 2^31).
    XlaOp end = xla::Select(xla::Ge(IntConst(b, xla::S64, k), xla::Sub(IntConst(b, xla::S64, in), start)),
                            xla::FullLike(start, in), xla::Add(start, IntConst(b, xla::S64, k)));
    return xla::Sub(end, xla::Max(start, xla::ZerosLike(start)));
  };
  XlaOp rows = axis(p.in_height, p.out_height, p.window_height, p.stride_height, p.pad_top);
  XlaOp cols = axis(p.in_width, p.out_width, p.window_width, p.stride_width, p.pad_left);
  const std::vector<int64_t> dims = {p.batch, p.out_height, p.out_width, p.channels};
  XlaOp m = xla::Mul(xla::BroadcastInDim(rows, dims, {1}), xla::BroadcastInDim(cols, dims, {2}));
  return xla::ConvertElementType(m, xla::S32);
}

// Each output's median: the chosen slot (S32) and the bits of its element.
struct Choice {
  XlaOp slot, bits;
};

Choice NetworkChoice(const std::vector<XlaOp>& keys, const std::vector<XlaOp>& bits, XlaOp m,
                     xla::PrimitiveType k) {
  xla::XlaBuilder* b = m.builder();
  const int n = static_cast<int>(keys.size());
  const mpi::SelectionNetwork net = mpi::MedianNetwork(n);
  // Out-of-image slots (key high): the first `low` of them become low keys, so that the
  // network's rank (n-1)/2 is the window's rank (m-1)/2 (median_pool_functor.h, SelectBlock).
  XlaOp high = IntConst(b, k, OrderedKeyHigh(k));
  XlaOp half_m = xla::Div(xla::Sub(m, IntConst(b, xla::S32, 1)), IntConst(b, xla::S32, 2));
  XlaOp low = xla::Sub(IntConst(b, xla::S32, net.target), half_m);
  std::vector<XlaOp> slot(n);
  XlaOp pads_before = xla::ZerosLike(m);
  for (int t = 0; t < n; ++t) {
    XlaOp is_pad = xla::Eq(keys[t], high);
    XlaOp make_low = xla::And(is_pad, xla::Lt(pads_before, low));
    slot[t] = xla::Select(make_low, xla::FullLike(keys[t], OrderedKeyLow(k)), keys[t]);
    pads_before = xla::Add(pads_before, xla::ConvertElementType(is_pad, xla::S32));
  }
  for (const auto& [a, c] : net.pairs) {
    XlaOp lo = xla::Min(slot[a], slot[c]);
    slot[c] = xla::Max(slot[a], slot[c]);
    slot[a] = lo;
  }
  const XlaOp median = slot[net.target];
  // The stable sort's element of rank (m-1)/2 is the (rank - #smaller)-th element with the
  // median key in row-major order.
  XlaOp smaller = xla::ZerosLike(m);
  for (int t = 0; t < n; ++t) {
    smaller = xla::Add(smaller, xla::ConvertElementType(xla::Lt(keys[t], median), xla::S32));
  }
  XlaOp wanted = xla::Sub(half_m, smaller);
  XlaOp seen = xla::ZerosLike(m);
  Choice choice{xla::ZerosLike(m), xla::ZerosLike(bits[0])};
  for (int t = 0; t < n; ++t) {
    XlaOp equal = xla::Eq(keys[t], median);
    XlaOp hit = xla::And(equal, xla::Eq(seen, wanted));
    choice.slot = xla::Select(hit, xla::FullLike(m, t), choice.slot);
    choice.bits = xla::Select(hit, bits[t], choice.bits);
    seen = xla::Add(seen, xla::ConvertElementType(equal, xla::S32));
  }
  return choice;
}

absl::StatusOr<Choice> SortChoice(const std::vector<XlaOp>& keys, const std::vector<XlaOp>& bits,
                                  XlaOp m, xla::PrimitiveType k) {
  xla::XlaBuilder* b = m.builder();
  const int64_t n = static_cast<int64_t>(keys.size());
  TF_ASSIGN_OR_RETURN(xla::Shape shape, b->GetShape(m));
  std::vector<int64_t> dims(shape.dimensions().begin(), shape.dimensions().end());
  std::vector<int64_t> one = dims;
  one.push_back(1);
  dims.push_back(n);
  std::vector<XlaOp> key_parts, bit_parts;
  for (int64_t t = 0; t < n; ++t) {
    key_parts.push_back(xla::Reshape(keys[t], one));
    bit_parts.push_back(xla::Reshape(bits[t], one));
  }
  const int64_t last = static_cast<int64_t>(dims.size()) - 1;
  XlaOp all_keys = xla::ConcatInDim(b, key_parts, last);
  XlaOp all_bits = xla::ConcatInDim(b, bit_parts, last);
  XlaOp slot_index = xla::Iota(b, xla::ShapeUtil::MakeShape(xla::S32, dims), last);
  // (key, slot) lexicographic: a strict total order, so the sort's result is unique.
  xla::XlaBuilder cmp("median_slot_order");
  auto scalar = [&](xla::PrimitiveType t, int i, const char* name) {
    return xla::Parameter(&cmp, i, xla::ShapeUtil::MakeShape(t, {}), name);
  };
  XlaOp ka = scalar(k, 0, "ka"), kb = scalar(k, 1, "kb");
  XlaOp sa = scalar(xla::S32, 2, "sa"), sb = scalar(xla::S32, 3, "sb");
  xla::Or(xla::Lt(ka, kb), xla::And(xla::Eq(ka, kb), xla::Lt(sa, sb)));
  TF_ASSIGN_OR_RETURN(xla::XlaComputation order, cmp.Build());
  XlaOp sorted = xla::Sort({all_keys, slot_index}, order, last);
  XlaOp sorted_slot = xla::GetTupleElement(sorted, 1);
  XlaOp rank = xla::Div(xla::Sub(m, IntConst(b, xla::S32, 1)), IntConst(b, xla::S32, 2));
  auto pick = [&](XlaOp values, XlaOp position, xla::PrimitiveType type) {
    XlaOp at = xla::Eq(slot_index, xla::BroadcastInDim(position, dims, {0, 1, 2, 3}));
    return xla::Reduce(xla::Select(at, values, xla::ZerosLike(values)), IntConst(b, type, 0),
                       xla::CreateScalarOrComputation(type, b), {last});
  };
  Choice choice;
  choice.slot = pick(sorted_slot, rank, xla::S32);
  TF_ASSIGN_OR_RETURN(xla::Shape bits_shape, b->GetShape(bits[0]));
  choice.bits = pick(all_bits, choice.slot, bits_shape.element_type());
  return choice;
}

absl::StatusOr<Choice> ChooseMedians(XlaOp x, const functor::MedianPool2DParams& p,
                                     const Slots& s) {
  xla::XlaBuilder* b = x.builder();
  TF_ASSIGN_OR_RETURN(xla::Shape shape, b->GetShape(x));
  const xla::PrimitiveType type = shape.element_type();
  const FloatLayout l = LayoutOf(type);
  XlaOp key = OrderedKey(Widen(x, type));
  TF_ASSIGN_OR_RETURN(xla::Shape key_shape, b->GetShape(key));
  const xla::PrimitiveType k = key_shape.element_type();
  XlaOp keys_padded = PadSpatial(key, IntConst(b, k, OrderedKeyHigh(k)), s);
  XlaOp bits_padded =
      PadSpatial(xla::BitcastConvertType(x, l.bits_type), IntConst(b, l.bits_type, 0), s);
  std::vector<XlaOp> keys, bits;
  for (int64_t th = 0; th < s.h.count; ++th) {
    for (int64_t tw = 0; tw < s.w.count; ++tw) {
      keys.push_back(SlotSlice(keys_padded, p, th, tw));
      bits.push_back(SlotSlice(bits_padded, p, th, tw));
    }
  }
  XlaOp m = WindowCounts(b, p);
  if (s.count() <= mpi::kMaxNetworkSlots) return NetworkChoice(keys, bits, m, k);
  return SortChoice(keys, bits, m, k);
}

// The gradient's padded input grid as blocks of the stride along each axis: window slot t of
// output o is padded element o * stride + t = (o + t / stride) * stride + t % stride, so one
// slot's outputs fill a dense [N, out_h, 1, out_w, 1, C] block of the [N, blocks_h, stride_h,
// blocks_w, stride_w, C] grid.
struct SumAxis {
  int64_t blocks = 0, stride = 1;
};

SumAxis SumAxisOf(int64_t out, int64_t stride, const AxisSlots& a, int64_t in) {
  const int64_t needed = std::max(a.padded, a.pad_low + in);
  SumAxis axis;
  axis.stride = stride;
  axis.blocks = std::max(out + (a.count - 1) / stride, (needed + stride - 1) / stride);
  return axis;
}

struct SumGrid {
  SumAxis h, w;
};

SumGrid SumGridOf(const functor::MedianPool2DParams& p, const Slots& s) {
  return {SumAxisOf(p.out_height, p.stride_height, s.h, p.in_height),
          SumAxisOf(p.out_width, p.stride_width, s.w, p.in_width)};
}

// One step of the gradient's loop over window slots, from the last slot to the first (for any
// input element that is output-pixel order, the CPU kernel's order, so the sums are its sums
// bit for bit): d_y of the outputs whose median is slot t, added at the slot's place. A loop
// rather than K unrolled placements: its state keeps the chosen slots in memory, where XLA
// would otherwise fuse the whole selection into every placement and compute it K times over.
absl::StatusOr<std::vector<XlaOp>> AddSlot(XlaOp i, absl::Span<const XlaOp> v,
                                           const functor::MedianPool2DParams& p, const Slots& s,
                                           xla::XlaBuilder* b) {
  const XlaOp sum = v[0], slot = v[1], dy = v[2];
  XlaOp t = xla::Sub(IntConst(b, xla::S32, s.count() - 1), i);
  XlaOp th = xla::Div(t, IntConst(b, xla::S32, s.w.count));
  XlaOp tw = xla::Rem(t, IntConst(b, xla::S32, s.w.count));
  XlaOp stride_h = IntConst(b, xla::S32, p.stride_height);
  XlaOp stride_w = IntConst(b, xla::S32, p.stride_width);
  XlaOp zero = IntConst(b, xla::S32, 0);
  const std::vector<XlaOp> start = {zero, xla::Div(th, stride_h), xla::Rem(th, stride_h),
                                    xla::Div(tw, stride_w), xla::Rem(tw, stride_w), zero};
  const std::vector<int64_t> block = {p.batch, p.out_height, 1, p.out_width, 1, p.channels};
  XlaOp part = xla::Reshape(xla::Select(xla::Eq(slot, t), dy,
                                        xla::ZerosLike(dy)),
                            block);
  XlaOp updated = xla::Add(xla::DynamicSlice(sum, start, block), part);
  return std::vector<XlaOp>{xla::DynamicUpdateSlice(sum, updated, start), slot, dy};
}

bool Empty(const functor::MedianPool2DParams& p) {
  return p.InputSize() == 0 || p.OutputSize() == 0;
}

}  // namespace

absl::StatusOr<XlaOp> MedianPool2D(XlaOp x, const functor::MedianPool2DParams& p) {
  xla::XlaBuilder* b = x.builder();
  TF_ASSIGN_OR_RETURN(xla::Shape shape, b->GetShape(x));
  const xla::PrimitiveType type = shape.element_type();
  if (Empty(p)) {
    return xla::Broadcast(xla::Zero(b, type), {p.batch, p.out_height, p.out_width, p.channels});
  }
  TF_ASSIGN_OR_RETURN(Choice choice, ChooseMedians(x, p, SlotsOf(p)));
  XlaOp y = xla::BitcastConvertType(choice.bits, type);
  return type == xla::F16 ? CanonicalHalfNaN(y) : y;
}

absl::StatusOr<XlaOp> MedianPool2DGrad(XlaOp x, XlaOp d_y, const functor::MedianPool2DParams& p) {
  xla::XlaBuilder* b = x.builder();
  TF_ASSIGN_OR_RETURN(xla::Shape shape, b->GetShape(x));
  const xla::PrimitiveType type = shape.element_type();
  if (Empty(p)) return xla::ZerosLike(x);
  const Slots s = SlotsOf(p);
  TF_ASSIGN_OR_RETURN(Choice choice, ChooseMedians(x, p, s));
  XlaOp dy = Widen(d_y, type);
  TF_ASSIGN_OR_RETURN(xla::Shape dy_shape, b->GetShape(dy));
  const SumGrid g = SumGridOf(p, s);
  XlaOp zeros = xla::Broadcast(xla::Zero(b, dy_shape.element_type()),
                               {p.batch, g.h.blocks, g.h.stride, g.w.blocks, g.w.stride, p.channels});
  TF_ASSIGN_OR_RETURN(std::vector<XlaOp> state,
                      xla::ForEachIndex(s.count(), xla::S32,
                                        [&](XlaOp i, absl::Span<const XlaOp> v, xla::XlaBuilder* lb)
                                            -> absl::StatusOr<std::vector<XlaOp>> {
                                          return AddSlot(i, v, p, s, lb);
                                        },
                                        {zeros, choice.slot, dy}, "median_pool_grad_slots", b));
  XlaOp sum = xla::Reshape(state[0], {p.batch, g.h.blocks * g.h.stride, g.w.blocks * g.w.stride,
                                      p.channels});
  XlaOp dx = xla::Slice(sum, {0, s.h.pad_low, s.w.pad_low, 0},
                        {p.batch, s.h.pad_low + p.in_height, s.w.pad_low + p.in_width, p.channels},
                        {1, 1, 1, 1});
  // The CPU kernel's sums start from +0, so none is -0.
  return Narrow(PositiveZeros(dx), type);
}

}  // namespace tensorflow::tf_ext::lowering
