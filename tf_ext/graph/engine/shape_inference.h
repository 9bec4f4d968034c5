// Shape inference over a graph or a function body's graph, for the passes that rewrite graphs
// before they are differentiated (workarounds.h, control_flow.h).
#ifndef TF_EXT_GRAPH_ENGINE_SHAPE_INFERENCE_H_
#define TF_EXT_GRAPH_ENGINE_SHAPE_INFERENCE_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tensorflow/core/common_runtime/shape_refiner.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/graph/graph.h"

namespace tensorflow::tf_ext {

// Per _Arg node name, the shape given for its index (a function body's arguments).
std::map<std::string, PartialTensorShape> ArgShapesByName(
    const Graph& g, const std::vector<PartialTensorShape>& by_index);

// Adds g's nodes to `refiner`, producers first (every node is reached from the source: input-less
// nodes added without an edge from it get one). A node whose shape function fails, or whose
// inputs' did, gets no context. An _Arg named in `arg_shapes` gets that shape (a loop
// variable's shape invariant). `include` picks the nodes (all when null).
void InferShapes(Graph* g, const std::map<std::string, PartialTensorShape>& arg_shapes,
                 ShapeRefiner* refiner,
                 const std::function<bool(const Node*)>& include = nullptr);

// The value of `op` (Shape, Size or Rank, with output type `out_type`) of output `index` of `n`
// when `refiner` knows it statically (a fully defined shape; for Rank, a known rank), else
// nullopt.
std::optional<Tensor> StaticShapeValue(const ShapeRefiner& refiner, const Node* n, int index,
                                       const std::string& op, DataType out_type);

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_ENGINE_SHAPE_INFERENCE_H_
