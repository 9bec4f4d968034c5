#include "tf_ext/graph/engine/backprop.h"

#include "absl/strings/str_cat.h"
#include "tf_ext/graph/engine/backward_nodes.h"
#include "tf_ext/graph/engine/control_flow.h"
#include "tf_ext/graph/engine/control_flow_ops.h"

namespace tensorflow::tf_ext {

absl::Status AddGradients(Graph* g, const std::vector<GraphTensor>& ys,
                          const std::vector<GraphTensor>& dys, const std::vector<GraphTensor>& xs,
                          std::vector<GraphTensor>* dxs, const BackpropOptions& options,
                          BackpropStats* stats) {
  BackpropStats local_stats;
  if (stats == nullptr) stats = &local_stats;
  *stats = BackpropStats();
  if (ys.size() != dys.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(ys.size(), " ys but ", dys.size(), " incoming gradients"));
  }
  // Control flow first (control_flow.h): loops and conditionals on the path are rewritten to
  // output what their gradients read. They are replaced, so no y or x may be one's output.
  for (const auto* ts : {&ys, &xs}) {
    for (const GraphTensor& t : *ts) {
      if (IsFunctionalControlFlow(t.node->type_string()) &&
          !IsPreparedControlFlow(*t.node, options.name_prefix + "_cf")) {
        return absl::InvalidArgumentError(absl::StrCat(
            "a y or x is output ", t.index, " of the ", t.node->type_string(), " node '",
            t.node->name(), "': read it through an Identity node, which the gradient keeps"));
      }
    }
  }
  auto control_flow = PrepareControlFlowForGradients(g, ys, xs, options.name_prefix + "_cf",
                                                     options.recompute_loop_bodies);
  if (!control_flow.ok()) return control_flow.status();
  TF_RETURN_IF_ERROR(AddBackwardNodes(g, ys, dys, xs, dxs, options, stats));
  stats->loops = control_flow->loops;
  stats->conditionals = control_flow->conditionals;
  stats->accumulators = control_flow->accumulators;
  return absl::OkStatus();
}

}  // namespace tensorflow::tf_ext
