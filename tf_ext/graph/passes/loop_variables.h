// Loops and conditionals that read variables, rewritten to take the variables' values.
//
// A loop body or a branch cannot be differentiated with respect to a resource handle, and a
// frozen or trained model's loops (a Keras LSTM's While) take their weights as resource loop
// inputs, each read by a ReadVariableOp in the body and passed through unchanged; a tf.cond
// that reads a variable passes its handle to both branches (If/Case inputs).
// ReadLoopVariablesOutside reads each such variable once before the node and feeds the value in
// its place (the functions' reads become Identity nodes), so the control-flow pass
// differentiates the loop or conditional with respect to it (a loop invariant: its gradient is
// summed over the iterations; a branch input: the taken branch's gradient), the trainer
// updates the variable from that gradient, and the SavedModel loader freezes it like any other
// read.
#ifndef TF_EXT_GRAPH_PASSES_LOOP_VARIABLES_H_
#define TF_EXT_GRAPH_PASSES_LOOP_VARIABLES_H_

#include <functional>

#include "absl/status/statusor.h"
#include "tensorflow/core/graph/graph.h"

namespace tensorflow::tf_ext {

// Rewrites every While/StatelessWhile, If/StatelessIf and Case/StatelessCase input that is a
// variable (a VarHandleOp, through Identity nodes) for which `which` is true and that every
// function of the node only reads (ReadVariableOp) or, in a loop body, passes through; other
// uses are left as they are (a nested call taking the handle, an assignment). Returns how many
// inputs were rewritten. A loop's output for that input (the handle) is taken from the
// VarHandleOp instead. The node's functions are added under new names; the originals stay.
absl::StatusOr<int> ReadLoopVariablesOutside(Graph* g,
                                             const std::function<bool(const Node*)>& which);

// The VarHandleOp a resource edge comes from, through Identity and IdentityN nodes; null if
// it comes from anything else.
Node* VariableOfEdge(const Edge* e);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_PASSES_LOOP_VARIABLES_H_
