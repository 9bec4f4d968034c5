// Building blocks of the per-op validation functions (Validate<Op>Attrs / Validate<Op>Shapes,
// declared in each family's ops/<family>_ops.h). Every op's validation is written once, on
// plain values: attrs come as an AttrSlice, shapes as PartialTensorShape (unknown rank or
// dims = -1), so the shape function, the kernel and the gradient creator all call the same
// function and graph mode and eager mode accept exactly the same calls.
//
// Conventions: every failure is InvalidArgument and starts with "<op type>: "; arithmetic on
// attrs and dims is overflow-checked; float attrs are read as the kernel sees them, with
// denormals flushed to zero (TensorFlow runs CPU kernels with FTZ/DAZ on).
#ifndef TF_EXT_OPS_OP_CHECKS_H_
#define TF_EXT_OPS_OP_CHECKS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/platform/statusor.h"  // TF_ASSIGN_OR_RETURN, for ShapeFnValidAttrs

namespace tensorflow::tf_ext {

// InvalidArgument("<op_type>: <pieces...>").
template <typename... Args>
absl::Status OpInvalid(std::string_view op_type, const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat(op_type, ": ", args...));
}

// `v` with a denormal mapped to a zero of the same sign: the value a kernel running with
// flush-to-zero / denormals-are-zero sees. Works on the bits, so it gives the same answer
// whether or not the calling thread has FTZ/DAZ on.
float FlushDenormal(float v);
double FlushDenormal(double v);

// Reads attr `name` of op_type from `attrs`, else the OpDef's default. A missing attr without
// default, or a value of the wrong type, is an InvalidArgument naming op and attr.
absl::Status ReadAttr(std::string_view op_type, const AttrSlice& attrs, const char* name,
                      int64_t* value);
absl::Status ReadAttr(std::string_view op_type, const AttrSlice& attrs, const char* name,
                      float* value);  // flushed with FlushDenormal
absl::Status ReadAttr(std::string_view op_type, const AttrSlice& attrs, const char* name,
                      std::string* value);
absl::Status ReadAttr(std::string_view op_type, const AttrSlice& attrs, const char* name,
                      std::vector<int64_t>* value);

// *out = a * b (both >= 0), or an InvalidArgument "<op>: <what> overflows (a * b)".
absl::Status CheckedMul(std::string_view op_type, std::string_view what, int64_t a, int64_t b,
                        int64_t* out);

// Fails unless `shape` can have rank `rank` (an unknown rank passes).
absl::Status CheckRank(std::string_view op_type, std::string_view name,
                       const PartialTensorShape& shape, int rank, std::string_view layout = "");

// Fails unless `got` is compatible with `want` (same rank, equal known dims).
absl::Status CheckCompatible(std::string_view op_type, std::string_view name,
                             const PartialTensorShape& got, const PartialTensorShape& want,
                             std::string_view layout = "");

// A PartialTensorShape from known-or-unknown dims (-1), failing if the element count of a
// fully known shape overflows int64.
absl::Status MakeShape(std::string_view op_type, std::string_view name,
                       const std::vector<int64_t>& dims, PartialTensorShape* out);

// A kernel's (fully known) input shape, for the per-op shape checks.
inline PartialTensorShape Partial(const TensorShape& s) { return PartialTensorShape(s.dim_sizes()); }

// Dim `i` of a shape of known rank, -1 if unknown.
inline int64_t DimOf(const PartialTensorShape& s, int i) {
  return s.unknown_rank() ? -1 : s.dim_size(i);
}

// Shape function side: the node's attrs (those op_type's OpDef declares; the context has no
// AttrSlice accessor), input `i` as a PartialTensorShape, and the reverse.
AttrValueMap ShapeFnAttrs(shape_inference::InferenceContext* c, std::string_view op_type);

// `hook` runs once, in the first shape function of a tf_ext op to run in the process (through
// ShapeFnAttrs): after the library's load has completed, and before anything compiles a graph
// holding the op. tf_ext/xla/xla_registration.cc registers the XLA kernels through it. Set at
// load time; one hook.
void SetFirstShapeFnHook(void (*hook)());
PartialTensorShape InputShape(shape_inference::InferenceContext* c, int i);
absl::Status SetOutputShape(shape_inference::InferenceContext* c, int i,
                            const PartialTensorShape& shape);

// The node's attrs as checked by the op's own `validate` (ValidateFooAttrs, the check its
// kernel runs), so a bad attr fails at graph construction with the kernel's message.
template <typename A>
absl::StatusOr<A> ShapeFnValidAttrs(
    shape_inference::InferenceContext* c, std::string_view op_type,
    absl::Status (*validate)(std::string_view, const AttrSlice&, A*)) {
  const AttrValueMap attrs = ShapeFnAttrs(c, op_type);
  A a;
  absl::Status s = validate(op_type, AttrSlice(&attrs), &a);
  if (!s.ok()) return s;
  return a;
}

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_OPS_OP_CHECKS_H_
