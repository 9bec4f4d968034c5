// Function calls of a forward graph inlined before it is differentiated.
#ifndef TF_EXT_GRAPH_ENGINE_INLINE_CALLS_H_
#define TF_EXT_GRAPH_ENGINE_INLINE_CALLS_H_

#include "absl/status/statusor.h"
#include "tensorflow/core/graph/graph.h"

namespace tensorflow::tf_ext {

// Inlines every function call node of `g` (PartitionedCall, StatefulPartitionedCall, nodes
// whose op is a function of g's library), recursively; each leaves an IdentityN with the
// caller's name so its outputs keep their names. Returns how many calls were inlined.
absl::StatusOr<int> InlineFunctionCalls(Graph* g);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_ENGINE_INLINE_CALLS_H_
