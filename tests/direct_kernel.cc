#include "tests/direct_kernel.h"

#include <memory>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/common_runtime/device.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/device_factory.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_def.pb.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/public/session_options.h"
#include "tensorflow/core/public/version.h"

namespace tensorflow::tf_ext::testing {

absl::StatusOr<std::vector<Tensor>> RunKernelDirect(const std::string& op_type,
                                                    const OpAttrs& attrs,
                                                    const std::vector<Tensor>& inputs) {
  const OpDef* op_def = nullptr;
  TF_RETURN_IF_ERROR(OpRegistry::Global()->LookUpOpDef(op_type, &op_def));
  if (op_def->input_arg_size() != static_cast<int>(inputs.size())) {
    return absl::InvalidArgumentError(absl::StrCat("RunKernelDirect(", op_type, "): op has ",
                                                   op_def->input_arg_size(), " inputs, got ",
                                                   inputs.size()));
  }
  NodeDef def;
  def.set_name("op");
  def.set_op(op_type);
  for (const auto& [name, value] : attrs) (*def.mutable_attr())[name] = value.proto;
  for (size_t i = 0; i < inputs.size(); ++i) {
    def.add_input(absl::StrCat("x", i));
    const std::string& type_attr = op_def->input_arg(i).type_attr();
    if (!type_attr.empty() && !def.attr().contains(type_attr)) {
      (*def.mutable_attr())[type_attr].set_type(inputs[i].dtype());
    }
  }
  AddDefaultsToNodeDef(*op_def, &def);

  SessionOptions options;
  // More threads than this machine's cores, so work splitting really runs concurrently.
  options.config.set_intra_op_parallelism_threads(4);
  std::unique_ptr<Device> device =
      DeviceFactory::NewDevice("CPU", options, "/job:localhost/replica:0/task:0");
  if (device == nullptr) return absl::InternalError("RunKernelDirect: no CPU device");
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
    if (t == nullptr) return absl::InternalError(absl::StrCat("output ", i, " was not set"));
    outputs.push_back(*t);
  }
  return outputs;
}

}  // namespace tensorflow::tf_ext::testing
