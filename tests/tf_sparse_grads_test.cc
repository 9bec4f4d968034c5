// The C++ gradients tf_ext adds for TensorFlow's sparse-tensor ops (tf_ext/grads/tf/
// sparse_grad.cc), CTC losses (ctc_grad.cc) and TopK v1 (nn_grad.cc) against numeric
// Jacobians, plus their hostile cases (out-of-range indices, empty tensors, a second
// derivative of CTC). Comparisons with Python's gradients: tests/python/test_tf_sparse_grads.py.
//
// tests/numeric_jacobian.h's check gives every floating output a random incoming gradient;
// here some outputs' incoming gradients must be zero (CTCLoss's fused `gradient`, whose
// gradient is ignored as in Python) and the integer outputs are int64 (sparse indices), so
// this file has its own driver over the same helpers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "tensorflow/cc/framework/gradients.h"
#include "tensorflow/cc/framework/scope.h"
#include "tensorflow/cc/ops/const_op.h"
#include "tensorflow/cc/ops/math_ops.h"
#include "tensorflow/core/graph/node_builder.h"
#include "tensorflow/core/framework/node_def_builder.h"
#include "tensorflow/core/public/session.h"
#include "tests/numeric_jacobian.h"
#include "tf_ext/grads/registry.h"

namespace tensorflow::tf_ext {
namespace {

using test::AsTensor;
using test::cd;
using test::Get;
using test::OpAttrs;
using test::Random;
using test::RunOp;
using test::RunPath;
using test::RunSymbolicGradient;

Tensor I64(std::vector<int64_t> v, TensorShape shape) { return AsTensor<int64_t>(v, shape); }
Tensor I64(std::vector<int64_t> v) { return AsTensor<int64_t>(v, {}); }
Tensor Ints(std::vector<int32> v, TensorShape shape) { return AsTensor<int32>(v, shape); }

Tensor ZerosOf(DataType t, const TensorShape& shape) {
  Tensor z(t, shape);
  if (DataTypeCanUseMemcpy(t) && z.TotalBytes() > 0) std::memset(z.data(), 0, z.TotalBytes());
  return z;
}

struct SparseCheck {
  std::string op;
  OpAttrs attrs;
  std::vector<Tensor> inputs;   // floating inputs in double / complex128
  std::vector<int> diff;        // the differentiable inputs; every other must get exact zeros
  std::vector<int> ignored = {};  // outputs whose incoming gradient is zero
  OpAttrs single_attrs = {};    // attrs of the single-precision run, if they differ
  double tol = 1e-7;
  double delta = 1e-6;          // central-difference step
};

// Central differences of sum Re(conj(v) y) against the C++ gradient (one SymbolicGradient
// node), then the single-precision gradient against the double one.
void ExpectNumeric(const SparseCheck& c) {
  SCOPED_TRACE(c.op);
  auto ys = RunOp(c.op, c.attrs, c.inputs, {RunPath::kKernel});
  ASSERT_TRUE(ys.ok()) << ys.status();
  std::vector<Tensor> vs;
  for (size_t o = 0; o < ys->size(); ++o) {
    const Tensor& y = (*ys)[o];
    const bool ignored = std::count(c.ignored.begin(), c.ignored.end(), o) > 0;
    vs.push_back(test::IsFloating(y.dtype()) && !ignored ? Random(y.dtype(), y.shape(), 100 + o)
                                                         : ZerosOf(y.dtype(), y.shape()));
  }
  auto grads = RunSymbolicGradient(c.op, c.attrs, c.inputs, vs);
  ASSERT_TRUE(grads.ok()) << grads.status();
  ASSERT_EQ(grads->size(), c.inputs.size());
  const double delta = c.delta;
  int64_t checked = 0;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const Tensor& g = (*grads)[k];
    ASSERT_EQ(g.shape(), c.inputs[k].shape()) << "input " << k;
    ASSERT_EQ(g.dtype(), c.inputs[k].dtype()) << "input " << k;
    if (std::count(c.diff.begin(), c.diff.end(), k) == 0) {
      const Tensor zeros = ZerosOf(g.dtype(), g.shape());
      EXPECT_EQ(g.tensor_data(), zeros.tensor_data()) << "input " << k << " is not zeros";
      continue;
    }
    const bool cplx = test::IsComplex(c.inputs[k].dtype());
    for (int64_t i = 0; i < c.inputs[k].NumElements(); ++i) {
      for (const cd dir : cplx ? std::vector<cd>{1, cd(0, 1)} : std::vector<cd>{1}) {
        std::vector<Tensor> plus = c.inputs, minus = c.inputs;
        plus[k] = tensor::DeepCopy(c.inputs[k]);
        minus[k] = tensor::DeepCopy(c.inputs[k]);
        test::Set(&plus[k], i, Get(c.inputs[k], i) + delta * dir);
        test::Set(&minus[k], i, Get(c.inputs[k], i) - delta * dir);
        auto yp = RunOp(c.op, c.attrs, plus, {RunPath::kKernel});
        auto ym = RunOp(c.op, c.attrs, minus, {RunPath::kKernel});
        ASSERT_TRUE(yp.ok() && ym.ok());
        const double numeric = (test::Loss(*yp, vs) - test::Loss(*ym, vs)) / (2 * delta);
        const double symbolic = dir == cd(1) ? Get(g, i).real() : Get(g, i).imag();
        EXPECT_NEAR(symbolic, numeric, c.tol * std::max(1.0, std::abs(numeric)))
            << "input " << k << " element " << i << (dir == cd(1) ? " (real)" : " (imag)");
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0);
  std::vector<Tensor> inputs32, vs32;
  for (const Tensor& t : c.inputs) inputs32.push_back(test::Convert(t, test::Single(t.dtype())));
  for (const Tensor& t : vs) vs32.push_back(test::Convert(t, test::Single(t.dtype())));
  auto grads32 = RunSymbolicGradient(c.op, c.single_attrs.empty() ? c.attrs : c.single_attrs,
                                     inputs32, vs32);
  ASSERT_TRUE(grads32.ok()) << grads32.status();
  for (int k : c.diff) {
    const Tensor& g32 = (*grads32)[k];
    ASSERT_EQ(g32.dtype(), inputs32[k].dtype());
    for (int64_t i = 0; i < g32.NumElements(); ++i) {
      const cd want = Get((*grads)[k], i);
      EXPECT_LE(std::abs(Get(g32, i) - want), 1e-4 * std::max(1.0, std::abs(want)))
          << "float input " << k << " element " << i;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Sparse ops. A [3, 4] sparse matrix with 5 entries in row-major order.

const std::vector<int64_t> kIdx = {0, 1, 0, 3, 1, 2, 2, 0, 2, 3};
// CTC labels of a batch of 2: [1, 2] and [0, 0, 2]
const std::vector<int64_t> kLabelIdx = {0, 0, 0, 1, 1, 0, 1, 1, 1, 2};

TEST(SparseGrads, SparseReorder) {
  // out of order, a 3-D shape
  ExpectNumeric({"SparseReorder", {},
                 {I64({1, 2, 0, 0, 0, 3, 1, 0, 1, 0, 2, 2, 1, 1, 0}, {5, 3}),
                  Random(DT_DOUBLE, {5}, 1), I64({2, 3, 4})},
                 {1}});
}

TEST(SparseGrads, SparseAdd) {
  // b overlaps a at (0, 3) and (2, 0); thresh 0 keeps every sum
  for (DataType t : {DT_DOUBLE, DT_COMPLEX128}) {
    ExpectNumeric({"SparseAdd", {},
                   {I64(kIdx, {5, 2}), Random(t, {5}, 2), I64({3, 4}),
                    I64({0, 0, 0, 3, 2, 0}, {3, 2}), Random(t, {3}, 3), I64({3, 4}),
                    AsTensor<double>({0.0})},
                   {1, 4}});
  }
}

TEST(SparseGrads, SparseTensorDenseAdd) {
  std::vector<int32> k32(kIdx.begin(), kIdx.end());
  ExpectNumeric({"SparseTensorDenseAdd", {},
                 {I64(kIdx, {5, 2}), Random(DT_DOUBLE, {5}, 4), I64({3, 4}),
                  Random(DT_DOUBLE, {3, 4}, 5)},
                 {1, 3}});
  ExpectNumeric({"SparseTensorDenseAdd", {},
                 {Ints(k32, {5, 2}), Random(DT_DOUBLE, {5}, 4), Ints({3, 4}, {2}),
                  Random(DT_DOUBLE, {3, 4}, 5)},
                 {1, 3}});
}

TEST(SparseGrads, SparseReduceSum) {
  const Tensor idx = I64({0, 0, 1, 0, 2, 3, 1, 1, 0, 1, 2, 2, 1, 2, 3}, {5, 3});  // in [2, 3, 4]
  for (bool keep : {false, true}) {
    for (const Tensor& axes : {Ints({1}, {1}), Ints({-1, 0}, {2}), Ints({2}, {}),
                               Ints({0, 1, 2}, {3})}) {
      ExpectNumeric({"SparseReduceSum", {{"keep_dims", keep}},
                     {idx, Random(DT_DOUBLE, {5}, 6), I64({2, 3, 4}), axes}, {1}});
    }
  }
}

TEST(SparseGrads, SparseSlice) {
  ExpectNumeric({"SparseSlice", {},
                 {I64(kIdx, {5, 2}), Random(DT_DOUBLE, {5}, 7), I64({3, 4}), I64({1, 1}),
                  I64({2, 3})},
                 {1}});
}

TEST(SparseGrads, SparseTensorDenseMatMul) {
  std::vector<int32> k32(kIdx.begin(), kIdx.end());
  for (DataType t : {DT_DOUBLE, DT_COMPLEX128}) {
    for (bool adj_a : {false, true}) {
      for (bool adj_b : {false, true}) {
        SCOPED_TRACE(absl::StrCat(DataTypeString(t), " adjoint_a=", adj_a, " adjoint_b=", adj_b));
        // op(A) is [3, 4] or [4, 3]; op(B) has op(A)'s columns as rows, 2 columns
        const int64_t inner = adj_a ? 3 : 4;
        const TensorShape b_shape = adj_b ? TensorShape({2, inner}) : TensorShape({inner, 2});
        ExpectNumeric({"SparseTensorDenseMatMul",
                       {{"adjoint_a", adj_a}, {"adjoint_b", adj_b}},
                       {adj_b ? Ints(k32, {5, 2}) : I64(kIdx, {5, 2}), Random(t, {5}, 8),
                        I64({3, 4}), Random(t, b_shape, 9)},
                       {1, 3}});
      }
    }
  }
}

TEST(SparseGrads, SparseDenseCwiseMulDiv) {
  const Tensor idx = I64({0, 0, 1, 0, 2, 3, 1, 1, 0, 1, 2, 2, 1, 2, 3, 1, 0, 3}, {6, 3});
  for (const std::string op : {"SparseDenseCwiseMul", "SparseDenseCwiseDiv"}) {
    for (DataType t : {DT_DOUBLE}) {  // the kernels are real only
      // dense of sp's shape, broadcast along axes of size 1 and leading axes, a scalar
      for (const TensorShape& dense : {TensorShape({2, 3, 4}), TensorShape({3, 1}),
                                       TensorShape({2, 1, 4}), TensorShape({4}),
                                       TensorShape({})}) {
        SCOPED_TRACE(absl::StrCat(op, " ", DataTypeString(t), " dense ", dense.DebugString()));
        ExpectNumeric({op, {},
                       {idx, Random(t, {6}, 10), I64({2, 3, 4}),
                        Random(t, dense, 11, 0.5, 1.5)},
                       {1, 3}});
      }
    }
  }
}

TEST(SparseGrads, SparseSoftmax) {
  // rows of 1, 2 and 3 entries in a [2, 2, 4] tensor (one row empty)
  ExpectNumeric({"SparseSoftmax", {},
                 {I64({0, 0, 1, 0, 1, 0, 0, 1, 3, 1, 0, 0, 1, 0, 2, 1, 0, 3}, {6, 3}),
                  Random(DT_DOUBLE, {6}, 12), I64({2, 2, 4})},
                 {1}});
}

TEST(SparseGrads, SparseFillEmptyRows) {
  // rows 1 and 3 of 5 empty
  ExpectNumeric({"SparseFillEmptyRows", {},
                 {I64({0, 1, 0, 2, 2, 0, 4, 1}, {4, 2}), Random(DT_DOUBLE, {4}, 13),
                  I64({5, 3}), AsTensor<double>({0.25})},
                 {1, 3}});
}

TEST(SparseGrads, SparseToDense) {
  std::vector<int32> k32(kIdx.begin(), kIdx.end());
  // [N, 2] indices, values per index and one value for all; 1-D indices of a vector
  ExpectNumeric({"SparseToDense", {},
                 {Ints(k32, {5, 2}), Ints({3, 4}, {2}), Random(DT_DOUBLE, {5}, 14),
                  AsTensor<double>({0.5})},
                 {2, 3}});
  ExpectNumeric({"SparseToDense", {},
                 {I64(kIdx, {5, 2}), I64({3, 4}), AsTensor<double>({1.5}),
                  AsTensor<double>({-0.5})},
                 {2, 3}});
  ExpectNumeric({"SparseToDense", {},
                 {Ints({1, 3, 4}, {3}), Ints({6}, {1}), Random(DT_DOUBLE, {3}, 15),
                  AsTensor<double>({0.5})},
                 {2, 3}});
}

// Out-of-range (or negative) indices fail the gradient with InvalidArgument naming the op.
TEST(SparseGrads, OutOfRangeIndicesAreInvalidArguments) {
  const Tensor bad = I64({0, 1, 0, 3, 1, 4, 2, 0, 2, 3}, {5, 2});  // (1, 4) in [3, 4]
  const Tensor neg = I64({0, 1, 0, 3, -1, 2, 2, 0, 2, 3}, {5, 2});
  const Tensor v = Random(DT_FLOAT, {5}, 16);
  const Tensor shape = I64({3, 4});
  for (const Tensor& idx : {bad, neg}) {
    struct Case {
      std::string op;
      OpAttrs attrs;
      std::vector<Tensor> inputs, dys;
    };
    const std::vector<Case> cases = {
        {"SparseReorder", {}, {idx, v, shape}, {ZerosOf(DT_INT64, {5, 2}), v}},
        {"SparseTensorDenseAdd", {}, {idx, v, shape, Random(DT_FLOAT, {3, 4}, 17)},
         {Random(DT_FLOAT, {3, 4}, 18)}},
        {"SparseReduceSum", {}, {idx, v, shape, Ints({1}, {1})}, {Random(DT_FLOAT, {3}, 19)}},
        {"SparseSlice", {}, {idx, v, shape, I64({0, 0}), I64({2, 2})},
         {ZerosOf(DT_INT64, {1, 2}), Random(DT_FLOAT, {1}, 20), ZerosOf(DT_INT64, {2})}},
        {"SparseTensorDenseMatMul", {}, {idx, v, shape, Random(DT_FLOAT, {4, 2}, 21)},
         {Random(DT_FLOAT, {3, 2}, 22)}},
        {"SparseDenseCwiseMul", {}, {idx, v, shape, Random(DT_FLOAT, {4}, 23)}, {v}},
        {"SparseDenseCwiseDiv", {}, {idx, v, shape, Random(DT_FLOAT, {3, 1}, 24)}, {v}},
        {"SparseSoftmax", {}, {idx, v, shape}, {v}},
        {"SparseFillEmptyRows", {}, {idx, v, shape, AsTensor<float>({0.0f})},
         {ZerosOf(DT_INT64, {5, 2}), v, ZerosOf(DT_BOOL, {3}), ZerosOf(DT_INT64, {5})}},
        {"SparseToDense", {}, {idx, shape, v, AsTensor<float>({0.0f})},
         {Random(DT_FLOAT, {3, 4}, 25)}},
        {"SparseAdd", {}, {idx, v, shape, I64({0, 0}, {1, 2}), AsTensor<float>({1.0f}, {1}),
                           shape, AsTensor<float>({0.0f})},
         {ZerosOf(DT_INT64, {6, 2}), Random(DT_FLOAT, {6}, 26), ZerosOf(DT_INT64, {2})}},
    };
    for (const Case& c : cases) {
      SCOPED_TRACE(c.op);
      auto r = RunSymbolicGradient(c.op, c.attrs, c.inputs, c.dys);
      test::ExpectInvalidArgument(r.status(), c.op, {"out of range"});
    }
  }
}

TEST(SparseGrads, EmptySparseTensors) {
  const Tensor none = I64({}, {0, 2});
  const Tensor v = Tensor(DT_FLOAT, {0});
  auto mm = RunSymbolicGradient("SparseTensorDenseMatMul", {},
                                {none, v, I64({3, 4}), Random(DT_FLOAT, {4, 2}, 27)},
                                {Random(DT_FLOAT, {3, 2}, 28)});
  ASSERT_TRUE(mm.ok()) << mm.status();
  EXPECT_EQ((*mm)[1].shape(), TensorShape({0}));
  test::ExpectTensorNear<float>((*mm)[3], ZerosOf(DT_FLOAT, {4, 2}));  // A = 0
  auto rs = RunSymbolicGradient("SparseReduceSum", {}, {none, v, I64({3, 4}), Ints({0}, {1})},
                                {Random(DT_FLOAT, {4}, 29)});
  ASSERT_TRUE(rs.ok()) << rs.status();
  EXPECT_EQ((*rs)[1].shape(), TensorShape({0}));
  // a dense shape with a zero-sized axis
  auto rz = RunSymbolicGradient("SparseReduceSum", {}, {none, v, I64({0, 4}), Ints({1}, {1})},
                                {Tensor(DT_FLOAT, {0})});
  ASSERT_TRUE(rz.ok()) << rz.status();
  auto sd = RunSymbolicGradient("SparseToDense", {},
                                {Ints({}, {0, 2}), Ints({2, 2}, {2}), Tensor(DT_FLOAT, {0}),
                                 AsTensor<float>({1.0f})},
                                {AsTensor<float>({1, 2, 3, 4}, {2, 2})});
  ASSERT_TRUE(sd.ok()) << sd.status();
  test::ExpectTensorNear<float>((*sd)[3], AsTensor<float>({10.0f}));  // all default
  auto sm = RunSymbolicGradient("SparseSoftmax", {}, {none, v, I64({3, 4})}, {v});
  ASSERT_TRUE(sm.ok()) << sm.status();
  EXPECT_EQ((*sm)[1].shape(), TensorShape({0}));
}

// Python's gradients of these raise NotImplementedError: so do tf_ext's (not zeros).
TEST(SparseGrads, UnimplementedAsInPython) {
  for (const std::string op : {"SparseDenseCwiseAdd", "SparseSparseMaximum",
                               "SparseSparseMinimum"}) {
    EXPECT_EQ(LookupGradientKind(op), GradientKind::kUnimplemented) << op;
  }
  auto r = RunSymbolicGradient("SparseDenseCwiseAdd", {},
                               {I64(kIdx, {5, 2}), Random(DT_FLOAT, {5}, 30), I64({3, 4}),
                                Random(DT_FLOAT, {3, 4}, 31)},
                               {Random(DT_FLOAT, {5}, 32)});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(),
                                "Gradient for SparseDenseCwiseAdd is not implemented"))
      << r.status();
  for (const std::string op : {"SparseAddGrad", "SparseConcat"}) {
    EXPECT_EQ(LookupGradientKind(op), GradientKind::kNone) << op;
  }
}

// ---------------------------------------------------------------------------------------------
// The client registry (cc AddSymbolicGradients, TF_AddGradients) passes the forward outputs to
// the gradients that read them (SparseAdd, SparseSlice, SparseSoftmax, SparseFillEmptyRows,
// CTCLoss): that gradient function must equal the one SymbolicGradient runs, which recomputes
// the outputs.

// d(sum(w * output[k])) / d(inputs[wrt]) through cc AddSymbolicGradients, against the
// SymbolicGradient of the op for the incoming gradient w at output k (zeros elsewhere).
void ExpectClientGradientMatches(const std::string& op, const std::vector<Tensor>& inputs,
                                 int k, const std::vector<int>& wrt) {
  SCOPED_TRACE(op);
  auto ys = RunOp(op, {}, inputs, {RunPath::kKernel});
  ASSERT_TRUE(ys.ok()) << ys.status();
  const Tensor w = Random((*ys)[k].dtype(), (*ys)[k].shape(), 41);
  std::vector<Tensor> dys;
  for (size_t o = 0; o < ys->size(); ++o) {
    dys.push_back(static_cast<int>(o) == k ? w : ZerosOf((*ys)[o].dtype(), (*ys)[o].shape()));
  }
  auto want = RunSymbolicGradient(op, {}, inputs, dys);
  ASSERT_TRUE(want.ok()) << want.status();

  Scope root = Scope::NewRootScope();
  std::vector<Output> in;
  std::vector<NodeBuilder::NodeOut> node_in;
  for (const Tensor& t : inputs) {
    in.push_back(ops::Const(root, t));
    node_in.push_back({in.back().node(), 0});
  }
  Node* forward = nullptr;
  NodeBuilder builder("forward", op);
  for (const auto& x : node_in) builder.Input(x);
  ASSERT_TRUE(builder.Finalize(root.graph(), &forward).ok());
  Output y(forward, k);
  auto loss = ops::Sum(root, ops::Mul(root, y, ops::Const(root, w)), ops::Const(root, 0));
  std::vector<Output> xs, grads;
  for (int i : wrt) xs.push_back(in[i]);
  ASSERT_TRUE(AddSymbolicGradients(root, {loss}, xs, &grads).ok());
  ASSERT_TRUE(root.status().ok()) << root.status();
  GraphDef graph;
  ASSERT_TRUE(root.ToGraphDef(&graph).ok());
  // the forward outputs were passed: a call of the gradient function taking them, no
  // SymbolicGradient of `op` (which would recompute them; the loss's Sum has one)
  int calls = 0;
  for (const NodeDef& n : graph.node()) {
    if (n.op() == "SymbolicGradient") {
      EXPECT_NE(n.attr().at("f").func().name(), op) << n.name();
    }
    calls += n.op() == "PartitionedCall";
  }
  EXPECT_EQ(calls, 1);
  std::unique_ptr<Session> session(NewSession(SessionOptions()));
  ASSERT_TRUE(session->Create(graph).ok());
  std::vector<std::string> names;
  for (const Output& g : grads) names.push_back(g.name());
  std::vector<Tensor> got;
  ASSERT_TRUE(session->Run({}, names, {}, &got).ok());
  for (size_t j = 0; j < wrt.size(); ++j) {
    test::ExpectTensorNear<double>(got[j], (*want)[wrt[j]], 1e-12);
    double largest = 0;
    for (int64_t i = 0; i < got[j].NumElements(); ++i) {
      largest = std::max(largest, std::abs(got[j].flat<double>()(i)));
    }
    EXPECT_GT(largest, 0.0) << "input " << wrt[j];
  }
}

TEST(SparseGrads, ClientRegistryPassesTheForwardOutputs) {
  ExpectClientGradientMatches("SparseAdd",
                              {I64(kIdx, {5, 2}), Random(DT_DOUBLE, {5}, 42), I64({3, 4}),
                               I64({0, 0, 0, 3, 2, 0}, {3, 2}), Random(DT_DOUBLE, {3}, 43),
                               I64({3, 4}), AsTensor<double>({0.0})},
                              1, {1, 4});
  ExpectClientGradientMatches("SparseSlice",
                              {I64(kIdx, {5, 2}), Random(DT_DOUBLE, {5}, 44), I64({3, 4}),
                               I64({1, 1}), I64({2, 3})},
                              1, {1});
  ExpectClientGradientMatches("SparseSoftmax",
                              {I64(kIdx, {5, 2}), Random(DT_DOUBLE, {5}, 45), I64({3, 4})}, 0,
                              {1});
  ExpectClientGradientMatches("SparseFillEmptyRows",
                              {I64({0, 1, 0, 2, 2, 0, 4, 1}, {4, 2}), Random(DT_DOUBLE, {4}, 46),
                               I64({5, 3}), AsTensor<double>({0.25})},
                              1, {1, 3});
  ExpectClientGradientMatches("CTCLoss",
                              {Random(DT_DOUBLE, {5, 2, 4}, 47, -2, 2), I64(kLabelIdx, {5, 2}),
                               Ints({1, 2, 0, 0, 2}, {5}), Ints({5, 4}, {2})},
                              0, {0});
}

// ---------------------------------------------------------------------------------------------
// CTC. inputs [time 5, batch 2, classes 4], blank 3 (CTCLoss) or 0 (CTCLossV2). CTCLoss's
// kernel computes in single precision even for double inputs (its loss is exact to ~1e-8
// only), so its numeric Jacobian takes a large step and a loose tolerance.

TEST(CtcGrads, CTCLossMatchesNumericJacobian) {
  for (bool merge : {true, false}) {
    ExpectNumeric({"CTCLoss", {{"ctc_merge_repeated", merge}},
                   {Random(DT_DOUBLE, {5, 2, 4}, 33, -2, 2), I64(kLabelIdx, {5, 2}),
                    Ints({1, 2, 0, 0, 2}, {5}), Ints({5, 4}, {2})},
                   {0}, /*ignored=*/{1}, {}, /*tol=*/2e-3, /*delta=*/1e-3});
  }
}

// CTCLossV2 (blank 0) has only a GPU kernel; on the CPU its gradient recomputes the loss with
// CTCLoss (blank last). It must equal CTCLoss's gradient of the classes rotated by one.
TEST(CtcGrads, CTCLossV2IsCTCLossWithTheBlankFirst) {
  const Tensor x = Random(DT_FLOAT, {5, 2, 4}, 34, -2, 2);
  const Tensor labels_v1 = Ints({1, 2, 0, 0, 2}, {5});
  Tensor x_v1(DT_FLOAT, x.shape()), labels_v2(DT_INT32, labels_v1.shape());
  for (int64_t r = 0; r < 10; ++r) {
    for (int c = 0; c < 4; ++c) {  // v1 class c = v2 class c + 1; v1's blank 3 = v2's 0
      x_v1.flat<float>()(r * 4 + c) = x.flat<float>()(r * 4 + (c + 1) % 4);
    }
  }
  for (int i = 0; i < 5; ++i) labels_v2.flat<int32>()(i) = labels_v1.flat<int32>()(i) + 1;
  const Tensor dloss = AsTensor<float>({0.7f, -1.3f});
  const Tensor lengths = Ints({5, 4}, {2});
  auto g1 = RunSymbolicGradient("CTCLoss", {}, {x_v1, I64(kLabelIdx, {5, 2}), labels_v1, lengths},
                                {dloss, ZerosOf(DT_FLOAT, x.shape())});
  auto g2 = RunSymbolicGradient("CTCLossV2", {}, {x, I64(kLabelIdx, {5, 2}), labels_v2, lengths},
                                {dloss, ZerosOf(DT_FLOAT, x.shape())});
  ASSERT_TRUE(g1.ok()) << g1.status();
  ASSERT_TRUE(g2.ok()) << g2.status();
  float max_abs = 0;
  for (int64_t r = 0; r < 10; ++r) {
    for (int c = 0; c < 4; ++c) {
      const float want = (*g1)[0].flat<float>()(r * 4 + c);
      EXPECT_NEAR((*g2)[0].flat<float>()(r * 4 + (c + 1) % 4), want, 1e-6) << r << " " << c;
      max_abs = std::max(max_abs, std::abs(want));
    }
  }
  EXPECT_GT(max_abs, 0.01f);
}

// Labels out of range fail the gradient with InvalidArgument: a class >= C (which CTCLoss's
// kernel accepts, reading past the class axis) or negative with the gradient's own message
// naming the op, a label index outside the batch with the kernel's.
TEST(CtcGrads, BadLabelsAreInvalidArguments) {
  const Tensor x = Random(DT_FLOAT, {5, 2, 4}, 35);
  const std::vector<std::pair<Tensor, Tensor>> bad = {
      {I64(kLabelIdx, {5, 2}), Ints({1, 7, 0, 0, 2}, {5})},              // class 7 of 4
      {I64(kLabelIdx, {5, 2}), Ints({1, -1, 0, 0, 2}, {5})},             // negative class
      {I64({0, 0, 0, 1, 2, 0, 1, 1, 1, 2}, {5, 2}), Ints({1, 2, 0, 0, 2}, {5})},  // batch 2 of 2
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    SCOPED_TRACE(i);
    auto r = RunSymbolicGradient("CTCLoss", {}, {x, bad[i].first, bad[i].second,
                                                 Ints({5, 4}, {2})},
                                 {Random(DT_FLOAT, {2}, 36), ZerosOf(DT_FLOAT, {5, 2, 4})});
    if (i < 2) {  // the forward kernel accepts a class >= C: the gradient's own check
      test::ExpectInvalidArgument(r.status(), "CTCLoss", {"label is out of range"});
    } else {      // the kernel's check of the label indices
      ASSERT_FALSE(r.ok());
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    }
  }
  // CTCLossV2's labels are 1..C-1 (0 the blank): C and 0 are out of range
  for (const Tensor& labels : {Ints({2, 4, 1, 1, 3}, {5}), Ints({2, 3, 0, 1, 3}, {5})}) {
    auto v2 = RunSymbolicGradient("CTCLossV2", {}, {x, I64(kLabelIdx, {5, 2}), labels,
                                                    Ints({5, 4}, {2})},
                                  {Random(DT_FLOAT, {2}, 36), ZerosOf(DT_FLOAT, {5, 2, 4})});
    test::ExpectInvalidArgument(v2.status(), "CTCLossV2", {"label is out of range"});
  }
}

// As in Python, the gradient has no derivative: differentiating the gradient function (a
// SymbolicGradient of it, as a function in the graph's library) fails with PreventGradient's
// error carrying Python's message, instead of silently giving zeros.
TEST(CtcGrads, NoSecondDerivative) {
  gradient::Creator creator;
  ASSERT_TRUE(gradient::GetOpGradientCreator("CTCLoss", &creator).ok());
  ASSERT_TRUE(creator != nullptr);
  AttrValueMap attrs;
  attrs["T"].set_type(DT_DOUBLE);
  attrs["preprocess_collapse_repeated"].set_b(false);
  attrs["ctc_merge_repeated"].set_b(true);
  attrs["ignore_longer_outputs_than_inputs"].set_b(false);
  FunctionDef fdef;
  ASSERT_TRUE(creator(AttrSlice(&attrs), &fdef).ok());
  fdef.mutable_signature()->set_name("CtcLossFirstOrder");
  Scope root = Scope::NewRootScope();
  FunctionDefLibrary library;
  *library.add_function() = fdef;
  ASSERT_TRUE(root.graph()->AddFunctionLibrary(library).ok());
  const Tensor x = Random(DT_DOUBLE, {5, 2, 4}, 39);
  std::vector<Output> in = {ops::Const(root, x), ops::Const(root, I64(kLabelIdx, {5, 2})),
                            ops::Const(root, Ints({1, 2, 0, 0, 2}, {5})),
                            ops::Const(root, Ints({5, 4}, {2})),
                            ops::Const(root, AsTensor<double>({1.0, 1.0})),
                            ops::Const(root, ZerosOf(DT_DOUBLE, {5, 2, 4}))};
  const DataTypeVector types = {DT_DOUBLE, DT_INT64, DT_INT32, DT_INT32, DT_DOUBLE, DT_DOUBLE};
  NameAttrList f;
  f.set_name("CtcLossFirstOrder");
  *f.mutable_attr() = google::protobuf::Map<std::string, AttrValue>(attrs.begin(), attrs.end());
  // d(first-order gradient)/d(everything), for incoming gradients of its 4 outputs
  std::vector<Output> second_in = in;
  second_in.push_back(ops::Const(root, Random(DT_DOUBLE, {5, 2, 4}, 40)));
  second_in.push_back(ops::Const(root, ZerosOf(DT_INT64, {5, 2})));
  second_in.push_back(ops::Const(root, ZerosOf(DT_INT32, {5})));
  second_in.push_back(ops::Const(root, ZerosOf(DT_INT32, {2})));
  std::vector<NodeBuilder::NodeOut> second_nodes;
  for (const Output& o : second_in) second_nodes.push_back({o.node(), o.index()});
  Node* second = nullptr;
  ASSERT_TRUE(NodeBuilder("second", "SymbolicGradient")
                  .Input(second_nodes)
                  .Attr("Tout", types)
                  .Attr("f", f)
                  .Finalize(root.graph(), &second)
                  .ok());
  ASSERT_TRUE(root.status().ok()) << root.status();
  GraphDef graph;
  ASSERT_TRUE(root.ToGraphDef(&graph).ok());
  std::unique_ptr<Session> session(NewSession(SessionOptions()));
  ASSERT_TRUE(session->Create(graph).ok());
  std::vector<Tensor> out;
  const absl::Status s = session->Run({}, {"second:0"}, {}, &out);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.message(), "PreventGradient")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "second  derivative of ctc_loss")) << s;
}

// ---------------------------------------------------------------------------------------------
// TopK (v1): no TopK node can run in TensorFlow 2.21, so no numeric Jacobian of its own; its
// gradient must be TopKV2's (itself checked numerically in tf_grads_gradcheck_test) and route
// each value's gradient to the position it came from.
TEST(TopKGrads, TopKV1IsTopKV2) {
  const Tensor x = Random(DT_FLOAT, {3, 5}, 37);
  const Tensor dv = Random(DT_FLOAT, {3, 2}, 38);
  const Tensor di = ZerosOf(DT_INT32, {3, 2});
  auto v1 = RunSymbolicGradient("TopK", {{"k", 2}}, {x}, {dv, di});
  ASSERT_TRUE(v1.ok()) << v1.status();
  auto v2 = RunSymbolicGradient("TopKV2", {}, {x, AsTensor<int32>({2})}, {dv, di});
  ASSERT_TRUE(v2.ok()) << v2.status();
  test::ExpectTensorNear<float>((*v1)[0], (*v2)[0]);
  // the two largest of each row get d(values) in order, the rest zeros
  for (int r = 0; r < 3; ++r) {
    std::vector<int> order(5);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      return x.matrix<float>()(r, a) > x.matrix<float>()(r, b);
    });
    for (int j = 0; j < 5; ++j) {
      const float want = j < 2 ? dv.matrix<float>()(r, j) : 0.0f;
      EXPECT_EQ((*v1)[0].matrix<float>()(r, order[j]), want) << r << " " << j;
    }
  }
}

// ApproxTopK has no CPU kernel here (Python's runtime has one for the last axis only), so its
// gradient function is run in the form that takes the forward outputs (the client registry's;
// grad_builder.h), given the exact top 2 along each axis: d(values) must land on the selected
// positions of that axis.
TEST(TopKGrads, ApproxTopKAlongEveryAxis) {
  gradient::Creator creator;
  ASSERT_TRUE(gradient::GetOpGradientCreator("ApproxTopK", &creator).ok());
  const Tensor x = Random(DT_FLOAT, {3, 5, 4}, 48);
  const auto xt = x.tensor<float, 3>();
  for (const int dim : {0, 1, 2, -1, -3}) {
    SCOPED_TRACE(dim);
    const int axis = (dim + 3) % 3;
    TensorShape out_shape = x.shape();
    out_shape.set_dim(axis, 2);
    Tensor values(DT_FLOAT, out_shape), indices(DT_INT32, out_shape);
    Tensor want(DT_FLOAT, x.shape());
    want.flat<float>().setZero();
    const Tensor dv = Random(DT_FLOAT, out_shape, 49);
    // the top 2 along `axis` of every line, and the expected scatter of dv
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 5; ++j) {
        for (int l = 0; l < 4; ++l) {
          int pos[3] = {i, j, l};
          if (pos[axis] != 0) continue;  // one line per start
          std::vector<int> order(x.dim_size(axis));
          std::iota(order.begin(), order.end(), 0);
          auto at = [&](int q) {
            int p[3] = {i, j, l};
            p[axis] = q;
            return xt(p[0], p[1], p[2]);
          };
          std::sort(order.begin(), order.end(), [&](int a, int b) { return at(a) > at(b); });
          for (int r = 0; r < 2; ++r) {
            int o[3] = {i, j, l}, w[3] = {i, j, l};
            o[axis] = r;
            w[axis] = order[r];
            values.tensor<float, 3>()(o[0], o[1], o[2]) = at(order[r]);
            indices.tensor<int32, 3>()(o[0], o[1], o[2]) = order[r];
            want.tensor<float, 3>()(w[0], w[1], w[2]) = dv.tensor<float, 3>()(o[0], o[1], o[2]);
          }
        }
      }
    }
    AttrValueMap attrs;
    attrs["k"].set_i(2);
    attrs["reduction_dimension"].set_i(dim);
    attrs["T"].set_type(DT_FLOAT);
    attrs["is_max_k"].set_b(true);
    attrs["aggregate_to_topk"].set_b(true);
    attrs["recall_target"].set_f(0.95f);
    attrs["reduction_input_size_override"].set_i(-1);
    attrs["_tf_ext_forward_outputs"].set_b(true);
    FunctionDef fdef;
    ASSERT_TRUE(creator(AttrSlice(&attrs), &fdef).ok());
    fdef.mutable_signature()->set_name("ApproxTopKGradWithOutputs");
    Scope root = Scope::NewRootScope();
    FunctionDefLibrary library;
    *library.add_function() = fdef;
    ASSERT_TRUE(root.graph()->AddFunctionLibrary(library).ok());
    std::vector<NodeBuilder::NodeOut> args;
    for (const Tensor& t : {x, values, indices, dv, ZerosOf(DT_INT32, out_shape)}) {
      args.push_back({ops::Const(root, t).node(), 0});
    }
    NameAttrList f;
    f.set_name("ApproxTopKGradWithOutputs");
    for (const auto& [name, value] : attrs) {
      if (name[0] != '_') (*f.mutable_attr())[name] = value;
    }
    Node* call = nullptr;
    ASSERT_TRUE(NodeBuilder("grad", "PartitionedCall")
                    .Input(args)
                    .Attr("Tin", DataTypeVector{DT_FLOAT, DT_FLOAT, DT_INT32, DT_FLOAT, DT_INT32})
                    .Attr("Tout", DataTypeVector{DT_FLOAT})
                    .Attr("f", f)
                    .Finalize(root.graph(), &call)
                    .ok());
    GraphDef graph;
    ASSERT_TRUE(root.ToGraphDef(&graph).ok());
    std::unique_ptr<Session> session(NewSession(SessionOptions()));
    ASSERT_TRUE(session->Create(graph).ok());
    std::vector<Tensor> out;
    const absl::Status s = session->Run({}, {"grad:0"}, {}, &out);
    ASSERT_TRUE(s.ok()) << s;
    test::ExpectTensorNear<float>(out[0], want);
  }
}

}  // namespace
}  // namespace tensorflow::tf_ext
