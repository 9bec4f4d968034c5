// The backward builder's walk (backprop.h's AddGradients, after the control-flow pass): the
// gradient node of every op on the differentiable path, consumers before producers, each op's
// incoming gradients summed, a rewritten loop or conditional's gradient from
// control_flow_gradient.h. Function bodies are differentiated with it too
// (function_gradient.h), their nested control flow rewritten first.
#ifndef TF_EXT_GRAPH_ENGINE_BACKWARD_NODES_H_
#define TF_EXT_GRAPH_ENGINE_BACKWARD_NODES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tensorflow/core/graph/graph.h"
#include "tf_ext/graph/engine/path_check.h"

namespace tensorflow::tf_ext {

struct BackpropOptions {
  bool inline_gradients = true;
  // Every node added is named "<name_prefix>/...": pick one no node of the graph uses (a graph
  // differentiated once already holds the first pass's "tf_ext_grad/..." nodes).
  std::string name_prefix = "tf_ext_grad";
  // Loops save only their carried state per iteration and recompute the rest of their body
  // in the gradient loop (PrepareControlFlowForGradients; a memory budget sets it).
  bool recompute_loop_bodies = false;
};

struct BackpropStats {
  int gradient_nodes = 0;  // ops on the path whose gradient was added
  int inlined = 0;         // of those, inlined as plain ops
  // Control flow rewritten for its gradient (control_flow.h), nested loops included.
  int loops = 0;
  int conditionals = 0;
  int accumulators = 0;
};

// AddGradients (backprop.h) for a graph whose control flow on the path the pass has rewritten
// already (or that holds none): the same nodes, dxs and stats, but loops and conditionals
// (which the pass counts) stay 0.
absl::Status AddBackwardNodes(Graph* g, const std::vector<GraphTensor>& ys,
                              const std::vector<GraphTensor>& dys,
                              const std::vector<GraphTensor>& xs, std::vector<GraphTensor>* dxs,
                              const BackpropOptions& options, BackpropStats* stats);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_ENGINE_BACKWARD_NODES_H_
