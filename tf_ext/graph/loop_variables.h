// Loops that read variables, rewritten to take the variables' values.
//
// A loop body cannot be differentiated with respect to a resource handle, and a frozen or
// trained model's loops (a Keras LSTM's While) take their weights as resource loop inputs, each
// read by a ReadVariableOp in the body and passed through unchanged. ReadLoopVariablesOutside
// reads each such variable once before the loop and feeds the value in its place (the body's
// read becomes an Identity), so the control-flow pass differentiates the loop with respect to it
// (a loop invariant: its gradient is summed over the iterations), the trainer updates the
// variable from that gradient, and the SavedModel loader freezes it like any other read.
#ifndef TF_EXT_GRAPH_LOOP_VARIABLES_H_
#define TF_EXT_GRAPH_LOOP_VARIABLES_H_

#include <functional>

#include "absl/status/statusor.h"
#include "tensorflow/core/graph/graph.h"

namespace tensorflow::tf_ext {

// Rewrites every While/StatelessWhile input that is a variable (a VarHandleOp, through Identity
// nodes) for which `which` is true and that the body and cond only read or pass through; other
// uses are left as they are. Returns how many loop inputs were rewritten. The loop's output for
// that input (the handle) is taken from the VarHandleOp instead.
absl::StatusOr<int> ReadLoopVariablesOutside(Graph* g,
                                             const std::function<bool(const Node*)>& which);

// The VarHandleOp a resource edge comes from, through Identity and IdentityN nodes; null if
// it comes from anything else.
Node* VariableOfEdge(const Edge* e);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_LOOP_VARIABLES_H_
