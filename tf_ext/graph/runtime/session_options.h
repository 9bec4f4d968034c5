// The Session options every backward graph runs with.
#ifndef TF_EXT_GRAPH_RUNTIME_SESSION_OPTIONS_H_
#define TF_EXT_GRAPH_RUNTIME_SESSION_OPTIONS_H_

#include "tensorflow/core/public/session_options.h"

namespace tensorflow::tf_ext {

// A static graph: the Session drops its GraphDef once it has built its executors. With
// `optimize`, TensorFlow's graph optimizations run as in a Python tf.function (Grappler and
// the classic passes); without, every optimization is off. Grappler copies the GraphDef it
// optimizes and folds constants into new ones, so ComputeGraphGradients then feeds a frozen
// model's weights instead of holding them in Const nodes (gradient_request.h): Keras ResNet50
// at batch 1 then peaks about 0.2 GB above its loaded size, against 1.2 GB with Const weights
// and 1.7 GB for Python's tf.function gradient of the same graph.
SessionOptions BackwardSessionOptions(bool optimize);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_RUNTIME_SESSION_OPTIONS_H_
