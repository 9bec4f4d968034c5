// The Session options every backward graph runs with.
#ifndef TF_EXT_GRAPH_SESSION_OPTIONS_H_
#define TF_EXT_GRAPH_SESSION_OPTIONS_H_

#include "tensorflow/core/public/session_options.h"

namespace tensorflow::tf_ext {

// A static graph: the Session drops its GraphDef once it has built its executors. Unless
// `optimize`, TensorFlow's graph optimizations are off: on a frozen model, constant folding
// (classic L1 and Grappler's) copies every weight that passes an Identity, and Grappler's
// passes over the forward + backward graph cost more than they save (Keras ResNet152,
// training mode, batch 8: peak RSS 3.55 GB -> 1.30 GB, run 13.8 s -> 5.0 s, same gradient).
SessionOptions GradientSessionOptions(bool optimize);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_SESSION_OPTIONS_H_
