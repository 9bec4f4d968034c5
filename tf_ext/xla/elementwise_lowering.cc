// XLA lowerings of the elementwise ops: ZeroOut, SmoothL1, SignSTE and SignSTEGrad (see
// lowerings.h). GradientReversal's forward is the identity (its kernel in xla_kernels.cc).
#include <cstdint>
#include <cstring>
#include <limits>

#include "tf_ext/kernels/gpu/half_body.h"
#include "tf_ext/xla/lowering_util.h"
#include "tf_ext/xla/lowerings.h"
#include "xla/hlo/builder/lib/constants.h"
#include "xla/shape.h"
#include "xla/shape_util.h"

namespace tensorflow::tf_ext::lowering {

using xla::XlaOp;

absl::StatusOr<XlaOp> ZeroOut(XlaOp to_zero, int64_t preserve_index) {
  xla::XlaBuilder* b = to_zero.builder();
  TF_ASSIGN_OR_RETURN(xla::Shape shape, b->GetShape(to_zero));
  const int64_t n = xla::ShapeUtil::ElementsIn(shape);
  const xla::PrimitiveType index_type =
      n <= std::numeric_limits<int32_t>::max() ? xla::S32 : xla::S64;
  XlaOp flat = xla::Reshape(to_zero, {n});
  XlaOp keep = xla::Eq(xla::Iota(b, index_type, n), IntConst(b, index_type, preserve_index));
  return xla::Reshape(xla::Select(keep, flat, xla::ZerosLike(flat)), shape.dimensions());
}

absl::StatusOr<XlaOp> SmoothL1(XlaOp x, float delta) {
  xla::XlaBuilder* b = x.builder();
  TF_ASSIGN_OR_RETURN(xla::Shape shape, b->GetShape(x));
  const xla::PrimitiveType type = shape.element_type();
  const xla::PrimitiveType acc = ComputeTypeOf(type);
  XlaOp v = Widen(x, type);
  const double d_value = acc == xla::F64 ? static_cast<double>(delta) : delta;
  const double half_d = acc == xla::F64 ? 0.5 * d_value : static_cast<double>(0.5f * delta);
  // The divisor stays a division (OpaqueScalar); |x| as the kernel takes it (v < 0 ? -v : v),
  // which keeps a NaN's sign where Abs would clear it.
  XlaOp d = OpaqueScalar(b, acc, d_value);
  XlaOp a = xla::Select(xla::Lt(v, xla::ZerosLike(v)), xla::Neg(v), v);
  XlaOp inside = xla::Div(xla::Mul(xla::Mul(xla::ScalarLike(v, 0.5), v), v), d);
  XlaOp outside = xla::Sub(a, xla::ScalarLike(v, half_d));
  return Narrow(xla::Select(xla::Lt(a, d), inside, outside), type);
}

absl::StatusOr<XlaOp> SignSTE(XlaOp x) {
  xla::XlaBuilder* b = x.builder();
  TF_ASSIGN_OR_RETURN(xla::Shape shape, b->GetShape(x));
  const FloatLayout l = LayoutOf(shape.element_type());
  const xla::PrimitiveType k = l.bits_type;
  // half has no denormal flush (its kernels widen it to float): any nonzero magnitude is +-1.
  const int64_t smallest_one = shape.element_type() == xla::F16 ? 1 : l.min_normal;
  XlaOp bits = xla::BitcastConvertType(x, k);
  XlaOp magnitude = xla::And(bits, IntConst(b, k, l.magnitude));
  XlaOp sign = xla::Xor(bits, magnitude);
  XlaOp r = xla::Select(xla::Ge(magnitude, IntConst(b, k, smallest_one)),
                        xla::Or(sign, IntConst(b, k, l.one)), sign);
  XlaOp out = xla::Select(xla::Gt(magnitude, IntConst(b, k, l.inf)), bits, r);
  return xla::BitcastConvertType(out, shape.element_type());
}

absl::StatusOr<XlaOp> SignSTEGrad(XlaOp d_y, XlaOp x, float clip) {
  xla::XlaBuilder* b = x.builder();
  TF_ASSIGN_OR_RETURN(xla::Shape shape, b->GetShape(x));
  const xla::PrimitiveType type = shape.element_type();
  const FloatLayout l = LayoutOf(type);
  const xla::PrimitiveType k = l.bits_type;
  // clip as the kernel holds it (static_cast<T>), as bits: for a non-negative clip,
  // |x| <= clip is magnitude(x) <= bits(clip), NaN's magnitude exceeding every finite clip's.
  int64_t clip_bits;
  if (type == xla::F16) {
    clip_bits = gpu::FloatToHalfBits(clip);
  } else if (type == xla::F64) {
    const double c = clip;
    std::memcpy(&clip_bits, &c, sizeof(c));
  } else {
    uint32_t c;
    std::memcpy(&c, &clip, sizeof(c));
    clip_bits = c;
  }
  XlaOp magnitude = xla::And(xla::BitcastConvertType(x, k), IntConst(b, k, l.magnitude));
  if (type != xla::F16) {  // the kernels see a denormal x as zero
    magnitude = xla::Select(xla::Lt(magnitude, IntConst(b, k, l.min_normal)),
                            xla::ZerosLike(magnitude), magnitude);
  }
  return xla::Select(xla::Le(magnitude, IntConst(b, k, clip_bits)), d_y, xla::ZerosLike(d_y));
}

}  // namespace tensorflow::tf_ext::lowering
