// Values for a graph's placeholders, from command-line specs, files or a seed.
#ifndef TF_EXT_GRAPH_IO_FEEDS_H_
#define TF_EXT_GRAPH_IO_FEEDS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/tensor.h"
#include "tf_ext/graph/io/tensor_ref.h"

namespace tensorflow::tf_ext {

// A feed: NAME[:IDX]=VALUE where VALUE is
//   [SHAPE:]V1,V2,...   SHAPE like 2x3 (omitted: 1-D; "scalar": rank 0), e.g. x=2x3:1,2,3,4,5,6
//   @FILE.npy           a NumPy array (its dtype must be the placeholder's)
//   @FILE.npz[:KEY]     the array KEY (default: NAME, or the only array) of an np.savez file
//   [SHAPE:]@FILE       raw little-endian values of the placeholder's dtype; SHAPE defaults to
//                       the placeholder's (fully known) shape
//   random[:SEED]       standard normal values (uniform in [0, 10) for integer dtypes) of the
//                       placeholder's fully known shape
// The dtype is the Placeholder's `dtype` attr (float if none).
absl::StatusOr<std::pair<TensorRef, Tensor>> ParseFeed(const std::string& spec,
                                                       const GraphDef& graph);

// A random feed (as "random:SEED") for every Placeholder of `graph` that has none in `feeds`
// and a fully known shape, appended to `feeds`; returns the names fed. Placeholders of unknown shape are left. An
// invalid shape, or one whose values would not fit in half of this machine's memory, is an
// InvalidArgument naming the placeholder (as for ParseFeed's random and raw-file feeds).
absl::StatusOr<std::vector<std::string>> AddRandomFeeds(
    const GraphDef& graph, std::vector<std::pair<TensorRef, Tensor>>* feeds, uint64_t seed);

// This machine's physical memory in bytes (0 if unknown): random feeds and GradientSession's
// default memory budget are bounded by half of it.
double PhysicalMemoryBytes();

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_IO_FEEDS_H_
