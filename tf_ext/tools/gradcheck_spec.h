// Input specs for tf_ext_gradcheck: how to build valid random inputs for an op whose signature
// alone does not say (shapes, value ranges, ROI rows, integer arguments, attrs).
//
// One configuration per line, whitespace-separated tokens, '#' starts a comment:
//   OP [INPUT=SPEC]... [attr.NAME=VALUE]... [nondiff=IN1,IN2] [symmetric=IN1]
//      [ignore_outputs=OUT1] [delta=STEP] [tol=TOL] [dtypes=float,double]
// An op may have several lines: each is one configuration (other shapes, attrs, ranges), checked
// in turn; a second text (tf_ext_gradcheck --spec over a library's own specs) that names an op
// replaces all of that op's configurations.
// INPUT SPEC:
//   2x3              random distinct values in the default range; "scalar" for rank 0
//   2x3@-1:1         ... in [-1, 1]
//   values:1,0       exactly these values, 1-D (sorted segment ids, an index list, a shape)
//   values[3x2]:0,1,1,0,2,1   exactly these values in this shape (e.g. sparse indices, sorted,
//                    unique and in range)
//   scalar:1         a rank-0 tensor with this value
//   rois:R           R rows (batch, x1, y1, x2, y2) inside the op's first NHWC input
//   spd:3 / spd:2x3x3  a (batch of) symmetric positive definite matrices M M^T / n + I, M random
//                    in [-1, 1] (Hermitian M M^H / n + I for complex dtypes)
// Complex dtypes (dtypes=complex64,complex128) draw real and imaginary parts from the range;
// values: gives real parts. Inputs not named get shape 2x3. VALUE is parsed by the attr's type:
// int, float, bool, string, type (float/double/complex64/...), list(int) and shape as [1,2].
// A type attr the spec does not set whose allowed values hold both precisions of a kind
// (float and double, or complex64 and complex128: RFFT's Tcomplex, Eig's Tout, SparseAdd's
// Treal) follows the checked dtype's precision: 32-bit with float/complex64, else 64-bit.
// nondiff: inputs whose gradient must be exactly zero (not differenced).
// symmetric: inputs the op reads through one triangle only (Cholesky, SelfAdjointEigV2): they
// are differenced along symmetric (Hermitian) perturbations of each pair (i, j), (j, i), which
// a symmetric gradient must match as g_ij + g_ji.
// ignore_outputs: outputs whose incoming gradient is zero and which are not compared: by-products
// Python's gradient ignores (CTCLoss's `gradient`), outputs fixed only up to a convention that
// a finite difference does not follow (Eig's eigenvector phases), and the unused u, v of Svd
// with compute_uv=false.
// dtypes: the dtypes checked (default: float and double where the op allows them, else
// complex64 and complex128).
// delta, tol: the central-difference step and the pass tolerance (max relative error) for a
// kernel less precise than its dtype (CTCLoss computes in float even for double inputs).
#ifndef TF_EXT_TOOLS_GRADCHECK_SPEC_H_
#define TF_EXT_TOOLS_GRADCHECK_SPEC_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/op_def.pb.h"
#include "tensorflow/core/framework/tensor.h"

namespace tensorflow::tf_ext::tools {

struct InputSpec {
  enum Kind { kRandom, kValues, kRois, kSpd } kind = kRandom;
  std::vector<int64_t> shape = {2, 3};
  bool scalar = false;
  double lo = 0.1, hi = 0.9;       // kRandom range
  std::vector<double> values;      // kValues
  int64_t rois = 0;                // kRois
};

struct OpSpec {
  std::string op;
  std::map<std::string, InputSpec> inputs;
  std::map<std::string, std::string> attrs;   // raw text, parsed against the OpDef
  std::vector<std::string> nondiff;
  std::vector<std::string> symmetric;
  std::vector<std::string> ignore_outputs;
  double delta = 0;                           // 0: the checker's default step
  double tol = 0;                             // 0: the tool's tolerance for the dtype
  std::vector<std::string> dtypes;            // empty: float and double where allowed
};

// Every op's configurations, in the order of their lines.
absl::StatusOr<std::map<std::string, std::vector<OpSpec>>> ParseSpecConfigs(
    const std::string& text);
// The first configuration of every op.
absl::StatusOr<std::map<std::string, OpSpec>> ParseSpecs(const std::string& text);

// Parses `text` as a value of attr `def` (e.g. "[3,3]" for list(int)).
absl::StatusOr<AttrValue> ParseAttrValue(const OpDef::AttrDef& def, const std::string& text);

// Builds one input per the spec for `dtype`. Random values are distinct and at least
// (hi-lo)/(2n) apart, so order-statistics ops (max, median) have no ties for a small
// finite-difference step to cross. `image_shape` (N,H,W,C) is used by kRois. Complex dtypes
// get random real and imaginary parts (kValues: the values as real parts).
absl::StatusOr<Tensor> MakeInput(const InputSpec& spec, DataType dtype,
                                 const std::vector<int64_t>& image_shape, uint64_t seed);

// One call of an op built from its spec: the attrs (type_attr = dtype, then the spec's) and
// inputs. `problem` (instead of an error status) says why the op cannot be instantiated from
// the spec, e.g. an integer input without a spec.
struct OpInstance {
  std::vector<std::pair<std::string, AttrValue>> attrs;
  std::vector<Tensor> inputs;
  std::string problem;
};
// type_attr: the op's first input's type attr ("" for fixed types); dtype: its value.
// batch_zero: every spec'd shape's first dimension 0 and no ROI rows (empty inputs).
// lists: a list input of N tensors (N an int attr the spec sets) gets N tensors of its spec
// (the audit's replay); otherwise a list input is a `problem`.
OpInstance BuildOpInstance(const OpDef& def, const OpSpec* spec, const std::string& type_attr,
                           DataType dtype, uint64_t seed, bool batch_zero = false,
                           bool lists = false);

// `spec` (or, for nullptr, an empty spec of def's op) with a value chosen for every integer
// input it leaves out, from the input's name and the first input's shape: an axis (axis,
// reduction_indices, dim, ...) the last one, a permutation reversed, paddings of 1, multiples
// [2, 1, ...], a shape or size the first input's shape, begin zeros, segment ids and indices
// sorted and in range, num_segments the first dimension; otherwise the scalar rank - 1.
// tf_ext_gradcheck --ops=X uses it for an op without a spec line.
OpSpec WithDefaultIntInputs(const OpDef& def, const OpSpec* spec);

// The attribute sweep of one configuration (tf_ext_gradcheck --emit_configs, scripts/
// audit_gradients.py): `base` itself ("base"), then one variant per
//  * allowed value of each string attr with allowed values (padding, data_format, mode ...):
//    data_format permutes the first input's shape and strides/ksize/dilations; EXPLICIT
//    padding gets explicit_paddings (1, 0) / (0, 1) on the spatial dimensions;
//  * bool attr flipped (transpose_X / adj_X / adjoint_X also swap input X's last two dims);
//  * strides and dilations of 2 on the spatial dimensions;
//  * axis-like integer input given as values, made negative (v - rank);
//  * size-1 and empty first dimension of every random input;
//  * broadcasting, for ops with several inputs of the first input's type and shape: the second
//    input's trailing dimension only, and the first input's first dimension 1.
// Labels say what changed ("transpose_a=true", "dim0=0"). A variant may be invalid for the op
// (its forward then fails, which the audit counts and skips).
struct SweepVariant {
  std::string label;
  OpSpec spec;
};
std::vector<SweepVariant> SweepVariants(const OpDef& def, const OpSpec& base);

}  // namespace tensorflow::tf_ext::tools

#endif  // TF_EXT_TOOLS_GRADCHECK_SPEC_H_
