// tf_ext::test::CheckGradient: symbolic vs numeric Jacobians for any op, with no Python.
//
// The symbolic Jacobian comes from the op's registered FDH gradient, run through a
// SymbolicGradient node in a Session (exactly the path C++ serving binaries use). The numeric
// Jacobian is a central difference of the forward op, computed in float64 whenever the op's
// type attrs allow double (inputs are cast up), else in the inputs' own dtype.
//
// Rows: one per element of every floating-point output (one-hot incoming gradient), or, when
// the outputs have more than `max_rows` elements in total, `num_projections` random incoming
// gradients v (both Jacobians are compared as v^T J). Integer and bool outputs get zero
// incoming gradients (their gradient is ignored by definition). The numeric pass runs in the
// inputs' dtype when the op has no CPU kernel for float64.
//
// Complex inputs and outputs count as two reals per element (real part, imaginary part), with
// TensorFlow's convention: the incoming gradient of a complex y for the real loss
// L = sum Re(conj(v) y) is v, and the gradient of a complex x is dL/dRe(x) + i dL/dIm(x). So a
// row is an output's real part (v = 1) or imaginary part (v = i), a column an input's real or
// imaginary part; the numeric pass runs in complex128.
//
// Errors per entry: abs = |sym - num|, rel = abs / max(1, |num|). Inputs listed in
// `non_differentiable_inputs` are not compared with finite differences; their symbolic
// gradient must be exactly zero instead (reported as `nondiff_max_abs`).
#ifndef TF_EXT_TESTING_GRADIENT_CHECKER_H_
#define TF_EXT_TESTING_GRADIENT_CHECKER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/tensor.h"

namespace tensorflow::tf_ext::test {

// {"pooled_height", 2}, {"spatial_scale", 0.5f}, {"padding", "SAME"}, ... Type attrs bound
// to inputs (e.g. T) are inferred from the input tensors when omitted.
using OpAttrs = std::vector<std::pair<std::string, FunctionDefHelper::AttrValueWrapper>>;

struct GradientCheckOptions {
  // Central-difference step. <= 0: 1e-6 when the numeric pass runs in float64, else 1e-3.
  double delta = 0;
  // Above this many output elements, compare random projections instead of full rows.
  int64_t max_rows = 512;
  int num_projections = 16;
  uint64_t seed = 301;
  // Names (OpDef input names) of inputs whose gradient must be zero and is not differenced.
  std::vector<std::string> non_differentiable_inputs;
  // Names of inputs (batches of square matrices) the op reads through one triangle only
  // (Cholesky, SelfAdjointEigV2): differenced along symmetric perturbations e_ij + e_ji
  // (Hermitian for complex: the imaginary parts with opposite signs), against g_ij + g_ji
  // (g_ij - g_ji for imaginary parts) of the symbolic gradient; i >= j only.
  std::vector<std::string> symmetric_inputs;
  // Names of outputs whose incoming gradient is zero and which are not compared (outputs
  // Python's gradient ignores by design, e.g. CTCLoss's `gradient`). Integer and bool outputs
  // are always so.
  std::vector<std::string> ignored_outputs;
  // Run the numeric pass in float64 when the op allows it (recommended).
  bool numeric_in_float64 = true;
  // Difference the op's registered surrogate forward (registry.h) when it has one: for
  // gradients that are by design not the derivative of the forward (STE, reversal).
  bool use_surrogate_forward = true;
};

struct GradientCheckResult {
  double max_abs_error = 0;
  double max_rel_error = 0;
  double nondiff_max_abs = 0;     // largest |gradient| of a non-differentiable input
  std::string worst_input;        // OpDef name of the input where max_rel_error occurred
  int64_t worst_element = -1;     // flat index into that input (complex: 2 * element + part)
  std::string worst_row;          // "output[k]" or "projection p"
  double worst_symbolic = 0, worst_numeric = 0;
  int64_t rows = 0;               // Jacobian rows compared
  int64_t columns = 0;            // input elements differenced
  bool numeric_float64 = false;
  std::string numeric_reference;  // "the op" or "surrogate forward <function name>"

  // Passed if max_rel_error <= tol and every non-differentiable gradient is zero.
  bool Passed(double tol) const { return max_rel_error <= tol && nondiff_max_abs == 0; }
  // "TfExt>Foo: max abs 1e-9, max rel 1e-9 at input 'x'[3] (output[0][5]: symbolic 1,
  //  numeric 1.0000001)".
  std::string ToString() const;
  std::string op_type;
};

// Fails (non-OK) only when the check cannot run: unknown op, bad attrs, the op or its
// gradient fails. A wrong gradient is a successful check with large errors.
absl::Status CheckGradient(const std::string& op_type, const OpAttrs& attrs,
                           const std::vector<Tensor>& inputs,
                           const GradientCheckOptions& options, GradientCheckResult* result);

}  // namespace tensorflow::tf_ext::test

#endif  // TF_EXT_TESTING_GRADIENT_CHECKER_H_
