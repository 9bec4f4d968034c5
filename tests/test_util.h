// Small tensor helpers for tf_ext's gtests.
#ifndef TF_EXT_TESTS_TEST_UTIL_H_
#define TF_EXT_TESTS_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace tensorflow::tf_ext::test {

// A tensor of `values` with `shape` (1-D when shape is omitted).
template <typename T>
Tensor AsTensor(const std::vector<T>& values, TensorShape shape = {}) {
  if (shape.dims() == 0 && values.size() != 1) shape = TensorShape({static_cast<int64_t>(values.size())});
  Tensor t(DataTypeToEnum<T>::value, shape);
  EXPECT_EQ(t.NumElements(), static_cast<int64_t>(values.size()));
  auto f = t.flat<T>();
  for (int64_t i = 0; i < f.size() && i < static_cast<int64_t>(values.size()); ++i) f(i) = values[i];
  return t;
}

// Same dtype and shape, every element within `tol` (exact when tol == 0).
template <typename T>
void ExpectTensorNear(const Tensor& got, const Tensor& want, double tol = 0) {
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.shape(), want.shape()) << got.shape().DebugString() << " vs " << want.shape().DebugString();
  auto g = got.flat<T>();
  auto w = want.flat<T>();
  for (int64_t i = 0; i < g.size(); ++i) {
    EXPECT_LE(std::abs(static_cast<double>(g(i)) - static_cast<double>(w(i))), tol)
        << "element " << i << ": got " << g(i) << ", want " << w(i);
  }
}

}  // namespace tensorflow::tf_ext::test

#endif  // TF_EXT_TESTS_TEST_UTIL_H_
