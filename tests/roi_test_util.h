// Inputs shared by the ROI ops' tests (status checks and runners: test_util.h, op_runner.h).
#ifndef TESTS_ROI_TEST_UTIL_H_
#define TESTS_ROI_TEST_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/types.h"

namespace tensorflow::tf_ext::test {

// Values (k - n/2) * 0.1 for k = 0..n-1 in random order: distinct and 0.1 apart, so a max is
// unique and a finite-difference step cannot change which element wins.
template <typename T>
Tensor DistinctValues(const TensorShape& shape, std::mt19937* rng) {
  Tensor t(DataTypeToEnum<T>::value, shape);
  auto f = t.flat<T>();
  std::vector<int64_t> k(f.size());
  std::iota(k.begin(), k.end(), 0);
  std::shuffle(k.begin(), k.end(), *rng);
  for (int64_t i = 0; i < f.size(); ++i) {
    f(i) = static_cast<T>(static_cast<double>(k[i] - f.size() / 2) * 0.1);
  }
  return t;
}

template <typename T>
Tensor UniformValues(const TensorShape& shape, std::mt19937* rng, double lo = -1, double hi = 1) {
  Tensor t(DataTypeToEnum<T>::value, shape);
  std::uniform_real_distribution<double> u(lo, hi);
  auto f = t.flat<T>();
  for (int64_t i = 0; i < f.size(); ++i) f(i) = static_cast<T>(u(*rng));
  return t;
}

template <typename T>
Tensor Filled(const TensorShape& shape, T value) {
  Tensor t(DataTypeToEnum<T>::value, shape);
  t.flat<T>().setConstant(value);
  return t;
}

// A `dtype` tensor of zeros (all-zero bytes: 0 for every numeric dtype).
inline Tensor Zeros(DataType dtype, const TensorShape& shape) {
  Tensor t(dtype, shape);
  if (t.TotalBytes() > 0) std::memset(t.data(), 0, t.TotalBytes());
  return t;
}

// rois [rows.size(), 5] from explicit rows.
inline Tensor Rois(const std::vector<std::vector<float>>& rows) {
  Tensor t(DT_FLOAT, TensorShape({static_cast<int64_t>(rows.size()), 5}));
  for (size_t r = 0; r < rows.size(); ++r) {
    for (int k = 0; k < 5; ++k) t.matrix<float>()(r, k) = rows[r][k];
  }
  return t;
}

// `num_rois` random ROIs in input-image coordinates for images of image_h x image_w pixels
// (feature map size / spatial_scale): mostly inside, some partly or fully outside, some
// degenerate (x2 < x1), over random images in [0, num_images).
inline Tensor RandomRois(std::mt19937* rng, int64_t num_rois, int64_t num_images, float image_h,
                         float image_w) {
  Tensor t(DT_FLOAT, TensorShape({num_rois, 5}));
  auto m = t.matrix<float>();
  std::uniform_int_distribution<int64_t> image(0, std::max<int64_t>(num_images - 1, 0));
  std::uniform_real_distribution<float> u(-0.4f, 1.4f);
  std::uniform_int_distribution<int> kind(0, 9);
  for (int64_t r = 0; r < num_rois; ++r) {
    m(r, 0) = static_cast<float>(image(*rng));
    float x1 = u(*rng) * image_w, x2 = u(*rng) * image_w;
    float y1 = u(*rng) * image_h, y2 = u(*rng) * image_h;
    const int k = kind(*rng);
    if (k < 7) {  // ordered corners (the usual case)
      if (x2 < x1) std::swap(x1, x2);
      if (y2 < y1) std::swap(y1, y2);
    } else if (k == 7) {  // far outside
      x1 = -3 * image_w;
      x2 = -2 * image_w;
    }  // else: possibly reversed corners, i.e. a degenerate ROI
    m(r, 1) = x1;
    m(r, 2) = y1;
    m(r, 3) = x2;
    m(r, 4) = y2;
  }
  return t;
}

}  // namespace tensorflow::tf_ext::test

#endif  // TESTS_ROI_TEST_UTIL_H_
