// The C++ gradients tf_ext adds for the last TensorFlow ops of Python's gradient registry
// (docs/registries.md, "Parity with Python"): the debugger's pass-through identities,
// _EagerConst's refusal and the composite-tensor variants (tf_ext/grads/tf/array_grad.cc),
// BatchNormWithGlobalNormalization (nn_grad.cc), BlockLSTM and BlockLSTMV2 (rnn_grad.cc),
// RaggedFillEmptyRows, RaggedTensorToSparse, RaggedGather, RaggedTensorToTensor,
// RaggedTensorToVariant and RaggedTensorFromVariant (ragged_grad.cc) against numeric
// Jacobians.
// Comparisons with Python's gradients: tests/python/test_tf_misc_parity_grads.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/cc/framework/gradients.h"
#include "tensorflow/cc/framework/scope.h"
#include "tensorflow/cc/ops/array_ops.h"
#include "tensorflow/cc/ops/const_op.h"
#include "tensorflow/cc/ops/functional_ops.h"
#include "tensorflow/cc/ops/state_ops.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/versions.pb.h"
#include "tensorflow/core/graph/node_builder.h"
#include "tensorflow/core/public/session.h"
#include "tests/numeric_jacobian.h"
#include "tf_ext/graph/io/tensor_doubles.h"

namespace tensorflow::tf_ext {
namespace {

using test::Check;
using test::OpAttrs;
using test::ExpectMatchesNumeric;
using test::Random;

// ---------------------------------------------------------------------------------------------
// Pass-through identities and _EagerConst.

TEST(MiscParityGrads, DebugIdentitiesPassTheGradientThrough) {
  ExpectMatchesNumeric({"DebugGradientIdentity", {}, {Random(DT_DOUBLE, {2, 3}, 1)}});
  ExpectMatchesNumeric({"DebugIdentityV2", {}, {Random(DT_DOUBLE, {4}, 2)}});
  ExpectMatchesNumeric({"DebugIdentityV2", {{"op_name", std::string("x")}, {"output_slot", 1}},
                        {Random(DT_COMPLEX128, {3}, 3)}});
}

// DebugGradientRefIdentity takes a reference (a v1 variable): d(input) = d(output), through
// a SymbolicGradient node fed the variable.
TEST(MiscParityGrads, DebugGradientRefIdentity) {
  Scope s = Scope::NewRootScope();
  auto var = ops::Variable(s, {3}, DT_FLOAT);
  auto init = ops::Assign(s, var, ops::Const(s, {1.0f, -2.0f, 3.0f}));
  Node* ident;
  TF_EXT_ASSERT_OK(NodeBuilder("ident", "DebugGradientRefIdentity")
                       .Input(var.node())
                       .Finalize(s.graph(), &ident));
  NameAttrList f;
  f.set_name("DebugGradientRefIdentity");
  (*f.mutable_attr())["T"].set_type(DT_FLOAT);
  auto dy = ops::Const(s, {0.5f, 4.0f, -7.0f});
  auto grad = ops::SymbolicGradient(s, {Output(ident), dy}, {DT_FLOAT}, f);
  TF_EXT_ASSERT_OK(s.status());
  GraphDef gd;
  TF_EXT_ASSERT_OK(s.ToGraphDef(&gd));
  std::unique_ptr<Session> session(NewSession(SessionOptions()));
  TF_EXT_ASSERT_OK(session->Create(gd));
  const std::vector<std::pair<std::string, Tensor>> no_feeds;
  TF_EXT_ASSERT_OK(session->Run(no_feeds, {}, {init.node()->name()}, nullptr));
  std::vector<Tensor> out;
  TF_EXT_ASSERT_OK(session->Run(no_feeds, {grad.output[0].name()}, {}, &out));
  test::ExpectTensorNear<float>(out[0], test::AsTensor<float>({0.5f, 4.0f, -7.0f}, {3}));
}

// Python's gradient only raises; so does C++'s, with Python's message.
TEST(MiscParityGrads, EagerConstRefusesAsPython) {
  const Tensor x = Random(DT_FLOAT, {2}, 4);
  auto r = test::RunSymbolicGradient("_EagerConst", {}, {x}, {x});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(),
                                "This op should never interact with gradient APIs"))
      << r.status();
}

// CompositeTensorVariantFromComponents then ToComponents gives back the components (a
// double and an int64 one here; an empty metadata proto): through the client registry
// (AddSymbolicGradients: the decoder's gradient, a variant, feeds the encoder's) d(double
// component) = d(its output).
TEST(MiscParityGrads, CompositeTensorVariantRoundTrip) {
  Scope s = Scope::NewRootScope();
  const Tensor x = Random(DT_DOUBLE, {3, 2}, 70);
  auto values = ops::Const(s, x);
  auto ints = ops::Const(s, test::AsTensor<int64_t>({0, 2, 3}, {3}));
  const DataTypeVector types = {DT_DOUBLE, DT_INT64};
  Node* encode;
  Node* decode;
  TF_EXT_ASSERT_OK(NodeBuilder("encode", "CompositeTensorVariantFromComponents")
                       .Input(std::vector<NodeBuilder::NodeOut>{values.node(), ints.node()})
                       .Attr("metadata", "")
                       .Finalize(s.graph(), &encode));
  TF_EXT_ASSERT_OK(NodeBuilder("decode", "CompositeTensorVariantToComponents")
                       .Input(encode)
                       .Attr("metadata", "")
                       .Attr("Tcomponents", types)
                       .Finalize(s.graph(), &decode));
  const Tensor dy = Random(DT_DOUBLE, {3, 2}, 71);
  std::vector<Output> grads;
  TF_EXT_ASSERT_OK(AddSymbolicGradients(s, {Output(decode, 0)}, {values, ints},
                                        {ops::Const(s, dy)}, &grads));
  GraphDef gd;
  TF_EXT_ASSERT_OK(s.ToGraphDef(&gd));
  std::unique_ptr<Session> session(NewSession(SessionOptions()));
  TF_EXT_ASSERT_OK(session->Create(gd));
  std::vector<Tensor> out;
  TF_EXT_ASSERT_OK(session->Run(std::vector<std::pair<std::string, Tensor>>{},
                                {grads[0].name(), grads[1].name(), Output(decode, 0).name()}, {},
                                &out));
  test::ExpectTensorNear<double>(out[2], x);  // the round trip
  test::ExpectTensorNear<double>(out[0], dy);
  // As Python's: the int64 component's "gradient" is the component the gradient variant
  // holds, the forward's (no gradient flows through integers).
  test::ExpectTensorNear<int64_t>(out[1], test::AsTensor<int64_t>({0, 2, 3}, {3}));
}

// ---------------------------------------------------------------------------------------------
// BatchNormWithGlobalNormalization: its kernels run only in graphs of GraphDef version < 9,
// so the op and its gradient run in a Session of such a graph (producer 8), and the Jacobian
// is differenced there.

class BatchNormGraph {
 public:
  BatchNormGraph(DataType type, float epsilon, bool scale) {
    Scope s = Scope::NewRootScope();
    VersionDef versions = s.graph()->versions();
    versions.set_producer(8);  // the op was removed in GraphDef version 9
    s.graph()->set_versions(versions);
    // (The graph dies with the constructor: the Session then holds its GraphDef.)
    std::vector<Output> inputs;
    for (const char* name : {"t", "m", "v", "beta", "gamma"}) {
      inputs.push_back(ops::Placeholder(s.WithOpName(name), type));
    }
    Node* bn;
    TF_CHECK_OK(NodeBuilder("bn", "BatchNormWithGlobalNormalization")
                    .Input(inputs[0].node())
                    .Input(inputs[1].node())
                    .Input(inputs[2].node())
                    .Input(inputs[3].node())
                    .Input(inputs[4].node())
                    .Attr("T", type)
                    .Attr("variance_epsilon", epsilon)
                    .Attr("scale_after_normalization", scale)
                    .Finalize(s.graph(), &bn));
    auto dy = ops::Placeholder(s.WithOpName("dy"), type);
    NameAttrList f;
    f.set_name("BatchNormWithGlobalNormalization");
    (*f.mutable_attr())["T"].set_type(type);
    (*f.mutable_attr())["variance_epsilon"].set_f(epsilon);
    (*f.mutable_attr())["scale_after_normalization"].set_b(scale);
    std::vector<Output> args(inputs.begin(), inputs.end());
    args.push_back(dy);
    auto grad = ops::SymbolicGradient(s.WithOpName("grad"), args, DataTypeVector(5, type), f);
    TF_CHECK_OK(s.status());
    GraphDef gd;
    TF_CHECK_OK(s.ToGraphDef(&gd));
    session_.reset(NewSession(SessionOptions()));
    TF_CHECK_OK(session_->Create(gd));
  }

  std::vector<std::pair<std::string, Tensor>> Feeds(const std::vector<Tensor>& x) const {
    std::vector<std::pair<std::string, Tensor>> feeds;
    for (int i = 0; i < 5; ++i) feeds.push_back({names_[i], x[i]});
    return feeds;
  }
  absl::StatusOr<Tensor> Forward(const std::vector<Tensor>& x) const {
    std::vector<Tensor> out;
    TF_RETURN_IF_ERROR(session_->Run(Feeds(x), {"bn:0"}, std::vector<std::string>{}, &out));
    return out[0];
  }
  absl::StatusOr<std::vector<Tensor>> Gradient(const std::vector<Tensor>& x,
                                               const Tensor& dy) const {
    auto feeds = Feeds(x);
    feeds.push_back({"dy:0", dy});
    std::vector<Tensor> out;
    TF_RETURN_IF_ERROR(
        session_->Run(feeds, {"grad:0", "grad:1", "grad:2", "grad:3", "grad:4"},
                      std::vector<std::string>{}, &out));
    return out;
  }

 private:
  std::vector<std::string> names_ = {"t:0", "m:0", "v:0", "beta:0", "gamma:0"};
  std::unique_ptr<Session> session_;
};

TEST(MiscParityGrads, BatchNormWithGlobalNormalization) {
  for (const bool scale : {true, false}) {
    SCOPED_TRACE(scale ? "scale_after_normalization" : "no scale");
    BatchNormGraph graph(DT_DOUBLE, 0.01f, scale);
    std::vector<Tensor> x = {Random(DT_DOUBLE, {2, 2, 3, 4}, 5), Random(DT_DOUBLE, {4}, 6),
                             Random(DT_DOUBLE, {4}, 7, 0.2, 1.5), Random(DT_DOUBLE, {4}, 8),
                             Random(DT_DOUBLE, {4}, 9)};
    const Tensor dy = Random(DT_DOUBLE, {2, 2, 3, 4}, 10);
    auto grads = graph.Gradient(x, dy);
    ASSERT_TRUE(grads.ok()) << grads.status();
    const double delta = 1e-6;
    for (int k = 0; k < 5; ++k) {
      ASSERT_EQ((*grads)[k].shape(), x[k].shape()) << k;
      for (int64_t i = 0; i < x[k].NumElements(); ++i) {
        std::vector<Tensor> plus = x, minus = x;
        plus[k] = tensor::DeepCopy(x[k]);
        minus[k] = tensor::DeepCopy(x[k]);
        plus[k].flat<double>()(i) += delta;
        minus[k].flat<double>()(i) -= delta;
        auto yp = graph.Forward(plus);
        auto ym = graph.Forward(minus);
        ASSERT_TRUE(yp.ok() && ym.ok());
        const double numeric =
            (test::Loss({*yp}, {dy}) - test::Loss({*ym}, {dy})) / (2 * delta);
        EXPECT_NEAR((*grads)[k].flat<double>()(i), numeric,
                    1e-6 * std::max(1.0, std::abs(numeric)))
            << "input " << k << " element " << i;
      }
    }
    // Single precision: the same gradient within float rounding.
    BatchNormGraph graph32(DT_FLOAT, 0.01f, scale);
    std::vector<Tensor> x32;
    for (const Tensor& t : x) x32.push_back(test::Convert(t, DT_FLOAT));
    auto grads32 = graph32.Gradient(x32, test::Convert(dy, DT_FLOAT));
    ASSERT_TRUE(grads32.ok()) << grads32.status();
    for (int k = 0; k < 5; ++k) {
      for (int64_t i = 0; i < x[k].NumElements(); ++i) {
        const double want = (*grads)[k].flat<double>()(i);
        EXPECT_NEAR((*grads32)[k].flat<float>()(i), want, 1e-4 * std::max(1.0, std::abs(want)))
            << "float input " << k << " element " << i;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// BlockLSTM, BlockLSTMV2 (float and half only): the gradient of L = sum(v_cs * cs + v_h * h),
// the states Python differentiates (the gates' incoming gradients are ignored, so they are
// zero here), against float32 central differences.

void ExpectBlockLSTMMatchesNumeric(const std::string& op, const OpAttrs& attrs,
                                   int64_t seq_len_max) {
  SCOPED_TRACE(op);
  const int64_t steps = 3, batch = 2, in = 3, hidden = 2;
  Tensor seq(DT_INT64, {});
  seq.scalar<int64_t>()() = seq_len_max;
  std::vector<Tensor> inputs = {seq,
                                Random(DT_FLOAT, {steps, batch, in}, 20, -0.8, 0.8),
                                Random(DT_FLOAT, {batch, hidden}, 21, -0.8, 0.8),
                                Random(DT_FLOAT, {batch, hidden}, 22, -0.8, 0.8),
                                Random(DT_FLOAT, {in + hidden, 4 * hidden}, 23, -0.8, 0.8),
                                Random(DT_FLOAT, {hidden}, 24, -0.8, 0.8),
                                Random(DT_FLOAT, {hidden}, 25, -0.8, 0.8),
                                Random(DT_FLOAT, {hidden}, 26, -0.8, 0.8),
                                Random(DT_FLOAT, {4 * hidden}, 27, -0.8, 0.8)};
  auto ys = test::RunOp(op, attrs, inputs);
  ASSERT_TRUE(ys.ok()) << ys.status();
  std::vector<Tensor> vs;
  for (int o = 0; o < 7; ++o) {
    vs.push_back(Random(DT_FLOAT, (*ys)[o].shape(), 30 + o));
    if (o != 1 && o != 6) vs.back().flat<float>().setZero();  // only cs and h
  }
  auto grads = test::RunSymbolicGradient(op, attrs, inputs, vs);
  ASSERT_TRUE(grads.ok()) << grads.status();
  ASSERT_EQ(grads->size(), inputs.size());
  EXPECT_EQ((*grads)[0].dtype(), DT_INT64);
  EXPECT_EQ((*grads)[0].scalar<int64_t>()(), 0);
  const float delta = 1e-2f;
  double largest = 0;
  for (size_t k = 1; k < inputs.size(); ++k) {
    ASSERT_EQ((*grads)[k].shape(), inputs[k].shape()) << k;
    for (int64_t i = 0; i < inputs[k].NumElements(); ++i) {
      std::vector<Tensor> plus = inputs, minus = inputs;
      plus[k] = tensor::DeepCopy(inputs[k]);
      minus[k] = tensor::DeepCopy(inputs[k]);
      plus[k].flat<float>()(i) += delta;
      minus[k].flat<float>()(i) -= delta;
      auto yp = test::RunOp(op, attrs, plus, {test::RunPath::kKernel});
      auto ym = test::RunOp(op, attrs, minus, {test::RunPath::kKernel});
      ASSERT_TRUE(yp.ok() && ym.ok());
      // Only cs and h: past seq_len_max the kernel zeroes them but leaves the gates unset.
      const auto loss = [&](const std::vector<Tensor>& y) {
        return test::Loss({y[1], y[6]}, {vs[1], vs[6]});
      };
      const double numeric = (loss(*yp) - loss(*ym)) / (2 * delta);
      largest = std::max(largest, std::abs(numeric));
      EXPECT_NEAR((*grads)[k].flat<float>()(i), numeric, 2e-3 * std::max(1.0, std::abs(numeric)))
          << "input " << k << " element " << i;
    }
  }
  EXPECT_GT(largest, 0.1);  // not vacuous
}

TEST(MiscParityGrads, BlockLSTM) {
  for (const bool peephole : {false, true}) {
    ExpectBlockLSTMMatchesNumeric("BlockLSTM", {{"use_peephole", peephole}}, 3);
    ExpectBlockLSTMMatchesNumeric(
        "BlockLSTM", {{"use_peephole", peephole}, {"forget_bias", 0.5f}, {"cell_clip", -1.0f}},
        2);  // steps past seq_len_max are zeros
  }
}

TEST(MiscParityGrads, BlockLSTMV2) {
  for (const bool peephole : {false, true}) {
    ExpectBlockLSTMMatchesNumeric("BlockLSTMV2", {{"use_peephole", peephole}}, 3);
    ExpectBlockLSTMMatchesNumeric("BlockLSTMV2", {{"use_peephole", peephole}}, 2);
  }
}

// ---------------------------------------------------------------------------------------------
// Ragged ops (ragged_grad.cc). Their integer outputs (row splits, indices) get zero incoming
// gradients; the double-precision gradient against central differences.

Tensor Int64s(std::vector<int64_t> v, TensorShape shape) {
  return test::AsTensor<int64_t>(v, shape);
}

Tensor ZerosOf(DataType type, const TensorShape& shape) {
  Tensor z(type, shape);
  switch (type) {
    case DT_INT64: z.flat<int64_t>().setZero(); break;
    case DT_INT32: z.flat<int32>().setZero(); break;
    case DT_BOOL: z.flat<bool>().setConstant(false); break;
    default: z = Random(type, shape, 0, 0, 0);
  }
  return z;
}

// Inputs not in `diff` must get zeros.
void ExpectRaggedMatchesNumeric(const std::string& op, const OpAttrs& attrs,
                                const std::vector<Tensor>& inputs, const std::vector<int>& diff) {
  SCOPED_TRACE(op);
  auto ys = test::RunOp(op, attrs, inputs);
  ASSERT_TRUE(ys.ok()) << ys.status();
  std::vector<Tensor> vs;
  for (size_t o = 0; o < ys->size(); ++o) {
    const Tensor& y = (*ys)[o];
    vs.push_back(test::IsFloating(y.dtype()) ? Random(y.dtype(), y.shape(), 40 + o)
                                             : ZerosOf(y.dtype(), y.shape()));
  }
  auto grads = test::RunSymbolicGradient(op, attrs, inputs, vs);
  ASSERT_TRUE(grads.ok()) << grads.status();
  ASSERT_EQ(grads->size(), inputs.size());
  const double delta = 1e-6;
  int64_t checked = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& g = (*grads)[k];
    ASSERT_EQ(g.dtype(), inputs[k].dtype()) << k;
    ASSERT_EQ(g.shape(), inputs[k].shape()) << k;
    if (std::find(diff.begin(), diff.end(), static_cast<int>(k)) == diff.end()) {
      const std::vector<double> values = ToDoubles(g);
      ASSERT_EQ(static_cast<int64_t>(values.size()), g.NumElements()) << k;
      for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(values[i], 0) << k << "[" << i << "]";
      continue;
    }
    for (int64_t i = 0; i < inputs[k].NumElements(); ++i) {
      std::vector<Tensor> plus = inputs, minus = inputs;
      plus[k] = tensor::DeepCopy(inputs[k]);
      minus[k] = tensor::DeepCopy(inputs[k]);
      plus[k].flat<double>()(i) += delta;
      minus[k].flat<double>()(i) -= delta;
      auto yp = test::RunOp(op, attrs, plus, {test::RunPath::kKernel});
      auto ym = test::RunOp(op, attrs, minus, {test::RunPath::kKernel});
      ASSERT_TRUE(yp.ok() && ym.ok());
      const double numeric = (test::Loss(*yp, vs) - test::Loss(*ym, vs)) / (2 * delta);
      EXPECT_NEAR(g.flat<double>()(i), numeric, 1e-7 * std::max(1.0, std::abs(numeric)))
          << "input " << k << " element " << i;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(MiscParityGrads, RaggedFillEmptyRows) {
  // 6 rows, rows 1, 3 and 5 empty (filled with the default)
  ExpectRaggedMatchesNumeric("RaggedFillEmptyRows", {},
                             {Int64s({0, 0, 2, 4}, {4}), Random(DT_DOUBLE, {4}, 50),
                              Int64s({6}, {}), Random(DT_DOUBLE, {}, 51)},
                             {1, 3});
  // no empty row: the default gets zero
  ExpectRaggedMatchesNumeric("RaggedFillEmptyRows", {},
                             {Int64s({0, 1, 1}, {3}), Random(DT_DOUBLE, {3}, 52),
                              Int64s({2}, {}), Random(DT_DOUBLE, {}, 53)},
                             {1, 3});
}

TEST(MiscParityGrads, RaggedTensorToSparse) {
  ExpectRaggedMatchesNumeric("RaggedTensorToSparse", {{"RAGGED_RANK", 1}},
                             {Int64s({0, 2, 2, 5}, {4}), Random(DT_DOUBLE, {5}, 54)}, {1});
  ExpectRaggedMatchesNumeric(
      "RaggedTensorToSparse", {{"RAGGED_RANK", 2}},
      {test::AsTensor<int32>({0, 1, 3}, {3}), test::AsTensor<int32>({0, 2, 2, 5}, {4}),
       Random(DT_DOUBLE, {5}, 55)},
      {2});
}

TEST(MiscParityGrads, RaggedGather) {
  // params [[v0, v1], [], [v2, v3, v4]] (rows of 2 values), rows gathered twice and never
  const Tensor splits = Int64s({0, 2, 2, 5}, {4});
  ExpectRaggedMatchesNumeric(
      "RaggedGather", {{"PARAMS_RAGGED_RANK", 1}, {"OUTPUT_RAGGED_RANK", 1}},
      {splits, Random(DT_DOUBLE, {5, 2}, 56), test::AsTensor<int32>({2, 0, 2}, {3})}, {1});
  // 2-D indices: OUTPUT_RAGGED_RANK = 2
  ExpectRaggedMatchesNumeric(
      "RaggedGather", {{"PARAMS_RAGGED_RANK", 1}, {"OUTPUT_RAGGED_RANK", 2}},
      {splits, Random(DT_DOUBLE, {5}, 57), Int64s({2, 1, 0, 2}, {2, 2})}, {1});
  // two ragged dimensions, int32 splits
  ExpectRaggedMatchesNumeric(
      "RaggedGather", {{"PARAMS_RAGGED_RANK", 2}, {"OUTPUT_RAGGED_RANK", 2}},
      {test::AsTensor<int32>({0, 1, 3}, {3}), test::AsTensor<int32>({0, 2, 2, 5}, {4}),
       Random(DT_DOUBLE, {5}, 58), test::AsTensor<int32>({1, 0, 1}, {3})},
      {2});
}

TEST(MiscParityGrads, RaggedTensorToTensor) {
  const Tensor splits = Int64s({0, 2, 2, 5}, {4});  // rows [v0, v1], [], [v2, v3, v4]
  const std::vector<std::string> row_splits = {"ROW_SPLITS"};
  const OpAttrs attrs = {{"num_row_partition_tensors", 1}, {"row_partition_types", row_splits}};
  // padded to [4, 3] with a scalar default
  ExpectRaggedMatchesNumeric("RaggedTensorToTensor", attrs,
                             {Int64s({4, 3}, {2}), Random(DT_DOUBLE, {5}, 62),
                              Random(DT_DOUBLE, {}, 63), splits},
                             {1, 2});
  // cropped to [2, 2]: v2..v4 dropped (zero gradient), the default fills row 1
  ExpectRaggedMatchesNumeric("RaggedTensorToTensor", attrs,
                             {Int64s({2, 2}, {2}), Random(DT_DOUBLE, {5}, 64),
                              Random(DT_DOUBLE, {}, 65), splits},
                             {1, 2});
  // values of shape [2] with a default of shape [2]; of shape [3, 2] with a default of shape
  // [1, 2] (a leading one, broadcast along it too)
  ExpectRaggedMatchesNumeric("RaggedTensorToTensor", attrs,
                             {Int64s({3, 4, 2}, {3}), Random(DT_DOUBLE, {5, 2}, 66),
                              Random(DT_DOUBLE, {2}, 67), splits},
                             {1, 2});
  ExpectRaggedMatchesNumeric("RaggedTensorToTensor", attrs,
                             {Int64s({3, 4, 3, 2}, {4}), Random(DT_DOUBLE, {5, 3, 2}, 66),
                              Random(DT_DOUBLE, {1, 2}, 67), splits},
                             {1, 2});
  // the first dimension's size and value row ids, int32 partitions
  const std::vector<std::string> rowids = {"FIRST_DIM_SIZE", "VALUE_ROWIDS"};
  ExpectRaggedMatchesNumeric(
      "RaggedTensorToTensor",
      {{"num_row_partition_tensors", 2}, {"row_partition_types", rowids}},
      {test::AsTensor<int32>({4, 3}, {2}), Random(DT_DOUBLE, {5}, 68), Random(DT_DOUBLE, {}, 69),
       test::AsTensor<int32>({4}, {}), test::AsTensor<int32>({0, 0, 2, 2, 3}, {5})},
      {1, 2});
}

// RaggedTensorToVariant then RaggedTensorFromVariant gives back the dense values, so the
// gradient of the pair (through the client registry, AddSymbolicGradients: the decoder's
// gradient, a variant, feeds the encoder's) is the identity: d(values) = d(output values).
void ExpectVariantRoundTripIsIdentity(int ragged_rank, bool batched, int input_ragged_rank,
                                      int output_ragged_rank, const std::vector<Tensor>& splits,
                                      const TensorShape& values_shape) {
  SCOPED_TRACE(absl::StrCat("ragged_rank ", ragged_rank, (batched ? " batched" : ""),
                            " input_ragged_rank ", input_ragged_rank));
  Scope s = Scope::NewRootScope();
  std::vector<NodeBuilder::NodeOut> split_outs;
  for (const Tensor& t : splits) split_outs.push_back(ops::Const(s, t).node());
  const Tensor x = Random(DT_DOUBLE, values_shape, 60);
  auto values = ops::Const(s, x);
  Node* encode;
  Node* decode;
  TF_EXT_ASSERT_OK(NodeBuilder("encode", "RaggedTensorToVariant")
                       .Input(split_outs)
                       .Input(values.node())
                       .Attr("RAGGED_RANK", ragged_rank)
                       .Attr("Tsplits", DT_INT64)
                       .Attr("batched_input", batched)
                       .Finalize(s.graph(), &encode));
  TF_EXT_ASSERT_OK(NodeBuilder("decode", "RaggedTensorFromVariant")
                       .Input(encode)
                       .Attr("input_ragged_rank", input_ragged_rank)
                       .Attr("output_ragged_rank", output_ragged_rank)
                       .Attr("Tvalues", DT_DOUBLE)
                       .Attr("Tsplits", DT_INT64)
                       .Finalize(s.graph(), &decode));
  const Tensor dy = Random(DT_DOUBLE, values_shape, 61);
  std::vector<Output> grads;
  TF_EXT_ASSERT_OK(AddSymbolicGradients(s, {Output(decode, output_ragged_rank)}, {values},
                                        {ops::Const(s, dy)}, &grads));
  TF_EXT_ASSERT_OK(s.status());
  GraphDef gd;
  TF_EXT_ASSERT_OK(s.ToGraphDef(&gd));
  std::unique_ptr<Session> session(NewSession(SessionOptions()));
  TF_EXT_ASSERT_OK(session->Create(gd));
  std::vector<Tensor> out;
  TF_EXT_ASSERT_OK(session->Run(std::vector<std::pair<std::string, Tensor>>{},
                                {grads[0].name(), Output(decode, output_ragged_rank).name()}, {},
                                &out));
  test::ExpectTensorNear<double>(out[1], x);  // the round trip
  test::ExpectTensorNear<double>(out[0], dy);
}

TEST(MiscParityGrads, RaggedTensorToAndFromVariant) {
  const std::vector<Tensor> splits = {Int64s({0, 2, 2, 5}, {4})};
  ExpectVariantRoundTripIsIdentity(1, true, 0, 1, splits, {5, 2});
  ExpectVariantRoundTripIsIdentity(1, false, 1, 1, splits, {5});
  ExpectVariantRoundTripIsIdentity(1, true, -1, 1, splits, {5});  // inferred input rank
  ExpectVariantRoundTripIsIdentity(0, false, 0, 0, {}, {3, 2});   // a dense tensor
  ExpectVariantRoundTripIsIdentity(2, true, 1, 2, {Int64s({0, 1, 3}, {3}), splits[0]}, {5});
}

}  // namespace
}  // namespace tensorflow::tf_ext
