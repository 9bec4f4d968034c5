// The gradient nodes of control flow: of a loop or conditional that the control-flow pass
// (control_flow.h) rewrote, built from the attrs the pass left on it, and of a lowered (v1)
// conditional. What the backward builder (backward_nodes.h) adds for such a node.
#ifndef TF_EXT_GRAPH_ENGINE_CONTROL_FLOW_GRADIENT_H_
#define TF_EXT_GRAPH_ENGINE_CONTROL_FLOW_GRADIENT_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tensorflow/core/graph/graph.h"
#include "tf_ext/graph/engine/path_check.h"

namespace tensorflow::tf_ext {

// The gradient of a node the pass rewrote: `dy(k)` returns the incoming gradient of original
// output k (called only for outputs of a differentiable type). Returns one tensor per input of
// `n`: the gradient of that input, or {nullptr, 0} where none flows.
absl::StatusOr<std::vector<GraphTensor>> AddControlFlowGradient(
    Graph* g, Node* n, const std::function<absl::StatusOr<GraphTensor>(int)>& dy,
    const std::string& name_prefix);

// Switch, _SwitchN and Merge that reach the backward builder without FunctionalizeV1ControlFlow
// (which converts every lowered conditional, lowered Cases included: lowered_case.h). Their
// gradients are v1 conditionals too (dead tensors on the branches not taken): a Merge's
// gradient goes to its taken input through a _SwitchN on its value_index, a switch's gradient
// is the Merge of its outputs' gradients. Arguments and result as AddControlFlowGradient's.
absl::StatusOr<std::vector<GraphTensor>> AddV1ConditionalGradient(
    Graph* g, Node* n, const std::function<absl::StatusOr<GraphTensor>(int)>& dy,
    const std::string& name_prefix);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_ENGINE_CONTROL_FLOW_GRADIENT_H_
