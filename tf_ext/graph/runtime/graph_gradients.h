// Graph-level gradients with no Python: the library behind tf_ext_grad.
//
// ComputeGraphGradients takes a forward GraphDef, inlines its function calls
// (inline_calls.h), works around TensorFlow's gradient bugs (workarounds.h), builds the backward
// graph along the differentiable path from the xs to y (backprop.h, path_check.h: one
// SymbolicGradient node per op on it, each resolved by the runtime through that op's function
// gradient: FDH, or a client gradient converted by tf_ext/grads/unify.h) and runs it in a
// Session (session_options.h).
//
// This header is the library's entry point: it also brings in the request and result types
// (gradient_request.h), feeds (feeds.h), graph and gradient files (graph_io.h) and the numeric
// check (numeric_check.h). Bazel target: //tf_ext:graph_gradients.
#ifndef TF_EXT_GRAPH_RUNTIME_GRAPH_GRADIENTS_H_
#define TF_EXT_GRAPH_RUNTIME_GRAPH_GRADIENTS_H_

#include "absl/status/status.h"
#include "tf_ext/graph/io/feeds.h"
#include "tf_ext/graph/pipeline/gradient_request.h"
#include "tf_ext/graph/io/graph_io.h"
#include "tf_ext/graph/runtime/numeric_check.h"
#include "tf_ext/graph/io/tensor_ref.h"

namespace tensorflow::tf_ext {

// d sum(request->y) / d x for every x of the request, computed in a Session that stays in
// result->session (NumericCheck reuses it).
absl::Status ComputeGraphGradients(GradientRequest* request, GradientResult* result,
                                   const GradientOptions& options = {});

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_RUNTIME_GRAPH_GRADIENTS_H_
