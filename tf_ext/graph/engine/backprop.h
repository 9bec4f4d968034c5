// The backward graph: tf_ext's own builder of gradient nodes, in place of TensorFlow's
// graph-level AddSymbolicGradients (core/common_runtime/gradients.h).
//
// TensorFlow's builder walks back from y along every edge, so it adds a gradient node for
// every op upstream of y (also ops that do not depend on x, and ops whose only link to x is an
// integer tensor, which then need a gradient Python would never ask for), stops at every
// requested x (so d/dx of several xs, one computed from another, needs one pass each) and
// CHECK-fails, aborting the process, on an x that is not a node's only output. This builder
// follows only the differentiable path (path_check.h), as Python's tf.gradients does, and
// computes every x's total derivative in one pass.
//
// Each op on the path gets its function gradient (FDH, or a client gradient converted by
// tf_ext/grads/unify.h): by default inlined as plain ops (the gradient FunctionDef specialised
// to the op's attrs), so that the Session prunes what is not fetched (a Conv2D's filter
// gradient when only d/dx is asked for) and TensorFlow's graph optimizations see one graph;
// or, with inline_gradients off, as one SymbolicGradient node resolved at run time (it
// computes the gradients of all the op's inputs). Inlined, a gradient that reads its op's
// forward outputs (registry.h, ReadsForwardOutputs) takes them from the forward node instead of
// recomputing the op (another draw of a random op; TensorArrayConcatV3's lengths). Outputs of an op on the path that carry no
// gradient get zeros; an x that y does not depend on gets zeros.
#ifndef TF_EXT_GRAPH_ENGINE_BACKPROP_H_
#define TF_EXT_GRAPH_ENGINE_BACKPROP_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tensorflow/core/graph/graph.h"
#include "tf_ext/graph/engine/backward_nodes.h"
#include "tf_ext/graph/engine/path_check.h"

namespace tensorflow::tf_ext {

// Loops and conditionals (While, If, Case and their stateless forms) on the path are first
// rewritten by PrepareControlFlowForGradients (control_flow.h), which replaces them: no y or x
// may be an output of one (read it through an Identity).
//
// Adds to `g` the nodes computing, for each x, sum_i <dys[i], d ys[i] / d x> (dys: the incoming
// gradients, one per y, of the y's type and shape); `dxs` receives one tensor per x, each
// the output of an Identity node named <name_prefix>/dx (uniquified). Fails,
// naming every op, when an op on the path has no gradient (CheckPathHasGradients).
absl::Status AddGradients(Graph* g, const std::vector<GraphTensor>& ys,
                          const std::vector<GraphTensor>& dys, const std::vector<GraphTensor>& xs,
                          std::vector<GraphTensor>* dxs, const BackpropOptions& options = {},
                          BackpropStats* stats = nullptr);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_ENGINE_BACKPROP_H_
