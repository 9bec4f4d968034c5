// tf_ext's overrides of TensorFlow's defective gradients (OpDeclaration::Overrides,
// tf_ext/grads/manifest.h; OverrideGradient, registry.h; docs/registries.md): installed in both
// C++ registries when the op library loads, once, so that a SymbolicGradient node run by a
// Session (what TensorFlow's function runtime, tf_ext_grad --symbolic_gradients and every
// SymbolicGradient in a user's graph resolve) and the client registry (cc AddSymbolicGradients,
// the C API's TF_AddGradients) both give the corrected gradient, checked against central
// differences on the attributes TensorFlow's own got wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/cc/framework/grad_op_registry.h"
#include "tensorflow/cc/framework/gradients.h"
#include "tensorflow/cc/framework/scope.h"
#include "tensorflow/cc/ops/array_ops.h"
#include "tensorflow/cc/ops/const_op.h"
#include "tensorflow/cc/ops/math_ops.h"
#include "tensorflow/cc/ops/nn_ops.h"
#include "tensorflow/core/common_runtime/function_body.h"
#include "tensorflow/core/common_runtime/function_def_utils.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/attr_value_util.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/public/session.h"
#include "tests/numeric_jacobian.h"
#include "tests/test_util.h"
#include "tf_ext/grads/manifest.h"
#include "tf_ext/grads/registry.h"

namespace tensorflow::tf_ext {
namespace {

using test::Check;
using test::ExpectMatchesNumeric;
using test::Random;

const std::vector<int32> kOnes = {1, 1, 1, 1};

AttrValue Ints(std::vector<int64_t> values) {
  AttrValue a;
  SetAttrValue(absl::Span<const int64_t>(values), &a);
  return a;
}


Tensor Axes(DataType dtype, const std::vector<int64_t>& values) {
  Tensor t(dtype, TensorShape({static_cast<int64_t>(values.size())}));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DT_INT32) {
      t.vec<int32>()(i) = static_cast<int32>(values[i]);
    } else {
      t.vec<int64_t>()(i) = values[i];
    }
  }
  return t;
}


TEST(GradientOverrides, EveryDeclaredOverrideIsInstalledInBothRegistries) {
  std::vector<std::string> declared;
  for (const OpFacts& f : GradientOverrides()) {
    declared.push_back(f.op);
    EXPECT_FALSE(f.overrides.empty()) << f.op;
    EXPECT_NE(f.gradient, nullptr) << f.op;
  }
  EXPECT_EQ(declared,
            (std::vector<std::string>{
                "Acos", "Acosh", "Angle", "Asin", "Asinh", "Atan", "Atan2", "Atanh",
                "BatchMatMul", "BatchMatMulV2", "BroadcastTo", "Complex", "Conv2D", "Cos",
                "Cosh", "Div", "DivNoNan", "Exp", "Expm1", "GatherV2", "Imag", "Inv", "LRN",
                "Log", "Log1p", "MatMul", "Max", "MaxPool", "MaxPoolGrad", "Mean", "Min", "Pow",
                "Prod", "QuantizeAndDequantizeV4", "Real", "RealDiv", "Reciprocal", "Reshape",
                "Rsqrt", "Sigmoid", "Sin", "Sinh", "Slice",
                "SoftmaxCrossEntropyWithLogits", "Split", "Sqrt", "Square", "SquaredDifference",
                "Sum", "Tan", "Tanh"}));
  EXPECT_EQ(OverriddenTfGradientOps(), declared);
  for (const std::string& op : declared) {
    ops::GradFunc client = nullptr;
    TF_EXT_ASSERT_OK(ops::GradOpRegistry::Global()->Lookup(op, &client));
    EXPECT_EQ(client, &SymbolicGradientClientGrad) << op;
    // TensorFlow had a gradient for each; the registry now returns tf_ext's.
    gradient::Creator replaced;
    EXPECT_TRUE(FindReplacedTfGradient(op, &replaced)) << op;
  }
  // A tf_ext op is not an override.
  EXPECT_TRUE(OverriddenTfGradientOps().size() == declared.size());
}

// The function registry's Conv2D creator is tf_ext's: it passes dilations and explicit
// paddings on; TensorFlow's replaced one does not (the defect docs/registries.md names).
TEST(GradientOverrides, Conv2DCreatorPassesDilationsWhereTensorFlowsDoesNot) {
  AttrValueMap attrs;
  attrs["T"].set_type(DT_FLOAT);
  attrs["strides"] = Ints({1, 1, 1, 1});
  attrs["padding"].set_s("VALID");
  attrs["dilations"] = Ints({1, 2, 2, 1});
  auto dilations_of_backprop_nodes = [&](const gradient::Creator& creator) {
    FunctionDef fdef;
    EXPECT_TRUE(creator(AttrSlice(&attrs), &fdef).ok());
    std::vector<std::string> found;
    for (const NodeDef& n : fdef.node_def()) {
      if (n.op() != "Conv2DBackpropInput" && n.op() != "Conv2DBackpropFilter") continue;
      found.push_back(n.attr().contains("dilations") ? n.attr().at("dilations").DebugString()
                                                      : "absent");
    }
    return found;
  };
  gradient::Creator ours, theirs;
  TF_EXT_ASSERT_OK(gradient::GetOpGradientCreator("Conv2D", &ours));
  ASSERT_TRUE(FindReplacedTfGradient("Conv2D", &theirs));
  const std::vector<std::string> ours_found = dilations_of_backprop_nodes(ours);
  ASSERT_EQ(ours_found.size(), 2u);
  for (const std::string& d : ours_found) EXPECT_NE(d, "absent");
  EXPECT_EQ(dilations_of_backprop_nodes(theirs), (std::vector<std::string>{"absent", "absent"}));
}

double MaxAbsDiff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.NumElements(); ++i) {
    m = std::max(m, std::abs(a.flat<double>()(i) - b.flat<double>()(i)));
  }
  return m;
}

// Runs a gradient FunctionDef, instantiated with `attrs`, on `args`: its body as a graph whose
// arguments are constants, in a Session.
absl::StatusOr<std::vector<Tensor>> RunGradientFunction(const FunctionDef& fdef,
                                                        const AttrValueMap& attrs,
                                                        const std::vector<Tensor>& args) {
  FunctionLibraryDefinition library(OpRegistry::Global(), FunctionDefLibrary());
  std::unique_ptr<FunctionBody> body;
  TF_RETURN_IF_ERROR(FunctionDefToBodyHelper(fdef, AttrSlice(&attrs), &library, &body));
  GraphDef graph;
  body->graph->ToGraphDef(&graph);
  std::map<int64_t, std::string> fetches;  // return index -> node
  for (NodeDef& n : *graph.mutable_node()) {
    if (n.op() != "_Arg" && n.op() != "_Retval") continue;
    const int64_t index = n.attr().at("index").i();
    if (n.op() == "_Arg") {
      if (index >= static_cast<int64_t>(args.size())) return absl::InvalidArgumentError("args");
      n.set_op("Const");
      n.clear_attr();
      AddNodeAttr("dtype", args[index].dtype(), &n);
      AddNodeAttr("value", args[index], &n);
    } else {
      n.set_op("Identity");
      n.mutable_attr()->erase("index");
      fetches[index] = n.name() + ":0";
    }
  }
  std::unique_ptr<Session> session(NewSession(SessionOptions()));
  TF_RETURN_IF_ERROR(session->Create(graph));
  std::vector<std::string> names;
  for (const auto& [index, name] : fetches) names.push_back(name);
  std::vector<Tensor> outs;
  TF_RETURN_IF_ERROR(session->Run({}, names, {}, &outs));
  return outs;
}

absl::StatusOr<std::vector<Tensor>> RunCreator(const gradient::Creator& creator,
                                               const AttrValueMap& attrs,
                                               const std::vector<Tensor>& args) {
  FunctionDef fdef;
  TF_RETURN_IF_ERROR(creator(AttrSlice(&attrs), &fdef));
  return RunGradientFunction(fdef, attrs, args);
}

// For an override where TensorFlow's replaced gradient fails to build or run: tf_ext's runs and
// gives d(first input) of `want` shape, TensorFlow's fails.
void ExpectOursRunWhereTheirsFail(const std::string& op, const AttrValueMap& attrs,
                                  const std::vector<Tensor>& args, const TensorShape& want) {
  gradient::Creator ours, theirs;
  TF_EXT_ASSERT_OK(gradient::GetOpGradientCreator(op, &ours));
  ASSERT_TRUE(FindReplacedTfGradient(op, &theirs));
  auto good = RunCreator(ours, attrs, args);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ((*good)[0].shape(), want);
  EXPECT_FALSE(RunCreator(theirs, attrs, args).ok());
}

// What each override corrects, shown on TensorFlow's replaced gradient and on tf_ext's, run the
// same way: TensorFlow's fails or differs, tf_ext's matches the SymbolicGradient checked against
// central differences below.
TEST(GradientOverrides, TensorFlowsReplacedGradientsAreWrongWhereOursAreNot) {
  gradient::Creator ours, theirs;
  {
    SCOPED_TRACE("Conv2D, explicit paddings: fails");
    AttrValueMap attrs;
    attrs["T"].set_type(DT_DOUBLE);
    attrs["strides"] = Ints({1, 2, 1, 1});
    attrs["padding"].set_s("EXPLICIT");
    attrs["explicit_paddings"] = Ints({0, 0, 1, 0, 2, 1, 0, 0});
    const std::vector<Tensor> args = {Random(DT_DOUBLE, {1, 6, 5, 2}, 1),
                                      Random(DT_DOUBLE, {2, 3, 2, 3}, 2),
                                      Random(DT_DOUBLE, {1, 3, 6, 3}, 3)};
    TF_EXT_ASSERT_OK(gradient::GetOpGradientCreator("Conv2D", &ours));
    ASSERT_TRUE(FindReplacedTfGradient("Conv2D", &theirs));
    auto good = RunCreator(ours, attrs, args);
    ASSERT_TRUE(good.ok()) << good.status();
    auto checked = test::RunSymbolicGradient(
        "Conv2D",
        {{"strides", std::vector<int32>{1, 2, 1, 1}}, {"padding", "EXPLICIT"},
         {"explicit_paddings", std::vector<int32>{0, 0, 1, 0, 2, 1, 0, 0}}},
        {args[0], args[1]}, {args[2]});
    ASSERT_TRUE(checked.ok()) << checked.status();
    test::ExpectTensorNear<double>((*good)[0], (*checked)[0], 1e-12);
    test::ExpectTensorNear<double>((*good)[1], (*checked)[1], 1e-12);
    EXPECT_FALSE(RunCreator(theirs, attrs, args).ok());
  }
  for (const char* op : {"Sum", "Mean"}) {
    SCOPED_TRACE(absl::StrCat(op, ", axis -1: fails"));
    AttrValueMap attrs;
    attrs["T"].set_type(DT_DOUBLE);
    attrs["Tidx"].set_type(DT_INT32);
    attrs["keep_dims"].set_b(false);
    const std::vector<Tensor> args = {Random(DT_DOUBLE, {2, 3}, 5), Axes(DT_INT32, {-1}),
                                      Random(DT_DOUBLE, {2}, 6)};
    TF_EXT_ASSERT_OK(gradient::GetOpGradientCreator(op, &ours));
    ASSERT_TRUE(FindReplacedTfGradient(op, &theirs));
    EXPECT_TRUE(RunCreator(ours, attrs, args).ok());
    EXPECT_FALSE(RunCreator(theirs, attrs, args).ok());
    // An empty dimension the reduction keeps: TensorFlow's divides 0 by 0.
    const std::vector<Tensor> empty = {Tensor(DT_DOUBLE, TensorShape({0, 3})),
                                       Axes(DT_INT32, {1}), Tensor(DT_DOUBLE, TensorShape({0}))};
    auto ours_empty = RunCreator(ours, attrs, empty);
    ASSERT_TRUE(ours_empty.ok()) << ours_empty.status();
    EXPECT_EQ((*ours_empty)[0].shape(), TensorShape({0, 3}));
    EXPECT_FALSE(RunCreator(theirs, attrs, empty).ok());
  }
  {
    SCOPED_TRACE("Slice, size -1: the wrong shape");
    AttrValueMap attrs;
    attrs["T"].set_type(DT_DOUBLE);
    attrs["Index"].set_type(DT_INT32);
    const std::vector<Tensor> args = {Random(DT_DOUBLE, {4, 5}, 9), Axes(DT_INT32, {1, 2}),
                                      Axes(DT_INT32, {-1, -1}), Random(DT_DOUBLE, {3, 3}, 10)};
    TF_EXT_ASSERT_OK(gradient::GetOpGradientCreator("Slice", &ours));
    ASSERT_TRUE(FindReplacedTfGradient("Slice", &theirs));
    auto good = RunCreator(ours, attrs, args);
    ASSERT_TRUE(good.ok()) << good.status();
    EXPECT_EQ((*good)[0].shape(), TensorShape({4, 5}));
    auto bad = RunCreator(theirs, attrs, args);
    ASSERT_TRUE(bad.ok()) << bad.status();
    EXPECT_EQ((*bad)[0].shape(), TensorShape({8, 9}));  // padded by -1 too many on each side
  }
  {
    SCOPED_TRACE("GatherV2, axis -1: fails");
    AttrValueMap attrs;
    attrs["Tparams"].set_type(DT_DOUBLE);
    attrs["Tindices"].set_type(DT_INT32);
    attrs["Taxis"].set_type(DT_INT32);
    attrs["batch_dims"].set_i(0);
    Tensor axis(DT_INT32, TensorShape({}));
    axis.scalar<int32>()() = -1;
    const std::vector<Tensor> args = {Random(DT_DOUBLE, {2, 5}, 12), Axes(DT_INT32, {3, 0, 3}),
                                      axis, Random(DT_DOUBLE, {2, 3}, 13)};
    ExpectOursRunWhereTheirsFail("GatherV2", attrs, args, TensorShape({2, 5}));
  }
  {
    SCOPED_TRACE("BroadcastTo, int64 shape: fails");
    AttrValueMap attrs;
    attrs["T"].set_type(DT_DOUBLE);
    attrs["Tidx"].set_type(DT_INT64);
    const std::vector<Tensor> args = {Random(DT_DOUBLE, {1, 3}, 14), Axes(DT_INT64, {2, 3}),
                                      Random(DT_DOUBLE, {2, 3}, 15)};
    ExpectOursRunWhereTheirsFail("BroadcastTo", attrs, args, TensorShape({1, 3}));
  }
  {
    SCOPED_TRACE("Reshape, int64 shape: the function's shape argument is int32");
    AttrValueMap attrs;
    attrs["T"].set_type(DT_DOUBLE);
    attrs["Tshape"].set_type(DT_INT64);
    const std::vector<Tensor> args = {Random(DT_DOUBLE, {2, 3}, 16), Axes(DT_INT64, {3, 2}),
                                      Random(DT_DOUBLE, {3, 2}, 17)};
    ExpectOursRunWhereTheirsFail("Reshape", attrs, args, TensorShape({2, 3}));
  }
  {
    SCOPED_TRACE("QuantizeAndDequantizeV4: fails for every dtype");
    AttrValueMap attrs;
    attrs["T"].set_type(DT_DOUBLE);
    attrs["signed_input"].set_b(true);
    attrs["num_bits"].set_i(8);
    attrs["range_given"].set_b(true);
    attrs["round_mode"].set_s("HALF_TO_EVEN");
    attrs["narrow_range"].set_b(false);
    attrs["axis"].set_i(-1);
    const std::vector<Tensor> args = {Random(DT_DOUBLE, {2, 3}, 18),
                                      test::AsTensor<double>({-0.5}), test::AsTensor<double>({0.5}),
                                      Random(DT_DOUBLE, {2, 3}, 19)};
    ExpectOursRunWhereTheirsFail("QuantizeAndDequantizeV4", attrs, args, TensorShape({2, 3}));
  }
  for (const char* op : {"Max", "Min"}) {
    SCOPED_TRACE(absl::StrCat(op, ", keep_dims: fails or wrong"));
    AttrValueMap attrs;
    attrs["T"].set_type(DT_DOUBLE);
    attrs["Tidx"].set_type(DT_INT32);
    attrs["keep_dims"].set_b(true);
    const std::vector<Tensor> args = {Random(DT_DOUBLE, {2, 3}, 7), Axes(DT_INT32, {1}),
                                      Random(DT_DOUBLE, {2, 1}, 8)};
    TF_EXT_ASSERT_OK(gradient::GetOpGradientCreator(op, &ours));
    ASSERT_TRUE(FindReplacedTfGradient(op, &theirs));
    auto good = RunCreator(ours, attrs, args);
    ASSERT_TRUE(good.ok()) << good.status();
    auto bad = RunCreator(theirs, attrs, args);
    if (bad.ok()) {
      EXPECT_FALSE((*bad)[0].shape() == (*good)[0].shape() &&
                   MaxAbsDiff((*bad)[0], (*good)[0]) < 1e-6);
    }
  }
}

// A complex128 tensor of `shape` with parts uniform in [-0.9, 0.9] (seeded).
Tensor RandomComplex(const TensorShape& shape, int seed) {
  const Tensor re = Random(DT_DOUBLE, shape, seed), im = Random(DT_DOUBLE, shape, seed + 50);
  Tensor t(DT_COMPLEX128, shape);
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    t.flat<complex128>()(i) = complex128(0.9 * re.flat<double>()(i), 0.9 * im.flat<double>()(i));
  }
  return t;
}

// The conjugation overrides (tf_ext/grads/tf/complex_grad.cc): for a complex T TensorFlow's
// gradient lacks Python's conjugation (or refuses the type), tf_ext's has it, and for a real T
// the two are the same nodes and give the same bits.
TEST(GradientOverrides, ComplexGradientsAreConjugatedAndRealOnesUnchanged) {
  struct Case {
    const char* op;
    std::vector<TensorShape> inputs;
    bool theirs_fails;  // for complex T
  };
  const std::vector<Case> cases = {{"Exp", {{2, 3}}, false},
                                   {"Tanh", {{2, 3}}, false},
                                   {"RealDiv", {{2, 3}, {3}}, false},
                                   {"Pow", {{2, 3}, {2, 3}}, false},
                                   {"MatMul", {{2, 3}, {3, 4}}, true}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op);
    gradient::Creator ours, theirs;
    TF_EXT_ASSERT_OK(gradient::GetOpGradientCreator(c.op, &ours));
    ASSERT_TRUE(FindReplacedTfGradient(c.op, &theirs));
    for (DataType t : {DT_COMPLEX128, DT_DOUBLE}) {
      AttrValueMap attrs;
      attrs["T"].set_type(t);
      if (std::string(c.op) == "MatMul") {
        attrs["transpose_a"].set_b(false);
        attrs["transpose_b"].set_b(false);
      }
      std::vector<Tensor> args;
      for (size_t i = 0; i < c.inputs.size(); ++i) {
        Tensor x = RandomComplex(c.inputs[i], 20 + i);
        if (t == DT_DOUBLE) {  // positive: in Pow's real domain
          Tensor positive(DT_DOUBLE, x.shape());
          for (int64_t j = 0; j < x.NumElements(); ++j) {
            positive.flat<double>()(j) = 0.1 + std::abs(x.flat<complex128>()(j));
          }
          x = positive;
        }
        args.push_back(x);
      }
      const TensorShape out = std::string(c.op) == "MatMul" ? TensorShape({2, 4})
                                                            : TensorShape({2, 3});
      args.push_back(t == DT_DOUBLE ? Random(t, out, 30) : RandomComplex(out, 30));
      auto good = RunCreator(ours, attrs, args);
      ASSERT_TRUE(good.ok()) << good.status();
      auto bad = RunCreator(theirs, attrs, args);
      if (t == DT_DOUBLE) {
        ASSERT_TRUE(bad.ok()) << bad.status();
        for (size_t i = 0; i < good->size(); ++i) {
          test::ExpectTensorNear<double>((*good)[i], (*bad)[i], 0.0);  // the same bits
        }
      } else if (c.theirs_fails) {
        EXPECT_FALSE(bad.ok());
      } else {
        ASSERT_TRUE(bad.ok()) << bad.status();
        double differs = 0;
        for (int64_t i = 0; i < (*good)[0].NumElements(); ++i) {
          differs = std::max(differs, std::abs((*good)[0].flat<complex128>()(i) -
                                               (*bad)[0].flat<complex128>()(i)));
        }
        EXPECT_GT(differs, 1e-3);  // conj(f'(x)) against f'(x)
      }
    }
  }
}

// A second OverrideGradient of an op (a second copy of the gradient code in the process)
// changes nothing.
TEST(GradientOverrides, OverridingAgainChangesNothing) {
  EXPECT_TRUE(OverrideGradient("Sum", [](const AttrSlice&, FunctionDef*) {
    return absl::InternalError("a second override must not be installed");
  }));
  gradient::Creator creator;
  TF_EXT_ASSERT_OK(gradient::GetOpGradientCreator("Sum", &creator));
  AttrValueMap attrs;
  attrs["T"].set_type(DT_FLOAT);
  attrs["Tidx"].set_type(DT_INT32);
  attrs["keep_dims"].set_b(false);
  FunctionDef fdef;
  EXPECT_TRUE(creator(AttrSlice(&attrs), &fdef).ok());
}

// Through one SymbolicGradient node in a Session, against central differences.
TEST(GradientOverrides, ExplicitlyPaddedConv2D) {
  const Tensor input = Random(DT_DOUBLE, {1, 6, 5, 2}, 1);
  const Tensor filter = Random(DT_DOUBLE, {2, 3, 2, 3}, 2);
  ExpectMatchesNumeric({"Conv2D",
                        {{"strides", std::vector<int32>{1, 2, 1, 1}}, {"padding", "EXPLICIT"},
                         {"explicit_paddings", std::vector<int32>{0, 0, 1, 0, 2, 1, 0, 0}}},
                        {input, filter}});
  ExpectMatchesNumeric({"Conv2D",
                        {{"strides", kOnes}, {"padding", "EXPLICIT"},
                         {"explicit_paddings", std::vector<int32>{0, 0, 0, 2, 1, 1, 0, 0}}},
                        {input, filter}});
}

// A dilated Conv2D's gradient run by TensorFlow's function runtime (a SymbolicGradient node not
// inlined): TensorFlow's CPU backprop kernels reject dilations > 1 outside oneDNN's graph
// rewrite, so it fails with TensorFlow's error naming the dilation, never silently (TensorFlow's
// own gradient dropped the dilations and returned an undilated convolution's gradient). Inlined
// (every tf_ext front end's default), oneDNN runs it: tests/simplify_backward_test.cc checks
// those gradients against direct sums.
TEST(GradientOverrides, DilatedConv2DThroughTheFunctionRuntimeFailsClearly) {
  auto grads = test::RunSymbolicGradient(
      "Conv2D",
      {{"strides", kOnes}, {"padding", "VALID"}, {"dilations", std::vector<int32>{1, 2, 2, 1}}},
      {Random(DT_DOUBLE, {1, 6, 5, 2}, 1), Random(DT_DOUBLE, {2, 3, 2, 3}, 2)},
      {Random(DT_DOUBLE, {1, 4, 1, 3}, 3)});
  ASSERT_FALSE(grads.ok());
  EXPECT_TRUE(absl::StrContains(grads.status().message(), "dilation")) << grads.status();
}

// Negative axes (Keras's LayerNormalization: -1), several axes, keep_dims, int64 axes.
TEST(GradientOverrides, ReductionsWithNegativeAxesAndKeepDims) {
  const Tensor x = Random(DT_DOUBLE, {2, 3, 4}, 3);
  for (const char* op : {"Sum", "Mean", "Max", "Min"}) {
    for (bool keep_dims : {false, true}) {
      for (DataType axes_type : {DT_INT32, DT_INT64}) {
        SCOPED_TRACE(absl::StrCat(op, " keep_dims=", keep_dims, " ", DataTypeString(axes_type)));
        ExpectMatchesNumeric({op, {{"keep_dims", keep_dims}}, {x, Axes(axes_type, {-1})}, {1}});
        ExpectMatchesNumeric({op, {{"keep_dims", keep_dims}}, {x, Axes(axes_type, {-1, 0})}, {1}});
      }
    }
  }
}

// A size of -1 (to the end), and int64 indices (which TensorFlow's refused).
TEST(GradientOverrides, SliceToTheEndAndInt64Indices) {
  const Tensor x = Random(DT_DOUBLE, {4, 5}, 9);
  for (DataType index : {DT_INT32, DT_INT64}) {
    SCOPED_TRACE(DataTypeString(index));
    ExpectMatchesNumeric({"Slice", {}, {x, Axes(index, {1, 2}), Axes(index, {-1, -1})}, {1, 2}});
    ExpectMatchesNumeric({"Slice", {}, {x, Axes(index, {0, 1}), Axes(index, {2, -1})}, {1, 2}});
  }
}

// A negative axis, also with batch dimensions (TensorFlow's failed at the axis as given).
TEST(GradientOverrides, GatherV2AlongANegativeAxis) {
  const Tensor params = Random(DT_DOUBLE, {2, 3, 5}, 11);
  Tensor indices(DT_INT32, TensorShape({2, 4}));
  for (int64_t i = 0; i < indices.NumElements(); ++i) indices.flat<int32>()(i) = (i * 3) % 5;
  for (DataType axis_type : {DT_INT32, DT_INT64}) {
    SCOPED_TRACE(DataTypeString(axis_type));
    Tensor axis(axis_type, TensorShape({}));
    if (axis_type == DT_INT32) axis.scalar<int32>()() = -1; else axis.scalar<int64_t>()() = -1;
    ExpectMatchesNumeric({"GatherV2", {{"batch_dims", 0}}, {params, indices, axis}, {1, 2}});
    ExpectMatchesNumeric({"GatherV2", {{"batch_dims", 1}}, {params, indices, axis}, {1, 2}});
  }
}

// An empty dimension kept by the reduction: TensorFlow's Sum and Mean gradients divided the
// input's shape by the kept shape (0 / 0).
TEST(GradientOverrides, ReductionOfAnInputWithAnEmptyKeptDimension) {
  const Tensor x(DT_DOUBLE, TensorShape({0, 3}));
  for (const char* op : {"Sum", "Mean", "Max", "Min"}) {
    SCOPED_TRACE(op);
    auto grads = test::RunSymbolicGradient(op, {{"keep_dims", false}}, {x, Axes(DT_INT32, {-1})},
                                           {Tensor(DT_DOUBLE, TensorShape({0}))});
    ASSERT_TRUE(grads.ok()) << grads.status();
    EXPECT_EQ((*grads)[0].shape(), TensorShape({0, 3}));
  }
}

// An explicitly padded MaxPool (TensorFlow's gradient dropped explicit_paddings and failed),
// found by the attribute-sweep audit (scripts/audit_gradients.py).
TEST(GradientOverrides, ExplicitlyPaddedMaxPool) {
  Tensor input(DT_DOUBLE, TensorShape({1, 4, 5, 2}));  // distinct values: no ties in a window
  for (int64_t i = 0; i < input.NumElements(); ++i) input.flat<double>()(i) = (i * 37 % 40) / 8.0;
  ExpectMatchesNumeric({"MaxPool",
                        {{"ksize", std::vector<int32>{1, 2, 2, 1}},
                         {"strides", std::vector<int32>{1, 2, 2, 1}},
                         {"padding", "EXPLICIT"},
                         {"explicit_paddings", std::vector<int32>{0, 0, 1, 0, 0, 1, 0, 0}}},
                        {input}});
}

// A Split into one slice (TensorFlow's concatenated with a one-input Concat) and into three,
// and a complex Prod (TensorFlow's did not conjugate): found by the attribute-sweep audit.
// LRN (float only) is checked against Python's in tests/python/test_registries.py.
TEST(GradientOverrides, SplitProd) {
  for (int num_split : {1, 3}) {
    SCOPED_TRACE(num_split);
    Tensor dim(DT_INT32, TensorShape({}));
    dim.scalar<int32>()() = -1;
    ExpectMatchesNumeric({"Split", {{"num_split", num_split}}, {dim, Random(DT_DOUBLE, {2, 3}, 2)},
                          {0}});
  }
  ExpectMatchesNumeric({"Prod", {{"keep_dims", false}},
                        {Random(DT_COMPLEX128, {2, 3}, 3), Axes(DT_INT32, {1})}, {1}});
}

// SoftmaxCrossEntropyWithLogits in float64 (TensorFlow's client gradient built a float32 node
// and failed), both outputs and both inputs: d(labels) includes the backprop output's term.
// Labels are distributions (rows summing to 1), where backprop is d(loss)/d(features).
TEST(GradientOverrides, SoftmaxCrossEntropyWithLogitsDouble) {
  Tensor labels = Random(DT_DOUBLE, {3, 4}, 2, 0.1, 1.0);
  auto l = labels.matrix<double>();
  for (int i = 0; i < 3; ++i) {
    double sum = 0;
    for (int j = 0; j < 4; ++j) sum += l(i, j);
    for (int j = 0; j < 4; ++j) l(i, j) /= sum;
  }
  ExpectMatchesNumeric({"SoftmaxCrossEntropyWithLogits", {}, {Random(DT_DOUBLE, {3, 4}, 1), labels}});
}

// MaxPoolGrad's gradient (a second derivative of max pooling) through SymbolicGradient: TensorFlow's
// function had MaxPool's signature.
TEST(GradientOverrides, MaxPoolGradSecondDerivative) {
  const test::OpAttrs pool = {{"ksize", std::vector<int32>{1, 2, 2, 1}},
                              {"strides", std::vector<int32>{1, 2, 2, 1}},
                              {"padding", "VALID"}};
  // Distinct values: no ties inside a window.
  Tensor input(DT_DOUBLE, TensorShape({1, 4, 4, 2}));
  for (int64_t i = 0; i < input.NumElements(); ++i) input.flat<double>()(i) = (i * 37 % 32) / 8.0;
  auto output = test::RunOp("MaxPool", pool, {input});
  ASSERT_TRUE(output.ok()) << output.status();
  ExpectMatchesNumeric({"MaxPoolGrad", pool,
                        {input, (*output)[0], Random(DT_DOUBLE, {1, 2, 2, 2}, 4)}, {0, 1}});
}

// The client registry (cc AddSymbolicGradients, TF_AddGradients) gives the same gradient as the
// SymbolicGradient node above.
TEST(GradientOverrides, ClientRegistryGivesTheSameGradient) {
  const Tensor x_value = Random(DT_DOUBLE, {1, 6, 5, 2}, 1);
  const Tensor w_value = Random(DT_DOUBLE, {2, 3, 2, 3}, 2);
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root, DT_DOUBLE);
  auto w = ops::Placeholder(root, DT_DOUBLE);
  auto conv = ops::Conv2D(root, x, w, {1, 2, 1, 1}, "EXPLICIT",
                          ops::Conv2D::ExplicitPaddings({0, 0, 1, 0, 2, 1, 0, 0}));
  Output y = ops::Mean(root, conv, ops::Const(root, {-1}));
  std::vector<Output> grads;
  TF_EXT_ASSERT_OK(AddSymbolicGradients(root, {y}, {Output(x), Output(w)}, &grads));
  TF_EXT_ASSERT_OK(root.status());
  GraphDef graph;
  TF_EXT_ASSERT_OK(root.ToGraphDef(&graph));
  std::unique_ptr<Session> session(NewSession(SessionOptions()));
  TF_EXT_ASSERT_OK(session->Create(graph));
  std::vector<Tensor> got;
  TF_EXT_ASSERT_OK(session->Run({{x.node()->name(), x_value}, {w.node()->name(), w_value}},
                                {grads[0].name(), grads[1].name(), conv.output.name()}, {},
                                &got));
  // d mean_{-1}(conv) / d conv = 1/3 everywhere; then Conv2D's gradient.
  Tensor dconv(DT_DOUBLE, got[2].shape());
  dconv.flat<double>().setConstant(1.0 / 3);
  auto want = test::RunSymbolicGradient(
      "Conv2D",
      {{"strides", std::vector<int32>{1, 2, 1, 1}}, {"padding", "EXPLICIT"},
       {"explicit_paddings", std::vector<int32>{0, 0, 1, 0, 2, 1, 0, 0}}},
      {x_value, w_value}, {dconv});
  ASSERT_TRUE(want.ok()) << want.status();
  test::ExpectTensorNear<double>(got[0], (*want)[0], 1e-12);
  test::ExpectTensorNear<double>(got[1], (*want)[1], 1e-12);
}

}  // namespace
}  // namespace tensorflow::tf_ext
