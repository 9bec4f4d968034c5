// The C++ gradients tf_ext adds for TensorFlow's spectral and image ops (tf_ext/grads/tf/
// spectral_grad.cc, image_grad.cc) against numeric Jacobians, complex inputs included.
//
// Complex convention (TensorFlow's): for the real scalar L = sum Re(conj(v) * y) of the op's
// outputs y and random incoming gradients v, the gradient of a complex input x is
// dL/dRe(x) + i dL/dIm(x); both parts are central differences here, in double precision.
// The single-precision gradients are compared with the double ones. Comparisons with Python's
// gradients: tests/python/test_tf_spectral_image_grads.py.
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

namespace tensorflow::tf_ext {
namespace {

using test::OpAttrs;
using cd = std::complex<double>;

bool IsComplex(DataType t) { return t == DT_COMPLEX64 || t == DT_COMPLEX128; }
DataType Single(DataType t) {
  return t == DT_DOUBLE ? DT_FLOAT : t == DT_COMPLEX128 ? DT_COMPLEX64 : t;
}

// Element i of a float/double/complex tensor as a complex double.
cd Get(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DT_FLOAT: return t.flat<float>()(i);
    case DT_DOUBLE: return t.flat<double>()(i);
    case DT_COMPLEX64: return cd(t.flat<complex64>()(i));
    case DT_COMPLEX128: return t.flat<complex128>()(i);
    default: ADD_FAILURE() << DataTypeString(t.dtype()); return 0;
  }
}
void Set(Tensor* t, int64_t i, cd v) {
  switch (t->dtype()) {
    case DT_FLOAT: t->flat<float>()(i) = v.real(); break;
    case DT_DOUBLE: t->flat<double>()(i) = v.real(); break;
    case DT_COMPLEX64: t->flat<complex64>()(i) = complex64(v); break;
    case DT_COMPLEX128: t->flat<complex128>()(i) = v; break;
    default: ADD_FAILURE() << DataTypeString(t->dtype());
  }
}
bool IsFloating(DataType t) {
  return t == DT_FLOAT || t == DT_DOUBLE || IsComplex(t);
}

// A tensor of `shape` with values uniform in [lo, hi] (real and imaginary parts).
Tensor Random(DataType type, const TensorShape& shape, uint64_t seed, double lo = -1,
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
Tensor Convert(const Tensor& t, DataType to) {
  if (!IsFloating(t.dtype())) return t;
  Tensor out(to, t.shape());
  for (int64_t i = 0; i < t.NumElements(); ++i) Set(&out, i, Get(t, i));
  return out;
}

// sum Re(conj(v) * y) over every floating output.
double Loss(const std::vector<Tensor>& ys, const std::vector<Tensor>& vs) {
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
void ExpectMatchesNumeric(const Check& c) {
  SCOPED_TRACE(c.op);
  auto ys = test::RunOp(c.op, c.attrs, c.inputs);
  ASSERT_TRUE(ys.ok()) << ys.status();
  std::vector<Tensor> vs;
  for (size_t o = 0; o < ys->size(); ++o) {
    const Tensor& y = (*ys)[o];
    vs.push_back(IsFloating(y.dtype()) ? Random(y.dtype(), y.shape(), 100 + o)
                                       : Tensor(y.dtype(), y.shape()));
    if (!IsFloating(y.dtype())) vs.back().flat<int32>().setZero();
  }
  auto grads = test::RunSymbolicGradient(c.op, c.attrs, c.inputs, vs);
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
        auto yp = test::RunOp(c.op, c.attrs, plus, {test::RunPath::kKernel});
        auto ym = test::RunOp(c.op, c.attrs, minus, {test::RunPath::kKernel});
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
  auto grads32 = test::RunSymbolicGradient(
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

Tensor Lengths(std::vector<int32> n) {
  return test::AsTensor<int32>(n, TensorShape({static_cast<int64_t>(n.size())}));
}

// ---------------------------------------------------------------------------------------------
// Spectral ops.

TEST(SpectralGrads, ComplexTransforms) {
  for (const bool inverse : {false, true}) {
    const std::string p = inverse ? "IFFT" : "FFT";
    ExpectMatchesNumeric({p, {}, {Random(DT_COMPLEX128, {2, 6}, 1)}});
    ExpectMatchesNumeric({p, {}, {Random(DT_COMPLEX128, {5}, 2)}});
    ExpectMatchesNumeric({p + "2D", {}, {Random(DT_COMPLEX128, {2, 3, 4}, 3)}});
    ExpectMatchesNumeric({p + "2D", {}, {Random(DT_COMPLEX128, {3, 5}, 4)}});
    ExpectMatchesNumeric({p + "3D", {}, {Random(DT_COMPLEX128, {2, 2, 3}, 5)}});
    ExpectMatchesNumeric({p + "3D", {}, {Random(DT_COMPLEX128, {2, 1, 3, 2}, 6)}});
  }
}

// Even and odd lengths, and inputs longer than fft_length (the op crops them; Python's
// gradient fails there).
TEST(SpectralGrads, RealTransforms) {
  const OpAttrs d = {{"Tcomplex", DT_COMPLEX128}}, f = {{"Tcomplex", DT_COMPLEX64}};
  struct Case { std::string op; TensorShape shape; std::vector<int32> n; };
  for (const Case& k : std::vector<Case>{
           {"RFFT", {2, 6}, {6}}, {"RFFT", {7}, {7}}, {"RFFT", {2, 7}, {5}},
           {"RFFT", {2, 9}, {6}}, {"RFFT2D", {2, 3, 4}, {3, 4}}, {"RFFT2D", {3, 5}, {3, 5}},
           {"RFFT2D", {4, 6}, {3, 4}}, {"RFFT3D", {2, 3, 4}, {2, 3, 4}},
           {"RFFT3D", {1, 3, 3, 6}, {2, 2, 5}}}) {
    ExpectMatchesNumeric({k.op, d, {Random(DT_DOUBLE, k.shape, 7), Lengths(k.n)}, {1}, f});
  }
}

TEST(SpectralGrads, InverseRealTransforms) {
  const OpAttrs d = {{"Treal", DT_DOUBLE}}, f = {{"Treal", DT_FLOAT}};
  struct Case { std::string op; TensorShape shape; std::vector<int32> n; };
  for (const Case& k : std::vector<Case>{
           {"IRFFT", {2, 4}, {6}}, {"IRFFT", {4}, {7}}, {"IRFFT", {2, 6}, {6}},
           {"IRFFT", {2, 6}, {7}}, {"IRFFT2D", {2, 3, 3}, {3, 4}}, {"IRFFT2D", {3, 3}, {3, 5}},
           {"IRFFT2D", {4, 4}, {3, 4}}, {"IRFFT3D", {2, 3, 3}, {2, 3, 4}},
           {"IRFFT3D", {1, 3, 2, 4}, {2, 2, 5}}}) {
    ExpectMatchesNumeric({k.op, d, {Random(DT_COMPLEX128, k.shape, 8), Lengths(k.n)}, {1}, f});
  }
}

// ---------------------------------------------------------------------------------------------
// Image ops.

TEST(ImageGrads, ExtractImagePatches) {
  const auto attrs = [](std::vector<int> k, std::vector<int> s, std::vector<int> r,
                        const char* padding) -> OpAttrs {
    return {{"ksizes", k}, {"strides", s}, {"rates", r}, {"padding", padding}};
  };
  ExpectMatchesNumeric({"ExtractImagePatches", attrs({1, 3, 3, 1}, {1, 2, 2, 1}, {1, 1, 1, 1},
                                                     "SAME"),
                        {Random(DT_DOUBLE, {2, 5, 5, 2}, 9)}});
  ExpectMatchesNumeric({"ExtractImagePatches", attrs({1, 2, 3, 1}, {1, 1, 2, 1}, {1, 2, 1, 1},
                                                     "VALID"),
                        {Random(DT_DOUBLE, {1, 5, 6, 3}, 10)}});
}

TEST(ImageGrads, ExtractVolumePatches) {
  const auto attrs = [](std::vector<int> k, std::vector<int> s, const char* padding) -> OpAttrs {
    return {{"ksizes", k}, {"strides", s}, {"padding", padding}};
  };
  ExpectMatchesNumeric({"ExtractVolumePatches", attrs({1, 2, 2, 2, 1}, {1, 2, 1, 2, 1}, "SAME"),
                        {Random(DT_DOUBLE, {1, 3, 3, 4, 2}, 11)}});
  ExpectMatchesNumeric({"ExtractVolumePatches", attrs({1, 2, 3, 1, 1}, {1, 1, 2, 1, 1}, "VALID"),
                        {Random(DT_DOUBLE, {2, 3, 4, 2, 1}, 12)}});
}

// Integer shifts: the warp is a permutation (with zero fill), whose adjoint is exactly the
// inverse warp Python's gradient applies. Other transforms: the comparisons with Python. The
// kernel interpolates in float even for double images; the op is linear in the images, so a
// large step differences it exactly.
TEST(ImageGrads, ImageProjectiveTransformShifts) {
  const Tensor shift = test::AsTensor<float>({1, 0, 1, 0, 1, -2, 0, 0}, TensorShape({1, 8}));
  const Tensor hw = test::AsTensor<int32>({4, 5}, TensorShape({2}));
  for (const char* interpolation : {"NEAREST", "BILINEAR"}) {
    const OpAttrs a = {{"interpolation", interpolation}, {"fill_mode", "CONSTANT"}};
    ExpectMatchesNumeric({"ImageProjectiveTransformV2", a,
                          {Random(DT_DOUBLE, {2, 4, 5, 2}, 13), shift, hw}, {1, 2}, {}, 0.5,
                          1e-6});
    ExpectMatchesNumeric({"ImageProjectiveTransformV3", a,
                          {Random(DT_DOUBLE, {2, 4, 5, 2}, 14), shift, hw,
                           test::AsTensor<float>({0.5f})},
                          {1, 2, 3}, {}, 0.5, 1e-6});
  }
}

// Inputs in (0, 1] with no two channels equal (no ties: each case of the piecewise formula is
// differentiable there), every channel the largest and the smallest somewhere.
TEST(ImageGrads, RgbToHsv) {
  ExpectMatchesNumeric({"RGBToHSV", {}, {Random(DT_DOUBLE, {4, 5, 3}, 15, 0.05, 1.0)}});
  ExpectMatchesNumeric({"RGBToHSV", {}, {Random(DT_DOUBLE, {7, 3}, 16, 0.2, 0.9)}});
}

}  // namespace
}  // namespace tensorflow::tf_ext
