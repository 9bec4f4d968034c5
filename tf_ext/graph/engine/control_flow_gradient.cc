#include "tf_ext/graph/engine/control_flow_gradient.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/graph/node_builder.h"
#include "tf_ext/grads/control_flow_attrs.h"
#include "tf_ext/graph/engine/control_flow_ops.h"
#include "tf_ext/graph/engine/function_graph.h"

namespace tensorflow::tf_ext {
namespace {

// The attrs of a rewritten node that its gradient reads (tf_ext/grads/control_flow_attrs.h).
using control_flow::kCaptures;
using control_flow::kFunctions;
using control_flow::kInputs;
using control_flow::kNumOutputs;
using control_flow::kNumSaved;
using control_flow::kOutputs;

absl::StatusOr<GraphTensor> InputOf(const Node* n, int index) {
  const Edge* e = nullptr;
  TF_RETURN_IF_ERROR(n->input_edge(index, &e));
  return GraphTensor{e->src(), e->src_output()};
}

}  // namespace

absl::StatusOr<std::vector<GraphTensor>> AddV1ConditionalGradient(
    Graph* g, Node* n, const std::function<absl::StatusOr<GraphTensor>(int)>& dy,
    const std::string& name_prefix) {
  std::vector<GraphTensor> result(n->num_inputs());
  const DataType type = n->output_type(0);
  if (!Flows(type)) return result;
  const std::string name = g->NewName(absl::StrCat(name_prefix, "/", n->name(), "/grad"));
  Node* grad = nullptr;
  if (n->type_string() == "Merge") {
    // The gradient goes to the input that was taken (Merge's value_index): a _SwitchN on it
    // sends dy there and a dead tensor to the other inputs.
    auto d = dy(0);
    if (!d.ok()) return d.status();
    TF_RETURN_IF_ERROR(NodeBuilder(name, "_SwitchN")
                           .Input(d->node, d->index)
                           .Input(n, 1)
                           .Attr("num_outs", n->num_inputs())
                           .Attr("T", type)
                           .Finalize(g, &grad));
    for (int k = 0; k < n->num_inputs(); ++k) result[k] = {grad, k};
    return result;
  }
  // Switch / _SwitchN: only the taken output is live; Merge forwards its gradient to the data.
  std::vector<NodeBuilder::NodeOut> ds;
  for (int k = 0; k < n->num_outputs(); ++k) {
    auto d = dy(k);
    if (!d.ok()) return d.status();
    ds.push_back({d->node, d->index});
  }
  TF_RETURN_IF_ERROR(NodeBuilder(name, "Merge").Input(ds).Finalize(g, &grad));
  result[0] = {grad, 0};
  return result;
}

absl::StatusOr<std::vector<GraphTensor>> AddControlFlowGradient(
    Graph* g, Node* n, const std::function<absl::StatusOr<GraphTensor>(int)>& dy,
    const std::string& name_prefix) {
  std::vector<std::string> functions;
  std::vector<int> inputs, outputs, captures;
  int num_outputs = 0, num_saved = 0;
  TF_RETURN_IF_ERROR(GetNodeAttr(n->attrs(), kFunctions, &functions));
  TF_RETURN_IF_ERROR(GetNodeAttr(n->attrs(), kInputs, &inputs));
  TF_RETURN_IF_ERROR(GetNodeAttr(n->attrs(), kNumOutputs, &num_outputs));
  TF_RETURN_IF_ERROR(GetNodeAttr(n->attrs(), kNumSaved, &num_saved));
  std::vector<GraphTensor> result(n->num_inputs());
  auto func = [](const std::string& name) {
    NameAttrList f;
    f.set_name(name);
    return f;
  };
  std::vector<NodeBuilder::NodeOut> in;
  DataTypeVector types;
  auto add = [&](const GraphTensor& t) {
    in.push_back({t.node, t.index});
    types.push_back(t.node->output_type(t.index));
  };
  const std::string name = g->NewName(absl::StrCat(name_prefix, "/", n->name(), "/grad"));
  Node* grad = nullptr;
  if (IsWhile(n->type_string())) {
    TF_RETURN_IF_ERROR(GetNodeAttr(n->attrs(), kCaptures, &captures));
    auto fresh_type = control_flow::FreshLists(n->attrs(), n->name(), inputs.size());
    if (!fresh_type.ok()) return fresh_type.status();
    std::vector<GraphTensor> incoming;
    std::set<size_t> nothing_incoming;  // fresh lists whose incoming gradient is zeros
    add({n, num_outputs});  // the iteration count
    for (size_t m = 0; m < inputs.size(); ++m) {
      auto d = dy(inputs[m]);
      if (!d.ok()) return d.status();
      incoming.push_back(*d);
      auto it = fresh_type->find(m);
      if (it == fresh_type->end()) {
        add(*d);
        continue;
      }
      // A list of uninitialised elements, as long as the incoming gradient and with its
      // element shape, which the backward loop writes once per element. Where no gradient
      // comes in (zeros of the forward list), the shape is read from the forward list, so
      // that the zeros are never made (an LSTM's input sequence: a copy of it).
      GraphTensor like = *d;
      const Edge* zeros_of = nullptr;
      if (d->node->type_string() == "ZerosLike" && d->node->input_edge(0, &zeros_of).ok()) {
        like = {zeros_of->src(), zeros_of->src_output()};
        nothing_incoming.insert(m);
      }
      Node *shape = nullptr, *length = nullptr, *list = nullptr;
      const std::string base = g->NewName(absl::StrCat(name, "/fresh_list"));
      TF_RETURN_IF_ERROR(NodeBuilder(base + "/element_shape", "TensorListElementShape")
                             .Input(like.node, like.index)
                             .Attr("shape_type", DT_INT32)
                             .Finalize(g, &shape));
      TF_RETURN_IF_ERROR(NodeBuilder(base + "/length", "TensorListLength")
                             .Input(like.node, like.index)
                             .Finalize(g, &length));
      TF_RETURN_IF_ERROR(NodeBuilder(base, "TensorListReserve")
                             .Input(shape, 0)
                             .Input(length, 0)
                             .Attr("element_dtype", it->second)
                             .Attr("shape_type", DT_INT32)
                             .Finalize(g, &list));
      add({list, 0});
    }
    for (int j = 0; j < num_saved; ++j) add({n, num_outputs + 1 + j});
    for (int k : captures) {
      auto t = InputOf(n, k);
      if (!t.ok()) return t.status();
      add(*t);
    }
    std::vector<TensorShapeProto> shapes(types.size(), UnknownShape());
    int parallel = 10;
    (void)GetNodeAttr(n->attrs(), "parallel_iterations", &parallel);
    NodeBuilder builder(name, "While");
    builder.Input(in)
        .Attr("T", types)
        .Attr("body", func(functions[0]))
        .Attr("cond", func(functions[1]))
        .Attr("output_shapes", shapes)
        .Attr("parallel_iterations", parallel);
    // Lowered, as Python's while_v2 lowers gradient loops: the executor then prunes the loop
    // variables whose gradients nobody fetches (a frozen weight's, every iteration).
    builder.Attr("_lower_using_switch_merge", true);
    TF_RETURN_IF_ERROR(builder.Finalize(g, &grad));
    for (size_t m = 0; m < inputs.size(); ++m) {
      result[inputs[m]] = {grad, 1 + static_cast<int>(m)};
      if (!fresh_type->count(m)) continue;
      // The incoming gradient plus what the loop wrote (an uninitialised element adds as
      // zeros): one pass over the list, once; nothing to add to zeros (list ops read an
      // uninitialised element as zeros).
      if (nothing_incoming.count(m)) continue;
      Node* sum = nullptr;
      TF_RETURN_IF_ERROR(
          NodeBuilder(g->NewName(absl::StrCat(name, "/fresh_list_sum")), "AddN")
              .Input(std::vector<NodeBuilder::NodeOut>{{incoming[m].node, incoming[m].index},
                                                       {grad, 1 + static_cast<int>(m)}})
              .Finalize(g, &sum));
      result[inputs[m]] = {sum, 0};
    }
    return result;
  }
  TF_RETURN_IF_ERROR(GetNodeAttr(n->attrs(), kOutputs, &outputs));
  auto pred = InputOf(n, 0);
  if (!pred.ok()) return pred.status();
  for (int k : outputs) {
    auto d = dy(k);
    if (!d.ok()) return d.status();
    add(*d);
  }
  for (int s = 0; s < num_saved; ++s) add({n, num_outputs + s});
  for (int i = 1; i < n->num_inputs(); ++i) {
    auto t = InputOf(n, i);
    if (!t.ok()) return t.status();
    add(*t);
  }
  DataTypeVector tout;
  DataTypeVector tin;
  TF_RETURN_IF_ERROR(GetNodeAttr(n->attrs(), "Tin", &tin));
  for (int k : inputs) tout.push_back(tin[k]);
  NodeBuilder builder(name, n->type_string());
  builder.Input(pred->node, pred->index).Input(in).Attr("Tin", types).Attr("Tout", tout);
  builder.Attr("output_shapes", std::vector<TensorShapeProto>());
  if (IsCase(n->type_string())) {
    std::vector<NameAttrList> fs;
    for (const std::string& f : functions) fs.push_back(func(f));
    builder.Attr("branches", fs);
  } else {
    DataType tcond;
    TF_RETURN_IF_ERROR(GetNodeAttr(n->attrs(), "Tcond", &tcond));
    builder.Attr("Tcond", tcond)
        .Attr("then_branch", func(functions[0]))
        .Attr("else_branch", func(functions[1]));
  }
  builder.Attr("_lower_using_switch_merge", true);
  TF_RETURN_IF_ERROR(builder.Finalize(g, &grad));
  // Branch input i is input i + 1 of the If/Case (input 0 is the predicate or index).
  for (size_t m = 0; m < inputs.size(); ++m) result[inputs[m] + 1] = {grad, static_cast<int>(m)};
  return result;
}

}  // namespace tensorflow::tf_ext
