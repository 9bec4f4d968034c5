#include "tf_ext/train/model/graph_ops.h"

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/attr_value_util.h"

namespace tensorflow::tf_ext::train {

Node* GraphOps::Finish(NodeBuilder* b) {
  Node* n = nullptr;
  if (!status_.ok()) return nullptr;
  absl::Status s = b->Finalize(g_, &n);
  if (!s.ok()) {
    status_ = s;
    return nullptr;
  }
  return n;
}

GraphTensor GraphOps::Op(const std::string& op, const std::vector<GraphTensor>& inputs,
                         const std::string& name,
                         const std::vector<std::pair<std::string, AttrValue>>& attrs,
                         int output) {
  if (!status_.ok()) return {};
  NodeBuilder b(g_->NewName(absl::StrCat(prefix_, "/", name)), op);
  for (const GraphTensor& in : inputs) {
    if (in.node == nullptr) {
      status_ = absl::InternalError(absl::StrCat("trainer: an input of ", op, " is missing"));
      return {};
    }
    b.Input(in.node, in.index);
  }
  for (const auto& [key, value] : attrs) b.Attr(key, value);
  return {Finish(&b), output};
}

GraphTensor GraphOps::Const(const Tensor& value, const std::string& name) {
  AttrValue dtype, v;
  SetAttrValue(value.dtype(), &dtype);
  SetAttrValue(value, &v);
  return Op("Const", {}, name, {{"dtype", dtype}, {"value", v}});
}

GraphTensor GraphOps::Scalar(DataType dtype, double value, const std::string& name) {
  Tensor t(dtype, TensorShape({}));
  switch (dtype) {
    case DT_FLOAT: t.scalar<float>()() = static_cast<float>(value); break;
    case DT_DOUBLE: t.scalar<double>()() = value; break;
    case DT_INT32: t.scalar<int32>()() = static_cast<int32>(value); break;
    case DT_INT64: t.scalar<int64_t>()() = static_cast<int64_t>(value); break;
    default:
      status_ = absl::InvalidArgumentError(absl::StrCat("trainer: no scalar of ", DataTypeString(dtype)));
      return {};
  }
  return Const(t, name);
}

GraphTensor GraphOps::Unary(const std::string& op, GraphTensor x) { return Op(op, {x}, op); }

GraphTensor GraphOps::Binary(const std::string& op, GraphTensor a, GraphTensor b) {
  return Op(op, {a, b}, op);
}

GraphTensor GraphOps::Cast(GraphTensor x, DataType to) {
  AttrValue v;
  SetAttrValue(to, &v);
  return Op("Cast", {x}, "Cast", {{"DstT", v}});
}

GraphTensor GraphOps::SumAll(GraphTensor x) {
  // sum over range(rank(x))
  GraphTensor axes = Op("Range", {Scalar(DT_INT32, 0), Unary("Rank", x), Scalar(DT_INT32, 1)}, "axes");
  return Op("Sum", {x, axes}, "Sum");
}

GraphTensor GraphOps::ReduceLast(const std::string& op, GraphTensor x) {
  return Op(op, {x, Scalar(DT_INT32, -1)}, op);
}

GraphTensor GraphOps::Size(GraphTensor x, DataType out) {
  AttrValue v;
  SetAttrValue(out, &v);
  return Op("Size", {x}, "Size", {{"out_type", v}});
}

GraphTensor GraphOps::VarHandle(const std::string& name, DataType dtype,
                                const PartialTensorShape& shape) {
  const std::string node = g_->NewName(absl::StrCat(prefix_, "/", name));
  if (!status_.ok()) return {};
  NodeBuilder b(node, "VarHandleOp");
  b.Attr("dtype", dtype).Attr("shape", shape).Attr("shared_name", node);
  return {Finish(&b), 0};
}

GraphTensor GraphOps::Read(GraphTensor handle, DataType dtype) {
  AttrValue d;
  SetAttrValue(dtype, &d);
  return Op("ReadVariableOp", {handle}, "read", {{"dtype", d}});
}

Node* GraphOps::Update(const std::string& op, const std::vector<GraphTensor>& inputs,
                       const std::vector<Node*>& after,
                       const std::vector<std::pair<std::string, AttrValue>>& attrs) {
  if (!status_.ok()) return nullptr;
  NodeBuilder b(g_->NewName(absl::StrCat(prefix_, "/", op)), op);
  for (const GraphTensor& in : inputs) {
    if (in.node == nullptr) {
      status_ = absl::InternalError(absl::StrCat("trainer: an input of ", op, " is missing"));
      return nullptr;
    }
    b.Input(in.node, in.index);
  }
  for (const auto& [name, value] : attrs) b.Attr(name, value);
  for (Node* n : after) {
    if (n != nullptr) b.ControlInput(n);
  }
  return Finish(&b);
}

Node* GraphOps::Assign(const std::string& op, GraphTensor handle, GraphTensor value,
                       const std::vector<Node*>& after) {
  return Update(op, {handle, value}, after);
}

Node* GraphOps::Scatter(const std::string& op, GraphTensor handle, GraphTensor indices,
                        GraphTensor rows, const std::vector<Node*>& after) {
  return Update(op, {handle, indices, rows}, after);
}

GraphTensor GraphOps::GatherRows(GraphTensor handle, DataType dtype, GraphTensor indices,
                                 Node* after) {
  AttrValue d;
  SetAttrValue(dtype, &d);
  GraphTensor rows = Op("ResourceGather", {handle, indices}, "gather_rows", {{"dtype", d}});
  if (rows.node != nullptr && after != nullptr) g_->AddControlEdge(after, rows.node);
  return rows;
}

Node* GraphOps::Group(const std::string& name, const std::vector<Node*>& nodes) {
  if (!status_.ok()) return nullptr;
  NodeBuilder b(g_->NewName(absl::StrCat(prefix_, "/", name)), "NoOp");
  for (Node* n : nodes) {
    if (n != nullptr) b.ControlInput(n);
  }
  return Finish(&b);
}

}  // namespace tensorflow::tf_ext::train
