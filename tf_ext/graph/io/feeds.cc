#include "tf_ext/graph/io/feeds.h"

#include <unistd.h>

#include <cstring>
#include <optional>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/platform/env.h"
#include "tf_ext/graph/io/npy_io.h"
#include "tf_ext/graph/io/tensor_doubles.h"

namespace tensorflow::tf_ext {
namespace {

const NodeDef* FindNodeDef(const GraphDef& graph, const std::string& name) {
  for (const NodeDef& n : graph.node()) {
    if (n.name() == name) return &n;
  }
  return nullptr;
}

// The placeholder's shape attr, when fully known; an error naming the node when the attr is
// not a valid shape (its size overflows).
absl::StatusOr<std::optional<TensorShape>> KnownShape(const NodeDef* n) {
  if (n == nullptr || !n->attr().contains("shape")) return std::optional<TensorShape>();
  PartialTensorShape shape;
  if (absl::Status s = PartialTensorShape::BuildPartialTensorShape(n->attr().at("shape").shape(),
                                                                   &shape);
      !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("placeholder '", n->name(), "' has an invalid shape: ", s.message()));
  }
  TensorShape full;
  if (!shape.AsTensorShape(&full)) return std::optional<TensorShape>();
  return std::optional<TensorShape>(full);
}

// Whether `bytes_per_element` bytes for each element of `shape` fit in half of this machine's
// memory; else an error naming `what` (a hostile or mistaken shape must not abort the process
// with std::bad_alloc).
absl::Status CheckFitsInMemory(const std::string& what, DataType dtype, const TensorShape& shape,
                               int64_t bytes_per_element) {
  const int64_t elements = shape.num_elements();
  const double bytes = static_cast<double>(elements) * bytes_per_element;
  const double memory = PhysicalMemoryBytes();
  if (memory > 0 && bytes > memory / 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s %s needs %.3g bytes, more than half of this machine's memory (%.3g bytes)", what,
        DataTypeString(dtype), shape.DebugString(), bytes, memory));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> RandomTensor(const std::string& what, DataType dtype,
                                    const TensorShape& shape, uint64_t seed) {
  // The values are drawn as doubles, then converted.
  TF_RETURN_IF_ERROR(CheckFitsInMemory(what, dtype, shape, DataTypeSize(dtype) + 8));
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  std::mt19937_64 gen(seq);
  std::normal_distribution<double> normal;
  std::vector<double> values(shape.num_elements());
  const bool real = IsFloatingPoint(dtype);
  for (double& v : values) v = real ? normal(gen) : static_cast<double>(gen() % 10);
  return FromDoubles(dtype, shape, values);
}

// "2x3" as a shape; errors name the feed.
absl::StatusOr<TensorShape> ParseDims(const std::string& spec, const std::string& dims) {
  TensorShape shape;
  for (absl::string_view d : absl::StrSplit(dims, 'x')) {
    int64_t v;
    if (!absl::SimpleAtoi(d, &v) || v < 0 || !shape.AddDimWithStatus(v).ok()) {
      return absl::InvalidArgumentError(absl::StrCat("feed '", spec, "': bad shape '", dims, "'"));
    }
  }
  return shape;
}

absl::StatusOr<Tensor> FeedFromFile(const std::string& spec, const std::string& node,
                                    const std::string& file, const std::string& dims,
                                    bool has_dims, DataType dtype, const NodeDef* placeholder) {
  std::string path = file, key;
  if (const size_t npz = file.find(".npz:"); npz != std::string::npos) {
    path = file.substr(0, npz + 4);
    key = file.substr(npz + 5);
  }
  auto check_dtype = [&](const Tensor& t) -> absl::StatusOr<Tensor> {
    if (t.dtype() != dtype) {
      return absl::InvalidArgumentError(absl::StrCat("feed '", spec, "': the array is ",
                                                     DataTypeString(t.dtype()), ", '", node,
                                                     "' takes ", DataTypeString(dtype)));
    }
    return t;
  };
  if (absl::EndsWith(path, ".npy")) {
    auto t = ReadNpy(path);
    if (!t.ok()) return t.status();
    return check_dtype(*t);
  }
  if (absl::EndsWith(path, ".npz")) {
    auto arrays = ReadNpz(path);
    if (!arrays.ok()) return arrays.status();
    std::vector<std::string> names;
    for (const auto& [name, t] : *arrays) {
      names.push_back(name);
      if (name == (key.empty() ? node : key)) return check_dtype(t);
    }
    if (key.empty() && arrays->size() == 1) return check_dtype(arrays->front().second);
    return absl::InvalidArgumentError(absl::StrCat("feed '", spec, "': ", path, " has no array '",
                                                   key.empty() ? node : key, "' (it has: ",
                                                   absl::StrJoin(names, ", "), ")"));
  }
  // Raw bytes of the placeholder's dtype.
  TensorShape shape;
  if (has_dims) {
    auto parsed = ParseDims(spec, dims);
    if (!parsed.ok()) return parsed.status();
    shape = *parsed;
  } else if (auto known = KnownShape(placeholder); !known.ok()) {
    return known.status();
  } else if (known->has_value()) {
    shape = **known;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "feed '", spec, "': raw file needs a shape (e.g. ", node, "=2x3:@", file,
        ") because '", node, "' has no fully known shape"));
  }
  std::string bytes;
  TF_RETURN_IF_ERROR(ReadFileToString(Env::Default(), path, &bytes));
  if (!DataTypeCanUseMemcpy(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("feed '", spec, "': raw ", DataTypeString(dtype),
                                                   " files are not supported"));
  }
  const double needed = static_cast<double>(shape.num_elements()) * DataTypeSize(dtype);
  if (static_cast<double>(bytes.size()) != needed) {
    return absl::InvalidArgumentError(absl::StrCat("feed '", spec, "': ", path, " has ", bytes.size(),
                                                   " bytes; ", DataTypeString(dtype), " ",
                                                   shape.DebugString(), " needs ", needed));
  }
  Tensor t(dtype, shape);
  if (!bytes.empty()) std::memcpy(t.data(), bytes.data(), bytes.size());
  return t;
}

}  // namespace

double PhysicalMemoryBytes() {
  const double memory = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  return memory > 0 ? memory : 0;
}

absl::StatusOr<std::pair<TensorRef, Tensor>> ParseFeed(const std::string& spec,
                                                       const GraphDef& graph) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "feed '", spec, "' must look like name=2x3:1,2,3,4,5,6, name=@file.npy or name=random"));
  }
  auto ref = TensorRef::Parse(spec.substr(0, eq));
  if (!ref.ok()) return ref.status();
  const NodeDef* placeholder = FindNodeDef(graph, ref->node);
  DataType dtype = DT_FLOAT;
  if (placeholder != nullptr && placeholder->attr().contains("dtype")) {
    dtype = placeholder->attr().at("dtype").type();
  }
  std::string rest = spec.substr(eq + 1);
  if (rest == "random" || absl::StartsWith(rest, "random:")) {
    uint64_t seed = 0;
    if (rest != "random" && !absl::SimpleAtoi(rest.substr(7), &seed)) {
      return absl::InvalidArgumentError(absl::StrCat("feed '", spec, "': bad seed"));
    }
    auto shape = KnownShape(placeholder);
    if (!shape.ok()) return shape.status();
    if (!shape->has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "feed '", spec, "': '", ref->node, "' is not a placeholder of fully known shape"));
    }
    auto t = RandomTensor(absl::StrCat("feed '", spec, "'"), dtype, **shape, seed);
    if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat("feed '", spec, "': ", t.status().message()));
    return std::make_pair(*ref, *t);
  }
  std::string values = rest, dims;
  bool explicit_shape = false;
  if (!absl::StartsWith(rest, "@")) {
    if (const size_t colon = rest.find(':'); colon != std::string::npos) {
      explicit_shape = true;
      values = rest.substr(colon + 1);
      dims = rest.substr(0, colon);
    }
  }
  if (absl::StartsWith(values, "@")) {
    auto t = FeedFromFile(spec, ref->node, values.substr(1), dims, explicit_shape, dtype,
                          placeholder);
    if (!t.ok()) return t.status();
    return std::make_pair(*ref, *t);
  }
  TensorShape shape;
  if (explicit_shape && dims != "scalar") {
    auto parsed = ParseDims(spec, dims);
    if (!parsed.ok()) return parsed.status();
    shape = *parsed;
  }
  std::vector<double> vals;
  for (absl::string_view v : absl::StrSplit(values, ',', absl::SkipEmpty())) {
    double d;
    if (!absl::SimpleAtod(v, &d)) {
      return absl::InvalidArgumentError(absl::StrCat("feed '", spec, "': bad value '", v, "'"));
    }
    vals.push_back(d);
  }
  if (!explicit_shape) shape = TensorShape({static_cast<int64_t>(vals.size())});
  if (shape.num_elements() != static_cast<int64_t>(vals.size())) {
    return absl::InvalidArgumentError(absl::StrCat("feed '", spec, "': shape ", shape.DebugString(),
                                                   " needs ", shape.num_elements(), " values, got ",
                                                   vals.size()));
  }
  auto t = FromDoubles(dtype, shape, vals);
  if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat("feed '", spec, "': ", t.status().message()));
  return std::make_pair(*ref, *t);
}

absl::StatusOr<std::vector<std::string>> AddRandomFeeds(
    const GraphDef& graph, std::vector<std::pair<TensorRef, Tensor>>* feeds, uint64_t seed) {
  std::vector<std::string> fed;
  for (const NodeDef& n : graph.node()) {
    if (n.op() != "Placeholder") continue;
    bool has_feed = false;
    for (const auto& [ref, t] : *feeds) has_feed |= ref.node == n.name();
    if (has_feed) continue;
    auto shape = KnownShape(&n);
    if (!shape.ok()) return shape.status();
    if (!shape->has_value() || !n.attr().contains("dtype")) continue;
    const DataType dtype = n.attr().at("dtype").type();
    const std::string what = absl::StrCat("random values for placeholder '", n.name(), "'");
    TF_RETURN_IF_ERROR(CheckFitsInMemory(what, dtype, **shape, DataTypeSize(dtype) + 8));
    auto t = RandomTensor(what, dtype, **shape, seed);
    if (!t.ok()) continue;  // a type random values are not drawn for (bool, string): left unfed
    feeds->push_back({TensorRef{n.name(), 0}, *t});
    fed.push_back(n.name());
  }
  return fed;
}

}  // namespace tensorflow::tf_ext
