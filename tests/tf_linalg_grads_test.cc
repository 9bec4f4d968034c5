// The C++ gradients tf_ext adds for TensorFlow's linear-algebra ops (tf_ext/grads/tf/
// linalg_grad.cc) against numeric Jacobians (tests/numeric_jacobian.h): float64 central
// differences, then the float32 gradient against the float64 one; batched, well-conditioned
// random inputs; complex ones where the maths covers them. Comparisons with Python's gradients:
// tests/python/test_tf_linalg_grads.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <complex>
#include <memory>
#include <string>
#include <vector>

#include "tensorflow/cc/framework/gradients.h"
#include "tensorflow/cc/framework/scope.h"
#include "tensorflow/cc/ops/array_ops.h"
#include "tensorflow/cc/ops/const_op.h"
#include "tensorflow/cc/ops/linalg_ops.h"
#include "tensorflow/cc/ops/math_ops.h"
#include "tensorflow/core/framework/tensor_util.h"
#include "tensorflow/core/public/session.h"
#include "tests/numeric_jacobian.h"

namespace tensorflow::tf_ext {
namespace {

using test::cd;
using test::ExpectMatchesNumeric;
using test::Get;
using test::OpAttrs;
using test::Random;
using test::Set;

// Random matrices (the last two axes square) with `boost` added to the diagonal: far from
// singular.
Tensor Conditioned(DataType type, const TensorShape& shape, uint64_t seed, double boost = 3) {
  Tensor t = Random(type, shape, seed);
  const int64_t n = shape.dim_size(shape.dims() - 1);
  for (int64_t i = 0; i < t.NumElements(); i += n * n) {
    for (int64_t d = 0; d < n; ++d) Set(&t, i + d * n + d, Get(t, i + d * n + d) + boost);
  }
  return t;
}

// Hermitian matrices M + M^H with diagonal offsets 0, 3, 6, ...: well separated eigenvalues.
Tensor Hermitian(DataType type, const TensorShape& shape, uint64_t seed) {
  const Tensor m = Random(type, shape, seed);
  Tensor t(type, shape);
  const int64_t n = shape.dim_size(shape.dims() - 1);
  for (int64_t b = 0; b < t.NumElements(); b += n * n) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        cd v = Get(m, b + i * n + j) + std::conj(Get(m, b + j * n + i));
        if (i == j) v = v.real() + 3.0 * i;
        Set(&t, b + i * n + j, v);
      }
    }
  }
  return t;
}

// Symmetric positive definite matrices M M^T + n I (real).
Tensor SymmetricPositiveDefinite(const TensorShape& shape, uint64_t seed) {
  const Tensor m = Random(DT_DOUBLE, shape, seed);
  Tensor t(DT_DOUBLE, shape);
  const int64_t n = shape.dim_size(shape.dims() - 1);
  for (int64_t b = 0; b < t.NumElements(); b += n * n) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double v = i == j ? n : 0.0;
        for (int64_t k = 0; k < n; ++k) {
          v += Get(m, b + i * n + k).real() * Get(m, b + j * n + k).real();
        }
        t.flat<double>()(b + i * n + j) = v;
      }
    }
  }
  return t;
}

Tensor Ints(std::vector<int32> v, TensorShape shape = {}) {
  return test::AsTensor<int32>(v, shape);
}

// ExpectMatchesNumeric for the eigen- and singular-vector ops, whose vectors' signs are a
// convention that float32 and float64 kernels need not share: the float32 gradient is compared
// with the float64 one for incoming gradients whose columns are flipped as the float32 vectors
// are (the loss is then the same function). Outputs in `unused` (U, V when compute_uv is false)
// get zero incoming gradients and are left out of the loss. Inputs in `fixed` keep their type
// in the float32 run and are not differentiated (MatrixSolveLs's double l2_regularizer; its
// gradient must be zero).
struct SpectralCheck {
  std::string op;
  OpAttrs attrs;
  std::vector<Tensor> inputs;  // float64 / complex128
  std::vector<int> vectors;    // outputs whose columns have a sign convention
  std::vector<int> unused = {};
  std::vector<int> fixed = {};
  bool compare_float = true;  // false: the float32 outputs need not match in order (Eig)
};

bool Contains(const std::vector<int>& v, size_t i) {
  return std::find(v.begin(), v.end(), static_cast<int>(i)) != v.end();
}

double SpectralLoss(const std::vector<Tensor>& ys, const std::vector<Tensor>& vs,
                    const std::vector<int>& unused) {
  double s = 0;
  for (size_t o = 0; o < ys.size(); ++o) {
    if (Contains(unused, o)) continue;
    for (int64_t i = 0; i < ys[o].NumElements(); ++i) {
      s += (std::conj(Get(vs[o], i)) * Get(ys[o], i)).real();
    }
  }
  return s;
}

void ExpectSpectralMatchesNumeric(const SpectralCheck& c) {
  SCOPED_TRACE(c.op);
  auto ys = test::RunOp(c.op, c.attrs, c.inputs);
  ASSERT_TRUE(ys.ok()) << ys.status();
  std::vector<Tensor> vs;
  for (size_t o = 0; o < ys->size(); ++o) {
    vs.push_back(Random((*ys)[o].dtype(), (*ys)[o].shape(), 100 + o));
    if (!Contains(c.unused, o)) continue;
    for (int64_t i = 0; i < vs.back().NumElements(); ++i) Set(&vs.back(), i, 0);
  }
  auto grads = test::RunSymbolicGradient(c.op, c.attrs, c.inputs, vs);
  ASSERT_TRUE(grads.ok()) << grads.status();
  ASSERT_EQ(grads->size(), c.inputs.size());
  const double delta = 1e-6;
  bool cplx = false;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const Tensor& g = (*grads)[k];
    ASSERT_EQ(g.shape(), c.inputs[k].shape()) << "input " << k;
    if (Contains(c.fixed, k)) {
      for (int64_t i = 0; i < g.NumElements(); ++i) EXPECT_EQ(Get(g, i), cd(0)) << "input " << k;
      continue;
    }
    cplx = cplx || test::IsComplex(c.inputs[k].dtype());
    const bool ck = test::IsComplex(c.inputs[k].dtype());
    for (int64_t i = 0; i < c.inputs[k].NumElements(); ++i) {
      for (const cd dir : ck ? std::vector<cd>{1, cd(0, 1)} : std::vector<cd>{1}) {
        std::vector<Tensor> plus = c.inputs, minus = c.inputs;
        plus[k] = tensor::DeepCopy(c.inputs[k]);
        minus[k] = tensor::DeepCopy(c.inputs[k]);
        Set(&plus[k], i, Get(c.inputs[k], i) + delta * dir);
        Set(&minus[k], i, Get(c.inputs[k], i) - delta * dir);
        auto yp = test::RunOp(c.op, c.attrs, plus, {test::RunPath::kKernel});
        auto ym = test::RunOp(c.op, c.attrs, minus, {test::RunPath::kKernel});
        ASSERT_TRUE(yp.ok() && ym.ok());
        const double numeric =
            (SpectralLoss(*yp, vs, c.unused) - SpectralLoss(*ym, vs, c.unused)) / (2 * delta);
        const double symbolic = dir == cd(1) ? Get(g, i).real() : Get(g, i).imag();
        EXPECT_NEAR(symbolic, numeric, 1e-7 * std::max(1.0, std::abs(numeric)))
            << "input " << k << " element " << i << (dir == cd(1) ? " (real)" : " (imag)");
      }
    }
  }
  // phases, not signs, for complex types: float32 is compared with Python's gradient instead
  if (cplx || !c.compare_float) return;
  std::vector<Tensor> x32;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    x32.push_back(Contains(c.fixed, k) ? c.inputs[k] : test::Convert(c.inputs[k], DT_FLOAT));
  }
  auto ys32 = test::RunOp(c.op, c.attrs, x32);
  ASSERT_TRUE(ys32.ok()) << ys32.status();
  std::vector<Tensor> vs32;
  for (size_t o = 0; o < vs.size(); ++o) {
    vs32.push_back(test::Convert(vs[o], test::Single(vs[o].dtype())));
    if (!Contains(c.vectors, o)) continue;
    const Tensor& y64 = (*ys)[o];
    const Tensor& y32 = (*ys32)[o];
    const int64_t rows = y64.dim_size(y64.dims() - 2), cols = y64.dim_size(y64.dims() - 1);
    for (int64_t b = 0; b < y64.NumElements(); b += rows * cols) {
      for (int64_t j = 0; j < cols; ++j) {
        double dot = 0;
        for (int64_t r = 0; r < rows; ++r) {
          dot += Get(y64, b + r * cols + j).real() * Get(y32, b + r * cols + j).real();
        }
        if (dot >= 0) continue;
        for (int64_t r = 0; r < rows; ++r) {
          Set(&vs32.back(), b + r * cols + j, -Get(vs32.back(), b + r * cols + j));
        }
      }
    }
  }
  auto g32 = test::RunSymbolicGradient(c.op, c.attrs, x32, vs32);
  ASSERT_TRUE(g32.ok()) << g32.status();
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    if (Contains(c.fixed, k)) continue;
    for (int64_t i = 0; i < (*grads)[k].NumElements(); ++i) {
      const double want = Get((*grads)[k], i).real();
      EXPECT_NEAR(Get((*g32)[k], i).real(), want, 1e-4 * std::max(1.0, std::abs(want)))
          << "float input " << k << " element " << i;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Inverses, determinants, solves.

TEST(LinalgGrads, MatrixInverse) {
  for (const bool adjoint : {false, true}) {
    SCOPED_TRACE(adjoint);
    ExpectMatchesNumeric(
        {"MatrixInverse", {{"adjoint", adjoint}}, {Conditioned(DT_DOUBLE, {2, 3, 3}, 1)}});
    ExpectMatchesNumeric(
        {"MatrixInverse", {{"adjoint", adjoint}}, {Conditioned(DT_COMPLEX128, {2, 3, 3}, 2)}});
  }
}

// Complex: the derivative (d(c) conj(c) A^-H), not Python's d(c) c A^-H.
TEST(LinalgGrads, MatrixDeterminant) {
  ExpectMatchesNumeric({"MatrixDeterminant", {}, {Conditioned(DT_DOUBLE, {2, 2, 3, 3}, 3)}});
  ExpectMatchesNumeric({"MatrixDeterminant", {}, {Conditioned(DT_DOUBLE, {4, 4}, 4, -0.5)}});
  ExpectMatchesNumeric({"MatrixDeterminant", {}, {Conditioned(DT_COMPLEX128, {2, 3, 3}, 5)}});
}

// A negative determinant (sign -1) among them; complex: the sign's gradient included.
TEST(LinalgGrads, LogMatrixDeterminant) {
  Tensor a = Conditioned(DT_DOUBLE, {2, 3, 3}, 6);
  for (int j = 0; j < 3; ++j) std::swap(a.flat<double>()(j), a.flat<double>()(3 + j));
  ExpectMatchesNumeric({"LogMatrixDeterminant", {}, {a}});
  ExpectMatchesNumeric({"LogMatrixDeterminant", {}, {Conditioned(DT_COMPLEX128, {2, 3, 3}, 7)}});
}

TEST(LinalgGrads, MatrixSolve) {
  for (const bool adjoint : {false, true}) {
    SCOPED_TRACE(adjoint);
    ExpectMatchesNumeric({"MatrixSolve",
                          {{"adjoint", adjoint}},
                          {Conditioned(DT_DOUBLE, {2, 3, 3}, 8), Random(DT_DOUBLE, {2, 3, 2}, 9)}});
    ExpectMatchesNumeric(
        {"MatrixSolve",
         {{"adjoint", adjoint}},
         {Conditioned(DT_COMPLEX128, {3, 3}, 10), Random(DT_COMPLEX128, {3, 4}, 11)}});
  }
}

// The kernel reads one triangle: the gradient keeps to it (the other's numeric derivative is
// zero). Batch axes broadcast ([2, 1] against [3]).
TEST(LinalgGrads, MatrixTriangularSolve) {
  for (const bool lower : {true, false}) {
    for (const bool adjoint : {false, true}) {
      SCOPED_TRACE(absl::StrCat("lower ", lower, " adjoint ", adjoint));
      const OpAttrs attrs = {{"lower", lower}, {"adjoint", adjoint}};
      ExpectMatchesNumeric(
          {"MatrixTriangularSolve",
           attrs,
           {Conditioned(DT_DOUBLE, {2, 3, 3}, 12), Random(DT_DOUBLE, {2, 3, 2}, 13)}});
      ExpectMatchesNumeric(
          {"MatrixTriangularSolve",
           attrs,
           {Conditioned(DT_DOUBLE, {2, 1, 3, 3}, 14), Random(DT_DOUBLE, {3, 3, 2}, 15)}});
      ExpectMatchesNumeric(
          {"MatrixTriangularSolve",
           attrs,
           {Conditioned(DT_COMPLEX128, {3, 3}, 16), Random(DT_COMPLEX128, {2, 3, 1}, 17)}});
    }
  }
}

// Banded storage (LEFT_RIGHT): the main diagonal is row 0 of a lower matrix, the last row of an
// upper one; the packing's unused corners get zero gradient, as the kernel ignores them. Batch
// axes broadcast.
Tensor Banded(DataType type, const TensorShape& shape, bool lower, uint64_t seed) {
  Tensor t = Random(type, shape, seed);
  const int64_t bands = shape.dim_size(shape.dims() - 2), m = shape.dim_size(shape.dims() - 1);
  const int64_t main = lower ? 0 : bands - 1;
  for (int64_t b = 0; b < t.NumElements(); b += bands * m) {
    for (int64_t i = 0; i < m; ++i) Set(&t, b + main * m + i, Get(t, b + main * m + i) + 3.0);
  }
  return t;
}

TEST(LinalgGrads, BandedTriangularSolve) {
  for (const bool lower : {true, false}) {
    for (const bool adjoint : {false, true}) {
      SCOPED_TRACE(absl::StrCat("lower ", lower, " adjoint ", adjoint));
      const OpAttrs attrs = {{"lower", lower}, {"adjoint", adjoint}};
      ExpectMatchesNumeric(
          {"BandedTriangularSolve",
           attrs,
           {Banded(DT_DOUBLE, {2, 2, 4}, lower, 51), Random(DT_DOUBLE, {2, 4, 2}, 52)}});
      ExpectMatchesNumeric(
          {"BandedTriangularSolve",
           attrs,
           {Banded(DT_DOUBLE, {2, 1, 3, 4}, lower, 53), Random(DT_DOUBLE, {3, 4, 1}, 54)}});
      ExpectMatchesNumeric(
          {"BandedTriangularSolve",
           attrs,
           {Banded(DT_COMPLEX128, {3, 4}, lower, 55), Random(DT_COMPLEX128, {4, 2}, 56)}});
    }
  }
}

// The superdiagonal's last and the subdiagonal's first entries are unused: zero gradient.
TEST(LinalgGrads, TridiagonalMatMul) {
  for (const DataType t : {DT_DOUBLE, DT_COMPLEX128}) {
    ExpectMatchesNumeric({"TridiagonalMatMul",
                          {},
                          {Random(t, {2, 1, 4}, 57), Random(t, {2, 1, 4}, 58),
                           Random(t, {2, 1, 4}, 59), Random(t, {2, 4, 3}, 60)}});
  }
}

// Complex: the derivative (A^-H, conj(X)), where Python conjugates neither.
TEST(LinalgGrads, TridiagonalSolve) {
  for (const bool pivoting : {true, false}) {
    for (const DataType t : {DT_DOUBLE, DT_COMPLEX128}) {
      SCOPED_TRACE(absl::StrCat("pivoting ", pivoting, " ", DataTypeString(t)));
      Tensor d = Random(t, {2, 3, 4}, 61);
      for (int64_t b = 0; b < 2; ++b) {
        for (int64_t i = 0; i < 4; ++i) Set(&d, b * 12 + 4 + i, Get(d, b * 12 + 4 + i) + 3.0);
      }
      ExpectMatchesNumeric(
          {"TridiagonalSolve", {{"partial_pivoting", pivoting}}, {d, Random(t, {2, 4, 2}, 62)}});
    }
  }
}

// Cholesky reads A's lower triangle, but its gradient is Python's symmetric one, S = S^T. Along
// a symmetric perturbation of A_ij and A_ji the loss changes by S_ij + S_ji (S_ii on the
// diagonal): that is what is differenced here.
TEST(LinalgGrads, Cholesky) {
  const Tensor a = SymmetricPositiveDefinite({2, 3, 3}, 18);
  const int64_t n = 3;
  auto l = test::RunOp("Cholesky", {}, {a});
  ASSERT_TRUE(l.ok()) << l.status();
  const Tensor v = Random(DT_DOUBLE, (*l)[0].shape(), 19);
  auto g = test::RunSymbolicGradient("Cholesky", {}, {a}, {v});
  ASSERT_TRUE(g.ok()) << g.status();
  const Tensor& s = (*g)[0];
  const double delta = 1e-6;
  for (int64_t b = 0; b < a.NumElements(); b += n * n) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j <= i; ++j) {
        EXPECT_NEAR(s.flat<double>()(b + i * n + j), s.flat<double>()(b + j * n + i), 1e-12);
        double loss[2];
        for (int sign = 0; sign < 2; ++sign) {
          Tensor p = tensor::DeepCopy(a);
          const double d = sign == 0 ? delta : -delta;
          p.flat<double>()(b + i * n + j) += d;
          if (i != j) p.flat<double>()(b + j * n + i) += d;
          auto y = test::RunOp("Cholesky", {}, {p});
          ASSERT_TRUE(y.ok());
          loss[sign] = test::Loss(*y, {v});
        }
        const double numeric = (loss[0] - loss[1]) / (2 * delta);
        const double symbolic =
            s.flat<double>()(b + i * n + j) + (i != j ? s.flat<double>()(b + j * n + i) : 0.0);
        EXPECT_NEAR(symbolic, numeric, 1e-7 * std::max(1.0, std::abs(numeric)))
            << "batch " << b / (n * n) << " (" << i << ", " << j << ")";
      }
    }
  }
  // float32 against float64
  auto g32 = test::RunSymbolicGradient("Cholesky", {}, {test::Convert(a, DT_FLOAT)},
                                       {test::Convert(v, DT_FLOAT)});
  ASSERT_TRUE(g32.ok()) << g32.status();
  for (int64_t i = 0; i < s.NumElements(); ++i) {
    EXPECT_NEAR((*g32)[0].flat<float>()(i), s.flat<double>()(i),
                1e-4 * std::max(1.0, std::abs(s.flat<double>()(i))));
  }
}

// ---------------------------------------------------------------------------------------------
// Diagonals (MatrixDiag and MatrixBandPart have TensorFlow's own gradients).

TEST(LinalgGrads, MatrixDiagV1) {
  ExpectMatchesNumeric({"MatrixDiagPart", {}, {Random(DT_DOUBLE, {2, 3, 4}, 21)}});
  ExpectMatchesNumeric(
      {"MatrixSetDiag", {}, {Random(DT_DOUBLE, {2, 4, 3}, 22), Random(DT_DOUBLE, {2, 3}, 23)}});
  ExpectMatchesNumeric(
      {"MatrixSetDiag", {}, {Random(DT_COMPLEX128, {3, 3}, 24), Random(DT_COMPLEX128, {3}, 25)}});
}

// A band of diagonals k = [-1, 1] with num_rows / num_cols larger than needed (padding in the
// packed diagonals and in the matrix), every alignment; and a single diagonal k = 1.
TEST(LinalgGrads, MatrixDiagV2V3) {
  for (const char* align : {"LEFT_LEFT", "LEFT_RIGHT", "RIGHT_LEFT", "RIGHT_RIGHT"}) {
    SCOPED_TRACE(align);
    const OpAttrs a = {{"align", align}};
    ExpectMatchesNumeric({"MatrixDiagV3",
                          a,
                          {Random(DT_DOUBLE, {2, 3, 3}, 26), Ints({-1, 1}, {2}), Ints({4}),
                           Ints({3}), test::AsTensor<double>({0.5})},
                          {1, 2, 3, 4}});
    ExpectMatchesNumeric(
        {"MatrixDiagPartV3",
         a,
         {Random(DT_DOUBLE, {2, 4, 3}, 27), Ints({-1, 1}, {2}), test::AsTensor<double>({0.5})},
         {1, 2}});
    ExpectMatchesNumeric(
        {"MatrixSetDiagV3",
         a,
         {Random(DT_DOUBLE, {2, 4, 3}, 28), Random(DT_DOUBLE, {2, 3, 3}, 29), Ints({-1, 1}, {2})},
         {2}});
  }
  ExpectMatchesNumeric({"MatrixDiagV2",
                        {},
                        {Random(DT_DOUBLE, {2, 3, 3}, 30), Ints({-1, 1}, {2}), Ints({4}), Ints({3}),
                         test::AsTensor<double>({0.5})},
                        {1, 2, 3, 4}});
  ExpectMatchesNumeric({"MatrixDiagPartV2",
                        {},
                        {Random(DT_DOUBLE, {4, 3}, 31), Ints({1}), test::AsTensor<double>({0})},
                        {1, 2}});
  ExpectMatchesNumeric(
      {"MatrixSetDiagV2",
       {},
       {Random(DT_DOUBLE, {2, 4, 3}, 32), Random(DT_DOUBLE, {2, 3, 3}, 33), Ints({-1, 1}, {2})},
       {2}});
}

// ---------------------------------------------------------------------------------------------
// Decompositions.

// Tall, square and wide matrices (the wide ones through the split the Python branch makes),
// reduced and full factorisations; complex too.
TEST(LinalgGrads, Qr) {
  for (const bool full : {false, true}) {
    SCOPED_TRACE(full);
    const OpAttrs a = {{"full_matrices", full}};
    if (!full) ExpectMatchesNumeric({"Qr", a, {Random(DT_DOUBLE, {2, 4, 3}, 34)}});
    ExpectMatchesNumeric({"Qr", a, {Random(DT_DOUBLE, {2, 3, 3}, 35)}});
    ExpectMatchesNumeric({"Qr", a, {Random(DT_DOUBLE, {2, 3, 5}, 36)}});
    ExpectMatchesNumeric({"Qr", a, {Random(DT_COMPLEX128, {3, 3}, 37)}});
    ExpectMatchesNumeric({"Qr", a, {Random(DT_COMPLEX128, {2, 4}, 38)}});
  }
  ExpectMatchesNumeric({"Qr", {}, {Random(DT_COMPLEX128, {4, 2}, 39)}});
}

// As Python: no gradient of a tall matrix's full factorisation.
TEST(LinalgGrads, QrTallFullMatricesIsInvalidArgument) {
  const Tensor a = Random(DT_DOUBLE, {2, 4, 3}, 40);
  auto r = test::RunSymbolicGradient(
      "Qr", {{"full_matrices", true}}, {a},
      {Random(DT_DOUBLE, {2, 4, 4}, 41), Random(DT_DOUBLE, {2, 4, 3}, 42)});
  test::ExpectInvalidArgument(r.status(), "Qr", {"more rows than columns"});
}

// Distinct eigenvalues (the eigenvectors are then differentiable); only the lower triangle is
// read, which the gradient keeps to. compute_v = false: d(e) alone.
TEST(LinalgGrads, SelfAdjointEigV2) {
  ExpectSpectralMatchesNumeric(
      {"SelfAdjointEigV2", {}, {Hermitian(DT_DOUBLE, {2, 3, 3}, 43)}, {1}});
  ExpectSpectralMatchesNumeric({"SelfAdjointEigV2", {}, {Hermitian(DT_DOUBLE, {4, 4}, 44)}, {1}});
  ExpectSpectralMatchesNumeric(
      {"SelfAdjointEigV2", {{"compute_v", false}}, {Hermitian(DT_DOUBLE, {2, 3, 3}, 45)}, {}, {1}});
  ExpectSpectralMatchesNumeric({"SelfAdjointEigV2",
                                {{"compute_v", false}},
                                {Hermitian(DT_COMPLEX128, {3, 3}, 46)},
                                {},
                                {1}});
}

// Square, tall and wide (the two kinds of normal equations), with and without regularisation.
TEST(LinalgGrads, MatrixSolveLs) {
  struct Case {
    TensorShape a, b;
    double l2;
  };
  for (const Case& k : std::vector<Case>{{{2, 3, 3}, {2, 3, 2}, 0.0},
                                         {{2, 4, 3}, {2, 4, 2}, 0.0},
                                         {{4, 3}, {4, 1}, 0.5},
                                         {{2, 3, 4}, {2, 3, 2}, 0.0},
                                         {{3, 5}, {3, 2}, 0.25}}) {
    SCOPED_TRACE(k.a.DebugString());
    const Tensor l2 = test::AsTensor<double>({k.l2});
    ExpectSpectralMatchesNumeric({"MatrixSolveLs",
                                  {},
                                  {Random(DT_DOUBLE, k.a, 63), Random(DT_DOUBLE, k.b, 64), l2},
                                  {},
                                  {},
                                  {2}});
    ExpectSpectralMatchesNumeric(
        {"MatrixSolveLs",
         {},
         {Random(DT_COMPLEX128, k.a, 65), Random(DT_COMPLEX128, k.b, 66), l2},
         {},
         {},
         {2}});
  }
}

TEST(LinalgGrads, MatrixSolveLsSlowPathIsInvalidArgument) {
  auto r = test::RunSymbolicGradient(
      "MatrixSolveLs", {{"fast", false}},
      {Random(DT_DOUBLE, {3, 2}, 67), Random(DT_DOUBLE, {3, 1}, 68), test::AsTensor<double>({0})},
      {Random(DT_DOUBLE, {2, 1}, 69)});
  test::ExpectInvalidArgument(r.status(), "MatrixSolveLs", {"fast=False"});
}

// Symmetric (Hermitian) positive definite matrices, whose square roots are well conditioned;
// and a non-symmetric one near the identity. Complex: the derivative (R^H), where Python uses R^T.
TEST(LinalgGrads, MatrixSquareRoot) {
  ExpectMatchesNumeric({"MatrixSquareRoot", {}, {SymmetricPositiveDefinite({2, 3, 3}, 70)}});
  ExpectMatchesNumeric({"MatrixSquareRoot", {}, {Conditioned(DT_DOUBLE, {3, 3}, 71, 4)}});
  ExpectMatchesNumeric({"MatrixSquareRoot", {}, {Conditioned(DT_COMPLEX128, {2, 3, 3}, 72, 4)}});
}

// Eigenvalues only (the eigenvectors' phases are a convention, which random d(V) would make the
// loss depend on; Python's comparison covers them): real and complex matrices, complex
// eigenvalue pairs included.
TEST(LinalgGrads, Eig) {
  ExpectSpectralMatchesNumeric({"Eig",
                                {{"compute_v", false}, {"Tout", DT_COMPLEX128}},
                                {Random(DT_DOUBLE, {2, 3, 3}, 73)},
                                {},
                                {1},
                                {},
                                false});
  ExpectSpectralMatchesNumeric({"Eig",
                                {{"compute_v", false}, {"Tout", DT_COMPLEX128}},
                                {Random(DT_COMPLEX128, {3, 3}, 74)},
                                {},
                                {1}});
  // compute_v with d(V) = 0: the eigenvalues' gradient through the other formula
  ExpectSpectralMatchesNumeric(
      {"Eig", {{"Tout", DT_COMPLEX128}}, {Random(DT_DOUBLE, {2, 3, 3}, 75)}, {}, {1}, {}, false});
}

// Tall, square and wide, reduced and (|m - n| <= 1) full; compute_uv = false. Real only: a
// complex singular vector's phase is a convention, so random d(U), d(V) give a loss the maths
// cannot differentiate (the comparison with Python covers complex types).
TEST(LinalgGrads, Svd) {
  for (const TensorShape& shape :
       {TensorShape({2, 4, 3}), TensorShape({2, 3, 3}), TensorShape({3, 5})}) {
    ExpectSpectralMatchesNumeric({"Svd", {}, {Random(DT_DOUBLE, shape, 47)}, {1, 2}});
    ExpectSpectralMatchesNumeric(
        {"Svd", {{"compute_uv", false}}, {Random(DT_DOUBLE, shape, 48)}, {}, {1, 2}});
  }
  for (const TensorShape& shape :
       {TensorShape({2, 4, 3}), TensorShape({3, 3}), TensorShape({2, 3, 4})}) {
    ExpectSpectralMatchesNumeric(
        {"Svd", {{"full_matrices", true}}, {Random(DT_DOUBLE, shape, 49)}, {1, 2}});
  }
}

// As Python: no gradient of a full factorisation with |m - n| > 1.
TEST(LinalgGrads, SvdFullMatricesFarFromSquareIsInvalidArgument) {
  for (const TensorShape& shape : {TensorShape({5, 3}), TensorShape({2, 2, 5})}) {
    const Tensor a = Random(DT_DOUBLE, shape, 50);
    auto y = test::RunOp("Svd", {{"full_matrices", true}}, {a});
    ASSERT_TRUE(y.ok()) << y.status();
    auto r = test::RunSymbolicGradient("Svd", {{"full_matrices", true}}, {a}, *y);
    test::ExpectInvalidArgument(r.status(), "Svd", {"abs(m - n) > 1"});
  }
}

// An empty batch: every gradient runs and has its input's shape (BandedTriangularSolve's forward
// refuses empty inputs).
TEST(LinalgGrads, EmptyBatches) {
  struct Case {
    std::string op;
    OpAttrs attrs;
    std::vector<Tensor> inputs;
  };
  const auto z = [](TensorShape s) { return Random(DT_DOUBLE, s, 76); };
  const Tensor l2 = test::AsTensor<double>({0.5});
  for (const Case& c : std::vector<Case>{
           {"MatrixInverse", {}, {z({0, 3, 3})}},
           {"MatrixDeterminant", {}, {z({0, 3, 3})}},
           {"LogMatrixDeterminant", {}, {z({0, 3, 3})}},
           {"MatrixSolve", {}, {z({0, 3, 3}), z({0, 3, 2})}},
           {"MatrixTriangularSolve", {}, {z({0, 3, 3}), z({0, 3, 2})}},
           {"MatrixSolveLs", {}, {z({0, 4, 3}), z({0, 4, 2}), l2}},
           {"MatrixSolveLs", {}, {z({0, 3, 4}), z({0, 3, 2}), l2}},
           {"Cholesky", {}, {z({0, 3, 3})}},
           {"MatrixSquareRoot", {}, {z({0, 3, 3})}},
           {"Qr", {}, {z({0, 4, 3})}},
           {"Qr", {{"full_matrices", true}}, {z({0, 3, 5})}},
           {"SelfAdjointEigV2", {}, {z({0, 3, 3})}},
           {"Svd", {}, {z({0, 4, 3})}},
           {"Svd", {{"full_matrices", true}}, {z({0, 3, 4})}},
           {"Eig", {{"Tout", DT_COMPLEX128}}, {z({0, 3, 3})}},
           {"TridiagonalSolve", {}, {z({0, 3, 4}), z({0, 4, 2})}},
           {"TridiagonalMatMul", {}, {z({0, 1, 4}), z({0, 1, 4}), z({0, 1, 4}), z({0, 4, 2})}},
           {"MatrixSetDiagV3", {}, {z({0, 4, 3}), z({0, 3}), Ints({0})}}}) {
    SCOPED_TRACE(c.op);
    auto ys = test::RunOp(c.op, c.attrs, c.inputs);
    ASSERT_TRUE(ys.ok()) << ys.status();
    auto g = test::RunSymbolicGradient(c.op, c.attrs, c.inputs, *ys);
    ASSERT_TRUE(g.ok()) << g.status();
    for (size_t k = 0; k < c.inputs.size(); ++k) {
      EXPECT_EQ((*g)[k].shape(), c.inputs[k].shape()) << "input " << k;
      EXPECT_EQ((*g)[k].dtype(), c.inputs[k].dtype()) << "input " << k;
    }
  }
}

// Through the C++ client registry (cc/framework AddSymbolicGradients, which TF_AddGradients and
// the language bindings use), in a graph: for symmetric positive definite A,
// loss = 2 sum log diag(cholesky(A)) + log|det A| (sign unused) = 2 log det A, so
// d(loss)/dA = 2 A^-1 (Cholesky's symmetric gradient; LogMatrixDeterminant's A^-T = A^-1).
TEST(LinalgGrads, ClientRegistryGraph) {
  Scope root = Scope::NewRootScope();
  auto a = ops::Const(root, SymmetricPositiveDefinite({2, 3, 3}, 77));
  auto chol = ops::Cholesky(root, a);
  auto log_diag = ops::Log(root, ops::MatrixDiagPart(root, chol));
  auto logdet = ops::LogMatrixDeterminant(root, a);
  auto loss =
      ops::AddN(root, std::initializer_list<Input>{
                          ops::Mul(root, ops::Const(root, 2.0), ops::Sum(root, log_diag, {0, 1})),
                          ops::Sum(root, logdet.log_abs_determinant, {0})});
  std::vector<Output> grads;
  ASSERT_TRUE(AddSymbolicGradients(root, {loss}, {a}, &grads).ok());
  auto want = ops::Mul(root, ops::Const(root, 2.0), ops::MatrixInverse(root, a));
  ASSERT_TRUE(root.status().ok()) << root.status();
  GraphDef graph;
  ASSERT_TRUE(root.ToGraphDef(&graph).ok());
  std::unique_ptr<Session> session(NewSession(SessionOptions()));
  ASSERT_TRUE(session->Create(graph).ok());
  std::vector<Tensor> out;
  const absl::Status s = session->Run({}, {grads[0].name(), want.node()->name()}, {}, &out);
  ASSERT_TRUE(s.ok()) << s;
  test::ExpectTensorNear<double>(out[0], out[1], 1e-10);
}

}  // namespace
}  // namespace tensorflow::tf_ext
