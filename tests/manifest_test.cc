// The gradient manifest is the one list of tf_ext ops: every registered TfExt> op is in it
// exactly once, and what it says matches every C++ gradient registry.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "absl/strings/match.h"
#include "tensorflow/cc/framework/grad_op_registry.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_def.pb.h"
#include "tensorflow/core/framework/kernel_def.pb.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tests/test_util.h"
#include "tf_ext/grads/manifest.h"
#include "tf_ext/grads/registry.h"
#include "tf_ext/grads/specialize.h"

namespace tensorflow::tf_ext {
namespace {

std::vector<OpDef> TfExtOps() {
  std::vector<OpDef> ops;
  OpRegistry::Global()->GetRegisteredOps(&ops);
  std::vector<OpDef> out;
  for (const OpDef& op : ops) {
    if (absl::StartsWith(op.name(), "TfExt>")) out.push_back(op);
  }
  return out;
}

TEST(Manifest, ListsEveryTfExtOpExactlyOnce) {
  std::map<std::string, int> count;
  for (const auto& e : GradientManifest()) ++count[e.op];
  std::vector<OpDef> ops = TfExtOps();
  ASSERT_GE(ops.size(), 2u);
  for (const OpDef& op : ops) EXPECT_EQ(count[op.name()], 1) << op.name();
  for (const auto& [name, n] : count) {
    const OpDef* def = nullptr;
    EXPECT_TRUE(OpRegistry::Global()->LookUpOpDef(name, &def).ok()) << name << " is not an op";
  }
}

// A NodeDef with valid attrs for each op whose gradient is unimplemented (a new such op must be
// added here: the lookup fails the test otherwise).
NodeDef ValidNode(const std::string& op) {
  NodeDef node;
  node.set_name("n");
  node.set_op(op);
  auto& attr = *node.mutable_attr();
  attr["T"].set_type(DT_FLOAT);
  if (op == "TfExt>RoiPoolGrad" || op == "TfExt>PsRoiAlignGrad") {
    attr["pooled_height"].set_i(2);
    attr["pooled_width"].set_i(2);
    attr["spatial_scale"].set_f(1.0f);
  } else if (op == "TfExt>MedianPool2DGrad") {
    for (int i = 0; i < 2; ++i) attr["ksize"].mutable_list()->add_i(3);
    for (int i = 0; i < 2; ++i) attr["strides"].mutable_list()->add_i(1);
    attr["padding"].set_s("SAME");
  } else {
    ADD_FAILURE() << "no valid attrs known for " << op;
  }
  const OpDef* def = nullptr;
  if (OpRegistry::Global()->LookUpOpDef(op, &def).ok()) AddDefaultsToNodeDef(*def, &node);
  return node;
}

TEST(Manifest, MatchesEveryRegistry) {
  for (const auto& e : GradientManifest()) {
    // A gradient function, or an unimplemented one (which fails when asked), has a creator in
    // the function registry and a gradient in the client registry; a no-gradient op has null.
    const bool has_fn = e.gradient != nullptr || e.no_gradient == NoGradient::kUnimplemented;
    gradient::Creator creator;
    ASSERT_TRUE(gradient::GetOpGradientCreator(e.op, &creator).ok()) << e.op;
    EXPECT_EQ(creator != nullptr, has_fn) << e.op;
    ops::GradFunc fn = nullptr;
    ASSERT_TRUE(ops::GradOpRegistry::Global()->Lookup(e.op, &fn).ok()) << e.op;
    EXPECT_EQ(fn != nullptr, has_fn) << e.op;
    const GradientKind want = e.gradient != nullptr ? GradientKind::kFunction
                              : e.no_gradient == NoGradient::kUnimplemented
                                  ? GradientKind::kUnimplemented
                                  : GradientKind::kNone;
    EXPECT_EQ(LookupGradientKind(e.op), want) << e.op;
    if (want == GradientKind::kUnimplemented) {
      // Differentiating it fails with the manifest's message, not with zeros.
      // The NodeDef is validated first, so an attr-less one is refused as invalid ...
      NodeDef bare;
      bare.set_op(e.op);
      FunctionDef f;
      test::ExpectInvalidArgument(SpecializedGradient(bare, &f), e.op);
      // ... and a valid one reaches the unimplemented creator.
      NodeDef node = ValidNode(e.op);
      absl::Status s = SpecializedGradient(node, &f);
      EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << e.op << ": " << s;
      EXPECT_NE(s.message().find("not implemented"), std::string::npos) << s;
    }
    EXPECT_NE(std::string(e.rule), "") << e.op;
  }
}

TEST(Manifest, NamedInputsAndOutputsExist) {
  for (const auto& e : GradientManifest()) {
    const OpDef* def = nullptr;
    ASSERT_TRUE(OpRegistry::Global()->LookUpOpDef(e.op, &def).ok());
    std::set<std::string> inputs, outputs;
    for (const auto& a : def->input_arg()) inputs.insert(a.name());
    for (const auto& a : def->output_arg()) outputs.insert(a.name());
    for (const char* in : e.non_differentiable_inputs) EXPECT_TRUE(inputs.count(in)) << e.op << " " << in;
    for (const char* out : e.ignored_output_grads) EXPECT_TRUE(outputs.count(out)) << e.op << " " << out;
  }
}

TEST(Manifest, EveryDeclaredTypeHasACpuKernel) {
  // An op must not promise a dtype it has no kernel for.
  for (const OpDef& op : TfExtOps()) {
    for (const auto& attr : op.attr()) {
      if (attr.type() != "type" || !attr.has_allowed_values()) continue;
      for (int t : attr.allowed_values().list().type()) {
        NodeDef node;
        node.set_name("n");
        node.set_op(op.name());
        (*node.mutable_attr())[attr.name()].set_type(static_cast<DataType>(t));
        AddDefaultsToNodeDef(op, &node);
        const KernelDef* kdef = nullptr;
        absl::Status s = FindKernelDef(DeviceType(DEVICE_CPU), node, &kdef, nullptr);
        EXPECT_TRUE(s.ok()) << op.name() << " declares " << attr.name() << "="
                            << DataTypeString(static_cast<DataType>(t)) << " but: " << s;
      }
    }
  }
}

}  // namespace
}  // namespace tensorflow::tf_ext
