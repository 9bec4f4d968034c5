#include "tf_ext/ops/op_checks.h"

#include <atomic>
#include <cstring>
#include <mutex>

#include "absl/strings/str_join.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_def.pb.h"

namespace tensorflow::tf_ext {

float FlushDenormal(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  if ((bits & 0x7F800000u) == 0) bits &= 0x80000000u;  // exponent 0: zero or denormal
  std::memcpy(&v, &bits, sizeof(bits));
  return v;
}

double FlushDenormal(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  if ((bits & 0x7FF0000000000000ull) == 0) bits &= 0x8000000000000000ull;
  std::memcpy(&v, &bits, sizeof(bits));
  return v;
}

namespace {

// The attr's value: the node's, else the OpDef's default; nullptr with *status set if neither.
const AttrValue* FindAttr(std::string_view op_type, const AttrSlice& attrs, const char* name,
                          absl::Status* status) {
  if (const AttrValue* v = attrs.Find(name)) return v;
  const OpDef* op_def = nullptr;
  if (OpRegistry::Global()->LookUpOpDef(std::string(op_type), &op_def).ok()) {
    for (const auto& a : op_def->attr()) {
      if (a.name() == name && a.has_default_value()) return &a.default_value();
    }
  }
  *status = OpInvalid(op_type, "attr '", name, "' is missing");
  return nullptr;
}

template <typename V>
absl::Status ReadTyped(std::string_view op_type, const AttrSlice& attrs, const char* name,
                       V* value) {
  absl::Status s;
  const AttrValue* v = FindAttr(op_type, attrs, name, &s);
  if (v == nullptr) return s;
  AttrValueMap one;
  one[name] = *v;
  s = GetNodeAttr(AttrSlice(&one), name, value);
  if (!s.ok()) return OpInvalid(op_type, "attr '", name, "': ", s.message());
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadAttr(std::string_view op_type, const AttrSlice& attrs, const char* name,
                      int64_t* value) {
  return ReadTyped(op_type, attrs, name, value);
}

absl::Status ReadAttr(std::string_view op_type, const AttrSlice& attrs, const char* name,
                      float* value) {
  TF_RETURN_IF_ERROR(ReadTyped(op_type, attrs, name, value));
  *value = FlushDenormal(*value);
  return absl::OkStatus();
}

absl::Status ReadAttr(std::string_view op_type, const AttrSlice& attrs, const char* name,
                      std::string* value) {
  return ReadTyped(op_type, attrs, name, value);
}

absl::Status ReadAttr(std::string_view op_type, const AttrSlice& attrs, const char* name,
                      std::vector<int64_t>* value) {
  return ReadTyped(op_type, attrs, name, value);
}

absl::Status CheckedMul(std::string_view op_type, std::string_view what, int64_t a, int64_t b,
                        int64_t* out) {
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, out)) {
    return OpInvalid(op_type, what, " overflows (", a, " * ", b, ")");
  }
  return absl::OkStatus();
}

absl::Status CheckRank(std::string_view op_type, std::string_view name,
                       const PartialTensorShape& shape, int rank, std::string_view layout) {
  if (shape.unknown_rank() || shape.dims() == rank) return absl::OkStatus();
  return OpInvalid(op_type, name, " must have rank ", rank, layout.empty() ? "" : " (",
                   layout, layout.empty() ? "" : ")", ", got shape ", shape.DebugString());
}

absl::Status CheckCompatible(std::string_view op_type, std::string_view name,
                             const PartialTensorShape& got, const PartialTensorShape& want,
                             std::string_view layout) {
  if (got.IsCompatibleWith(want)) return absl::OkStatus();
  return OpInvalid(op_type, name, " must have shape ", want.DebugString(),
                   layout.empty() ? "" : " (", layout, layout.empty() ? "" : ")", ", got ",
                   got.DebugString());
}

absl::Status MakeShape(std::string_view op_type, std::string_view name,
                       const std::vector<int64_t>& dims, PartialTensorShape* out) {
  int64_t known = 1;
  for (int64_t d : dims) {
    if (d >= 0 && __builtin_mul_overflow(known, d, &known)) {
      return OpInvalid(op_type, name, " would have shape [", absl::StrJoin(dims, ","),
                       "], whose element count overflows int64");
    }
  }
  absl::Status s = PartialTensorShape::BuildPartialTensorShape(dims, out);
  if (!s.ok()) return OpInvalid(op_type, name, ": ", s.message());
  return absl::OkStatus();
}

namespace {

std::atomic<void (*)()> first_shape_fn_hook{nullptr};

void RunFirstShapeFnHook() {
  static std::once_flag once;
  void (*hook)() = first_shape_fn_hook.load();
  if (hook != nullptr) std::call_once(once, hook);
}

}  // namespace

void SetFirstShapeFnHook(void (*hook)()) { first_shape_fn_hook.store(hook); }

AttrValueMap ShapeFnAttrs(shape_inference::InferenceContext* c, std::string_view op_type) {
  RunFirstShapeFnHook();
  AttrValueMap attrs;
  const OpDef* op_def = nullptr;
  if (!OpRegistry::Global()->LookUpOpDef(std::string(op_type), &op_def).ok()) return attrs;
  for (const auto& a : op_def->attr()) {
    if (const AttrValue* v = c->GetAttr(a.name())) attrs[a.name()] = *v;
  }
  return attrs;
}

PartialTensorShape InputShape(shape_inference::InferenceContext* c, int i) {
  const shape_inference::ShapeHandle h = c->input(i);
  if (!c->RankKnown(h)) return PartialTensorShape();
  std::vector<int64_t> dims(c->Rank(h));
  for (int k = 0; k < c->Rank(h); ++k) dims[k] = c->Value(c->Dim(h, k));
  PartialTensorShape out;
  // Dims come from a valid graph (each < 2^63); only an overflowing product could fail, which
  // the per-op checks report. Fall back to an unknown shape rather than guessing.
  if (!PartialTensorShape::BuildPartialTensorShape(dims, &out).ok()) return PartialTensorShape();
  return out;
}

absl::Status SetOutputShape(shape_inference::InferenceContext* c, int i,
                            const PartialTensorShape& shape) {
  shape_inference::ShapeHandle h;
  TF_RETURN_IF_ERROR(c->MakeShapeFromPartialTensorShape(shape, &h));
  c->set_output(i, h);
  return absl::OkStatus();
}

}  // namespace tensorflow::tf_ext
