// Reading and writing numeric tensors as doubles: the common currency of tf_ext's gradient
// checks and tools (float, double, half, bfloat16, int32, int64).
#ifndef TF_EXT_GRAPH_IO_TENSOR_DOUBLES_H_
#define TF_EXT_GRAPH_IO_TENSOR_DOUBLES_H_

#include <vector>

#include "absl/status/statusor.h"
#include "tensorflow/core/framework/tensor.h"

namespace tensorflow::tf_ext {

// float, double, half or bfloat16: the dtypes that have gradients (all numeric, below).
bool IsFloatingPoint(DataType dtype);

// Whether ToDoubles/FromDoubles handle `dtype`.
bool IsNumeric(DataType dtype);

// Every element of `t` as a double (empty for an unsupported dtype).
std::vector<double> ToDoubles(const Tensor& t);

// A `dtype` tensor of `shape` holding `values` (cast per element); fails for an unsupported
// dtype or a size mismatch.
absl::StatusOr<Tensor> FromDoubles(DataType dtype, const TensorShape& shape,
                                   const std::vector<double>& values);

// Complex tensors as real vectors, for numeric Jacobians: complex64/complex128 elements are
// two reals each (real part, then imaginary part), every other numeric dtype one.
bool IsComplexType(DataType dtype);
// Floating point or complex: the dtypes a gradient check differences.
bool IsDifferencedType(DataType dtype);
int RealsPerElement(DataType dtype);
// Like ToDoubles / FromDoubles, with complex elements interleaved as (re, im).
std::vector<double> ToReals(const Tensor& t);
absl::StatusOr<Tensor> FromReals(DataType dtype, const TensorShape& shape,
                                 const std::vector<double>& values);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_IO_TENSOR_DOUBLES_H_
