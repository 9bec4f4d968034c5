// The manifest is the one declaration of each tf_ext op: every registered TfExt> op is declared
// exactly once, what it says matches every C++ gradient registry, and the generic tests below
// run over every declared op, so a new op gets them without writing them: a kernel for every
// declared type, a gradient exactly for the declared types, empty inputs, errors that name the
// op. (Numeric gradient checks of every declared op: gradcheck_test; its Python wrapper,
// exported and documented: tests/python/test_manifest.py.)
#include <gtest/gtest.h>

#include <map>
#include <random>
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
#include "tf_ext/testing/op_runner.h"
#include "tf_ext/graph/io/tensor_doubles.h"
#include "tf_ext/tools/gradcheck_spec.h"
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

TEST(Manifest, DeclaresEveryTfExtOpExactlyOnce) {
  std::vector<OpDef> ops = TfExtOps();
  ASSERT_GE(ops.size(), 10u);
  for (const OpDef& op : ops) EXPECT_NE(FindOpFacts(op.name()), nullptr) << op.name();
  std::set<std::string> seen;
  for (const OpFacts& f : GradientManifest()) {
    EXPECT_TRUE(seen.insert(f.op).second) << f.op;
    const OpDef* def = nullptr;
    EXPECT_TRUE(OpRegistry::Global()->LookUpOpDef(f.op, &def).ok()) << f.op << " is not an op";
  }
  EXPECT_EQ(seen.size(), ops.size());
}

// A NodeDef with valid attrs for a backward op: the attrs its forward op's input spec gives
// (a backward op shares its forward op's attrs), those the backward op has.
NodeDef ValidNode(const OpFacts& backward) {
  NodeDef node;
  node.set_name("n");
  node.set_op(backward.op);
  const OpFacts* forward = FindOpFacts(backward.backward_of);
  const OpDef* def = nullptr;
  const OpDef* forward_def = nullptr;
  auto specs = tools::ParseSpecs(ManifestGradCheckSpecs());
  if (forward == nullptr || !specs.ok() ||
      !OpRegistry::Global()->LookUpOpDef(backward.op, &def).ok() ||
      !OpRegistry::Global()->LookUpOpDef(forward->op, &forward_def).ok()) {
    ADD_FAILURE() << "no forward op declaration or spec for " << backward.op;
    return node;
  }
  tools::OpInstance inst = tools::BuildOpInstance(*forward_def, &(*specs)[forward->op],
                                                  forward->type_attr, DT_FLOAT, 1);
  for (const auto& [name, value] : inst.attrs) {
    for (const auto& a : def->attr()) {
      if (a.name() == name) (*node.mutable_attr())[name] = value;
    }
  }
  AddDefaultsToNodeDef(*def, &node);
  return node;
}

TEST(Manifest, MatchesEveryRegistry) {
  for (const OpFacts& f : GradientManifest()) {
    // A gradient function, or a backward op's unimplemented one (which fails when asked), has
    // a creator in the function registry and a gradient in the client registry; a
    // not-differentiable op has null.
    const bool has_fn = f.differentiability != Differentiability::kNotDifferentiable;
    gradient::Creator creator;
    ASSERT_TRUE(gradient::GetOpGradientCreator(f.op, &creator).ok()) << f.op;
    EXPECT_EQ(creator != nullptr, has_fn) << f.op;
    ops::GradFunc fn = nullptr;
    ASSERT_TRUE(ops::GradOpRegistry::Global()->Lookup(f.op, &fn).ok()) << f.op;
    EXPECT_EQ(fn != nullptr, has_fn) << f.op;
    const GradientKind want = f.differentiability == Differentiability::kGradient
                                  ? GradientKind::kFunction
                              : f.differentiability == Differentiability::kBackwardOp
                                  ? GradientKind::kUnimplemented
                                  : GradientKind::kNone;
    std::string message;
    EXPECT_EQ(LookupGradientKind(f.op, &message), want) << f.op;
    if (want == GradientKind::kUnimplemented) {
      EXPECT_EQ(message, BackwardOpMessage(f));
      // The NodeDef is validated first, so an attr-less one is refused as invalid ...
      NodeDef bare;
      bare.set_op(f.op);
      FunctionDef fdef;
      test::ExpectInvalidArgument(SpecializedGradient(bare, &fdef), f.op);
      // ... and a valid one reaches the unimplemented creator, with the declared message.
      absl::Status s = SpecializedGradient(ValidNode(f), &fdef);
      EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << f.op << ": " << s;
      EXPECT_EQ(s.message(), BackwardOpMessage(f));
    }
    EXPECT_NE(f.rule, "") << f.op;
    EXPECT_NE(f.doc, "") << f.op;
  }
}

TEST(Manifest, DeclaredNamesAndTypesExist) {
  std::set<std::string> python_names;
  for (const OpFacts& f : GradientManifest()) {
    SCOPED_TRACE(f.op);
    const OpDef* def = nullptr;
    ASSERT_TRUE(OpRegistry::Global()->LookUpOpDef(f.op, &def).ok());
    std::set<std::string> inputs, outputs;
    for (const auto& a : def->input_arg()) inputs.insert(a.name());
    for (const auto& a : def->output_arg()) outputs.insert(a.name());
    for (const std::string& in : f.not_differentiable) EXPECT_TRUE(inputs.count(in)) << in;
    // A gradient reads forward inputs and outputs (RoiPool's argmax).
    for (const std::string& in : f.reads) EXPECT_TRUE(inputs.count(in) || outputs.count(in)) << in;
    for (const std::string& out : f.ignored_output_grads) EXPECT_TRUE(outputs.count(out)) << out;
    if (!f.python.empty()) {
      EXPECT_TRUE(python_names.insert(f.python).second) << f.python;
    }
    switch (f.differentiability) {
      case Differentiability::kGradient: {
        EXPECT_NE(f.gradient, nullptr);
        EXPECT_FALSE(f.types.empty());
        EXPECT_NE(f.gradcheck, "") << "every gradient is checked numerically";
        EXPECT_NE(f.python, "") << "every differentiable op has a Python function";
        // Declared differentiable types are types the op accepts.
        const OpDef::AttrDef* attr = nullptr;
        for (const auto& a : def->attr()) {
          if (a.name() == f.type_attr) attr = &a;
        }
        ASSERT_NE(attr, nullptr) << f.type_attr;
        const auto& allowed = attr->allowed_values().list().type();
        for (DataType t : f.types) {
          EXPECT_NE(std::find(allowed.begin(), allowed.end(), t), allowed.end())
              << DataTypeString(t);
        }
        break;
      }
      case Differentiability::kBackwardOp: {
        const OpFacts* forward = FindOpFacts(f.backward_of);
        ASSERT_NE(forward, nullptr) << f.backward_of;
        EXPECT_EQ(forward->differentiability, Differentiability::kGradient);
        break;
      }
      case Differentiability::kNotDifferentiable:
        EXPECT_TRUE(f.types.empty());
        break;
    }
  }
}

TEST(Manifest, EveryDeclaredTypeHasAKernelOnEveryBuiltDevice) {
  // An op must not promise a dtype it has no kernel for, on any device this build has.
  std::vector<DeviceType> devices = {DeviceType(DEVICE_CPU)};
#if GOOGLE_CUDA
  devices.push_back(DeviceType(DEVICE_GPU));
#endif
  for (const OpDef& op : TfExtOps()) {
    for (const auto& attr : op.attr()) {
      if (attr.type() != "type" || !attr.has_allowed_values()) continue;
      for (int t : attr.allowed_values().list().type()) {
        NodeDef node;
        node.set_name("n");
        node.set_op(op.name());
        (*node.mutable_attr())[attr.name()].set_type(static_cast<DataType>(t));
        AddDefaultsToNodeDef(op, &node);
        for (const DeviceType& device : devices) {
          const KernelDef* kdef = nullptr;
          absl::Status s = FindKernelDef(device, node, &kdef, nullptr);
          EXPECT_TRUE(s.ok()) << op.name() << " declares " << attr.name() << "="
                              << DataTypeString(static_cast<DataType>(t)) << " but has no "
                              << device.type_string() << " kernel: " << s;
        }
      }
    }
  }
}

// ---- Generic tests over every declared op with a gradient: its inputs come from its
// declared gradcheck spec. (Backward ops are exercised by their forward op's gradient and by
// make fuzz; the utility op takes a serialized NodeDef.) ----

std::map<std::string, tools::OpSpec> Specs() {
  auto specs = tools::ParseSpecs(ManifestGradCheckSpecs());
  EXPECT_TRUE(specs.ok()) << specs.status();
  return specs.ok() ? *specs : std::map<std::string, tools::OpSpec>{};
}

test::OpAttrs ToOpAttrs(const std::vector<std::pair<std::string, AttrValue>>& attrs) {
  test::OpAttrs out;
  for (const auto& [name, value] : attrs) {
    FunctionDefHelper::AttrValueWrapper w;
    w.proto = value;
    out.push_back({name, w});
  }
  return out;
}

// Every type the op's type attr allows.
std::vector<DataType> AllowedTypes(const OpFacts& f) {
  const OpDef* def = nullptr;
  std::vector<DataType> out;
  if (!OpRegistry::Global()->LookUpOpDef(f.op, &def).ok()) return out;
  for (const auto& a : def->attr()) {
    if (a.name() != f.type_attr) continue;
    for (int t : a.allowed_values().list().type()) out.push_back(static_cast<DataType>(t));
  }
  return out;
}

void ExpectOkOrNamedInvalidArgument(const absl::Status& s, const std::string& op) {
  if (!s.ok()) test::ExpectInvalidArgument(s, op);
}

TEST(ManifestGeneric, GradientExactlyForTheDeclaredTypes) {
  auto specs = Specs();
  int checked = 0;
  for (const OpFacts& f : GradientManifest()) {
    if (f.differentiability != Differentiability::kGradient) continue;
    SCOPED_TRACE(f.op);
    const OpDef* def = nullptr;
    ASSERT_TRUE(OpRegistry::Global()->LookUpOpDef(f.op, &def).ok());
    ASSERT_TRUE(specs.count(f.op));
    for (DataType t : AllowedTypes(f)) {
      SCOPED_TRACE(DataTypeString(t));
      NodeDef node;
      node.set_name("n");
      node.set_op(f.op);
      for (const auto& [name, value] : tools::BuildOpInstance(*def, &specs[f.op], f.type_attr,
                                                              DT_FLOAT, 1).attrs) {
        (*node.mutable_attr())[name] = value;
      }
      (*node.mutable_attr())[f.type_attr].set_type(t);
      FunctionDef fdef;
      absl::Status s = SpecializedGradient(node, &fdef);
      const bool declared = std::find(f.types.begin(), f.types.end(), t) != f.types.end();
      if (declared) {
        EXPECT_TRUE(s.ok()) << s;
        ++checked;
      } else {
        EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
        EXPECT_TRUE(absl::StartsWith(s.message(), f.op)) << s;
      }
    }
  }
  EXPECT_GE(checked, 12);
}

TEST(ManifestGeneric, SymbolicGradientRunsForEveryDeclaredFloatType) {
  auto specs = Specs();
  int ran = 0;
  for (const OpFacts& f : GradientManifest()) {
    if (f.differentiability != Differentiability::kGradient) continue;
    const OpDef* def = nullptr;
    ASSERT_TRUE(OpRegistry::Global()->LookUpOpDef(f.op, &def).ok());
    for (DataType t : f.types) {
      SCOPED_TRACE(f.op + " " + DataTypeString(t));
      tools::OpInstance in = tools::BuildOpInstance(*def, &specs[f.op], f.type_attr, t, 7);
      ASSERT_EQ(in.problem, "");
      auto y = test::RunOp(f.op, ToOpAttrs(in.attrs), in.inputs);
      ASSERT_TRUE(y.ok()) << y.status();
      std::vector<Tensor> dys;
      for (const Tensor& out : *y) {
        Tensor ones(out.dtype(), out.shape());
        if (out.dtype() == DT_INT32) {
          ones.flat<int32_t>().setZero();
        } else {
          ones = FromDoubles(out.dtype(), out.shape(),
                                      std::vector<double>(out.NumElements(), 1.0)).value();
        }
        dys.push_back(ones);
      }
      auto dx = test::RunSymbolicGradient(f.op, ToOpAttrs(in.attrs), in.inputs, dys);
      ASSERT_TRUE(dx.ok()) << dx.status();
      ASSERT_EQ(dx->size(), in.inputs.size());
      for (size_t i = 0; i < dx->size(); ++i) {
        EXPECT_EQ((*dx)[i].shape(), in.inputs[i].shape()) << i;
        EXPECT_EQ((*dx)[i].dtype(), in.inputs[i].dtype()) << i;
      }
      // Declared non-differentiable inputs get exact zeros.
      for (int i = 0; i < def->input_arg_size(); ++i) {
        const std::string& name = def->input_arg(i).name();
        if (std::find(f.not_differentiable.begin(), f.not_differentiable.end(), name) ==
            f.not_differentiable.end()) {
          continue;
        }
        for (double v : ToDoubles((*dx)[i])) EXPECT_EQ(v, 0.0) << name;
      }
      ++ran;
    }
  }
  EXPECT_GE(ran, 12);
}

TEST(ManifestGeneric, EmptyInputsGiveEmptyOutputsOrAnErrorNamingTheOp) {
  auto specs = Specs();
  for (const OpFacts& f : GradientManifest()) {
    if (f.differentiability != Differentiability::kGradient) continue;
    const OpDef* def = nullptr;
    ASSERT_TRUE(OpRegistry::Global()->LookUpOpDef(f.op, &def).ok());
    for (DataType t : f.types) {
      SCOPED_TRACE(f.op + " " + DataTypeString(t));
      tools::OpInstance in =
          tools::BuildOpInstance(*def, &specs[f.op], f.type_attr, t, 3, /*batch_zero=*/true);
      ASSERT_EQ(in.problem, "");
      for (test::RunPath path : test::kAllRunPaths) {
        auto y = test::RunOp(f.op, ToOpAttrs(in.attrs), in.inputs, test::RunOpOptions{path});
        ExpectOkOrNamedInvalidArgument(y.status(), f.op);
        if (!y.ok()) continue;
        for (const Tensor& out : *y) EXPECT_EQ(out.NumElements(), 0) << out.DebugString();
      }
    }
  }
}

TEST(ManifestGeneric, WrongRankInputsAreAcceptedOrRejectedNamingTheOp) {
  // Each input in turn replaced by a scalar, then by a rank-5 tensor: never a crash, never an
  // error that does not start with the op type.
  auto specs = Specs();
  int rejected = 0;
  for (const OpFacts& f : GradientManifest()) {
    if (f.differentiability != Differentiability::kGradient) continue;
    const OpDef* def = nullptr;
    ASSERT_TRUE(OpRegistry::Global()->LookUpOpDef(f.op, &def).ok());
    tools::OpInstance in =
        tools::BuildOpInstance(*def, &specs[f.op], f.type_attr, f.types.back(), 5);
    ASSERT_EQ(in.problem, "");
    for (size_t i = 0; i < in.inputs.size(); ++i) {
      for (const TensorShape& shape : {TensorShape({}), TensorShape({1, 2, 1, 2, 1})}) {
        SCOPED_TRACE(f.op + " input " + std::to_string(i) + " " + shape.DebugString());
        std::vector<Tensor> inputs = in.inputs;
        inputs[i] = FromDoubles(inputs[i].dtype(), shape,
                                         std::vector<double>(shape.num_elements(), 0.5))
                        .value();
        for (test::RunPath path : test::kAllRunPaths) {
          auto y = test::RunOp(f.op, ToOpAttrs(in.attrs), inputs, test::RunOpOptions{path});
          ExpectOkOrNamedInvalidArgument(y.status(), f.op);
          rejected += !y.ok();
        }
      }
    }
  }
  EXPECT_GT(rejected, 0);
}

// A half op is its float op on the widened inputs, rounded once to nearest even: Eigen::half's
// own rounding is the reference. Forward ops with DT_HALF, and the gradients that are one
// dedicated backward op (RoiPoolGrad, ...), whose half kernels compute in float likewise.
std::vector<Tensor> Widened(const std::vector<Tensor>& inputs) {
  std::vector<Tensor> out;
  for (const Tensor& t : inputs) {
    out.push_back(t.dtype() != DT_HALF
                      ? t
                      : FromDoubles(DT_FLOAT, t.shape(), ToDoubles(t)).value());
  }
  return out;
}

void ExpectRoundedFrom(const Tensor& half, const Tensor& wide, const std::string& what) {
  ASSERT_EQ(half.shape(), wide.shape()) << what;
  if (half.dtype() != DT_HALF) {
    EXPECT_EQ(ToDoubles(half), ToDoubles(wide)) << what;
    return;
  }
  ASSERT_EQ(wide.dtype(), DT_FLOAT) << what;
  auto h = half.flat<Eigen::half>();
  auto f = wide.flat<float>();
  int64_t mismatches = 0;
  for (int64_t i = 0; i < h.size(); ++i) {
    const Eigen::half want = static_cast<Eigen::half>(f(i));
    const bool same = Eigen::numext::isnan(want)
                          ? static_cast<bool>(Eigen::numext::isnan(h(i)))
                          : Eigen::numext::bit_cast<uint16_t>(h(i)) ==
                                Eigen::numext::bit_cast<uint16_t>(want);
    if (!same && ++mismatches <= 3) {
      ADD_FAILURE() << what << " element " << i << ": half kernel "
                    << static_cast<float>(h(i)) << ", float kernel " << f(i) << " rounds to "
                    << static_cast<float>(want);
    }
  }
  EXPECT_EQ(mismatches, 0) << what;
}

TEST(ManifestGeneric, HalfIsTheFloatResultRoundedOnce) {
  auto specs = Specs();
  int compared = 0;
  for (const OpFacts& f : GradientManifest()) {
    if (f.differentiability != Differentiability::kGradient ||
        std::find(f.types.begin(), f.types.end(), DT_HALF) == f.types.end()) {
      continue;
    }
    const OpDef* def = nullptr;
    ASSERT_TRUE(OpRegistry::Global()->LookUpOpDef(f.op, &def).ok());
    bool dedicated_backward = false;
    for (const OpFacts& b : GradientManifest()) dedicated_backward |= b.backward_of == f.op;
    for (uint64_t seed : {11, 12, 13}) {
      SCOPED_TRACE(f.op + " seed " + std::to_string(seed));
      tools::OpInstance in = tools::BuildOpInstance(*def, &specs[f.op], f.type_attr, DT_HALF, seed);
      ASSERT_EQ(in.problem, "");
      test::OpAttrs attrs_h = ToOpAttrs(in.attrs), attrs_f = attrs_h;
      for (auto& [name, value] : attrs_f) {
        if (name == f.type_attr) value = FunctionDefHelper::AttrValueWrapper(DT_FLOAT);
      }
      const std::vector<Tensor> wide = Widened(in.inputs);
      auto yh = test::RunOp(f.op, attrs_h, in.inputs);
      auto yf = test::RunOp(f.op, attrs_f, wide);
      ASSERT_TRUE(yh.ok()) << yh.status();
      ASSERT_TRUE(yf.ok()) << yf.status();
      ASSERT_EQ(yh->size(), yf->size());
      for (size_t k = 0; k < yh->size(); ++k) {
        ExpectRoundedFrom((*yh)[k], (*yf)[k], f.op + " output " + std::to_string(k));
      }
      ++compared;
      if (!dedicated_backward) continue;
      // The gradient: its backward op in half vs in float, for the same half dys.
      std::vector<Tensor> dys;
      std::mt19937 rng(seed);
      std::uniform_real_distribution<double> u(-1, 1);
      for (const Tensor& y : *yh) {
        std::vector<double> v(y.NumElements());
        for (double& d : v) d = y.dtype() == DT_HALF ? u(rng) : 0.0;
        dys.push_back(FromDoubles(y.dtype(), y.shape(), v).value());
      }
      auto gh = test::RunSymbolicGradient(f.op, attrs_h, in.inputs, dys);
      auto gf = test::RunSymbolicGradient(f.op, attrs_f, wide, Widened(dys));
      ASSERT_TRUE(gh.ok()) << gh.status();
      ASSERT_TRUE(gf.ok()) << gf.status();
      for (size_t k = 0; k < gh->size(); ++k) {
        ExpectRoundedFrom((*gh)[k], (*gf)[k], f.op + " gradient " + std::to_string(k));
      }
    }
  }
  // MedianPool2D, RoiPool, PsRoiAlign, SignSTE, GradientReversal, SmoothL1, three seeds each.
  EXPECT_GE(compared, 18);
}

}  // namespace
}  // namespace tensorflow::tf_ext
