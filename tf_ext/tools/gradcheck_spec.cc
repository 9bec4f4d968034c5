#include "tf_ext/tools/gradcheck_spec.h"

#include <algorithm>
#include <complex>
#include <numeric>
#include <optional>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tensorflow/core/framework/types.h"
#include "tf_ext/graph/io/tensor_doubles.h"

namespace tensorflow::tf_ext::tools {
namespace {

absl::Status Bad(const std::string& what, const std::string& text) {
  return absl::InvalidArgumentError(absl::StrCat("gradcheck spec: bad ", what, " '", text, "'"));
}

absl::StatusOr<std::vector<double>> Numbers(absl::string_view text) {
  std::vector<double> out;
  for (absl::string_view v : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    double d;
    if (!absl::SimpleAtod(v, &d)) return Bad("number", std::string(v));
    out.push_back(d);
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> Shape(absl::string_view text, const std::string& whole) {
  std::vector<int64_t> shape;
  for (absl::string_view d : absl::StrSplit(text, 'x')) {
    int64_t v;
    if (!absl::SimpleAtoi(d, &v) || v < 0) return Bad("shape", whole);
    shape.push_back(v);
  }
  return shape;
}

absl::StatusOr<InputSpec> ParseInput(const std::string& text) {
  InputSpec s;
  absl::string_view t = text;
  if (absl::ConsumePrefix(&t, "values")) {
    s.kind = InputSpec::kValues;
    std::optional<std::vector<int64_t>> shape;
    if (absl::ConsumePrefix(&t, "[")) {  // values[2x3]:...
      const size_t close = t.find("]");
      if (close == absl::string_view::npos) return Bad("values shape", text);
      auto sh = Shape(t.substr(0, close), text);
      if (!sh.ok()) return sh.status();
      shape = *sh;
      t.remove_prefix(close + 1);
    }
    if (!absl::ConsumePrefix(&t, ":")) return Bad("values", text);
    auto v = Numbers(t);
    if (!v.ok()) return v.status();
    s.values = *v;
    s.shape = shape.value_or(std::vector<int64_t>{static_cast<int64_t>(s.values.size())});
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    if (n != static_cast<int64_t>(s.values.size())) {
      return Bad(absl::StrCat("values (", s.values.size(), " for ", n, " elements)"), text);
    }
    return s;
  }
  if (absl::ConsumePrefix(&t, "spd:")) {
    s.kind = InputSpec::kSpd;
    auto sh = Shape(t, text);
    if (!sh.ok()) return sh.status();
    s.shape = *sh;
    if (s.shape.size() == 1) s.shape.push_back(s.shape[0]);  // spd:N is N x N
    if (s.shape[s.shape.size() - 1] != s.shape[s.shape.size() - 2]) {
      return Bad("spd shape (square matrices)", text);
    }
    return s;
  }
  if (absl::ConsumePrefix(&t, "scalar:")) {
    s.kind = InputSpec::kValues;
    s.scalar = true;
    auto v = Numbers(t);
    if (!v.ok() || v->size() != 1) return Bad("scalar", text);
    s.values = *v;
    s.shape = {};
    return s;
  }
  if (absl::ConsumePrefix(&t, "rois:")) {
    s.kind = InputSpec::kRois;
    if (!absl::SimpleAtoi(t, &s.rois) || s.rois < 0) return Bad("rois count", text);
    s.shape = {s.rois, 5};
    return s;
  }
  std::vector<std::string> parts = absl::StrSplit(t, '@');
  if (parts.size() == 2) {
    std::vector<std::string> range = absl::StrSplit(parts[1], ':');
    if (range.size() != 2 || !absl::SimpleAtod(range[0], &s.lo) ||
        !absl::SimpleAtod(range[1], &s.hi) || !(s.lo < s.hi)) {
      return Bad("range", text);
    }
  }
  s.shape.clear();
  if (parts[0] == "scalar") {
    s.scalar = true;
    return s;
  }
  auto sh = Shape(parts[0], text);
  if (!sh.ok()) return sh.status();
  s.shape = *sh;
  return s;
}

// A batch of n x n matrices M M^T / n + I (M M^H / n + I), M's entries uniform in [-1, 1]:
// symmetric (Hermitian) with eigenvalues >= 1. `v` holds `reals` reals per element.
void SymmetricPositiveDefinite(const std::vector<int64_t>& shape, int reals, std::mt19937_64* rng,
                               std::vector<double>* v) {
  const int64_t n = shape.back();
  int64_t batch = 1;
  for (size_t i = 0; i + 2 < shape.size(); ++i) batch *= shape[i];
  std::uniform_real_distribution<double> u(-1, 1);
  v->assign(batch * n * n * reals, 0.0);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<std::complex<double>> m(n * n);
    for (auto& e : m) e = {u(*rng), reals == 2 ? u(*rng) : 0.0};
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        std::complex<double> a = i == j ? 1.0 : 0.0;
        for (int64_t k = 0; k < n; ++k) a += m[i * n + k] * std::conj(m[j * n + k]) / double(n);
        const int64_t at = ((b * n + i) * n + j) * reals;
        (*v)[at] = a.real();
        if (reals == 2) (*v)[at + 1] = i == j ? 0.0 : a.imag();
      }
    }
  }
}


}  // namespace

absl::StatusOr<std::map<std::string, std::vector<OpSpec>>> ParseSpecConfigs(
    const std::string& text) {
  std::map<std::string, std::vector<OpSpec>> specs;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = line.substr(0, line.find('#'));
    std::vector<std::string> tokens = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (tokens.empty()) continue;
    OpSpec spec;
    spec.op = tokens[0];
    for (size_t i = 1; i < tokens.size(); ++i) {
      const std::string& tok = tokens[i];
      const size_t eq = tok.find('=');
      if (eq == std::string::npos) return Bad("token", tok);
      const std::string key = tok.substr(0, eq), value = tok.substr(eq + 1);
      if (absl::StartsWith(key, "attr.")) {
        spec.attrs[key.substr(5)] = value;
      } else if (key == "nondiff") {
        spec.nondiff = absl::StrSplit(value, ',', absl::SkipEmpty());
      } else if (key == "symmetric") {
        spec.symmetric = absl::StrSplit(value, ',', absl::SkipEmpty());
      } else if (key == "ignore_outputs") {
        spec.ignore_outputs = absl::StrSplit(value, ',', absl::SkipEmpty());
      } else if (key == "delta" || key == "tol") {
        double v;
        if (!absl::SimpleAtod(value, &v) || !(v > 0)) return Bad(key, tok);
        (key == "delta" ? spec.delta : spec.tol) = v;
      } else if (key == "dtypes") {
        spec.dtypes = absl::StrSplit(value, ',', absl::SkipEmpty());
      } else {
        auto in = ParseInput(value);
        if (!in.ok()) return in.status();
        spec.inputs[key] = *in;
      }
    }
    specs[spec.op].push_back(spec);
  }
  return specs;
}

absl::StatusOr<std::map<std::string, OpSpec>> ParseSpecs(const std::string& text) {
  auto configs = ParseSpecConfigs(text);
  if (!configs.ok()) return configs.status();
  std::map<std::string, OpSpec> specs;
  for (const auto& [op, list] : *configs) specs[op] = list.front();
  return specs;
}

absl::StatusOr<AttrValue> ParseAttrValue(const OpDef::AttrDef& def, const std::string& text) {
  AttrValue v;
  const std::string& type = def.type();
  if (type == "int") {
    int64_t i;
    if (!absl::SimpleAtoi(text, &i)) return Bad("int attr " + def.name(), text);
    v.set_i(i);
  } else if (type == "float") {
    float f;
    if (!absl::SimpleAtof(text, &f)) return Bad("float attr " + def.name(), text);
    v.set_f(f);
  } else if (type == "bool") {
    if (text != "true" && text != "false") return Bad("bool attr " + def.name(), text);
    v.set_b(text == "true");
  } else if (type == "string") {
    v.set_s(text);
  } else if (type == "type") {
    DataType dt;
    if (!DataTypeFromString(text, &dt)) return Bad("type attr " + def.name(), text);
    v.set_type(dt);
  } else if (type == "list(int)" || type == "shape") {
    absl::string_view t = text;
    if (!absl::ConsumePrefix(&t, "[") || !absl::ConsumeSuffix(&t, "]")) {
      return Bad(type + " attr " + def.name(), text);
    }
    for (absl::string_view p : absl::StrSplit(t, ',', absl::SkipEmpty())) {
      int64_t i;
      if (!absl::SimpleAtoi(p, &i)) return Bad(type + " attr " + def.name(), text);
      if (type == "shape") {
        v.mutable_shape()->add_dim()->set_size(i);  // -1: unknown
      } else {
        v.mutable_list()->add_i(i);
      }
    }
  } else {
    return absl::UnimplementedError(
        absl::StrCat("gradcheck spec: attr ", def.name(), " of type ", type, " is not supported"));
  }
  return v;
}

absl::StatusOr<Tensor> MakeInput(const InputSpec& spec, DataType dtype,
                                 const std::vector<int64_t>& image_shape, uint64_t seed) {
  TensorShape shape;
  for (int64_t d : spec.shape) shape.AddDim(d);
  const int reals = RealsPerElement(dtype);
  const int64_t n = shape.num_elements() * reals;  // complex: (re, im) pairs
  std::vector<double> v(n);
  std::mt19937_64 rng(seed);
  switch (spec.kind) {
    case InputSpec::kValues:
      if (static_cast<int64_t>(spec.values.size()) * reals != n) {
        return absl::InvalidArgumentError(absl::StrCat(
            "gradcheck spec: ", spec.values.size(), " values for shape ", shape.DebugString()));
      }
      for (size_t i = 0; i < spec.values.size(); ++i) v[i * reals] = spec.values[i];
      break;
    case InputSpec::kSpd:
      SymmetricPositiveDefinite(spec.shape, reals, &rng, &v);
      break;
    case InputSpec::kRandom: {
      // A shuffled evenly spaced grid: distinct, well separated values.
      std::vector<int64_t> order(n);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      for (int64_t i = 0; i < n; ++i) {
        v[i] = spec.lo + (spec.hi - spec.lo) * (order[i] + 0.5) / static_cast<double>(n);
      }
      break;
    }
    case InputSpec::kRois: {
      if (image_shape.size() != 4) {
        return absl::InvalidArgumentError("gradcheck spec: rois need an NHWC input first");
      }
      const double h = image_shape[1], w = image_shape[2];
      std::uniform_real_distribution<double> u(0, 1);
      for (int64_t r = 0; r < spec.rois; ++r) {
        v[r * 5] = static_cast<double>(rng() % std::max<int64_t>(image_shape[0], 1));
        double x1 = u(rng) * (w - 1), x2 = u(rng) * (w - 1);
        double y1 = u(rng) * (h - 1), y2 = u(rng) * (h - 1);
        v[r * 5 + 1] = std::min(x1, x2);
        v[r * 5 + 2] = std::min(y1, y2);
        v[r * 5 + 3] = std::max(x1, x2) + 1;
        v[r * 5 + 4] = std::max(y1, y2) + 1;
      }
      break;
    }
  }
  return FromReals(dtype, shape, v);
}

OpInstance BuildOpInstance(const OpDef& def, const OpSpec* spec, const std::string& type_attr,
                           DataType dt, uint64_t seed, bool batch_zero, bool lists) {
  OpInstance out;
  if (!type_attr.empty() && dt != DT_INVALID) {
    AttrValue v;
    v.set_type(dt);
    out.attrs.push_back({type_attr, v});
  }
  if (spec != nullptr) {
    for (const auto& [name, text] : spec->attrs) {
      const OpDef::AttrDef* ad = nullptr;
      for (const auto& a : def.attr()) {
        if (a.name() == name) ad = &a;
      }
      if (ad == nullptr) {
        out.problem = absl::StrCat("spec names unknown attr '", name, "'");
        return out;
      }
      auto v = ParseAttrValue(*ad, text);
      if (!v.ok()) {
        out.problem = std::string(v.status().message());
        return out;
      }
      out.attrs.push_back({name, *v});
    }
  }
  // Type attrs the spec leaves that hold both precisions of a kind follow dt's precision.
  const bool wide = dt == DT_DOUBLE || dt == DT_COMPLEX128;
  for (const auto& a : def.attr()) {
    if (a.type() != "type" || a.name() == type_attr) continue;
    bool set = false;
    for (const auto& [name, v] : out.attrs) set = set || name == a.name();
    if (set || dt == DT_INVALID) continue;
    const auto& allowed = a.allowed_values().list().type();
    auto allows = [&](DataType t) {
      return std::find(allowed.begin(), allowed.end(), t) != allowed.end();
    };
    const std::pair<DataType, DataType> kinds[] = {{DT_FLOAT, DT_DOUBLE},
                                                   {DT_COMPLEX64, DT_COMPLEX128}};
    for (const auto& [narrow, wide_t] : kinds) {
      if (allows(narrow) && allows(wide_t)) {
        AttrValue v;
        v.set_type(wide ? wide_t : narrow);
        out.attrs.push_back({a.name(), v});
        break;
      }
    }
  }
  std::vector<int64_t> image_shape;
  for (int i = 0; i < def.input_arg_size(); ++i) {
    const auto& arg = def.input_arg(i);
    DataType in_type = arg.type_attr().empty() ? arg.type() : dt;
    if (!arg.type_attr().empty() && arg.type_attr() != type_attr) {
      // A second type attr (e.g. Tidx of reduction indices): its default, if it has one,
      in_type = DT_INVALID;
      for (const auto& a : def.attr()) {
        if (a.name() == arg.type_attr() && a.has_default_value()) in_type = a.default_value().type();
      }
      // ... or the spec's attr.<NAME>=<type> (e.g. U of FusedBatchNormGradV3).
      for (const auto& [name, v] : out.attrs) {
        if (name == arg.type_attr() && v.value_case() == AttrValue::kType) in_type = v.type();
      }
    }
    int64_t copies = 1;  // a list input: N tensors of the one spec
    if (lists && !arg.number_attr().empty()) {
      for (const auto& [name, v] : out.attrs) {
        if (name == arg.number_attr() && v.value_case() == AttrValue::kI) copies = v.i();
      }
    } else if (!arg.number_attr().empty() || !arg.type_list_attr().empty()) {
      out.problem = absl::StrCat("list input '", arg.name(), "'");
      return out;
    }
    InputSpec in_spec;
    const bool has_spec = spec != nullptr && spec->inputs.count(arg.name());
    if (has_spec) in_spec = spec->inputs.at(arg.name());
    if (in_type == DT_INVALID ||
        (!DataTypeIsFloating(in_type) && !DataTypeIsComplex(in_type) && !has_spec)) {
      out.problem = absl::StrCat("input '", arg.name(), "' (",
                                 in_type == DT_INVALID ? "another type attr" : DataTypeString(in_type),
                                 ") needs a spec");
      return out;
    }
    if (batch_zero) {
      if (!in_spec.scalar && !in_spec.shape.empty()) in_spec.shape[0] = 0;
      in_spec.rois = 0;
    }
    if (image_shape.empty() && in_spec.shape.size() == 4) image_shape = in_spec.shape;
    for (int64_t copy = 0; copy < copies; ++copy) {
      auto t = MakeInput(in_spec, in_type, image_shape, seed + i + 1000 * copy);
      if (!t.ok()) {
        out.problem = std::string(t.status().message());
        return out;
      }
      out.inputs.push_back(*t);
    }
  }
  return out;
}

namespace {

bool IsAxisName(const std::string& n) {
  return n == "axis" || n == "reduction_indices" || n == "dim" || n == "split_dim" ||
         n == "concat_dim" || n == "axes";
}

const OpDef::AttrDef* FindAttr(const OpDef& def, const std::string& name) {
  for (const auto& a : def.attr()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

// The input spec `name` of `spec`, inserted as the default (2x3) if absent.
InputSpec& In(OpSpec* spec, const std::string& name) { return spec->inputs[name]; }

// The first input's shape as the spec gives it (2x3 if unnamed).
std::vector<int64_t> FirstShape(const OpDef& def, const OpSpec& spec) {
  if (def.input_arg_size() == 0) return {2, 3};
  auto it = spec.inputs.find(def.input_arg(0).name());
  return it == spec.inputs.end() ? std::vector<int64_t>{2, 3} : it->second.shape;
}

InputSpec Values(std::vector<double> v, std::vector<int64_t> shape) {
  InputSpec s;
  s.kind = InputSpec::kValues;
  s.values = std::move(v);
  s.shape = std::move(shape);
  s.scalar = s.shape.empty();
  return s;
}

// An attr's value as spec text: the spec's, else the OpDef's default ("" if neither).
std::string AttrText(const OpDef::AttrDef& a, const OpSpec& spec) {
  auto it = spec.attrs.find(a.name());
  if (it != spec.attrs.end()) return it->second;
  if (!a.has_default_value()) return "";
  const AttrValue& v = a.default_value();
  if (a.type() == "string") return v.s();
  if (a.type() == "bool") return v.b() ? "true" : "false";
  if (a.type() == "list(int)") {
    std::vector<std::string> parts;
    for (int64_t i : v.list().i()) parts.push_back(absl::StrCat(i));
    return absl::StrCat("[", absl::StrJoin(parts, ","), "]");
  }
  return "";
}

std::vector<int64_t> IntList(const std::string& text) {
  std::vector<int64_t> out;
  absl::string_view t = text;
  absl::ConsumePrefix(&t, "[");
  absl::ConsumeSuffix(&t, "]");
  for (absl::string_view p : absl::StrSplit(t, ',', absl::SkipEmpty())) {
    int64_t i;
    if (absl::SimpleAtoi(p, &i)) out.push_back(i);
  }
  return out;
}

std::string IntListText(const std::vector<int64_t>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ","), "]");
}

// The spatial positions of an n-long strides/ksize/dilations list under `format`.
std::vector<int> Spatial(size_t n, const std::string& format) {
  std::vector<int> out;
  const bool channels_first = absl::StartsWith(format, "NC");
  for (int i = channels_first ? 2 : 1; i < static_cast<int>(n) - (channels_first ? 0 : 1); ++i) {
    out.push_back(i);
  }
  return out;
}

}  // namespace

OpSpec WithDefaultIntInputs(const OpDef& def, const OpSpec* spec) {
  OpSpec out;
  if (spec != nullptr) out = *spec;
  out.op = def.name();
  const std::vector<int64_t> shape = FirstShape(def, out);
  const int64_t rank = static_cast<int64_t>(shape.size());
  const int64_t dim0 = shape.empty() ? 1 : shape[0];
  for (const auto& arg : def.input_arg()) {
    if (out.inputs.count(arg.name()) || !arg.number_attr().empty() ||
        !arg.type_list_attr().empty()) {
      continue;
    }
    DataType t = arg.type();
    if (!arg.type_attr().empty()) {
      const OpDef::AttrDef* a = FindAttr(def, arg.type_attr());
      auto set = out.attrs.find(arg.type_attr());
      t = a != nullptr && a->has_default_value() ? a->default_value().type() : DT_INVALID;
      if (set != out.attrs.end()) DataTypeFromString(set->second, &t);
      // An index type attr without a default (GatherV2's Tindices): int32 where allowed.
      auto allows_int32 = [&] {
        const auto& allowed = a->allowed_values().list().type();
        return std::find(allowed.begin(), allowed.end(), DT_INT32) != allowed.end();
      };
      if (t == DT_INVALID && a != nullptr && arg.type_attr() != def.input_arg(0).type_attr() &&
          allows_int32()) {
        t = DT_INT32;
        out.attrs[arg.type_attr()] = "int32";
      }
    }
    if (t != DT_INT32 && t != DT_INT64) continue;
    const std::string& n = arg.name();
    std::vector<double> dims(shape.begin(), shape.end());
    if (IsAxisName(n)) {
      out.inputs[n] = Values({static_cast<double>(std::max<int64_t>(rank - 1, 0))}, {});
    } else if (n == "perm") {
      std::vector<double> v;
      for (int64_t i = rank - 1; i >= 0; --i) v.push_back(i);
      out.inputs[n] = Values(v, {rank});
    } else if (n == "paddings" || n == "crops") {
      out.inputs[n] = Values(std::vector<double>(2 * rank, 1.0), {rank, 2});
    } else if (n == "multiples") {
      std::vector<double> v(rank, 1.0);
      if (rank > 0) v[0] = 2;
      out.inputs[n] = Values(v, {rank});
    } else if (absl::StrContains(n, "shape") || absl::StrContains(n, "size") || n == "end") {
      out.inputs[n] = Values(dims, {rank});
    } else if (n == "begin") {
      out.inputs[n] = Values(std::vector<double>(rank, 0.0), {rank});
    } else if (n == "strides") {
      out.inputs[n] = Values(std::vector<double>(rank, 1.0), {rank});
    } else if (absl::StrContains(n, "segment_ids") || absl::StrContains(n, "indices") ||
               n == "ids" || n == "positions") {
      std::vector<double> v;
      for (int64_t i = 0; i < dim0; ++i) v.push_back(i / 2);
      out.inputs[n] = Values(v, {dim0});
    } else if (n == "num_segments") {
      out.inputs[n] = Values({static_cast<double>(dim0)}, {});
    } else {  // anything else: the last axis
      out.inputs[n] = Values({static_cast<double>(std::max<int64_t>(rank - 1, 0))}, {});
    }
  }
  // Attrs without a default that the spec leaves out (not type attrs, which the inputs give):
  // the first allowed string, windows and strides of 1, int 1, float 1, false, a message.
  for (const auto& a : def.attr()) {
    if (a.has_default_value() || out.attrs.count(a.name())) continue;
    if (a.type() == "string") {
      out.attrs[a.name()] = a.has_allowed_values() && a.allowed_values().list().s_size() > 0
                                ? a.allowed_values().list().s(0)
                                : "tf_ext_gradcheck";
    } else if (a.type() == "list(int)") {
      out.attrs[a.name()] = IntListText(std::vector<int64_t>(rank, 1));
    } else if (a.type() == "int") {
      bool list_length = false;  // N of a list input: two tensors
      for (const auto& arg : def.input_arg()) list_length |= arg.number_attr() == a.name();
      out.attrs[a.name()] = list_length ? "2" : "1";
    } else if (a.type() == "float") {
      out.attrs[a.name()] = "1";
    } else if (a.type() == "bool") {
      out.attrs[a.name()] = "false";
    }
  }
  return out;
}

std::vector<SweepVariant> SweepVariants(const OpDef& def, const OpSpec& base) {
  std::vector<SweepVariant> out = {{"base", base}};
  auto add = [&](const std::string& label, const OpSpec& s) { out.push_back({label, s}); };
  const OpDef::AttrDef* format_attr = FindAttr(def, "data_format");
  const std::string format = format_attr ? AttrText(*format_attr, base) : "";
  const std::string first = def.input_arg_size() > 0 ? def.input_arg(0).name() : "";
  for (const auto& a : def.attr()) {
    const std::string current = AttrText(a, base);
    if (a.type() == "string" && a.has_allowed_values()) {
      for (const std::string& value : a.allowed_values().list().s()) {
        if (value == current) continue;
        OpSpec s = base;
        s.attrs[a.name()] = value;
        if (value == "EXPLICIT" && FindAttr(def, "explicit_paddings") != nullptr) {
          const OpDef::AttrDef* strides = FindAttr(def, "strides");
          const size_t n = strides ? IntList(AttrText(*strides, base)).size() : 4;
          std::vector<int64_t> pads(2 * n, 0);
          std::vector<int> sp = Spatial(n, format);
          for (size_t k = 0; k < sp.size(); ++k) pads[2 * sp[k] + (k % 2)] = 1;
          s.attrs["explicit_paddings"] = IntListText(pads);
        }
        if (a.name() == "data_format" && value.size() == current.size()) {
          // Permute the first input's shape and every list attr of the format's length.
          auto permute = [&](const std::vector<int64_t>& v) {
            std::vector<int64_t> p(v.size());
            for (size_t i = 0; i < value.size(); ++i) p[i] = v[current.find(value[i])];
            return p;
          };
          InputSpec& in = In(&s, first);
          if (in.kind == InputSpec::kRandom && in.shape.size() == value.size()) {
            in.shape = permute(in.shape);
          }
          for (const auto& l : def.attr()) {
            if (l.type() != "list(int)") continue;
            std::vector<int64_t> v = IntList(AttrText(l, s));
            if (v.size() == value.size()) s.attrs[l.name()] = IntListText(permute(v));
          }
        }
        add(absl::StrCat(a.name(), "=", value), s);
      }
    } else if (a.type() == "bool" && !current.empty()) {
      OpSpec s = base;
      const bool flipped = current != "true";
      s.attrs[a.name()] = flipped ? "true" : "false";
      for (const char* prefix : {"transpose_", "adj_", "adjoint_"}) {
        absl::string_view operand = a.name();
        if (!absl::ConsumePrefix(&operand, prefix)) continue;
        for (const auto& arg : def.input_arg()) {
          if (arg.name() != operand) continue;
          InputSpec& in = In(&s, arg.name());
          if (in.kind == InputSpec::kRandom && in.shape.size() >= 2) {
            std::swap(in.shape[in.shape.size() - 1], in.shape[in.shape.size() - 2]);
          }
        }
      }
      add(absl::StrCat(a.name(), "=", s.attrs[a.name()]), s);
    } else if (a.type() == "list(int)" && (a.name() == "strides" || a.name() == "dilations")) {
      std::vector<int64_t> v = IntList(current);
      if (v.size() < 3) continue;
      for (int i : Spatial(v.size(), format)) v[i] = 2;
      if (IntListText(v) == current) continue;
      OpSpec s = base;
      s.attrs[a.name()] = IntListText(v);
      add(absl::StrCat(a.name(), "=", s.attrs[a.name()]), s);
    }
  }
  const int64_t rank = static_cast<int64_t>(FirstShape(def, base).size());
  for (const auto& [name, in] : base.inputs) {
    if (!IsAxisName(name) || in.kind != InputSpec::kValues) continue;
    bool any = false;
    OpSpec s = base;
    for (double& v : s.inputs[name].values) {
      if (v >= 0) {
        v -= rank;
        any = true;
      }
    }
    if (any) add(absl::StrCat(name, "<0"), s);
  }
  for (int64_t d : {1, 0}) {
    OpSpec s = base;
    bool any = false;
    for (const auto& arg : def.input_arg()) {
      if (!arg.number_attr().empty() || !arg.type_list_attr().empty()) continue;
      // Spec'd inputs, and unnamed ones of the first input's type (not an integer input).
      if (!s.inputs.count(arg.name()) &&
          (arg.type_attr().empty() || arg.type_attr() != def.input_arg(0).type_attr())) {
        continue;
      }
      InputSpec& in = In(&s, arg.name());
      if (in.kind == InputSpec::kRandom && !in.scalar && !in.shape.empty() && in.shape[0] != d) {
        in.shape[0] = d;
        any = true;
      }
    }
    if (any) add(absl::StrCat("dim0=", d), s);
  }
  // Broadcasting: the first two inputs of the first input's type attr, equal random shapes.
  std::vector<std::string> same;
  for (const auto& arg : def.input_arg()) {
    if (!def.input_arg(0).type_attr().empty() && arg.type_attr() == def.input_arg(0).type_attr() &&
        arg.number_attr().empty()) {
      same.push_back(arg.name());
    }
  }
  if (same.size() >= 2) {
    OpSpec s = base;
    InputSpec &x = In(&s, same[0]), &y = In(&s, same[1]);
    if (x.kind == InputSpec::kRandom && y.kind == InputSpec::kRandom && x.shape == y.shape &&
        x.shape.size() >= 2) {
      OpSpec trailing = s;
      In(&trailing, same[1]).shape = {x.shape.back()};
      add(absl::StrCat("broadcast ", same[1], "[-1:]"), trailing);
      if (x.shape[0] != 1) {
        x.shape[0] = 1;
        add(absl::StrCat("broadcast ", same[0], " dim0=1"), s);
      }
    }
  }
  return out;
}

}  // namespace tensorflow::tf_ext::tools
