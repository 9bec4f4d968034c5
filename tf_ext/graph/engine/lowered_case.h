#ifndef TF_EXT_GRAPH_ENGINE_LOWERED_CASE_H_
#define TF_EXT_GRAPH_ENGINE_LOWERED_CASE_H_

#include "absl/status/statusor.h"
#include "tensorflow/core/framework/graph.pb.h"

namespace tensorflow::tf_ext {

// Rewrites every lowered Case of `graph` (an N-way `_SwitchN` per input and the N-input `Merge`s
// its branches meet in, which is what lowering a `tf.switch_case` leaves) into the nested
// two-way conditionals TensorFlow's functionalization converts back to `If`:
//
//   _SwitchN(d, index) -> Switch(d, index == 0): branch 0 is its true output, its false output
//                         goes on to Switch(., index == 1), ..., and branch N-1 is the false
//                         output of the last one;
//   Merge(b_0, ..., b_N-1) -> Merge(b_0, Merge(b_1, ... Merge(b_N-2, b_N-1)))  (same name).
//
// An index outside [0, N) takes branch N-1, as Case does. Each predicate `index == k` is
// computed inside the conditionals around it (the index passes through their Switches), as a
// nested `tf.cond` builds it, so a lowered Case inside a loop body converts with the loop.
// Merges with more than two inputs come only from lowered Cases, and a nest of two-input Merges
// forwards the same live input, so each is rewritten on its own. Returns how many `_SwitchN`
// nodes were rewritten; a malformed one (not two inputs, no num_outs) is an InvalidArgument
// naming it. Where the branches do not nest as the Switches do, functionalization fails later.
absl::StatusOr<int> LoweredCasesToSwitches(GraphDef* graph);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_ENGINE_LOWERED_CASE_H_
