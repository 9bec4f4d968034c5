#include "tf_ext/graph/io/graph_io.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "tensorflow/core/platform/env.h"
#include "tf_ext/graph/io/npy_io.h"
#include "tf_ext/graph/io/tensor_doubles.h"

namespace tensorflow::tf_ext {

std::string InputNodeName(const std::string& input) {
  std::string src(absl::StripPrefix(input, "^"));
  return src.substr(0, src.find(':'));
}

std::set<std::string> NeededNodes(const GraphDef& graph, const std::set<std::string>& roots) {
  std::map<std::string, const NodeDef*> by_name;
  for (const NodeDef& n : graph.node()) by_name[n.name()] = &n;
  std::set<std::string> needed;
  std::deque<std::string> queue(roots.begin(), roots.end());
  while (!queue.empty()) {
    const std::string name = queue.front();
    queue.pop_front();
    if (!needed.insert(name).second) continue;
    auto it = by_name.find(name);
    if (it == by_name.end()) continue;
    for (const std::string& in : it->second->input()) queue.push_back(InputNodeName(in));
  }
  return needed;
}

void PruneGraphDef(const std::set<std::string>& roots, GraphDef* graph) {
  const std::set<std::string> needed = NeededNodes(*graph, roots);
  GraphDef kept;
  for (const NodeDef& n : graph->node()) {
    if (needed.count(n.name())) *kept.add_node() = n;
  }
  *kept.mutable_library() = graph->library();
  *kept.mutable_versions() = graph->versions();
  graph->Swap(&kept);
}

absl::Status LoadGraph(const std::string& path, GraphDef* graph) {
  if (!Env::Default()->FileExists(path).ok()) {
    return absl::NotFoundError(absl::StrCat("graph file '", path, "' does not exist"));
  }
  // Binary first: ReadTextProto logs every parse error of a binary file.
  if (ReadBinaryProto(Env::Default(), path, graph).ok()) return absl::OkStatus();
  graph->Clear();
  absl::Status s = ReadTextProto(Env::Default(), path, graph);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a GraphDef (text or binary): ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status SaveGradients(const std::string& path, const std::vector<TensorRef>& xs,
                           const Tensor& y, const std::vector<Tensor>& grads) {
  std::vector<std::pair<std::string, Tensor>> arrays = {{"y", y}};
  for (size_t i = 0; i < xs.size() && i < grads.size(); ++i) {
    const TensorRef& x = xs[i];
    std::string name = "d_" + x.node;
    if (x.index != 0) absl::StrAppend(&name, "_", x.index);
    for (char& c : name) {
      if (c == '/' || c == ':') c = '_';
    }
    arrays.push_back({name, grads[i]});
  }
  if (absl::EndsWith(path, ".npz")) return WriteNpz(path, arrays);
  std::string text;
  for (const auto& [name, t] : arrays) {
    std::vector<std::string> dims, values;
    for (int d = 0; d < t.dims(); ++d) dims.push_back(absl::StrCat(t.dim_size(d)));
    for (double v : ToDoubles(t)) values.push_back(absl::StrFormat("%.17g", v));
    absl::StrAppend(&text, name, " ", DataTypeString(t.dtype()), " [", absl::StrJoin(dims, ","),
                    "] ", absl::StrJoin(values, " "), "\n");
  }
  return WriteStringToFile(Env::Default(), path, text);
}

std::string FormatTensor(const Tensor& t, int max_values) {
  std::vector<std::string> vals;
  const int64_t n = t.NumElements();
  const std::vector<double> values = ToDoubles(t);
  for (int64_t i = 0; i < std::min<int64_t>(values.size(), max_values); ++i) {
    vals.push_back(absl::StrCat(values[i]));
  }
  if (n > max_values) vals.push_back(absl::StrCat("... (", n - max_values, " more)"));
  return absl::StrCat(DataTypeString(t.dtype()), " ", t.shape().DebugString(), " = [",
                      absl::StrJoin(vals, " "), "]");
}

}  // namespace tensorflow::tf_ext
