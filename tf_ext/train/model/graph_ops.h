// A few stock ops added to a Graph by name, for the step graph the trainer builds (losses.h,
// optimizers.h). Every node is "<prefix>/<name>", uniquified; errors are kept and returned by
// status() (the first), so a builder adds a whole formula and checks once.
#ifndef TF_EXT_TRAIN_MODEL_GRAPH_OPS_H_
#define TF_EXT_TRAIN_MODEL_GRAPH_OPS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/graph/graph.h"
#include "tensorflow/core/graph/node_builder.h"
#include "tf_ext/graph/engine/path_check.h"

namespace tensorflow::tf_ext::train {

class GraphOps {
 public:
  GraphOps(Graph* g, std::string prefix) : g_(g), prefix_(std::move(prefix)) {}

  GraphTensor Const(const Tensor& value, const std::string& name = "const");
  GraphTensor Scalar(DataType dtype, double value, const std::string& name = "const");
  GraphTensor Unary(const std::string& op, GraphTensor x);
  GraphTensor Binary(const std::string& op, GraphTensor a, GraphTensor b);
  GraphTensor Cast(GraphTensor x, DataType to);
  // Reductions over all axes, or the last (keepdims false).
  GraphTensor SumAll(GraphTensor x);
  GraphTensor ReduceLast(const std::string& op, GraphTensor x);  // "Mean", "Sum"
  GraphTensor Size(GraphTensor x, DataType out);                  // number of elements
  GraphTensor VarHandle(const std::string& name, DataType dtype, const PartialTensorShape& shape);
  GraphTensor Read(GraphTensor handle, DataType dtype);
  // An op that updates variables and has no outputs (AssignVariableOp, ResourceApplyAdam, ...),
  // run after `after`; returns the node.
  Node* Update(const std::string& op, const std::vector<GraphTensor>& inputs,
               const std::vector<Node*>& after = {},
               const std::vector<std::pair<std::string, AttrValue>>& attrs = {});
  // Assign / AssignAdd / AssignSub VariableOp; returns the node (no outputs).
  Node* Assign(const std::string& op, GraphTensor handle, GraphTensor value, const std::vector<Node*>& after = {});
  Node* Group(const std::string& name, const std::vector<Node*>& nodes);
  // ResourceScatterAdd / ResourceScatterSub of `rows` ([n, ...]) at `indices` ([n]) into the
  // variable, after `after`; returns the node (no outputs).
  Node* Scatter(const std::string& op, GraphTensor handle, GraphTensor indices, GraphTensor rows,
                const std::vector<Node*>& after = {});
  // The variable's rows at `indices` (ResourceGather), read after `after`.
  GraphTensor GatherRows(GraphTensor handle, DataType dtype, GraphTensor indices, Node* after);
  // Any op: inputs, attrs set by `set` on the builder.
  GraphTensor Op(const std::string& op, const std::vector<GraphTensor>& inputs, const std::string& name,
       const std::vector<std::pair<std::string, AttrValue>>& attrs = {}, int output = 0);

  absl::Status status() const { return status_; }
  Graph* graph() const { return g_; }
  const std::string& prefix() const { return prefix_; }

 private:
  Node* Finish(NodeBuilder* b);
  Graph* g_;
  std::string prefix_;
  absl::Status status_;
};

}  // namespace tensorflow::tf_ext::train

#endif  // TF_EXT_TRAIN_MODEL_GRAPH_OPS_H_
