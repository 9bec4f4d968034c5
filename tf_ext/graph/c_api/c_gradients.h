/* tf_ext's backward-graph builder for C (and the language bindings on it): TF_AddGradients
 * with control flow. Same arguments and semantics as TensorFlow's TF_AddGradientsWithPrefix,
 * but the gradients are tf_ext's (tf_ext/graph/engine/backprop.h): loops and conditionals (While,
 * If, Case and their stateless forms) are first rewritten by tf_ext's control-flow pass
 * (docs/control_flow.md), which TF_AddGradients cannot run; gradients follow only the
 * differentiable path, as Python's tf.gradients does.
 *
 * The pass replaces control-flow nodes on the path (same names), so call it before any
 * session runs the graph: with a session on the graph it fails. A y or x that is a
 * control-flow node's output is read through an Identity node (the pass replaces the node).
 * Lowered (v1) frames, e.g. loops built with TF_NewWhile, are first converted back to While
 * and If (TensorFlow's functionalization); a dx that is a v1 node's output is refused.
 * When it replaced nodes, the graph's shapes are inferred again from scratch: shapes set with
 * TF_GraphSetTensorShape beyond what inference gives are forgotten.
 *
 * Link //tf_ext:graph_gradients (Bazel) or the wheel's libtf_ext_c.so (docs/c_api.md); the op
 * library need not be loaded for TensorFlow's ops. */
#ifndef TF_EXT_GRAPH_C_API_C_GRADIENTS_H_
#define TF_EXT_GRAPH_C_API_C_GRADIENTS_H_

#include "tensorflow/c/c_api.h"
#include "tf_ext/version.h" /* TF_EXT_VERSION_STRING: the release of this C API */

#ifdef __cplusplus
extern "C" {
#endif

/* dy[i] = sum_j d(y[j]) / d(x[i]) weighted by dx[j] (dx NULL: ones). `prefix` names the
 * nodes added ("tf_ext_gradients", "tf_ext_gradients_1", ... when NULL; a given prefix must be
 * unused). Errors (InvalidArgument naming the op or node) through `status`; dy untouched. */
void TfExtAddGradients(TF_Graph* g, const char* prefix, TF_Output* y, int ny, TF_Output* x,
                       int nx, TF_Output* dx, TF_Status* status, TF_Output* dy);

/* The same pass over the graph's functions (PrepareFunctionLibraryForGradients): every function
 * holding a loop or conditional is rewritten in place, so that a SymbolicGradient of it (e.g.
 * TF_AddGradients of a PartitionedCall node, whose gradient is one) differentiates it. Before any
 * session runs the graph. */
void TfExtPrepareFunctionsForGradients(TF_Graph* g, TF_Status* status);

#ifdef __cplusplus
}
#endif

#endif /* TF_EXT_GRAPH_C_API_C_GRADIENTS_H_ */
