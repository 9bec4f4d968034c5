#include "tf_ext/graph/engine/lowered_case.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/types.pb.h"
#include "tensorflow/core/graph/tensor_id.h"

namespace tensorflow::tf_ext {
namespace {

std::string TensorString(const std::string& node, int index) {
  return index == 0 ? node : absl::StrCat(node, ":", index);
}

// Builds the new nodes with names no node of the graph has.
class Builder {
 public:
  explicit Builder(GraphDef* graph) : graph_(graph) {
    for (const NodeDef& n : graph->node()) names_.insert(n.name());
  }

  std::string UniqueName(const std::string& base) {
    std::string name = base;
    for (int k = 1; names_.count(name); ++k) name = absl::StrCat(base, "_", k);
    names_.insert(name);
    return name;
  }

  NodeDef* Add(const std::string& base, const std::string& op, std::vector<std::string> inputs,
               const std::string& device) {
    NodeDef* n = graph_->add_node();
    n->set_name(UniqueName(base));
    n->set_op(op);
    n->set_device(device);
    for (std::string& in : inputs) n->add_input(std::move(in));
    return n;
  }

  static void SetType(NodeDef* n, const char* attr, DataType t) {
    (*n->mutable_attr())[attr].set_type(t);
  }

 private:
  GraphDef* graph_;
  std::set<std::string> names_;
};

// The predicates `index == k` of one index tensor, each computed where a nested tf.cond would
// compute it: inside the false branches of the predicates before it.
class Predicates {
 public:
  Predicates(Builder* b, const std::string& index, const std::string& device)
      : b_(b), device_(device), base_(absl::StrCat("tf_ext_case/", absl::StrReplaceAll(
                                                       index, {{":", "_"}, {"^", ""}}))) {
    routed_.push_back(index);
  }

  // `index == k` as a tensor string.
  std::string Get(int k) {
    while (static_cast<int>(preds_.size()) <= k) {
      const int j = static_cast<int>(preds_.size());
      const std::string& idx = routed_[j];
      // A constant inside the conditionals (and loop frame) of idx: anchored by an Identity of
      // it, as tf.cond anchors its branches' constants on a pivot.
      NodeDef* pivot = b_->Add(absl::StrCat(base_, "/pivot_", j), "Identity", {idx}, device_);
      Builder::SetType(pivot, "T", DT_INT32);
      NodeDef* c = b_->Add(absl::StrCat(base_, "/k_", j), "Const", {"^" + pivot->name()}, device_);
      Builder::SetType(c, "dtype", DT_INT32);
      Tensor value(DT_INT32, TensorShape({}));
      value.scalar<int32>()() = j;
      value.AsProtoTensorContent((*c->mutable_attr())["value"].mutable_tensor());
      // index == j
      NodeDef* eq = b_->Add(absl::StrCat(base_, "/equal_", j), "Equal", {idx, c->name()}, device_);
      Builder::SetType(eq, "T", DT_INT32);
      (*eq->mutable_attr())["incompatible_shape_error"].set_b(true);
      preds_.push_back(eq->name());
      // The index inside the false branch of `index == j`, for the next predicate.
      NodeDef* sw = b_->Add(absl::StrCat(base_, "/switch_", j), "Switch", {idx, eq->name()},
                            device_);
      Builder::SetType(sw, "T", DT_INT32);
      routed_.push_back(sw->name());  // output 0: the false branch
    }
    return preds_[k];
  }

 private:
  Builder* b_;
  std::string device_;
  std::string base_;
  std::vector<std::string> routed_;  // the index inside the false branches of preds 0..j-1
  std::vector<std::string> preds_;
};

}  // namespace

absl::StatusOr<int> LoweredCasesToSwitches(GraphDef* graph) {
  std::vector<int> switches;
  for (int i = 0; i < graph->node_size(); ++i) {
    if (graph->node(i).op() == "_SwitchN") switches.push_back(i);
  }
  if (switches.empty()) return 0;

  Builder b(graph);
  std::map<std::string, Predicates> predicates;  // index tensor -> its predicates
  std::map<std::string, std::vector<std::string>> branches;  // _SwitchN -> branch k's tensor
  std::map<std::string, std::string> first_switch;            // _SwitchN -> its chain's first
  for (int i : switches) {
    // Copies: adding nodes may move the graph's NodeDefs.
    const NodeDef s = graph->node(i);
    std::vector<std::string> data, control;
    for (const std::string& in : s.input()) (absl::StartsWith(in, "^") ? control : data).push_back(in);
    const auto num_outs = s.attr().find("num_outs");
    const auto type = s.attr().find("T");
    if (data.size() != 2 || num_outs == s.attr().end() || type == s.attr().end() ||
        num_outs->second.i() < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "_SwitchN '", s.name(), "' is not a lowered Case's switch (two inputs, num_outs >= 1)"));
    }
    const int n = static_cast<int>(num_outs->second.i());
    const DataType t = type->second.type();
    std::vector<std::string>& out = branches[s.name()];
    if (n == 1) {
      // One branch takes every index.
      NodeDef* id = b.Add(s.name() + "/branch_0", "Identity", {data[0]}, s.device());
      Builder::SetType(id, "T", t);
      for (const std::string& c : control) id->add_input(c);
      out.push_back(id->name());
      first_switch[s.name()] = id->name();
      continue;
    }
    const TensorId index_id = ParseTensorName(data[1]);
    const std::string index = TensorString(std::string(index_id.node()), index_id.index());
    auto p = predicates.try_emplace(index, &b, index, s.device()).first;
    std::string carried = data[0];
    for (int k = 0; k + 1 < n; ++k) {
      // Switch(d, index == k): true -> branch k, false -> the remaining branches.
      NodeDef* sw = b.Add(absl::StrCat(s.name(), "/switch_", k), "Switch",
                          {carried, p->second.Get(k)}, s.device());
      Builder::SetType(sw, "T", t);
      if (k == 0) {
        for (const std::string& c : control) sw->add_input(c);
        first_switch[s.name()] = sw->name();
      }
      out.push_back(TensorString(sw->name(), 1));
      carried = sw->name();
    }
    out.push_back(carried);  // the last false output: branch n-1 (and out-of-range indices)
  }

  // N-input Merges (only a lowered Case makes them) -> nested two-input Merges, branch 0
  // outermost; the outermost keeps the name.
  const int original_size = graph->node_size();
  for (int i = 0; i < original_size; ++i) {
    if (graph->node(i).op() != "Merge") continue;
    std::vector<std::string> data, control;
    for (const std::string& in : graph->node(i).input()) {
      (absl::StartsWith(in, "^") ? control : data).push_back(in);
    }
    if (data.size() <= 2) continue;
    const NodeDef m = graph->node(i);
    const DataType t = m.attr().at("T").type();
    std::string inner = data.back();
    for (int k = static_cast<int>(data.size()) - 2; k >= 1; --k) {
      NodeDef* merge = b.Add(absl::StrCat(m.name(), "/merge_", k), "Merge", {data[k], inner},
                             m.device());
      Builder::SetType(merge, "T", t);
      (*merge->mutable_attr())["N"].set_i(2);
      inner = merge->name();
    }
    NodeDef* top = graph->mutable_node(i);
    top->clear_input();
    top->add_input(data[0]);
    top->add_input(inner);
    for (const std::string& c : control) top->add_input(c);
    (*top->mutable_attr())["N"].set_i(2);
  }

  // Consumers of each _SwitchN read their branch's tensor.
  for (NodeDef& n : *graph->mutable_node()) {
    for (std::string& in : *n.mutable_input()) {
      const TensorId id = ParseTensorName(in);
      const auto it = branches.find(std::string(id.node()));
      if (it == branches.end()) continue;
      if (id.index() < 0) {
        in = "^" + first_switch[it->first];
      } else if (id.index() < static_cast<int>(it->second.size())) {
        in = it->second[id.index()];
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            "node '", n.name(), "' reads output ", id.index(), " of _SwitchN '", it->first,
            "', which has ", it->second.size()));
      }
    }
  }
  // Drop the _SwitchN nodes.
  auto* nodes = graph->mutable_node();
  int kept = 0;
  for (int i = 0; i < nodes->size(); ++i) {
    if (branches.count(nodes->Get(i).name())) continue;
    if (kept != i) nodes->SwapElements(kept, i);
    ++kept;
  }
  while (nodes->size() > kept) nodes->RemoveLast();
  return static_cast<int>(switches.size());
}

}  // namespace tensorflow::tf_ext
