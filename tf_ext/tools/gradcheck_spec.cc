#include "tf_ext/tools/gradcheck_spec.h"

#include <algorithm>
#include <complex>
#include <numeric>
#include <optional>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
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
                           DataType dt, uint64_t seed, bool batch_zero) {
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
    if (!arg.number_attr().empty() || !arg.type_list_attr().empty()) {
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
    auto t = MakeInput(in_spec, in_type, image_shape, seed + i);
    if (!t.ok()) {
      out.problem = std::string(t.status().message());
      return out;
    }
    out.inputs.push_back(*t);
  }
  return out;
}

}  // namespace tensorflow::tf_ext::tools
