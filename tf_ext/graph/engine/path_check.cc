#include "tf_ext/graph/engine/path_check.h"

#include <deque>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensorflow/core/framework/function.h"
#include "tf_ext/graph/engine/control_flow_ops.h"
#include "tf_ext_python_gradients.h"

namespace tensorflow::tf_ext {
namespace {

bool InList(const char* const* list, const std::string& op) {
  for (; *list != nullptr; ++list) {
    if (op == *list) return true;
  }
  return false;
}

// Lowered (v1) control-flow ops: differentiated only once converted back to While/If
// (control_flow.h), or, outside loops, by the backward builder (Switch, Merge).
bool IsLoopOp(const std::string& op) {
  static const auto* loop_ops = new std::set<std::string>{
      "While", "StatelessWhile", "Enter", "RefEnter", "Exit", "RefExit", "Switch", "RefSwitch",
      "Merge", "RefMerge", "NextIteration", "RefNextIteration", "LoopCond"};
  return loop_ops->count(op) > 0;
}

// Registered as not differentiable (a null creator): gradients stop there, as in Python.
bool StopsGradients(const Node* n) {
  gradient::Creator creator;
  return gradient::GetOpGradientCreator(n->type_string(), &creator).ok() && creator == nullptr;
}

}  // namespace

bool IsDifferentiableType(DataType dtype) {
  switch (BaseType(dtype)) {
    case DT_HALF:
    case DT_BFLOAT16:
    case DT_FLOAT:
    case DT_DOUBLE:
    case DT_COMPLEX64:
    case DT_COMPLEX128:
    case DT_VARIANT:
    case DT_RESOURCE:
      return true;
    default:
      return false;
  }
}

bool Flows(DataType t) { return t != DT_RESOURCE && IsDifferentiableType(t); }

DifferentiablePath FindDifferentiablePath(const Graph& g, const std::vector<GraphTensor>& ys,
                                          const std::vector<GraphTensor>& xs) {
  const int ids = g.num_node_ids();
  // depends[id][k]: output k depends differentiably on an x. reaches[id][k]: a y depends
  // differentiably on output k.
  std::vector<std::vector<bool>> depends(ids), reaches(ids);
  for (const Node* n : g.nodes()) {
    depends[n->id()].assign(n->num_outputs(), false);
    reaches[n->id()].assign(n->num_outputs(), false);
  }
  // Forward from the xs: a node reading a dependent tensor makes its differentiable outputs
  // dependent, unless gradients stop at it.
  std::vector<bool> reads_dependent(ids, false);
  std::deque<const Node*> queue;
  auto mark_dependent = [&](const Node* n, int k) {
    if (depends[n->id()][k] || !IsDifferentiableType(n->output_type(k))) return;
    depends[n->id()][k] = true;
    for (const Edge* e : n->out_edges()) {
      if (e->IsControlEdge() || e->src_output() != k) continue;
      if (!reads_dependent[e->dst()->id()]) {
        reads_dependent[e->dst()->id()] = true;
        queue.push_back(e->dst());
      }
    }
  };
  for (const GraphTensor& x : xs) mark_dependent(x.node, x.index);
  while (!queue.empty()) {
    const Node* n = queue.front();
    queue.pop_front();
    if (StopsGradients(n)) continue;
    for (int k = 0; k < n->num_outputs(); ++k) mark_dependent(n, k);
  }
  // Backward from the ys, symmetrically.
  std::vector<bool> feeds_reaching(ids, false);
  auto mark_reaching = [&](const Node* n, int k) {
    if (reaches[n->id()][k] || !IsDifferentiableType(n->output_type(k))) return;
    reaches[n->id()][k] = true;
    if (!feeds_reaching[n->id()]) {
      feeds_reaching[n->id()] = true;
      queue.push_back(n);
    }
  };
  for (const GraphTensor& y : ys) mark_reaching(y.node, y.index);
  while (!queue.empty()) {
    const Node* n = queue.front();
    queue.pop_front();
    if (StopsGradients(n)) continue;
    for (const Edge* e : n->in_edges()) {
      if (!e->IsControlEdge()) mark_reaching(e->src(), e->src_output());
    }
  }
  DifferentiablePath path;
  path.carries.resize(ids);
  path.on_path.assign(ids, false);
  for (const Node* n : g.nodes()) {
    const int id = n->id();
    path.on_path[id] = reads_dependent[id] && feeds_reaching[id];
    path.carries[id].resize(n->num_outputs());
    for (int k = 0; k < n->num_outputs(); ++k) {
      path.carries[id][k] = depends[id][k] && reaches[id][k];
    }
  }
  return path;
}

absl::Status CheckPathHasGradients(const Graph& g, const DifferentiablePath& path) {
  std::map<std::string, std::vector<std::string>> missing;  // op type -> nodes
  for (const Node* n : g.op_nodes()) {
    if (!path.OnPath(n) || IsPreparedControlFlow(*n) || IsV1Conditional(n->type_string())) {
      continue;
    }
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
      absl::StrAppend(&line, ": lowered (v1) control-flow op");
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
    absl::StrAppend(&msg, "\nthe graph has lowered (v1) control flow (", absl::StrJoin(loops, ", "),
                    "): convert its frames back to While/If first (FunctionalizeV1ControlFlow, "
                    "tf_ext/graph/engine/control_flow.h; tf_ext_grad does), or freeze with "
                    "lower_control_flow=False");
  }
  return absl::InvalidArgumentError(msg);
}

}  // namespace tensorflow::tf_ext
