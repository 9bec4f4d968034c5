// One must-compile XLA cluster for what a Session run computes, as tf.function(jit_compile=True)
// makes one: the nodes that the run's fetches and targets need, from its feeds on, become one
// function marked _XlaMustCompile, called by one (Stateful)PartitionedCall node; TensorFlow's
// XLA JIT compiles that function whole at the first run (and again for feeds of new shapes),
// the tf_ext ops with their XLA kernels (tf_ext/xla/).
//
// Outside the cluster stay the fed tensors' nodes and the nodes XLA has no kernel for whose
// inputs are all outside too (Placeholder, VarHandleOp, a dataset iterator): their outputs are
// the function's arguments (a variable as its resource, whose reads and updates XLA compiles as
// in tf.function). Any other node on the way that XLA cannot compile - one with no XLA kernel,
// in the graph or in a function it calls - refuses the cluster before anything runs, naming
// the node and its op.
//
// Used by ComputeGraphGradients and GradientSession (GradientOptions::jit_compile: tf_ext_grad
// --jit_compile, the C API) and by the trainer (tf_ext_train --jit_compile).
// Tests: tests/python/test_xla_cpp.py.
#ifndef TF_EXT_GRAPH_PASSES_XLA_CLUSTER_H_
#define TF_EXT_GRAPH_PASSES_XLA_CLUSTER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tensorflow/core/framework/graph.pb.h"

namespace tensorflow::tf_ext {

struct XlaClusterSpec {
  std::vector<std::string> feeds;    // tensors fed at every run; each a node's output 0
  std::vector<std::string> fetches;  // tensors the run fetches
  std::vector<std::string> targets;  // nodes the run runs without fetching (updates)
  // Keep every node of the graph beside the cluster, for the Session's other runs; else the
  // graph keeps only what the cluster's run needs (a frozen model's weights are then held once,
  // in the function).
  bool keep_originals = false;
  std::string name = "tf_ext_xla_cluster";  // the function's and the call node's name
};

struct XlaCluster {
  std::vector<std::string> fetches;  // what the run fetches instead, in spec.fetches' order
  std::string target;                // what it runs instead of spec.targets (empty: none)
  int nodes = 0;                     // nodes compiled into the cluster
};

// Adds the cluster to `graph` (see above). Errors: a feed that is not a node's output 0, a
// fetch or target not in the graph, a node XLA cannot compile.
absl::StatusOr<XlaCluster> AddXlaCluster(GraphDef* graph, const XlaClusterSpec& spec);

// XLA compilations in this process so far, and the time they took
// (TensorFlow's /tensorflow/core/xla_compilations and xla_compilation_time_usecs).
struct XlaCompileStats {
  int64_t compilations = 0;
  int64_t micros = 0;
};
XlaCompileStats XlaCompilations();

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_PASSES_XLA_CLUSTER_H_
