#include "tf_ext/xla/lowering_util.h"

#include <limits>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "xla/hlo/builder/lib/arithmetic.h"
#include "xla/hlo/builder/lib/constants.h"
#include "xla/hlo/builder/lib/loops.h"
#include "xla/shape.h"
#include "xla/shape_util.h"

namespace tensorflow::tf_ext::lowering {

namespace {

using xla::XlaOp;

XlaOp Bits(XlaOp x, const FloatLayout& l) { return xla::BitcastConvertType(x, l.bits_type); }

// 2^e as a `type` scalar-shaped tensor like `e` (S32), from the exponent field: e must lie in
// the type's normal range.
XlaOp PowerOfTwo(XlaOp e, xla::PrimitiveType type) {
  xla::XlaBuilder* b = e.builder();
  const FloatLayout l = LayoutOf(type);
  const int64_t bias = (int64_t{1} << (l.width - l.mantissa_bits - 2)) - 1;
  XlaOp field = xla::ConvertElementType(xla::Add(e, IntConst(b, xla::S32, bias)), l.bits_type);
  return xla::BitcastConvertType(xla::ShiftLeft(field, IntConst(b, l.bits_type, l.mantissa_bits)),
                                 type);
}

xla::ScatterDimensionNumbers ScalarScatterDims() {
  xla::ScatterDimensionNumbers d;
  d.add_inserted_window_dims(0);
  d.add_scatter_dims_to_operand_dims(0);
  d.set_index_vector_dim(1);
  return d;
}

}  // namespace

FloatLayout LayoutOf(xla::PrimitiveType float_type) {
  switch (float_type) {
    case xla::F16:
      return {xla::S16, 16, 10, 0x7FFF, 0x0400, 0x7C00, 0x3C00};
    case xla::F64:
      return {xla::S64, 64, 52, 0x7FFFFFFFFFFFFFFF, 0x0010000000000000, 0x7FF0000000000000,
              0x3FF0000000000000};
    default:
      return {xla::S32, 32, 23, 0x7FFFFFFF, 0x00800000, 0x7F800000, 0x3F800000};
  }
}

XlaOp IntConst(xla::XlaBuilder* b, xla::PrimitiveType type, int64_t value) {
  return xla::ConstantR0WithType(b, type, value);
}

XlaOp OpaqueScalar(xla::XlaBuilder* b, xla::PrimitiveType type, double value) {
  return xla::OptimizationBarrier(xla::ConstantR0WithType(b, type, value));
}

XlaOp FlushDenormals(XlaOp x) {
  xla::XlaBuilder* b = x.builder();
  return b->ReportErrorOrReturn([&]() -> absl::StatusOr<XlaOp> {
    TF_ASSIGN_OR_RETURN(xla::Shape shape, b->GetShape(x));
    const FloatLayout l = LayoutOf(shape.element_type());
    XlaOp bits = Bits(x, l);
    XlaOp magnitude = xla::And(bits, IntConst(b, l.bits_type, l.magnitude));
    XlaOp sign = xla::Xor(bits, magnitude);
    XlaOp flushed = xla::Select(xla::Lt(magnitude, IntConst(b, l.bits_type, l.min_normal)),
                                sign, bits);
    return xla::BitcastConvertType(flushed, shape.element_type());
  });
}

int64_t OrderedKeyNaN(xla::PrimitiveType key_type) {
  return key_type == xla::S64 ? LayoutOf(xla::F64).inf + 1 : LayoutOf(xla::F32).inf + 1;
}
int64_t OrderedKeyLow(xla::PrimitiveType key_type) {
  return key_type == xla::S64 ? std::numeric_limits<int64_t>::min()
                              : std::numeric_limits<int32_t>::min();
}
int64_t OrderedKeyHigh(xla::PrimitiveType key_type) {
  return key_type == xla::S64 ? std::numeric_limits<int64_t>::max()
                              : std::numeric_limits<int32_t>::max();
}

XlaOp OrderedKey(XlaOp x) {
  xla::XlaBuilder* b = x.builder();
  return b->ReportErrorOrReturn([&]() -> absl::StatusOr<XlaOp> {
    TF_ASSIGN_OR_RETURN(xla::Shape shape, b->GetShape(x));
    const FloatLayout l = LayoutOf(shape.element_type());
    const xla::PrimitiveType k = l.bits_type;
    XlaOp bits = Bits(x, l);
    XlaOp magnitude = xla::And(bits, IntConst(b, k, l.magnitude));
    // A zero or denormal is +0 (the kernels add +0 under flush-to-zero); negative numbers get
    // their magnitude bits flipped, so the signed order of the keys is the order of the values.
    XlaOp zeroed = xla::Select(xla::Lt(magnitude, IntConst(b, k, l.min_normal)),
                               IntConst(b, k, 0), bits);
    XlaOp negative = xla::ShiftRightArithmetic(zeroed, IntConst(b, k, l.width - 1));
    XlaOp key = xla::Xor(zeroed, xla::And(negative, IntConst(b, k, l.magnitude)));
    return xla::Select(xla::Gt(magnitude, IntConst(b, k, l.inf)),
                       xla::Broadcast(IntConst(b, k, OrderedKeyNaN(k)), shape.dimensions()), key);
  });
}

XlaOp RoundToHalf(XlaOp f32) {
  xla::XlaBuilder* b = f32.builder();
  auto u = [b](int64_t v) { return IntConst(b, xla::U32, v); };
  XlaOp x = xla::BitcastConvertType(f32, xla::U32);
  XlaOp sign = xla::And(xla::ShiftRightLogical(x, u(16)), u(0x8000));
  XlaOp a = xla::And(x, u(0x7FFFFFFF));
  // >= 2^-14: a normal half; the rounding carry may reach the exponent (and inf) correctly.
  XlaOp rounded = xla::Add(xla::Add(a, u(0xFFF)), xla::And(xla::ShiftRightLogical(a, u(13)), u(1)));
  XlaOp normal = xla::ShiftRightLogical(xla::Sub(rounded, u(0x38000000)), u(13));
  // A half subnormal in units of 2^-24: the 24-bit mantissa shifted right by 126 - e (14..24),
  // rounded to nearest even.
  XlaOp e = xla::ShiftRightLogical(a, u(23));
  XlaOp m = xla::Or(xla::And(a, u(0x7FFFFF)), u(0x800000));
  XlaOp shift = xla::Sub(u(126), e);
  XlaOp q = xla::ShiftRightLogical(m, shift);
  XlaOp rem = xla::And(m, xla::Sub(xla::ShiftLeft(u(1), shift), u(1)));
  XlaOp halfway = xla::ShiftLeft(u(1), xla::Sub(shift, u(1)));
  XlaOp up = xla::Or(xla::Gt(rem, halfway),
                     xla::And(xla::Eq(rem, halfway), xla::Eq(xla::And(q, u(1)), u(1))));
  XlaOp subnormal = xla::Add(q, xla::Select(up, xla::FullLike(q, 1), xla::FullLike(q, 0)));
  XlaOp magnitude = xla::Select(
      xla::Gt(a, u(0x7F800000)), xla::FullLike(a, 0x7E00),
      xla::Select(xla::Ge(a, u(0x477FF000)), xla::FullLike(a, 0x7C00),
                  xla::Select(xla::Ge(a, u(0x38800000)), normal,
                              xla::Select(xla::Lt(a, u(0x33000000)), xla::FullLike(a, 0),
                                          subnormal))));
  XlaOp half_bits = xla::ConvertElementType(xla::Or(sign, magnitude), xla::U16);
  return xla::BitcastConvertType(half_bits, xla::F16);
}

XlaOp CanonicalHalfNaN(XlaOp f16) {
  xla::XlaBuilder* b = f16.builder();
  auto u = [b](int64_t v) { return IntConst(b, xla::U16, v); };
  XlaOp bits = xla::BitcastConvertType(f16, xla::U16);
  XlaOp nan = xla::Or(xla::And(bits, u(0x8000)), u(0x7E00));
  XlaOp out = xla::Select(xla::Gt(xla::And(bits, u(0x7FFF)), u(0x7C00)), nan, bits);
  return xla::BitcastConvertType(out, xla::F16);
}

xla::PrimitiveType ComputeTypeOf(xla::PrimitiveType type) {
  return type == xla::F16 ? xla::F32 : type;
}

XlaOp Widen(XlaOp x, xla::PrimitiveType type) {
  return type == xla::F16 ? xla::ConvertElementType(x, xla::F32) : x;
}

XlaOp Narrow(XlaOp x, xla::PrimitiveType type) {
  return type == xla::F16 ? RoundToHalf(x) : x;
}

XlaOp PositiveZeros(XlaOp x) {
  xla::XlaBuilder* b = x.builder();
  return b->ReportErrorOrReturn([&]() -> absl::StatusOr<XlaOp> {
    TF_ASSIGN_OR_RETURN(xla::Shape shape, b->GetShape(x));
    const FloatLayout l = LayoutOf(shape.element_type());
    XlaOp bits = Bits(x, l);
    XlaOp negative_zero = xla::Eq(bits, IntConst(b, l.bits_type, ~l.magnitude));
    return xla::BitcastConvertType(xla::Select(negative_zero, xla::ZerosLike(bits), bits),
                                   shape.element_type());
  });
}

int KeepsBitsBelowMax(int64_t max_terms) {
  int headroom = 0;
  while (headroom < 62 && (int64_t{1} << headroom) < max_terms) ++headroom;
  return 62 - headroom;
}

namespace {

int ExponentBits(const FloatLayout& l) { return l.width - 1 - l.mantissa_bits; }
int64_t AllOnes(const FloatLayout& l) { return (int64_t{1} << ExponentBits(l)) - 1; }

}  // namespace

ExactScatterSum::ExactScatterSum(xla::XlaBuilder* b, xla::PrimitiveType type, int64_t num_dest,
                                 int64_t max_terms)
    : b_(b), type_(type), num_dest_(num_dest), max_terms_(max_terms),
      keep_(KeepsBitsBelowMax(max_terms)) {}

absl::Status ExactScatterSum::Check() const {
  if (type_ != xla::F32 && type_ != xla::F64) {
    return absl::InternalError("ExactScatterSum: terms must be F32 or F64");
  }
  if (keep_ < 30) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a sum of up to ", max_terms_, " terms per element is too many for the XLA kernel's "
        "exact accumulation (64-bit fixed point keeps ", keep_, " bits)"));
  }
  return absl::OkStatus();
}

XlaOp ExactScatterSum::NoExponents() const {
  return xla::Broadcast(IntConst(b_, xla::S32, 0), {num_dest_ + 1});
}

XlaOp ExactScatterSum::NoTerms() const {
  return xla::Broadcast(IntConst(b_, xla::S64, 0), {num_dest_ + 1});
}

// [M, 1] scatter indices: dest, or the extra element num_dest (sliced off by Finish) for terms
// that add nothing, so no index is ever out of bounds.
XlaOp ExactScatterSum::Target(XlaOp dest) const {
  xla::XlaBuilder* b = dest.builder();
  return b->ReportErrorOrReturn([&]() -> absl::StatusOr<XlaOp> {
    TF_ASSIGN_OR_RETURN(xla::Shape shape, b->GetShape(dest));
    const xla::PrimitiveType t = shape.element_type();
    XlaOp in_range = xla::And(xla::Ge(dest, IntConst(b, t, 0)), xla::Lt(dest, IntConst(b, t, num_dest_)));
    return xla::Reshape(xla::Select(in_range, dest, xla::FullLike(dest, num_dest_)),
                        {shape.dimensions(0), 1});
  });
}

// The biased exponent field, S32: 0 for zeros and denormals, all ones for inf and NaN.
XlaOp ExactScatterSum::BiasedExponent(XlaOp values) const {
  xla::XlaBuilder* b = values.builder();
  const FloatLayout l = LayoutOf(type_);
  XlaOp magnitude = xla::And(Bits(values, l), IntConst(b, l.bits_type, l.magnitude));
  return xla::ConvertElementType(
      xla::ShiftRightLogical(magnitude, IntConst(b, l.bits_type, l.mantissa_bits)), xla::S32);
}

// The methods build in their operands' builder (a loop body's, for terms made in a loop).
XlaOp ExactScatterSum::NoteExponents(XlaOp exponents, XlaOp values, XlaOp dest) const {
  return xla::Scatter(exponents, Target(dest), BiasedExponent(values),
                      xla::CreateScalarMaxComputation(xla::S32, values.builder()),
                      ScalarScatterDims());
}

XlaOp ExactScatterSum::AddTerms(XlaOp sums, XlaOp exponents, XlaOp values, XlaOp dest) const {
  xla::XlaBuilder* b = values.builder();
  const FloatLayout l = LayoutOf(type_);
  const int64_t all_ones = AllOnes(l), bias = all_ones / 2;
  XlaOp target = Target(dest);
  xla::GatherDimensionNumbers gather_dims;
  gather_dims.add_collapsed_slice_dims(0);
  gather_dims.add_start_index_map(0);
  gather_dims.set_index_vector_dim(1);
  XlaOp element_max = xla::Gather(exponents, target, gather_dims, {1});
  // Term x 2^(keep - 1 - (E - bias)), E the element's largest exponent: every term's magnitude
  // stays below 2^keep, so max_terms of them stay below 2^62. Two factors, each in range.
  XlaOp s = xla::Sub(IntConst(b, xla::S32, keep_ - 1 + bias), element_max);
  XlaOp s1 = xla::ShiftRightArithmetic(s, IntConst(b, xla::S32, 1));
  XlaOp scaled = xla::Mul(xla::Mul(xla::ConvertElementType(values, xla::F64),
                                   PowerOfTwo(s1, xla::F64)),
                          PowerOfTwo(xla::Sub(s, s1), xla::F64));
  XlaOp fixed = xla::ConvertElementType(xla::RoundNearestEven(scaled), xla::S64);
  // An element with an inf or NaN term counts those instead: +inf 1, -inf 2^32, NaN both.
  XlaOp bits = Bits(values, l);
  XlaOp exponent = BiasedExponent(values);
  XlaOp is_nan = xla::Gt(xla::And(bits, IntConst(b, l.bits_type, l.magnitude)),
                         IntConst(b, l.bits_type, l.inf));
  XlaOp negative = xla::Lt(bits, IntConst(b, l.bits_type, 0));
  XlaOp special_term = xla::Select(
      xla::Eq(exponent, IntConst(b, xla::S32, all_ones)),
      xla::Select(is_nan, xla::FullLike(fixed, (int64_t{1} << 32) + 1),
                  xla::Select(negative, xla::FullLike(fixed, int64_t{1} << 32),
                              xla::FullLike(fixed, 1))),
      xla::ZerosLike(fixed));
  XlaOp normal_term = xla::Select(xla::Eq(exponent, IntConst(b, xla::S32, 0)),
                                  xla::ZerosLike(fixed), fixed);
  XlaOp term = xla::Select(xla::Eq(element_max, IntConst(b, xla::S32, all_ones)), special_term,
                           normal_term);
  return xla::Scatter(sums, target, term, xla::CreateScalarAddComputation(xla::S64, b),
                      ScalarScatterDims());
}

XlaOp ExactScatterSum::Finish(XlaOp sums, XlaOp exponents) const {
  xla::XlaBuilder* b = sums.builder();
  const FloatLayout l = LayoutOf(type_);
  const int64_t all_ones = AllOnes(l), bias = all_ones / 2;
  XlaOp sum = xla::Slice(sums, {0}, {num_dest_}, {1});
  XlaOp e = xla::Slice(exponents, {0}, {num_dest_}, {1});
  // One rounding (int64 -> type), then exact powers of two.
  XlaOp s = xla::Sub(IntConst(b, xla::S32, keep_ - 1 + bias), e);
  XlaOp s1 = xla::ShiftRightArithmetic(s, IntConst(b, xla::S32, 1));
  XlaOp finite = xla::Mul(xla::Mul(xla::ConvertElementType(sum, type_), PowerOfTwo(xla::Neg(s1), type_)),
                          PowerOfTwo(xla::Neg(xla::Sub(s, s1)), type_));
  XlaOp plus = xla::Gt(xla::And(sum, IntConst(b, xla::S64, 0xFFFFFFFF)), IntConst(b, xla::S64, 0));
  XlaOp minus = xla::Gt(xla::ShiftRightLogical(sum, IntConst(b, xla::S64, 32)),
                        IntConst(b, xla::S64, 0));
  XlaOp inf = xla::FullLike(finite, std::numeric_limits<double>::infinity());
  XlaOp special = xla::Select(xla::And(plus, minus),
                              xla::FullLike(finite, std::numeric_limits<double>::quiet_NaN()),
                              xla::Select(plus, inf, xla::Neg(inf)));
  return xla::Select(xla::Eq(e, IntConst(b, xla::S32, all_ones)), special, finite);
}

absl::StatusOr<XlaOp> DeterministicScatterSum(XlaOp values, XlaOp dest, int64_t num_dest,
                                              int64_t max_terms) {
  xla::XlaBuilder* b = values.builder();
  TF_ASSIGN_OR_RETURN(xla::Shape shape, b->GetShape(values));
  ExactScatterSum sum(b, shape.element_type(), num_dest, max_terms);
  TF_RETURN_IF_ERROR(sum.Check());
  XlaOp exponents = sum.NoteExponents(sum.NoExponents(), values, dest);
  return sum.Finish(sum.AddTerms(sum.NoTerms(), exponents, values, dest), exponents);
}

absl::StatusOr<std::vector<XlaOp>> CountedLoop(XlaOp trip_count, std::vector<XlaOp> state,
                                               const LoopBody& body, const char* name,
                                               xla::XlaBuilder* b) {
  std::vector<XlaOp> init = {IntConst(b, xla::S32, 0), trip_count};
  init.insert(init.end(), state.begin(), state.end());
  auto condition = [](absl::Span<const XlaOp> values,
                      xla::XlaBuilder*) -> absl::StatusOr<XlaOp> {
    return xla::Lt(values[0], values[1]);
  };
  auto step = [&body](absl::Span<const XlaOp> values,
                      xla::XlaBuilder* sub) -> absl::StatusOr<std::vector<XlaOp>> {
    TF_ASSIGN_OR_RETURN(std::vector<XlaOp> next, body(values[0], values.subspan(2), sub));
    std::vector<XlaOp> out = {xla::Add(values[0], IntConst(sub, xla::S32, 1)), values[1]};
    out.insert(out.end(), next.begin(), next.end());
    return out;
  };
  TF_ASSIGN_OR_RETURN(std::vector<XlaOp> result,
                      xla::WhileLoopHelper(condition, step, init, name, b));
  return std::vector<XlaOp>(result.begin() + 2, result.end());
}

absl::StatusOr<XlaOp> GatherRows(XlaOp table, XlaOp index) {
  xla::XlaBuilder* b = table.builder();
  TF_ASSIGN_OR_RETURN(xla::Shape table_shape, b->GetShape(table));
  TF_ASSIGN_OR_RETURN(xla::Shape index_shape, b->GetShape(index));
  const int64_t rank = index_shape.dimensions().size();
  xla::GatherDimensionNumbers dims;
  dims.add_offset_dims(rank);
  dims.add_collapsed_slice_dims(0);
  dims.add_start_index_map(0);
  dims.set_index_vector_dim(rank);
  return xla::Gather(table, index, dims, {1, table_shape.dimensions(1)});
}

}  // namespace tensorflow::tf_ext::lowering
