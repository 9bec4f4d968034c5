#include "tf_ext/graph/engine/shape_inference.h"

#include <cstdint>
#include <limits>

#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/graph/algorithm.h"

namespace tensorflow::tf_ext {

std::map<std::string, PartialTensorShape> ArgShapesByName(
    const Graph& g, const std::vector<PartialTensorShape>& by_index) {
  std::map<std::string, PartialTensorShape> shapes;
  for (const Node* n : g.op_nodes()) {
    int index = -1;
    if (n->IsArg() && GetNodeAttr(n->attrs(), "index", &index).ok() && index >= 0 &&
        index < static_cast<int>(by_index.size())) {
      shapes[n->name()] = by_index[index];
    }
  }
  return shapes;
}

void InferShapes(Graph* g, const std::map<std::string, PartialTensorShape>& arg_shapes,
                 ShapeRefiner* refiner, const std::function<bool(const Node*)>& include) {
  FixupSourceAndSinkEdges(g);
  std::vector<Node*> order;
  GetReversePostOrder(*g, &order, NodeComparatorName());
  for (Node* n : order) {
    if (!n->IsOp() || (include && !include(n)) || !refiner->AddNode(n).ok()) continue;
    auto it = arg_shapes.find(n->name());
    if (!n->IsArg() || it == arg_shapes.end()) continue;
    shape_inference::InferenceContext* c = refiner->GetContext(n);
    shape_inference::ShapeHandle h;
    if (c->MakeShapeFromPartialTensorShape(it->second, &h).ok()) {
      refiner->SetShape(n, 0, h).IgnoreError();
    }
  }
}

std::optional<Tensor> StaticShapeValue(const ShapeRefiner& refiner, const Node* n, int index,
                                       const std::string& op, DataType out_type) {
  if (out_type != DT_INT32 && out_type != DT_INT64) return std::nullopt;
  shape_inference::InferenceContext* c = refiner.GetContext(n);
  if (c == nullptr || index < 0 || index >= c->num_outputs()) return std::nullopt;
  const shape_inference::ShapeHandle shape = c->output(index);
  if (!c->RankKnown(shape)) return std::nullopt;
  const int rank = c->Rank(shape);
  auto set = [out_type](Tensor* t, int64_t i, int64_t v) {
    if (out_type == DT_INT32) t->flat<int32_t>()(i) = static_cast<int32_t>(v);
    else t->flat<int64_t>()(i) = v;
  };
  if (op == "Rank") {
    Tensor value(out_type, TensorShape({}));
    set(&value, 0, rank);
    return value;
  }
  if (!c->FullyDefined(shape)) return std::nullopt;
  if (op == "Shape") {
    Tensor value(out_type, TensorShape({rank}));
    for (int d = 0; d < rank; ++d) {
      const int64_t dim = c->Value(c->Dim(shape, d));
      if (out_type == DT_INT32 && dim > std::numeric_limits<int32_t>::max()) return std::nullopt;
      set(&value, d, dim);
    }
    return value;
  }
  if (op == "Size") {
    int64_t size = 1;
    for (int d = 0; d < rank; ++d) {
      const int64_t dim = c->Value(c->Dim(shape, d));
      if (dim != 0 && size > std::numeric_limits<int64_t>::max() / dim) return std::nullopt;
      size *= dim;
    }
    if (out_type == DT_INT32 && size > std::numeric_limits<int32_t>::max()) return std::nullopt;
    Tensor value(out_type, TensorShape({}));
    set(&value, 0, size);
    return value;
  }
  return std::nullopt;
}

}  // namespace tensorflow::tf_ext
