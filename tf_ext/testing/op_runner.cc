#include "tf_ext/testing/op_runner.h"

#include <memory>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/common_runtime/device.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/device_factory.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_def.pb.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.pb.h"
#include "tensorflow/core/public/session.h"
#include "tensorflow/core/public/session_options.h"
#include "tensorflow/core/public/version.h"

namespace tensorflow::tf_ext::test {
namespace {

NodeDef InputNode(const std::string& name, const Tensor& t, bool constant) {
  NodeDef n;
  n.set_name(name);
  n.set_op(constant ? "Const" : "Placeholder");
  (*n.mutable_attr())["dtype"].set_type(t.dtype());
  if (constant) t.AsProtoTensorContent((*n.mutable_attr())["value"].mutable_tensor());
  return n;
}

// The node for `op_type` applied to `inputs`, flattened: a list argument (N * T, or a type
// list) takes as many consecutive inputs as its length attr (from `attrs`) says.
absl::Status BuildOpNode(const std::string& op_type, const OpAttrs& attrs,
                         const std::vector<Tensor>& inputs, NodeDef* op, const OpDef** op_def) {
  TF_RETURN_IF_ERROR(OpRegistry::Global()->LookUpOpDef(op_type, op_def));
  op->set_name("op");
  op->set_op(op_type);
  for (const auto& [name, value] : attrs) (*op->mutable_attr())[name] = value.proto;
  size_t next = 0;
  for (const OpDef::ArgDef& arg : (*op_def)->input_arg()) {
    int64_t count = 1;
    if (!arg.number_attr().empty()) {
      if (!op->attr().contains(arg.number_attr())) {
        return absl::InvalidArgumentError(absl::StrCat("RunOp(", op_type, "): list input '",
                                                       arg.name(), "' needs attr ",
                                                       arg.number_attr()));
      }
      count = op->attr().at(arg.number_attr()).i();
    } else if (!arg.type_list_attr().empty()) {
      if (!op->attr().contains(arg.type_list_attr())) {
        auto* list = (*op->mutable_attr())[arg.type_list_attr()].mutable_list();
        for (size_t i = next; i < inputs.size(); ++i) list->add_type(inputs[i].dtype());
      }
      count = op->attr().at(arg.type_list_attr()).list().type_size();
    }
    if (count < 0 || next + count > inputs.size()) break;
    if (!arg.type_attr().empty() && count > 0 && !op->attr().contains(arg.type_attr())) {
      (*op->mutable_attr())[arg.type_attr()].set_type(inputs[next].dtype());
    }
    next += count;
  }
  if (next != inputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat("RunOp(", op_type, "): op has ",
                                                   (*op_def)->input_arg_size(),
                                                   " input arguments, which do not take ",
                                                   inputs.size(), " input tensors"));
  }
  for (size_t i = 0; i < inputs.size(); ++i) op->add_input(absl::StrCat("x", i));
  AddDefaultsToNodeDef(**op_def, op);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> Run(const GraphDef& graph,
                                        const std::vector<std::pair<std::string, Tensor>>& feeds,
                                        const std::vector<std::string>& fetches) {
  std::unique_ptr<Session> session(NewSession(SessionOptions()));
  if (session == nullptr) return absl::InternalError("could not create a Session");
  TF_RETURN_IF_ERROR(session->Create(graph));
  std::vector<Tensor> outs;
  TF_RETURN_IF_ERROR(session->Run(feeds, fetches, {}, &outs));
  TF_RETURN_IF_ERROR(session->Close());
  return outs;
}

absl::StatusOr<std::vector<Tensor>> RunKernel(const NodeDef& def,
                                              const std::vector<Tensor>& inputs) {
  SessionOptions options;
  // More threads than this machine's cores, so work splitting really runs concurrently.
  options.config.set_intra_op_parallelism_threads(4);
  std::unique_ptr<Device> device =
      DeviceFactory::NewDevice("CPU", options, "/job:localhost/replica:0/task:0");
  if (device == nullptr) return absl::InternalError("RunOp: no CPU device");
  absl::Status s;
  std::unique_ptr<OpKernel> kernel =
      CreateOpKernel(DEVICE_CPU, device.get(), device->GetAllocator(AllocatorAttributes()), def,
                     TF_GRAPH_DEF_VERSION, &s);
  TF_RETURN_IF_ERROR(s);

  std::vector<Tensor> in = inputs;  // shallow copies: the same buffers
  absl::InlinedVector<TensorValue, 4> values;
  for (Tensor& t : in) values.push_back(TensorValue(&t));
  std::vector<AllocatorAttributes> in_attrs(in.size()), out_attrs(kernel->num_outputs());
  OpKernelContext::Params params;
  params.device = device.get();
  params.op_kernel = kernel.get();
  params.inputs = values;
  params.input_alloc_attrs = in_attrs;
  params.output_attr_array = out_attrs.data();
  OpKernelContext ctx(&params, kernel->num_outputs());
  device->Compute(kernel.get(), &ctx);
  TF_RETURN_IF_ERROR(ctx.status());
  std::vector<Tensor> outputs;
  for (int i = 0; i < kernel->num_outputs(); ++i) {
    const Tensor* t = ctx.mutable_output(i);
    if (t == nullptr) {
      return absl::InternalError(absl::StrCat("RunOp: output ", i, " was not set"));
    }
    outputs.push_back(*t);
  }
  return outputs;
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> RunOp(const std::string& op_type, const OpAttrs& attrs,
                                          const std::vector<Tensor>& inputs,
                                          const RunOpOptions& options) {
  NodeDef op;
  const OpDef* op_def = nullptr;
  TF_RETURN_IF_ERROR(BuildOpNode(op_type, attrs, inputs, &op, &op_def));
  if (options.path == RunPath::kKernel) return RunKernel(op, inputs);
  const bool constants = options.path == RunPath::kSessionConstants;
  GraphDef graph;
  std::vector<std::pair<std::string, Tensor>> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    *graph.add_node() = InputNode(absl::StrCat("x", i), inputs[i], constants);
    if (!constants) feeds.push_back({absl::StrCat("x", i), inputs[i]});
  }
  *graph.add_node() = op;
  DataTypeVector in_types, out_types;
  TF_RETURN_IF_ERROR(InOutTypesForNode(op, *op_def, &in_types, &out_types));
  std::vector<std::string> fetches;
  for (size_t j = 0; j < out_types.size(); ++j) fetches.push_back(absl::StrCat("op:", j));
  return Run(graph, feeds, fetches);
}

absl::StatusOr<std::vector<Tensor>> RunSymbolicGradient(const std::string& op_type,
                                                        const OpAttrs& attrs,
                                                        const std::vector<Tensor>& inputs,
                                                        const std::vector<Tensor>& output_grads) {
  NodeDef op;
  const OpDef* op_def = nullptr;
  TF_RETURN_IF_ERROR(BuildOpNode(op_type, attrs, inputs, &op, &op_def));
  GraphDef graph;
  NodeDef grad;
  grad.set_name("grad");
  grad.set_op("SymbolicGradient");
  NameAttrList* f = (*grad.mutable_attr())["f"].mutable_func();
  f->set_name(op_type);
  for (const auto& kv : op.attr()) (*f->mutable_attr())[kv.first] = kv.second;
  AttrValue& tin = (*grad.mutable_attr())["Tin"];
  AttrValue& tout = (*grad.mutable_attr())["Tout"];
  std::vector<std::pair<std::string, Tensor>> feeds;
  auto add_input = [&](const std::string& name, const Tensor& t) {
    *graph.add_node() = InputNode(name, t, /*constant=*/false);
    feeds.push_back({name, t});
    grad.add_input(name);
    tin.mutable_list()->add_type(t.dtype());
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    add_input(absl::StrCat("x", i), inputs[i]);
    tout.mutable_list()->add_type(inputs[i].dtype());
  }
  for (size_t j = 0; j < output_grads.size(); ++j) add_input(absl::StrCat("dy", j), output_grads[j]);
  *graph.add_node() = grad;
  std::vector<std::string> fetches;
  for (size_t i = 0; i < inputs.size(); ++i) fetches.push_back(absl::StrCat("grad:", i));
  return Run(graph, feeds, fetches);
}

}  // namespace tensorflow::tf_ext::test
