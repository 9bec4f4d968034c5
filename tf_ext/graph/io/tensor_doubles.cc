#include "tf_ext/graph/io/tensor_doubles.h"

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/types.h"

namespace tensorflow::tf_ext {

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

bool IsComplexType(DataType dtype) { return dtype == DT_COMPLEX64 || dtype == DT_COMPLEX128; }

bool IsDifferencedType(DataType dtype) {
  return IsFloatingPoint(dtype) || IsComplexType(dtype);
}

int RealsPerElement(DataType dtype) { return IsComplexType(dtype) ? 2 : 1; }

namespace {

template <typename C>
void Interleave(const Tensor& t, std::vector<double>* v) {
  auto f = t.flat<C>();
  v->resize(2 * f.size());
  for (int64_t i = 0; i < f.size(); ++i) {
    (*v)[2 * i] = f(i).real();
    (*v)[2 * i + 1] = f(i).imag();
  }
}

template <typename C>
void Deinterleave(const std::vector<double>& v, Tensor* t) {
  auto f = t->flat<C>();
  using R = typename C::value_type;
  for (int64_t i = 0; i < f.size(); ++i) {
    f(i) = C(static_cast<R>(v[2 * i]), static_cast<R>(v[2 * i + 1]));
  }
}

}  // namespace

std::vector<double> ToReals(const Tensor& t) {
  std::vector<double> v;
  if (t.dtype() == DT_COMPLEX64) {
    Interleave<complex64>(t, &v);
  } else if (t.dtype() == DT_COMPLEX128) {
    Interleave<complex128>(t, &v);
  } else {
    v = ToDoubles(t);
  }
  return v;
}

absl::StatusOr<Tensor> FromReals(DataType dtype, const TensorShape& shape,
                                 const std::vector<double>& values) {
  if (!IsComplexType(dtype)) return FromDoubles(dtype, shape, values);
  if (2 * shape.num_elements() != static_cast<int64_t>(values.size())) {
    return absl::InvalidArgumentError(absl::StrCat("complex shape ", shape.DebugString(),
                                                   " needs ", 2 * shape.num_elements(),
                                                   " reals, got ", values.size()));
  }
  Tensor t(dtype, shape);
  if (dtype == DT_COMPLEX64) {
    Deinterleave<complex64>(values, &t);
  } else {
    Deinterleave<complex128>(values, &t);
  }
  return t;
}

}  // namespace tensorflow::tf_ext
