#include "tf_ext/graph/shape_inference.h"

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
  GetReversePostOrder(*g, &order);
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

}  // namespace tensorflow::tf_ext
