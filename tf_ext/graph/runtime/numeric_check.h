// Central differences of a forward graph, compared with the gradients ComputeGraphGradients
// returned (tf_ext_grad --check).
#ifndef TF_EXT_GRAPH_RUNTIME_NUMERIC_CHECK_H_
#define TF_EXT_GRAPH_RUNTIME_NUMERIC_CHECK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tf_ext/graph/pipeline/gradient_request.h"

namespace tensorflow::tf_ext {

struct NumericCheckOptions {
  double delta = 0;        // <= 0: 1e-6 for double xs, else 1e-3
  // Random projections: compare <grad, v> with the central difference of sum(y) along v
  // (v: random +-1 per element), `projections` times per x. -1: elementwise when an x has at
  // most 256 elements, else 16 projections; 0: always elementwise.
  int projections = -1;
  uint64_t seed = 0;
  bool optimize_graph = true;  // as GradientOptions::optimize_graph
};

struct NumericCheckResult {
  double max_abs_error = 0;
  double max_rel_error = 0;   // |sym - num| / max(1, |num|)
  int worst_x = -1;
  int64_t worst_element = -1;
  double worst_symbolic = 0, worst_numeric = 0;
  int64_t elements = 0;      // elements (or projections) compared
  int projections = 0;       // projections per x used for xs checked by projections
  double seconds = 0;
  // Ops whose surrogate forward (see tf_ext/grads/registry.h) was differenced in their place.
  std::vector<std::string> surrogates;
};

// Central differences of sum(y), elementwise or along random projections (see
// NumericCheckOptions), compared with `result.grads`. Ops with a registered surrogate forward
// (straight-through estimators, gradient reversal: their gradient is by design not the
// forward's derivative) are replaced by that surrogate in the differenced graph.
absl::Status NumericCheck(const GradientRequest& request, const GradientResult& result,
                          const NumericCheckOptions& options, NumericCheckResult* check);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_RUNTIME_NUMERIC_CHECK_H_
