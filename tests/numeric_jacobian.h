// ExpectMatchesNumeric: an op's C++ gradient (one SymbolicGradient node) against central
// differences, for real and complex inputs, in double precision, then the single-precision
// gradient against the double one. For the gradient tests of TensorFlow's own ops.
//
// Complex convention (TensorFlow's): for the real scalar L = sum Re(conj(v) * y) of the op's
// outputs y and random incoming gradients v, the gradient of a complex input x is
// dL/dRe(x) + i dL/dIm(x); both parts are differenced.
#ifndef TF_EXT_TESTS_NUMERIC_JACOBIAN_H_
#define TF_EXT_TESTS_NUMERIC_JACOBIAN_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <complex>
#include <random>
#include <string>
#include <vector>

#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_util.h"
#include "tests/test_util.h"
#include "tf_ext/testing/op_runner.h"

namespace tensorflow::tf_ext::test {


using cd = std::complex<double>;

inline bool IsComplex(DataType t) { return t == DT_COMPLEX64 || t == DT_COMPLEX128; }
inline DataType Single(DataType t) {
  return t == DT_DOUBLE ? DT_FLOAT : t == DT_COMPLEX128 ? DT_COMPLEX64 : t;
}

// Element i of a float/double/complex tensor as a complex double.
inline cd Get(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DT_FLOAT: return t.flat<float>()(i);
    case DT_DOUBLE: return t.flat<double>()(i);
    case DT_COMPLEX64: return cd(t.flat<complex64>()(i));
    case DT_COMPLEX128: return t.flat<complex128>()(i);
    default: ADD_FAILURE() << DataTypeString(t.dtype()); return 0;
  }
}
inline void Set(Tensor* t, int64_t i, cd v) {
  switch (t->dtype()) {
    case DT_FLOAT: t->flat<float>()(i) = v.real(); break;
    case DT_DOUBLE: t->flat<double>()(i) = v.real(); break;
    case DT_COMPLEX64: t->flat<complex64>()(i) = complex64(v); break;
    case DT_COMPLEX128: t->flat<complex128>()(i) = v; break;
    default: ADD_FAILURE() << DataTypeString(t->dtype());
  }
}
inline bool IsFloating(DataType t) {
  return t == DT_FLOAT || t == DT_DOUBLE || IsComplex(t);
}

// A tensor of `shape` with values uniform in [lo, hi] (real and imaginary parts).
inline Tensor Random(DataType type, const TensorShape& shape, uint64_t seed, double lo = -1,
              double hi = 1) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  Tensor t(type, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    const double re = u(rng);
    Set(&t, i, IsComplex(type) ? cd(re, u(rng)) : cd(re, 0));
  }
  return t;
}

// The same values in another floating type.
inline Tensor Convert(const Tensor& t, DataType to) {
  if (!IsFloating(t.dtype())) return t;
  Tensor out(to, t.shape());
  for (int64_t i = 0; i < t.NumElements(); ++i) Set(&out, i, Get(t, i));
  return out;
}

// sum Re(conj(v) * y) over every floating output.
inline double Loss(const std::vector<Tensor>& ys, const std::vector<Tensor>& vs) {
  double s = 0;
  for (size_t o = 0; o < ys.size(); ++o) {
    if (!IsFloating(ys[o].dtype())) continue;
    for (int64_t i = 0; i < ys[o].NumElements(); ++i) {
      s += (std::conj(Get(vs[o], i)) * Get(ys[o], i)).real();
    }
  }
  return s;
}

struct Check {
  std::string op;
  OpAttrs attrs;                  // for the double run; type attrs inferred from the inputs
  std::vector<Tensor> inputs;     // double / complex128 (integer inputs as they are)
  std::vector<int> nondiff = {};  // inputs whose gradient must be exactly zero
  OpAttrs single_attrs = {};      // the attrs of the single-precision run (if they differ)
  double delta = 1e-6;            // central-difference step
  double tol = 1e-7;              // relative to max(1, |numeric|)
};

// Central differences of Loss against the C++ gradient (double), then the single-precision
// gradient against the double one.
inline void ExpectMatchesNumeric(const Check& c) {
  SCOPED_TRACE(c.op);
  auto ys = RunOp(c.op, c.attrs, c.inputs);
  ASSERT_TRUE(ys.ok()) << ys.status();
  std::vector<Tensor> vs;
  for (size_t o = 0; o < ys->size(); ++o) {
    const Tensor& y = (*ys)[o];
    vs.push_back(IsFloating(y.dtype()) ? Random(y.dtype(), y.shape(), 100 + o)
                                       : Tensor(y.dtype(), y.shape()));
    if (!IsFloating(y.dtype())) vs.back().flat<int32>().setZero();
  }
  auto grads = RunSymbolicGradient(c.op, c.attrs, c.inputs, vs);
  ASSERT_TRUE(grads.ok()) << grads.status();
  ASSERT_EQ(grads->size(), c.inputs.size());
  const double delta = c.delta, tol = c.tol;
  int64_t checked = 0;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const Tensor& g = (*grads)[k];
    ASSERT_EQ(g.shape(), c.inputs[k].shape()) << "input " << k;
    if (std::find(c.nondiff.begin(), c.nondiff.end(), k) != c.nondiff.end()) {
      for (int64_t i = 0; i < g.NumElements(); ++i) {
        if (IsFloating(g.dtype())) {
          EXPECT_EQ(Get(g, i), cd(0)) << "input " << k;
        }
      }
      continue;
    }
    const bool cplx = IsComplex(c.inputs[k].dtype());
    for (int64_t i = 0; i < c.inputs[k].NumElements(); ++i) {
      for (const cd dir : cplx ? std::vector<cd>{1, cd(0, 1)} : std::vector<cd>{1}) {
        std::vector<Tensor> plus = c.inputs, minus = c.inputs;
        plus[k] = tensor::DeepCopy(c.inputs[k]);
        minus[k] = tensor::DeepCopy(c.inputs[k]);
        Set(&plus[k], i, Get(c.inputs[k], i) + delta * dir);
        Set(&minus[k], i, Get(c.inputs[k], i) - delta * dir);
        auto yp = RunOp(c.op, c.attrs, plus, {RunPath::kKernel});
        auto ym = RunOp(c.op, c.attrs, minus, {RunPath::kKernel});
        ASSERT_TRUE(yp.ok() && ym.ok());
        const double numeric = (Loss(*yp, vs) - Loss(*ym, vs)) / (2 * delta);
        const double symbolic = dir == cd(1) ? Get(g, i).real() : Get(g, i).imag();
        EXPECT_NEAR(symbolic, numeric, tol * std::max(1.0, std::abs(numeric)))
            << "input " << k << " element " << i << (dir == cd(1) ? " (real)" : " (imag)");
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0);
  // Single precision: the same gradient within float rounding.
  std::vector<Tensor> inputs32, vs32;
  for (const Tensor& t : c.inputs) inputs32.push_back(Convert(t, Single(t.dtype())));
  for (const Tensor& t : vs) vs32.push_back(Convert(t, Single(t.dtype())));
  auto grads32 = RunSymbolicGradient(
      c.op, c.single_attrs.empty() ? c.attrs : c.single_attrs, inputs32, vs32);
  ASSERT_TRUE(grads32.ok()) << grads32.status();
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const Tensor& g32 = (*grads32)[k];
    ASSERT_EQ(g32.dtype(), inputs32[k].dtype());
    if (!IsFloating(g32.dtype())) continue;
    for (int64_t i = 0; i < g32.NumElements(); ++i) {
      const cd want = Get((*grads)[k], i);
      EXPECT_LE(std::abs(Get(g32, i) - want), 1e-4 * std::max(1.0, std::abs(want)))
          << "float input " << k << " element " << i;
    }
  }
}

inline Tensor Lengths(std::vector<int32> n) {
  return AsTensor<int32>(n, TensorShape({static_cast<int64_t>(n.size())}));
}

}  // namespace tensorflow::tf_ext::test

#endif  // TF_EXT_TESTS_NUMERIC_JACOBIAN_H_
