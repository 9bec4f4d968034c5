#include "tf_ext/graph/path_check.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensorflow/core/framework/function.h"
#include "tf_ext_python_gradients.h"

namespace tensorflow::tf_ext {
namespace {

bool InList(const char* const* list, const std::string& op) {
  for (; *list != nullptr; ++list) {
    if (op == *list) return true;
  }
  return false;
}

// Control-flow loops: TensorFlow has no C++ gradient for them in either registry.
bool IsLoopOp(const std::string& op) {
  static const auto* loop_ops = new std::set<std::string>{
      "While", "StatelessWhile", "Enter", "RefEnter", "Exit", "RefExit", "Switch", "RefSwitch",
      "Merge", "RefMerge", "NextIteration", "RefNextIteration", "LoopCond"};
  return loop_ops->count(op) > 0 || absl::StartsWith(op, "TensorList");
}

}  // namespace

absl::Status CheckPathHasGradients(const Graph& g, const Node* y, const std::vector<Node*>& xs) {
  std::set<const Node*> from_x, to_y;
  std::deque<const Node*> q(xs.begin(), xs.end());
  while (!q.empty()) {
    const Node* n = q.front();
    q.pop_front();
    if (!from_x.insert(n).second) continue;
    for (const Edge* e : n->out_edges()) {
      if (!e->IsControlEdge()) q.push_back(e->dst());
    }
  }
  q.assign({y});
  while (!q.empty()) {
    const Node* n = q.front();
    q.pop_front();
    if (!to_y.insert(n).second) continue;
    for (const Edge* e : n->in_edges()) {
      if (!e->IsControlEdge()) q.push_back(e->src());
    }
  }
  std::map<std::string, std::vector<std::string>> missing;  // op type -> nodes
  for (const Node* n : g.op_nodes()) {
    if (!from_x.count(n) || !to_y.count(n)) continue;
    if (std::find(xs.begin(), xs.end(), n) != xs.end()) continue;
    gradient::Creator creator;
    if (!gradient::GetOpGradientCreator(n->type_string(), &creator).ok()) {
      missing[n->type_string()].push_back(n->name());
    }
  }
  if (missing.empty()) return absl::OkStatus();
  std::vector<std::string> lines, loops;
  int nodes = 0;
  for (const auto& [op, names] : missing) {
    nodes += names.size();
    std::string line = absl::StrCat("  ", op, " (", names.size(), " node",
                                    names.size() == 1 ? "" : "s", ": '", names[0], "'",
                                    names.size() > 1 ? ", ..." : "", ")");
    if (IsLoopOp(op)) {
      loops.push_back(op);
      absl::StrAppend(&line, ": control-flow loop op");
    } else if (InList(kTfExtPythonGradientOps, op)) {
      absl::StrAppend(&line, ": TensorFlow has a gradient for it only in Python");
    } else if (InList(kTfExtPythonNoGradientOps, op)) {
      absl::StrAppend(&line, ": TensorFlow's Python registry marks it not differentiable");
    } else {
      absl::StrAppend(&line, ": no gradient in any TensorFlow registry");
    }
    lines.push_back(line);
  }
  std::string msg = absl::StrCat(missing.size(), " op type", missing.size() == 1 ? "" : "s",
                                 " (", nodes, " node", nodes == 1 ? "" : "s",
                                 ") between x and y have no C++ gradient:\n",
                                 absl::StrJoin(lines, "\n"));
  if (!loops.empty()) {
    absl::StrAppend(&msg, "\nloops are not differentiated by tf_ext_grad (",
                    absl::StrJoin(loops, ", "),
                    "): unroll them before freezing, e.g. Keras RNN layers with unroll=True");
  }
  return absl::InvalidArgumentError(msg);
}

}  // namespace tensorflow::tf_ext
