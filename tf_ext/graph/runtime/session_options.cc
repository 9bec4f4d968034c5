#include "tf_ext/graph/runtime/session_options.h"

#include "tensorflow/core/protobuf/config.pb.h"
#include "tensorflow/core/protobuf/rewriter_config.pb.h"

namespace tensorflow::tf_ext {

SessionOptions BackwardSessionOptions(bool optimize) {
  SessionOptions options;
  options.config.mutable_experimental()->set_optimize_for_static_graph(true);
  if (!optimize) {
    options.config.mutable_graph_options()->mutable_rewrite_options()->set_disable_meta_optimizer(
        true);
    options.config.mutable_graph_options()->mutable_optimizer_options()->set_opt_level(
        OptimizerOptions::L0);
  }
  return options;
}


}  // namespace tensorflow::tf_ext
