// The manifest's storage, registration, JSON and C entry point. The declarations themselves
// live beside each op's gradient (tf_ext/grads/*_grad.cc); tests/manifest_test.cc checks that
// every op registered under "TfExt>" is declared exactly once and that every C++ registry
// agrees with its declaration.
#include "tf_ext/grads/manifest.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/platform/logging.h"
#include "tf_ext/grads/registry.h"
#include "tf_ext/grads/single_copy.h"
#include "tf_ext/grads/unify.h"

namespace tensorflow::tf_ext {
namespace {

struct Manifest {
  std::mutex mu;
  std::map<std::string, OpFacts> by_op;
};

Manifest& TheManifest() {
  static Manifest* m = new Manifest;
  return *m;
}

std::vector<std::string> ToStrings(std::initializer_list<const char*> names) {
  return std::vector<std::string>(names.begin(), names.end());
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      absl::StrAppend(&out, "\\u00", absl::Hex(c, absl::kZeroPad2));
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string JsonList(const std::vector<std::string>& items) {
  std::vector<std::string> quoted;
  for (const std::string& s : items) quoted.push_back(JsonString(s));
  return absl::StrCat("[", absl::StrJoin(quoted, ", "), "]");
}

}  // namespace

OpDeclaration& OpDeclaration::Doc(const char* line) {
  facts_.doc = line;
  return *this;
}
OpDeclaration& OpDeclaration::Python(const char* function) {
  facts_.python = function;
  return *this;
}
OpDeclaration& OpDeclaration::Gradient(GradientFn fn, const char* rule) {
  facts_.differentiability = Differentiability::kGradient;
  facts_.gradient = fn;
  facts_.rule = rule;
  return *this;
}
OpDeclaration& OpDeclaration::BackwardOf(const char* forward_op) {
  facts_.differentiability = Differentiability::kBackwardOp;
  facts_.backward_of = forward_op;
  facts_.rule = BackwardOpMessage(facts_);
  return *this;
}
OpDeclaration& OpDeclaration::NotDifferentiableOp(const char* why) {
  facts_.differentiability = Differentiability::kNotDifferentiable;
  facts_.rule = why;
  return *this;
}
OpDeclaration& OpDeclaration::Types(std::initializer_list<DataType> types, const char* type_attr) {
  facts_.types = types;
  facts_.type_attr = type_attr;
  return *this;
}
OpDeclaration& OpDeclaration::NotDifferentiable(std::initializer_list<const char*> inputs) {
  facts_.not_differentiable = ToStrings(inputs);
  return *this;
}
OpDeclaration& OpDeclaration::Reads(std::initializer_list<const char*> inputs) {
  facts_.reads = ToStrings(inputs);
  return *this;
}
OpDeclaration& OpDeclaration::IgnoresGradientOf(std::initializer_list<const char*> outputs) {
  facts_.ignored_output_grads = ToStrings(outputs);
  return *this;
}
OpDeclaration& OpDeclaration::Surrogate(GradientFn fn) {
  facts_.surrogate_forward = fn;
  return *this;
}
OpDeclaration& OpDeclaration::Overrides(const char* defect) {
  facts_.overrides = defect;
  return *this;
}
OpDeclaration& OpDeclaration::Xla(const char* unchecked) {
  facts_.xla = true;
  facts_.xla_note = unchecked;
  return *this;
}
OpDeclaration& OpDeclaration::NoXla(const char* why) {
  facts_.xla = false;
  facts_.xla_note = why;
  return *this;
}
OpDeclaration& OpDeclaration::GradCheck(const char* spec) {
  facts_.gradcheck = spec;
  return *this;
}

bool OpDeclaration::Register() const {
  // A second copy of the library registers nothing (its load fails; see single_copy.h).
  if (!IsFirstCopy()) return false;
  {
    Manifest& m = TheManifest();
    std::lock_guard<std::mutex> lock(m.mu);
    if (!m.by_op.emplace(facts_.op, facts_).second) {
      LOG(ERROR) << "tf_ext: " << facts_.op << " is declared twice; keeping the first";
      return false;
    }
  }
  RegisterOpFacts(facts_);
  // Loading the library also makes every TensorFlow op differentiable through both C++
  // registries (see unify.h): tf_ext_grad, Sessions and TF_AddGradients then agree. Once, at
  // the first declaration: it never touches ops declared later (they are in no registry yet).
  static const bool unified [[maybe_unused]] = [] {
    if (absl::Status s = UnifyGradientRegistries(); !s.ok()) {
      LOG(ERROR) << "tf_ext: unifying the gradient registries failed: " << s;
    }
    return true;
  }();
  return true;
}

namespace {

std::vector<OpFacts> ManifestEntries(bool overrides) {
  Manifest& m = TheManifest();
  std::lock_guard<std::mutex> lock(m.mu);
  std::vector<OpFacts> out;
  for (const auto& [op, facts] : m.by_op) {
    if (facts.overrides.empty() != overrides) out.push_back(facts);
  }
  return out;
}

}  // namespace

std::vector<OpFacts> GradientManifest() { return ManifestEntries(/*overrides=*/false); }

std::vector<OpFacts> GradientOverrides() { return ManifestEntries(/*overrides=*/true); }

std::string GradientOverridesJson() {
  std::vector<std::string> entries;
  for (const OpFacts& f : GradientOverrides()) {
    entries.push_back(absl::StrCat("{\"op\": ", JsonString(f.op), ", \"defect\": ",
                                   JsonString(f.overrides), ", \"rule\": ", JsonString(f.rule),
                                   "}"));
  }
  return absl::StrCat("[", absl::StrJoin(entries, ",\n "), "]");
}

const OpFacts* FindOpFacts(const std::string& op) {
  Manifest& m = TheManifest();
  std::lock_guard<std::mutex> lock(m.mu);
  auto it = m.by_op.find(op);
  return it == m.by_op.end() ? nullptr : &it->second;  // entries are never removed
}

std::string ManifestJson() {
  std::vector<std::string> entries;
  for (const OpFacts& f : GradientManifest()) {
    std::vector<std::string> types;
    for (DataType t : f.types) types.push_back(DataTypeString(t));
    entries.push_back(absl::StrCat(
        "{\"op\": ", JsonString(f.op), ", \"doc\": ", JsonString(f.doc),
        ", \"python\": ", JsonString(f.python),
        ", \"differentiability\": ", JsonString(DifferentiabilityName(f.differentiability)),
        ", \"rule\": ", JsonString(f.rule), ", \"type_attr\": ", JsonString(f.type_attr),
        ", \"types\": ", JsonList(types),
        ", \"not_differentiable\": ", JsonList(f.not_differentiable),
        ", \"reads\": ", JsonList(f.reads),
        ", \"ignored_output_grads\": ", JsonList(f.ignored_output_grads),
        ", \"backward_of\": ", JsonString(f.backward_of),
        ", \"gradcheck\": ", JsonString(f.gradcheck),
        ", \"has_surrogate\": ", f.surrogate_forward != nullptr ? "true" : "false",
        ", \"xla\": ", f.xla ? "true" : "false", ", \"xla_note\": ", JsonString(f.xla_note),
        "}"));
  }
  return absl::StrCat("[", absl::StrJoin(entries, ",\n "), "]");
}

std::string ManifestGradCheckSpecs() {
  std::string out;
  for (const OpFacts& f : GradientManifest()) {
    if (f.differentiability != Differentiability::kGradient) continue;
    absl::StrAppend(&out, f.op, " ", f.gradcheck);
    if (!f.not_differentiable.empty()) {
      absl::StrAppend(&out, " nondiff=", absl::StrJoin(f.not_differentiable, ","));
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

// The library's own utility op: not differentiable (it returns a serialized FunctionDef).
TF_EXT_DECLARE_OP("TfExt>GradientFunctionDef")
    .Doc("The gradient FunctionDef of a serialized NodeDef's op, specialised to its attrs.")
    .NotDifferentiableOp("utility op (returns a serialized FunctionDef)")
    .NoXla("host code over strings (it reads the C++ gradient registry), which XLA cannot hold")
    .Register();

}  // namespace tensorflow::tf_ext

namespace {

size_t CopyOut(const std::string& text, char* buffer, size_t len) {
  if (buffer != nullptr && len > 0) {
    const size_t n = std::min(len - 1, text.size());
    std::memcpy(buffer, text.data(), n);
    buffer[n] = '\0';
  }
  return text.size();
}

}  // namespace

extern "C" size_t TfExtManifestJson(char* buffer, size_t len) {
  return CopyOut(tensorflow::tf_ext::ManifestJson(), buffer, len);
}

extern "C" size_t TfExtGradientOverridesJson(char* buffer, size_t len) {
  return CopyOut(tensorflow::tf_ext::GradientOverridesJson(), buffer, len);
}

extern "C" size_t TfExtGradCheckSpecs(char* buffer, size_t len) {
  return CopyOut(tensorflow::tf_ext::ManifestGradCheckSpecs(), buffer, len);
}
