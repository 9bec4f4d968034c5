// The graph tf_ext_grad differentiates when given no --graph.
#ifndef TF_EXT_TOOLS_DEFAULT_EXAMPLE_H_
#define TF_EXT_TOOLS_DEFAULT_EXAMPLE_H_

#include "tf_ext/graph/pipeline/gradient_request.h"

namespace tensorflow::tf_ext::tools {

// A small graph through every tf_ext op, with its feeds.
GradientRequest DefaultExample();

}  // namespace tensorflow::tf_ext::tools

#endif  // TF_EXT_TOOLS_DEFAULT_EXAMPLE_H_
