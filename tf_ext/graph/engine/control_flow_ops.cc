#include "tf_ext/graph/engine/control_flow_ops.h"

#include <set>

#include "tensorflow/core/framework/node_def_util.h"
#include "tf_ext/grads/control_flow_attrs.h"

namespace tensorflow::tf_ext {

bool IsWhile(const std::string& op) { return op == "While" || op == "StatelessWhile"; }
bool IsCase(const std::string& op) { return op == "Case" || op == "StatelessCase"; }

bool IsV1ControlFlow(const std::string& op) {
  static const auto* v1_ops = new std::set<std::string>{
      "Enter", "RefEnter", "Exit", "RefExit", "Switch", "RefSwitch", "Merge", "RefMerge",
      "NextIteration", "RefNextIteration", "LoopCond"};
  return v1_ops->count(op) > 0;
}

bool IsV1Conditional(const std::string& op) {
  return op == "Switch" || op == "_SwitchN" || op == "Merge";
}

bool IsFunctionalControlFlow(const std::string& op) {
  return IsWhile(op) || IsCase(op) || op == "If" || op == "StatelessIf";
}

bool IsPreparedControlFlow(const Node& n) {
  return IsFunctionalControlFlow(n.type_string()) &&
         n.attrs().Find(control_flow::kFunctions) != nullptr;
}

bool IsPreparedControlFlow(const Node& n, const std::string& pass) {
  std::string by;
  return IsPreparedControlFlow(n) && GetNodeAttr(n.attrs(), control_flow::kPass, &by).ok() &&
         by == pass;
}

}  // namespace tensorflow::tf_ext
