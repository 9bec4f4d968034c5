// GradientFunctionDefOp: CPU kernel of TfExt>GradientFunctionDef.
#include "tensorflow/core/framework/function.pb.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tf_ext/grads/registry.h"
#include "tf_ext/grads/specialize.h"
#include "tf_ext/kernels/kernel_registration.h"
#include "tf_ext/kernels/validation.h"

namespace tensorflow::tf_ext {

class GradientFunctionDefOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    OP_REQUIRES(ctx, TensorShapeUtils::IsScalar(in.shape()),
                OpError(ctx, "node_def must be a scalar, got shape ", in.shape().DebugString()));
    NodeDef node;
    OP_REQUIRES(ctx, node.ParseFromString(in.scalar<tstring>()()),
                OpError(ctx, "node_def is not a serialized NodeDef"));
    FunctionDef fdef;
    absl::Status s = SpecializedGradient(node, &fdef);
    // Keep the registry's status code (NotFound vs InvalidArgument) so callers can tell
    // "missing" from "not differentiable"; prefix the op names.
    OP_REQUIRES(ctx, s.ok(),
                absl::Status(s.code(), absl::StrCat(type_string(), " for ", node.op(), ": ",
                                                    s.message())));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<tstring>()() = fdef.SerializeAsString();
  }
};

TF_EXT_REGISTER_KERNEL_BUILDER(Name("TfExt>GradientFunctionDef").Device(DEVICE_CPU),
                        GradientFunctionDefOp);

}  // namespace tensorflow::tf_ext
