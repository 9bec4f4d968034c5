// The C++ gradients tf_ext adds for TensorFlow's spectral and image ops (tf_ext/grads/tf/
// spectral_grad.cc, image_grad.cc) against numeric Jacobians, complex inputs included
// (tests/numeric_jacobian.h). Comparisons with Python's gradients:
// tests/python/test_tf_spectral_image_grads.py.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/numeric_jacobian.h"

namespace tensorflow::tf_ext {
namespace {

using test::Check;
using test::ExpectMatchesNumeric;
using test::Lengths;
using test::OpAttrs;
using test::Random;

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
