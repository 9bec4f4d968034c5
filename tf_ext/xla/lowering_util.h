// Building blocks of tf_ext's XLA lowerings (tf_ext/xla/*_lowering.cc): HLO written with
// XLA's client builder only (no TensorFlow), so that every op's lowering is device-independent
// code that XLA compiles for each backend.
//
// The rules they follow (docs/xla.md, "Semantics"):
//   - Selections (sign, median, max) work on integer keys made from the IEEE bits, not on
//     float comparisons: the results are those of the CPU kernels, which run with denormals
//     flushed (a denormal compares as a zero of its sign, -0 equals +0, NaN sorts above +inf),
//     on every backend whether or not it flushes denormals itself.
//   - A division by an attr stays a division: XLA's simplifier rewrites x / c with a constant c
//     as x * (1 / c), which rounds differently from the kernels (OpaqueScalar).
//   - Half results that the kernels compute in float are rounded by RoundToHalf, the kernels'
//     own integer rounding (kernels/gpu/half_body.h), NaN included.
//   - Sums that scatter (the ROI gradients) go through DeterministicScatterSum: integer
//     accumulation, so their result does not depend on the order in which a backend applies
//     the updates (XLA's floating-point scatter-add is a serial loop on the CPU and atomic
//     adds on GPUs). No lowering uses a floating-point scatter, a dot or a convolution;
//     tests/python/test_xla.py reads the optimized HLO of each op to hold that.
// Tests: tests/python/test_xla.py (every op against its CPU kernel), tests/xla_lowering_test.cc
// (DeterministicScatterSum and RoundToHalf against the host functions, exhaustively for half).
#ifndef TF_EXT_XLA_LOWERING_UTIL_H_
#define TF_EXT_XLA_LOWERING_UTIL_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "xla/hlo/builder/xla_builder.h"
#include "xla/xla_data.pb.h"

namespace tensorflow::tf_ext::lowering {

// The IEEE layout of a floating-point type, as integers of its width.
struct FloatLayout {
  xla::PrimitiveType bits_type;  // the same-width signed integer type (S16, S32, S64)
  int width;                     // 16, 32, 64
  int mantissa_bits;             // 10, 23, 52
  int64_t magnitude;             // every bit but the sign
  int64_t min_normal;            // bits of the smallest normal number
  int64_t inf;                   // bits of +inf
  int64_t one;                   // bits of 1.0
};
FloatLayout LayoutOf(xla::PrimitiveType float_type);

// A constant of integer type `type` (value truncated to its width).
xla::XlaOp IntConst(xla::XlaBuilder* b, xla::PrimitiveType type, int64_t value);

// A floating-point scalar of type `type` that XLA's simplifier cannot treat as a constant (an
// optimization barrier's result), for divisors: x / c stays an IEEE division.
xla::XlaOp OpaqueScalar(xla::XlaBuilder* b, xla::PrimitiveType type, double value);

// `x` (F32 or F64) with every denormal replaced by a zero of its sign, on the bits: what the
// CPU kernels see, on every backend.
xla::XlaOp FlushDenormals(xla::XlaOp x);

// The CPU kernels' order key of an F32 or F64 value, as S32 / S64 (kernels/
// median_pool_functor.h, OrderedKey): numbers in value order, -0 and +0 and every denormal the
// same key as +0, every NaN the one key OrderedKeyNaN (above +inf). Half values are widened to
// F32 first (exactly; their denormals are normal floats and keep their own keys).
xla::XlaOp OrderedKey(xla::XlaOp x);
int64_t OrderedKeyNaN(xla::PrimitiveType key_type);
int64_t OrderedKeyLow(xla::PrimitiveType key_type);   // below every value's key
int64_t OrderedKeyHigh(xla::PrimitiveType key_type);  // above every value's key

// kernels/gpu/half_body.h's FloatToHalfBits on an F32 tensor, as F16: round to nearest even,
// overflow to +-inf, a NaN to its sign | 0x7E00. Integer operations only.
xla::XlaOp RoundToHalf(xla::XlaOp f32);

// What the kernels' half path (widen to float, select, round back) leaves of a selected half
// value: itself, except that a NaN becomes its sign | 0x7E00.
xla::XlaOp CanonicalHalfNaN(xla::XlaOp f16);

// The compute type of a tensor type (F16 -> F32, otherwise itself) and `x` converted to it.
xla::PrimitiveType ComputeTypeOf(xla::PrimitiveType type);
xla::XlaOp Widen(xla::XlaOp x, xla::PrimitiveType type);
// A compute-type result in tensor type `type`: RoundToHalf for F16, else `x`.
xla::XlaOp Narrow(xla::XlaOp x, xla::PrimitiveType type);

// Every zero of `x` as +0 (integer compare on the bits, so -0 only).
xla::XlaOp PositiveZeros(xla::XlaOp x);

// Sums of terms into `num_dest` elements, deterministically on every backend: each element's
// sum is computed exactly in 64-bit fixed point below the largest exponent among its terms
// (KeepsBitsBelowMax bits of every term are kept), then rounded once into the terms' type
// (F32 or F64). A sum with a NaN term, or with both +inf and -inf terms, is NaN; otherwise one
// with an infinite term is that infinity. Denormal terms count as zero (as on the CPU
// kernels). Only integer scatters (a max, then an add), whose results do not depend on the
// order in which a backend applies the updates.
//
// Terms come in batches of [M] values with [M] destinations (S32 or S64; negative ones and
// ones >= num_dest add nothing). All batches go through NoteExponents first, then all through
// AddTerms (terms produced in a loop: two loops), then Finish:
//   ExactScatterSum sum(b, F32, n, max_terms);
//   XlaOp e = sum.NoteExponents(sum.NoExponents(), values, dest);
//   XlaOp acc = sum.AddTerms(sum.NoTerms(), e, values, dest);
//   XlaOp result = sum.Finish(acc, e);  // [n]
class ExactScatterSum {
 public:
  // max_terms: a bound on the terms of any one element (the fixed point's headroom).
  ExactScatterSum(xla::XlaBuilder* b, xla::PrimitiveType type, int64_t num_dest,
                  int64_t max_terms);

  // Fails if max_terms leaves fewer bits than the type needs.
  absl::Status Check() const;
  xla::XlaOp NoExponents() const;  // S32 [num_dest + 1]
  xla::XlaOp NoTerms() const;      // S64 [num_dest + 1]
  xla::XlaOp NoteExponents(xla::XlaOp exponents, xla::XlaOp values, xla::XlaOp dest) const;
  xla::XlaOp AddTerms(xla::XlaOp sums, xla::XlaOp exponents, xla::XlaOp values,
                      xla::XlaOp dest) const;
  xla::XlaOp Finish(xla::XlaOp sums, xla::XlaOp exponents) const;  // [num_dest], `type`

 private:
  xla::XlaOp Target(xla::XlaOp dest) const;
  xla::XlaOp BiasedExponent(xla::XlaOp values) const;

  xla::XlaBuilder* b_;
  xla::PrimitiveType type_;
  int64_t num_dest_;
  int64_t max_terms_;
  int keep_;
};

// The bits kept below each element's largest term, for a given bound on the term count.
int KeepsBitsBelowMax(int64_t max_terms);

// ExactScatterSum of one batch.
absl::StatusOr<xla::XlaOp> DeterministicScatterSum(xla::XlaOp values, xla::XlaOp dest,
                                                   int64_t num_dest, int64_t max_terms);

// A counted loop: state = body(i, state) for i in [0, trip_count) (trip_count: an S32 scalar
// computed in the graph). The loop's invariants travel in the state (the body gets every
// element; return them unchanged).
using LoopBody = std::function<absl::StatusOr<std::vector<xla::XlaOp>>(
    xla::XlaOp i, absl::Span<const xla::XlaOp> state, xla::XlaBuilder* b)>;
absl::StatusOr<std::vector<xla::XlaOp>> CountedLoop(xla::XlaOp trip_count,
                                                    std::vector<xla::XlaOp> state,
                                                    const LoopBody& body, const char* name,
                                                    xla::XlaBuilder* b);

// Rows of `table` [rows, width] at `index` [...] (S32, every value in [0, rows): callers make
// out-of-range positions in range themselves and mask their results, so the gather's silent
// clamping never applies): shape [..., width].
absl::StatusOr<xla::XlaOp> GatherRows(xla::XlaOp table, xla::XlaOp index);

}  // namespace tensorflow::tf_ext::lowering

#endif  // TF_EXT_XLA_LOWERING_UTIL_H_
