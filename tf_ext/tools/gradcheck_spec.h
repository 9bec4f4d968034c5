// Input specs for tf_ext_gradcheck: how to build valid random inputs for an op whose signature
// alone does not say (shapes, value ranges, ROI rows, integer arguments, attrs).
//
// One op per line, whitespace-separated tokens, '#' starts a comment:
//   OP [INPUT=SPEC]... [attr.NAME=VALUE]... [nondiff=IN1,IN2] [dtypes=float,double]
// INPUT SPEC:
//   2x3            random distinct values in the default range; "scalar" for rank 0
//   2x3@-1:1       ... in [-1, 1]
//   values:1,0     exactly these values, 1-D
//   scalar:1       a rank-0 tensor with this value
//   rois:R         R rows (batch, x1, y1, x2, y2) inside the op's first NHWC input
// Inputs not named get shape 2x3. VALUE is parsed by the attr's type: int, float, bool,
// string, type (float/double/...), list(int) as [1,2].
#ifndef TF_EXT_TOOLS_GRADCHECK_SPEC_H_
#define TF_EXT_TOOLS_GRADCHECK_SPEC_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/op_def.pb.h"
#include "tensorflow/core/framework/tensor.h"

namespace tensorflow::tf_ext::tools {

struct InputSpec {
  enum Kind { kRandom, kValues, kRois } kind = kRandom;
  std::vector<int64_t> shape = {2, 3};
  bool scalar = false;
  double lo = 0.1, hi = 0.9;       // kRandom range
  std::vector<double> values;      // kValues
  int64_t rois = 0;                // kRois
};

struct OpSpec {
  std::string op;
  std::map<std::string, InputSpec> inputs;
  std::map<std::string, std::string> attrs;   // raw text, parsed against the OpDef
  std::vector<std::string> nondiff;
  std::vector<std::string> dtypes;            // empty: float and double where allowed
};

absl::StatusOr<std::map<std::string, OpSpec>> ParseSpecs(const std::string& text);

// Parses `text` as a value of attr `def` (e.g. "[3,3]" for list(int)).
absl::StatusOr<AttrValue> ParseAttrValue(const OpDef::AttrDef& def, const std::string& text);

// Builds one input per the spec for `dtype`. Random values are distinct and at least
// (hi-lo)/(2n) apart, so order-statistics ops (max, median) have no ties for a small
// finite-difference step to cross. `image_shape` (N,H,W,C) is used by kRois.
absl::StatusOr<Tensor> MakeInput(const InputSpec& spec, DataType dtype,
                                 const std::vector<int64_t>& image_shape, uint64_t seed);

// One call of an op built from its spec: the attrs (type_attr = dtype, then the spec's) and
// inputs. `problem` (instead of an error status) says why the op cannot be instantiated from
// the spec, e.g. an integer input without a spec.
struct OpInstance {
  std::vector<std::pair<std::string, AttrValue>> attrs;
  std::vector<Tensor> inputs;
  std::string problem;
};
// type_attr: the op's first input's type attr ("" for fixed types); dtype: its value.
// batch_zero: every spec'd shape's first dimension 0 and no ROI rows (empty inputs).
OpInstance BuildOpInstance(const OpDef& def, const OpSpec* spec, const std::string& type_attr,
                           DataType dtype, uint64_t seed, bool batch_zero = false);

}  // namespace tensorflow::tf_ext::tools

#endif  // TF_EXT_TOOLS_GRADCHECK_SPEC_H_
