// Which nodes are control flow, and which a control-flow pass has rewritten for its gradient
// (control_flow.h): the predicates every part of the engine asks.
#ifndef TF_EXT_GRAPH_ENGINE_CONTROL_FLOW_OPS_H_
#define TF_EXT_GRAPH_ENGINE_CONTROL_FLOW_OPS_H_

#include <string>

#include "tensorflow/core/graph/graph.h"

namespace tensorflow::tf_ext {

// Enter, Exit, Switch, Merge, NextIteration, LoopCond and their Ref forms: the nodes of lowered
// (v1) control flow.
bool IsV1ControlFlow(const std::string& op);
// Switch, _SwitchN and Merge: the lowered conditionals the backward builder may meet
// (AddV1ConditionalGradient, control_flow_gradient.h).
bool IsV1Conditional(const std::string& op);

// While and StatelessWhile; Case and StatelessCase.
bool IsWhile(const std::string& op);
bool IsCase(const std::string& op);
// While, StatelessWhile, If, StatelessIf, Case, StatelessCase.
bool IsFunctionalControlFlow(const std::string& op);
// A control-flow node a pass has rewritten (it carries the gradient's attrs); the second form:
// rewritten by the pass of that name_prefix. A pass rewrites again what another pass (an
// earlier differentiation of the graph) rewrote, so a backward graph differentiates again
// (second derivatives through loops).
bool IsPreparedControlFlow(const Node& n);
bool IsPreparedControlFlow(const Node& n, const std::string& pass);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_ENGINE_CONTROL_FLOW_OPS_H_
