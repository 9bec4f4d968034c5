// Shared helpers for tf_ext's gtests: tensors from values, tensor comparison and the one
// check of the project's error convention (and of a call refused in every mode). Everything test-only lives in tf_ext::test (never
// tf_ext::testing, which would shadow gtest's ::testing inside tensorflow::tf_ext).
#ifndef TF_EXT_TESTS_TEST_UTIL_H_
#define TF_EXT_TESTS_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tf_ext/testing/op_runner.h"

// Fails the test (and returns) unless `expr` is an OK absl::Status; the status in the message.
#define TF_EXT_ASSERT_OK(expr)                       \
  do {                                               \
    const absl::Status status_ = (expr);             \
    ASSERT_TRUE(status_.ok()) << status_.ToString(); \
  } while (0)

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

// The project's convention for a rejected call: InvalidArgument, a message that starts with
// "<op>: " (the op type, so a user sees which op refused) and contains every fragment (the
// offending value, the rule it broke).
inline void ExpectInvalidArgument(const absl::Status& s, const std::string& op,
                                  const std::vector<std::string>& fragments = {}) {
  ASSERT_FALSE(s.ok()) << "expected an error from " << op;
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StartsWith(s.message(), op + ": ")) << "not \"" << op << ": ...\": " << s;
  for (const std::string& f : fragments) {
    EXPECT_TRUE(absl::StrContains(s.message(), f)) << "missing '" << f << "' in: " << s;
  }
}

// One bad call refused the same way everywhere it can be made: by the bare kernel (eager), by
// the shape function (a graph with constant inputs) and by the gradient creator
// (SymbolicGradient with dys = inputs: the ops this is used for are elementwise).
inline void ExpectRejectedByKernelShapeFnAndGradient(const std::string& op, const OpAttrs& attrs,
                                                     const std::vector<Tensor>& inputs,
                                                     const std::string& fragment) {
  ExpectInvalidArgument(RunOp(op, attrs, inputs, {RunPath::kKernel}).status(), op, {fragment});
  ExpectInvalidArgument(RunOp(op, attrs, inputs, {RunPath::kSessionConstants}).status(), op,
                        {fragment});
  ExpectInvalidArgument(RunSymbolicGradient(op, attrs, inputs, inputs).status(), op, {fragment});
}

}  // namespace tensorflow::tf_ext::test

#endif  // TF_EXT_TESTS_TEST_UTIL_H_
