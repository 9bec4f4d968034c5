// tf_ext::GradientSession (tf_ext/graph/runtime/gradient_session.h): built once, run per request.
// Gradients and vector-Jacobian products against closed forms computed here in double; the
// request checks (unknown, missing, mistyped and misshaped feeds, incoming gradients of the
// wrong shape, sizes over max_tensor_bytes or overflowing int64, found through a fed integer
// size); and 8 threads sending mixed valid and hostile requests to the same sessions, every
// valid answer checked.
#include <atomic>
#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/protobuf.h"
#include "tests/test_util.h"
#include "tf_ext/graph/runtime/gradient_session.h"

namespace tensorflow::tf_ext {
namespace {

using Feeds = std::vector<std::pair<std::string, Tensor>>;

GraphDef Parse(const char* text) {
  GraphDef g;
  CHECK(protobuf::TextFormat::ParseFromString(text, &g));
  return g;
}

float Value(int64_t i, float scale) { return scale * ((i * 37 % 23) - 11) / 11.0f; }

Tensor Values(TensorShape shape, float scale, int seed = 0) {
  Tensor t(DT_FLOAT, shape);
  auto flat = t.flat<float>();
  for (int64_t i = 0; i < flat.size(); ++i) flat(i) = Value(i + 7 * seed, scale);
  return t;
}

template <typename T>
Tensor Vec(std::vector<T> v) {
  Tensor t(DataTypeToEnum<T>::value, TensorShape({static_cast<int64_t>(v.size())}));
  for (size_t i = 0; i < v.size(); ++i) t.vec<T>()(i) = v[i];
  return t;
}

// z = x w + b, y = tanh(z), s = sum(z * z): x [?,8] fed, w [8,4] and b [4] constants.
constexpr int kIn = 8, kOut = 4;
GraphDef Mlp() {
  GraphDef g = Parse(R"pb(
    node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: -1 } dim { size: 8 } } } } }
    node { name: "w" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } } }
    node { name: "b" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } } }
    node { name: "xw" op: "MatMul" input: "x" input: "w" attr { key: "T" value { type: DT_FLOAT } } }
    node { name: "z" op: "AddV2" input: "xw" input: "b" attr { key: "T" value { type: DT_FLOAT } } }
    node { name: "y" op: "Tanh" input: "z" attr { key: "T" value { type: DT_FLOAT } } }
    node { name: "zz" op: "Mul" input: "z" input: "z" attr { key: "T" value { type: DT_FLOAT } } }
    node { name: "axes" op: "Const" attr { key: "dtype" value { type: DT_INT32 } }
           attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape { dim { size: 2 } }
                                                int_val: 0 int_val: 1 } } } }
    node { name: "s" op: "Sum" input: "zz" input: "axes" attr { key: "T" value { type: DT_FLOAT } }
           attr { key: "Tidx" value { type: DT_INT32 } } }
  )pb");
  Values(TensorShape({kIn, kOut}), 0.5f).AsProtoTensorContent(
      (*g.mutable_node(1)->mutable_attr())["value"].mutable_tensor());
  Values(TensorShape({kOut}), 0.3f, 3).AsProtoTensorContent(
      (*g.mutable_node(2)->mutable_attr())["value"].mutable_tensor());
  return g;
}

// The MLP's y, dx, dw for incoming gradient dy on y and ones on s, in double:
// dz = dy (1 - y^2) + 2 z; dx = dz w^T; dw = x^T dz.
struct MlpExpected {
  std::vector<double> y, dx, dw;
};
MlpExpected MlpReference(const Tensor& x, const Tensor& dy) {
  const int64_t n = x.dim_size(0);
  const Tensor w = Values(TensorShape({kIn, kOut}), 0.5f);
  const Tensor b = Values(TensorShape({kOut}), 0.3f, 3);
  MlpExpected e;
  e.y.assign(n * kOut, 0);
  e.dx.assign(n * kIn, 0);
  e.dw.assign(kIn * kOut, 0);
  for (int64_t r = 0; r < n; ++r) {
    for (int o = 0; o < kOut; ++o) {
      double z = b.vec<float>()(o);
      for (int i = 0; i < kIn; ++i) z += double{x.matrix<float>()(r, i)} * w.matrix<float>()(i, o);
      const double y = std::tanh(z);
      e.y[r * kOut + o] = y;
      const double dz = dy.matrix<float>()(r, o) * (1 - y * y) + 2 * z;
      for (int i = 0; i < kIn; ++i) {
        e.dx[r * kIn + i] += dz * w.matrix<float>()(i, o);
        e.dw[i * kOut + o] += double{x.matrix<float>()(r, i)} * dz;
      }
    }
  }
  return e;
}

std::unique_ptr<GradientSession> MlpSession(int64_t budget = 0) {
  GradientSessionSpec spec;
  spec.ys = {{"y"}, {"s"}};
  spec.xs = {{"x"}, {"w"}};
  spec.incoming_gradients = {true, false};
  GradientSessionOptions options;
  options.max_tensor_bytes = budget;
  options.intra_op_threads = 1;
  auto s = GradientSession::Create(Mlp(), spec, options);
  CHECK(s.ok()) << s.status();
  return std::move(*s);
}

// Empty string when `got` matches `want` (relative tolerance 1e-4), else what differs.
std::string Compare(const std::string& what, const Tensor& got, const std::vector<double>& want) {
  if (got.NumElements() != static_cast<int64_t>(want.size())) {
    return absl::StrCat(what, ": ", got.NumElements(), " values, want ", want.size());
  }
  auto flat = got.flat<float>();
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::abs(flat(i) - want[i]) > 1e-4 * (1 + std::abs(want[i]))) {
      return absl::StrCat(what, "[", i, "] = ", flat(i), ", want ", want[i]);
    }
  }
  return "";
}

// One MLP request of batch `n`; empty string when every output matches the reference.
std::string RunMlp(const GradientSession& session, int n, int seed) {
  const Tensor x = Values(TensorShape({n, kIn}), 1.0f, seed);
  const Tensor dy = Values(TensorShape({n, kOut}), 0.7f, seed + 1);
  std::vector<Tensor> ys, dxs;
  absl::Status s = session.Run({{"x", x}, {"d_y", dy}}, &ys, &dxs);
  if (!s.ok()) return s.ToString();
  if (ys.size() != 2 || dxs.size() != 2) return "wrong number of outputs";
  const MlpExpected e = MlpReference(x, dy);
  double sum = 0;
  for (int64_t r = 0; r < n; ++r) {
    for (int o = 0; o < kOut; ++o) {
      const double z = std::atanh(e.y[r * kOut + o]);
      sum += z * z;
    }
  }
  std::string diff = Compare("y", ys[0], e.y);
  if (diff.empty()) diff = Compare("s", ys[1], {sum});
  if (diff.empty()) diff = Compare("dx", dxs[0], e.dx);
  if (diff.empty()) diff = Compare("dw", dxs[1], e.dw);
  return diff;
}

std::unique_ptr<GradientSession> JitMlpSession(int cache) {
  GradientSessionSpec spec;
  spec.ys = {{"y"}, {"s"}};
  spec.xs = {{"x"}, {"w"}};
  spec.incoming_gradients = {true, false};
  GradientSessionOptions options;
  options.intra_op_threads = 1;
  options.jit_compile = true;
  options.jit_compile_cache = cache;
  auto s = GradientSession::Create(Mlp(), spec, options);
  CHECK(s.ok()) << s.status();
  return std::move(*s);
}

// jit_compile: the MLP's forward and backward as one XLA cluster, answers as without it; every
// batch size compiles anew, and at most jit_compile_cache of them are kept.
TEST(GradientSessionTest, JitCompiledGradientsMatchTheReferenceWithABoundedCache) {
  auto session = JitMlpSession(/*cache=*/3);
  EXPECT_GT(session->build_info().xla_cluster_nodes, 5);
  for (int round = 0; round < 2; ++round) {
    for (int n : {1, 2, 3, 4, 5, 2}) {
      EXPECT_EQ(RunMlp(*session, n, n + round), "") << "batch " << n;
      EXPECT_LE(session->jit_compiled_signatures(), 3);
      EXPECT_GE(session->jit_compiled_signatures(), 1);
    }
  }
}

TEST(GradientSessionTest, JitCompileRefusesAGraphWithAnOpXlaCannotCompile) {
  GraphDef g = Parse(R"pb(
    node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 1 } dim { size: 4 } dim { size: 4 }
                                               dim { size: 1 } } } } }
    node { name: "size" op: "Const" attr { key: "dtype" value { type: DT_INT32 } }
           attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape { dim { size: 2 } }
                                                int_val: 6 int_val: 6 } } } }
    node { name: "resized" op: "ResizeBicubic" input: "x" input: "size"
           attr { key: "T" value { type: DT_FLOAT } } }
  )pb");
  GradientSessionSpec spec;
  spec.ys = {{"resized"}};
  spec.xs = {{"x"}};
  GradientSessionOptions options;
  options.jit_compile = true;
  auto s = GradientSession::Create(g, spec, options);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.status().message(),
                                "node 'resized' (ResizeBicubic) has no XLA kernel"))
      << s.status();
  options.jit_compile = false;
  EXPECT_TRUE(GradientSession::Create(g, spec, options).ok());
}

TEST(GradientSessionTest, VectorJacobianProductsOfSeveralYs) {
  auto session = MlpSession();
  ASSERT_EQ(session->inputs().size(), 2);
  EXPECT_EQ(session->inputs()[0].name, "x");
  EXPECT_EQ(session->inputs()[1].name, "d_y");
  EXPECT_EQ(session->inputs()[1].dtype, DT_FLOAT);
  // Many runs of one build, with different batch sizes.
  for (int n : {1, 3, 5, 3}) EXPECT_EQ(RunMlp(*session, n, n), "") << "batch " << n;
  EXPECT_GT(session->build_info().gradient_nodes, 0);
}

TEST(GradientSessionTest, WithoutIncomingGradientsIsTheGradientOfTheSum) {
  GradientSessionSpec spec;
  spec.ys = {{"y"}};
  spec.xs = {{"x"}};
  auto session = GradientSession::Create(Mlp(), spec);
  TF_EXT_ASSERT_OK(session.status());
  ASSERT_EQ((*session)->inputs().size(), 1);  // no d_y
  const Tensor x = Values(TensorShape({2, kIn}), 1.0f);
  std::vector<Tensor> ys, dxs;
  TF_EXT_ASSERT_OK((*session)->Run({{"x:0", x}}, &ys, &dxs));
  // d sum(y) / dx: the MLP's reference with dy = 1 on y, minus s's part (2 z w^T).
  Tensor ones(DT_FLOAT, TensorShape({2, kOut}));
  ones.flat<float>().setConstant(1.0f);
  const MlpExpected with_s = MlpReference(x, ones);
  Tensor zeros(DT_FLOAT, TensorShape({2, kOut}));
  zeros.flat<float>().setZero();
  const MlpExpected only_s = MlpReference(x, zeros);
  std::vector<double> want(with_s.dx.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = with_s.dx[i] - only_s.dx[i];
  EXPECT_EQ(Compare("dx", dxs[0], want), "");
}

TEST(GradientSessionTest, BuildErrorsNameTheTensor) {
  GradientSessionSpec spec;
  spec.ys = {{"nope"}};
  spec.xs = {{"x"}};
  auto s = GradientSession::Create(Mlp(), spec);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.status().message(), "GradientSession: y 'nope:0': no node named 'nope'")) << s.status();
  spec.ys = {{"y"}};
  spec.incoming_gradients = {true, false};
  s = GradientSession::Create(Mlp(), spec);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
}

// A request refused before it runs: InvalidArgument, "GradientSession:", mentioning `words`.
void ExpectRefused(const GradientSession& session, const Feeds& feeds,
                   const std::vector<std::string>& words) {
  std::vector<Tensor> ys, dxs;
  const absl::Status s = session.Run(feeds, &ys, &dxs);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StartsWith(s.message(), "GradientSession: ")) << s;
  for (const std::string& w : words) EXPECT_TRUE(absl::StrContains(s.message(), w)) << s;
  EXPECT_TRUE(ys.empty() && dxs.empty());
}

TEST(GradientSessionTest, BadRequestsAreRefusedNamingTheFeed) {
  auto session = MlpSession();
  const Tensor x = Values(TensorShape({3, kIn}), 1.0f);
  const Tensor dy = Values(TensorShape({3, kOut}), 1.0f);
  ExpectRefused(*session, {{"x", x}}, {"'d_y' is missing"});
  ExpectRefused(*session, {{"x", x}, {"d_y", dy}, {"q", x}}, {"'q' is not an input", "x, d_y"});
  ExpectRefused(*session, {{"x", x}, {"x:0", x}, {"d_y", dy}}, {"'x' is given twice"});
  Tensor x64(DT_DOUBLE, TensorShape({3, kIn}));
  ExpectRefused(*session, {{"x", x64}, {"d_y", dy}}, {"'x' is double", "takes float"});
  ExpectRefused(*session, {{"x", Values(TensorShape({3, kIn, 1}), 1.0f)}, {"d_y", dy}},
                {"'x' has shape [3,8,1]", "[?,8]"});
  ExpectRefused(*session, {{"x", Values(TensorShape({3, 7}), 1.0f)}, {"d_y", dy}},
                {"'x' has shape [3,7]"});
  ExpectRefused(*session, {{"x", Tensor()}, {"d_y", dy}}, {"'x' has shape [0]"});
  // An incoming gradient that would broadcast: refused, not summed into wrong gradients.
  ExpectRefused(*session, {{"x", x}, {"d_y", Values(TensorShape({1, kOut}), 1.0f)}},
                {"'d_y' has shape [1,4]", "y 'y:0' has shape [3,4]"});
  ExpectRefused(*session, {{"x", x}, {"d_y", Values(TensorShape({kOut}), 1.0f)}}, {"'d_y'"});
  // A batch whose activations exceed the budget (a 1 MB budget; x alone is 4 MB).
  auto small = MlpSession(1 << 20);
  EXPECT_EQ(small->max_tensor_bytes(), 1 << 20);
  ExpectRefused(*small, {{"x", Values(TensorShape({1 << 17, kIn}), 1.0f)},
                         {"d_y", Values(TensorShape({1 << 17, kOut}), 1.0f)}},
                {"'x' [131072,8]", "over max_tensor_bytes"});
  // The session still answers valid requests.
  EXPECT_EQ(RunMlp(*session, 2, 9), "");
  EXPECT_EQ(RunMlp(*small, 2, 9), "");
}

// y = sum(fill(n, x)) for a fed integer vector n: dy/dx = prod(n). Shape inference reads the
// fed n, so sizes that overflow or exceed the budget are refused before anything runs.
GraphDef FillGraph() {
  return Parse(R"pb(
    node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { } } } }
    node { name: "n" op: "Placeholder" attr { key: "dtype" value { type: DT_INT32 } }
           attr { key: "shape" value { shape { dim { size: -1 } } } } }
    node { name: "filled" op: "Fill" input: "n" input: "x"
           attr { key: "T" value { type: DT_FLOAT } } attr { key: "index_type" value { type: DT_INT32 } } }
    node { name: "rank" op: "Rank" input: "filled" attr { key: "T" value { type: DT_FLOAT } } }
    node { name: "zero" op: "Const" attr { key: "dtype" value { type: DT_INT32 } }
           attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape { } int_val: 0 } } } }
    node { name: "one" op: "Const" attr { key: "dtype" value { type: DT_INT32 } }
           attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape { } int_val: 1 } } } }
    node { name: "axes" op: "Range" input: "zero" input: "rank" input: "one"
           attr { key: "Tidx" value { type: DT_INT32 } } }
    node { name: "y" op: "Sum" input: "filled" input: "axes" attr { key: "T" value { type: DT_FLOAT } }
           attr { key: "Tidx" value { type: DT_INT32 } } }
  )pb");
}

std::unique_ptr<GradientSession> FillSession() {
  GradientSessionSpec spec;
  spec.ys = {{"y"}};
  spec.xs = {{"x"}};
  GradientSessionOptions options;
  options.max_tensor_bytes = int64_t{1} << 30;
  options.intra_op_threads = 1;
  auto s = GradientSession::Create(FillGraph(), spec, options);
  CHECK(s.ok()) << s.status();
  return std::move(*s);
}

Tensor Scalar(float v) {
  Tensor t(DT_FLOAT, TensorShape({}));
  t.scalar<float>()() = v;
  return t;
}

std::string RunFill(const GradientSession& session, std::vector<int> n, float x) {
  std::vector<Tensor> ys, dxs;
  absl::Status s = session.Run({{"x", Scalar(x)}, {"n", Vec<int>(n)}}, &ys, &dxs);
  if (!s.ok()) return s.ToString();
  double count = 1;
  for (int d : n) count *= d;
  std::string diff = Compare("y", ys[0], {count * x});
  if (diff.empty()) diff = Compare("dx", dxs[0], {count});
  return diff;
}

TEST(GradientSessionTest, FedSizesAreCheckedByValue) {
  auto session = FillSession();
  EXPECT_EQ(RunFill(*session, {3, 4}, 1.5f), "");
  EXPECT_EQ(RunFill(*session, {2, 3, 2}, -0.5f), "");
  // 4e10 bytes: over the 1 GiB budget.
  ExpectRefused(*session, {{"x", Scalar(1)}, {"n", Vec<int>({100000, 100000})}},
                {"'n' [2] = 100000 100000", "node 'filled'", "over max_tensor_bytes"});
  // 2^66 elements: the size overflows int64.
  const int big = 1 << 22;
  ExpectRefused(*session, {{"x", Scalar(1)}, {"n", Vec<int>({big, big, big})}},
                {"node 'filled'", "overflows int64"});
  // A negative size reaches the kernel, which refuses it; nothing crashes.
  std::vector<Tensor> ys, dxs;
  EXPECT_EQ(session->Run({{"x", Scalar(1)}, {"n", Vec<int>({-1, 3})}}, &ys, &dxs).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunFill(*session, {5}, 2.0f), "");
}

// y = gather(x, where(x > 0)): y's shape depends on x's values, so only the run can check an
// incoming gradient's shape; a wrong one fails there, naming it.
TEST(GradientSessionTest, IncomingGradientOfADataDependentShapeIsCheckedByTheRun) {
  GraphDef g = Parse(R"pb(
    node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "shape" value { shape { dim { size: 5 } } } } }
    node { name: "zero" op: "Const" attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape { } float_val: 0 } } } }
    node { name: "positive" op: "Greater" input: "x" input: "zero" attr { key: "T" value { type: DT_FLOAT } } }
    node { name: "where" op: "Where" input: "positive" attr { key: "T" value { type: DT_BOOL } } }
    node { name: "flat" op: "Const" attr { key: "dtype" value { type: DT_INT32 } }
           attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape { dim { size: 1 } } int_val: -1 } } } }
    node { name: "indices" op: "Reshape" input: "where" input: "flat"
           attr { key: "T" value { type: DT_INT64 } } attr { key: "Tshape" value { type: DT_INT32 } } }
    node { name: "axis" op: "Const" attr { key: "dtype" value { type: DT_INT32 } }
           attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape { } int_val: 0 } } } }
    node { name: "y" op: "GatherV2" input: "x" input: "indices" input: "axis"
           attr { key: "Tparams" value { type: DT_FLOAT } } attr { key: "Tindices" value { type: DT_INT64 } }
           attr { key: "Taxis" value { type: DT_INT32 } } attr { key: "batch_dims" value { i: 0 } } }
  )pb");
  GradientSessionSpec spec;
  spec.ys = {{"y"}};
  spec.xs = {{"x"}};
  spec.incoming_gradients = {true};
  auto session = GradientSession::Create(std::move(g), spec);
  TF_EXT_ASSERT_OK(session.status());
  const Tensor x = Vec<float>({1.0f, -2.0f, 3.0f, 0.0f, 5.0f});  // 3 positive
  std::vector<Tensor> ys, dxs;
  TF_EXT_ASSERT_OK((*session)->Run({{"x", x}, {"d_y", Vec<float>({10, 20, 30})}}, &ys, &dxs));
  EXPECT_EQ(Compare("y", ys[0], {1, 3, 5}), "");
  EXPECT_EQ(Compare("dx", dxs[0], {10, 0, 20, 0, 30}), "");
  for (const Tensor& bad : {Vec<float>({10, 20}), Vec<float>({1, 2, 3, 4})}) {
    const absl::Status s = (*session)->Run({{"x", x}, {"d_y", bad}}, &ys, &dxs);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(absl::StrContains(
        s.message(), "GradientSession: the incoming gradient of y y:0 must have the shape of y"))
        << s;
  }
  // A rank shape inference knows to be wrong is refused before the run.
  ExpectRefused(**session, {{"x", x}, {"d_y", Scalar(1)}}, {"'d_y' has shape []", "y 'y:0'"});
  TF_EXT_ASSERT_OK((*session)->Run({{"x", x}, {"d_y", Vec<float>({1, 1, 1})}}, &ys, &dxs));
  EXPECT_EQ(Compare("dx", dxs[0], {1, 0, 1, 0, 1}), "");
}

// 8 threads, 40 requests each, mixed: valid MLP batches and Fill sizes (every answer checked)
// and each kind of hostile request (every one refused with InvalidArgument).
TEST(GradientSessionTest, EightThreadsOfMixedValidAndHostileRequests) {
  auto mlp = MlpSession(int64_t{1} << 30);
  auto fill = FillSession();
  std::atomic<int> valid{0}, refused{0};
  std::vector<std::string> failures(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 40 && failures[t].empty(); ++i) {
        const int kind = (t * 7 + i) % 10;
        const int n = 1 + (t + i) % 4;
        std::string error;
        std::vector<Tensor> ys, dxs;
        absl::Status s;
        switch (kind) {
          case 0: case 1: case 2:
            error = RunMlp(*mlp, n, t * 100 + i);
            ++valid;
            break;
          case 3: case 4:
            error = RunFill(*fill, {n, n + 1}, 0.25f * i);
            ++valid;
            break;
          case 5:
            s = mlp->Run({{"x", Values(TensorShape({n, kIn + 1}), 1.0f)},
                          {"d_y", Values(TensorShape({n, kOut}), 1.0f)}}, &ys, &dxs);
            break;
          case 6:
            s = mlp->Run({{"x", Values(TensorShape({n, kIn}), 1.0f)},
                          {"d_y", Values(TensorShape({n + 1, kOut}), 1.0f)}}, &ys, &dxs);
            break;
          case 7:
            s = fill->Run({{"x", Scalar(1)}, {"n", Vec<int>({100000, 100000 + i})}}, &ys, &dxs);
            break;
          case 8:
            s = fill->Run({{"x", Scalar(1)}, {"n", Vec<int>({1 << 22, 1 << 22, 1 << 22})}}, &ys, &dxs);
            break;
          case 9:
            s = mlp->Run({{"x", Values(TensorShape({n, kIn}), 1.0f)}}, &ys, &dxs);
            break;
        }
        if (kind >= 5) {
          if (s.code() != absl::StatusCode::kInvalidArgument ||
              !absl::StartsWith(s.message(), "GradientSession: ")) {
            error = absl::StrCat("hostile request ", kind, " got ", s.ToString());
          }
          ++refused;
        }
        if (!error.empty()) failures[t] = absl::StrCat("thread ", t, " request ", i, ": ", error);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (const std::string& f : failures) EXPECT_EQ(f, "");
  EXPECT_EQ(valid + refused, 320);
  EXPECT_GT(valid, 100);
  EXPECT_GT(refused, 100);
}

}  // namespace
}  // namespace tensorflow::tf_ext
