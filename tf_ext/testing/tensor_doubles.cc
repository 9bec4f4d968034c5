#include "tf_ext/testing/tensor_doubles.h"

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/types.h"

namespace tensorflow::tf_ext::test {

#define TF_EXT_NUMERIC_TYPES(CASE)   \
  CASE(DT_FLOAT, float)              \
  CASE(DT_DOUBLE, double)            \
  CASE(DT_HALF, Eigen::half)         \
  CASE(DT_BFLOAT16, bfloat16)        \
  CASE(DT_INT32, int32)              \
  CASE(DT_INT64, int64_t)

bool IsFloatingPoint(DataType dtype) {
  return dtype == DT_FLOAT || dtype == DT_DOUBLE || dtype == DT_HALF || dtype == DT_BFLOAT16;
}

bool IsNumeric(DataType dtype) {
  switch (dtype) {
#define TF_EXT_CASE(DT, T) case DT:
    TF_EXT_NUMERIC_TYPES(TF_EXT_CASE)
#undef TF_EXT_CASE
    return true;
    default:
      return false;
  }
}

std::vector<double> ToDoubles(const Tensor& t) {
  std::vector<double> v;
  switch (t.dtype()) {
#define TF_EXT_CASE(DT, T)                                                    \
  case DT: {                                                                  \
    auto f = t.flat<T>();                                                     \
    v.resize(f.size());                                                       \
    for (int64_t i = 0; i < f.size(); ++i) v[i] = static_cast<double>(f(i));  \
    break;                                                                    \
  }
    TF_EXT_NUMERIC_TYPES(TF_EXT_CASE)
#undef TF_EXT_CASE
    default:
      break;
  }
  return v;
}

absl::StatusOr<Tensor> FromDoubles(DataType dtype, const TensorShape& shape,
                                   const std::vector<double>& values) {
  if (shape.num_elements() != static_cast<int64_t>(values.size())) {
    return absl::InvalidArgumentError(absl::StrCat("shape ", shape.DebugString(), " needs ",
                                                   shape.num_elements(), " values, got ",
                                                   values.size()));
  }
  Tensor t(dtype, shape);
  switch (dtype) {
#define TF_EXT_CASE(DT, T)                                                    \
  case DT: {                                                                  \
    auto f = t.flat<T>();                                                     \
    for (int64_t i = 0; i < f.size(); ++i) f(i) = static_cast<T>(values[i]);  \
    return t;                                                                 \
  }
    TF_EXT_NUMERIC_TYPES(TF_EXT_CASE)
#undef TF_EXT_CASE
    default:
      return absl::UnimplementedError(
          absl::StrCat("tensors of type ", DataTypeString(dtype), " are not supported"));
  }
}

#undef TF_EXT_NUMERIC_TYPES

}  // namespace tensorflow::tf_ext::test
