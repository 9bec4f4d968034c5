// TfExt>MedianPool2D / TfExt>MedianPool2DGrad: forward and backward against a brute-force
// reference (full stable sort of each window), per dtype; the 3x3 selection network against
// the general selection (ties and NaN included); shape function; validation; gradients
// through SymbolicGradient and the numeric Jacobian.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_def.pb.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/tensor_shape.pb.h"
#include "tensorflow/core/public/version.h"
#include "tests/test_util.h"
#include "tf_ext/kernels/median_pool_functor.h"
#include "tf_ext/testing/gradient_checker.h"
#include "tf_ext/testing/op_runner.h"

namespace tensorflow::tf_ext::test {
namespace {

constexpr char kOp[] = "TfExt>MedianPool2D";
constexpr char kGradOp[] = "TfExt>MedianPool2DGrad";

struct Config {
  int64_t n, h, w, c;
  int64_t kh, kw, sh, sw;
  const char* padding;

  TensorShape InputShape() const { return TensorShape({n, h, w, c}); }
  OpAttrs Attrs() const {
    return {{"ksize", std::vector<int64_t>{kh, kw}},
            {"strides", std::vector<int64_t>{sh, sw}},
            {"padding", padding}};
  }
  std::string ToString() const {
    return absl::StrCat("x=[", n, ",", h, ",", w, ",", c, "] ksize=[", kh, ",", kw,
                        "] strides=[", sh, ",", sw, "] ", padding);
  }
};

// ---- Reference: written from the op's definition, independent of the kernel's code. ----

// MaxPool's output size rules, literally: VALID ceil((in - k + 1) / s) (no window fits: 0),
// SAME ceil(in / s) with pad_before = max((out - 1) s + k - in, 0) / 2.
int64_t RefOutSize(int64_t in, int64_t k, int64_t s, bool same, int64_t* pad_before) {
  if (same) {
    const int64_t out = static_cast<int64_t>(std::ceil(static_cast<double>(in) / s));
    *pad_before = std::max<int64_t>((out - 1) * s + k - in, 0) / 2;
    return out;
  }
  *pad_before = 0;
  const double out = std::ceil(static_cast<double>(in - k + 1) / s);
  return out > 0 ? static_cast<int64_t>(out) : 0;
}

struct RefResult {
  TensorShape shape;
  std::vector<double> y;
  std::vector<int64_t> arg;  // flat index into x of each output's median
};

// Every window's in-image elements, collected in row-major order, fully sorted by value with
// std::stable_sort (so equal values keep row-major order; NaN sorts last), element (m-1)/2.
template <typename T>
RefResult RefMedianPool(const Config& cfg, const Tensor& x) {
  const bool same = std::string(cfg.padding) == "SAME";
  int64_t pad_h = 0, pad_w = 0;
  const int64_t oh_n = RefOutSize(cfg.h, cfg.kh, cfg.sh, same, &pad_h);
  const int64_t ow_n = RefOutSize(cfg.w, cfg.kw, cfg.sw, same, &pad_w);
  RefResult r;
  r.shape = TensorShape({cfg.n, oh_n, ow_n, cfg.c});
  auto xf = x.flat<T>();
  for (int64_t n = 0; n < cfg.n; ++n) {
    for (int64_t oh = 0; oh < oh_n; ++oh) {
      for (int64_t ow = 0; ow < ow_n; ++ow) {
        for (int64_t c = 0; c < cfg.c; ++c) {
          std::vector<std::pair<double, int64_t>> win;
          for (int64_t dy = 0; dy < cfg.kh; ++dy) {
            for (int64_t dx = 0; dx < cfg.kw; ++dx) {
              const int64_t h = oh * cfg.sh - pad_h + dy, w = ow * cfg.sw - pad_w + dx;
              if (h < 0 || h >= cfg.h || w < 0 || w >= cfg.w) continue;
              const int64_t idx = ((n * cfg.h + h) * cfg.w + w) * cfg.c + c;
              win.push_back({static_cast<double>(xf(idx)), idx});
            }
          }
          std::stable_sort(win.begin(), win.end(), [](const auto& a, const auto& b) {
            return !std::isnan(a.first) && (std::isnan(b.first) || a.first < b.first);
          });
          const auto& med = win.at((win.size() - 1) / 2);
          r.y.push_back(med.first);
          r.arg.push_back(med.second);
        }
      }
    }
  }
  return r;
}

bool SameValue(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

enum class Fill { kFewValues, kDistinct, kWithNaN };

// kFewValues: integers 0..3, so most windows have ties; kDistinct: a permutation; kWithNaN:
// few values with ~30% NaN.
template <typename T>
Tensor MakeInput(const TensorShape& shape, Fill fill, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensor t(DataTypeToEnum<T>::value, shape);
  auto f = t.flat<T>();
  std::vector<int64_t> perm(f.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int64_t i = 0; i < f.size(); ++i) {
    switch (fill) {
      case Fill::kFewValues:
        f(i) = static_cast<T>(rng() % 4);
        break;
      case Fill::kDistinct:
        f(i) = static_cast<T>(perm[i]) * T(0.5) - T(3);
        break;
      case Fill::kWithNaN:
        f(i) = rng() % 10 < 3 ? std::numeric_limits<T>::quiet_NaN() : static_cast<T>(rng() % 3);
        break;
    }
  }
  return t;
}

// Integer-valued incoming gradients: any summation order gives the exact same dx.
template <typename T>
Tensor MakeDy(const TensorShape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensor t(DataTypeToEnum<T>::value, shape);
  auto f = t.flat<T>();
  for (int64_t i = 0; i < f.size(); ++i) f(i) = static_cast<T>(static_cast<int>(rng() % 11) - 5);
  return t;
}

const std::vector<Config>& Configs() {
  static const auto* configs = new std::vector<Config>{
      {2, 7, 6, 3, 3, 3, 1, 1, "VALID"},  // 3x3 fast path everywhere
      {2, 7, 6, 3, 3, 3, 1, 1, "SAME"},   // fast path inside, clipped windows on the border
      {1, 8, 9, 2, 3, 3, 2, 2, "SAME"},
      {1, 9, 7, 2, 3, 3, 2, 3, "VALID"},
      {1, 5, 5, 1, 2, 2, 1, 1, "VALID"},  // even count: lower median
      {2, 6, 5, 4, 2, 3, 2, 1, "SAME"},
      {1, 4, 7, 2, 4, 4, 3, 2, "SAME"},   // even windows, clipped to odd and even counts
      {1, 5, 7, 2, 5, 1, 1, 1, "VALID"},
      {1, 5, 7, 2, 1, 4, 1, 1, "SAME"},
      {1, 9, 8, 2, 2, 2, 4, 3, "VALID"},  // stride > window: some pixels never pooled
      {1, 6, 6, 1, 1, 1, 2, 2, "SAME"},   // 1x1 window: subsampling
      {1, 1, 1, 3, 1, 1, 1, 1, "VALID"},  // 1x1 image
      {2, 1, 1, 3, 3, 3, 1, 1, "SAME"},   // 1x1 image, larger window: the element itself
      {2, 3, 4, 2, 7, 9, 1, 1, "SAME"},   // window larger than the image, SAME
      {1, 3, 4, 2, 7, 9, 2, 3, "SAME"},
      {1, 11, 10, 3, 5, 5, 2, 2, "SAME"},
      {1, 9, 10, 2, 7, 7, 1, 1, "SAME"},  // up to 49 elements: beyond the rank-count path
      {0, 5, 5, 3, 3, 3, 1, 1, "SAME"},   // empty batch
      {0, 5, 5, 3, 3, 3, 1, 1, "VALID"},
      {2, 0, 5, 3, 3, 3, 1, 1, "SAME"},   // empty image
      {2, 4, 4, 0, 3, 3, 1, 1, "SAME"},   // no channels
      {1, 2, 2, 1, 3, 3, 1, 1, "VALID"},  // VALID, window larger than the image: empty output
      {2, 2, 5, 2, 5, 2, 1, 1, "VALID"},
  };
  return *configs;
}

template <typename T>
class MedianPoolTyped : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(MedianPoolTyped, FloatTypes);

TYPED_TEST(MedianPoolTyped, ForwardMatchesBruteForce) {
  uint32_t seed = 1;
  for (const Config& cfg : Configs()) {
    for (Fill fill : {Fill::kFewValues, Fill::kDistinct, Fill::kWithNaN}) {
      Tensor x = MakeInput<TypeParam>(cfg.InputShape(), fill, seed++);
      const RefResult ref = RefMedianPool<TypeParam>(cfg, x);
      for (RunPath path : {RunPath::kSessionFed, RunPath::kSessionConstants}) {
        auto out = RunOp(kOp, cfg.Attrs(), {x}, {path});
        ASSERT_TRUE(out.ok()) << cfg.ToString() << ": " << out.status();
        const Tensor& y = (*out)[0];
        ASSERT_EQ(y.shape(), ref.shape) << cfg.ToString();
        ASSERT_EQ(y.dtype(), DataTypeToEnum<TypeParam>::value);
        for (int64_t i = 0; i < y.NumElements(); ++i) {
          ASSERT_TRUE(SameValue(y.flat<TypeParam>()(i), ref.y[i]))
              << cfg.ToString() << " fill " << static_cast<int>(fill) << " output " << i
              << ": got " << y.flat<TypeParam>()(i) << ", want " << ref.y[i];
        }
      }
    }
  }
}

TYPED_TEST(MedianPoolTyped, GradOpScattersDyOntoTheMedianElement) {
  uint32_t seed = 100;
  for (const Config& cfg : Configs()) {
    for (Fill fill : {Fill::kFewValues, Fill::kDistinct, Fill::kWithNaN}) {
      Tensor x = MakeInput<TypeParam>(cfg.InputShape(), fill, seed++);
      const RefResult ref = RefMedianPool<TypeParam>(cfg, x);
      Tensor dy = MakeDy<TypeParam>(ref.shape, seed++);
      std::vector<double> want(x.NumElements(), 0.0);
      for (size_t o = 0; o < ref.arg.size(); ++o) want[ref.arg[o]] += dy.flat<TypeParam>()(o);

      auto direct = RunOp(kGradOp, cfg.Attrs(), {x, dy});
      auto symbolic = RunSymbolicGradient(kOp, cfg.Attrs(), {x}, {dy});
      for (const auto* got : {&direct, &symbolic}) {
        ASSERT_TRUE(got->ok()) << cfg.ToString() << ": " << got->status();
        const Tensor& dx = (**got)[0];
        ASSERT_EQ(dx.shape(), x.shape()) << cfg.ToString();
        for (int64_t i = 0; i < dx.NumElements(); ++i) {
          ASSERT_EQ(dx.flat<TypeParam>()(i), want[i])
              << cfg.ToString() << " fill " << static_cast<int>(fill) << " dx[" << i << "]";
        }
      }
    }
  }
}

// Big enough that ParallelFor splits the forward and both backward phases across threads.
TYPED_TEST(MedianPoolTyped, LargeInputsMatchBruteForce) {
  const std::vector<Config> configs = {{2, 48, 40, 5, 3, 3, 1, 1, "SAME"},
                                       {3, 33, 47, 20, 4, 4, 1, 1, "VALID"},
                                       {1, 64, 64, 3, 5, 5, 2, 2, "SAME"}};
  uint32_t seed = 7;
  for (const Config& cfg : configs) {
    Tensor x = MakeInput<TypeParam>(cfg.InputShape(), Fill::kFewValues, seed++);
    const RefResult ref = RefMedianPool<TypeParam>(cfg, x);
    Tensor dy = MakeDy<TypeParam>(ref.shape, seed++);
    std::vector<double> want(x.NumElements(), 0.0);
    for (size_t o = 0; o < ref.arg.size(); ++o) want[ref.arg[o]] += dy.flat<TypeParam>()(o);
    for (RunPath path : {RunPath::kSessionFed, RunPath::kKernel}) {
      auto y = RunOp(kOp, cfg.Attrs(), {x}, {path});
      ASSERT_TRUE(y.ok()) << y.status();
      ASSERT_EQ((*y)[0].shape(), ref.shape);
      int64_t mismatches = 0;
      for (int64_t i = 0; i < ref.shape.num_elements(); ++i) {
        mismatches += (*y)[0].flat<TypeParam>()(i) != ref.y[i];
      }
      EXPECT_EQ(mismatches, 0) << cfg.ToString();
      auto dx = RunOp(kGradOp, cfg.Attrs(), {x, dy}, {path});
      ASSERT_TRUE(dx.ok()) << dx.status();
      mismatches = 0;
      for (int64_t i = 0; i < x.NumElements(); ++i) {
        mismatches += (*dx)[0].flat<TypeParam>()(i) != want[i];
      }
      EXPECT_EQ(mismatches, 0) << cfg.ToString();
    }
  }
}

// The channel-parallel kernel (blocks of channels through a selection network) returns the very
// element the definition picks: -0 vs +0 and NaN payloads and signs included, with channel counts
// that fill no, some and several whole blocks.
TYPED_TEST(MedianPoolTyped, OutputIsTheMedianElementBitForBit) {
  using T = TypeParam;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const T alphabet[] = {T(-0.0), T(0.0), nan, -nan, T(1), -std::numeric_limits<T>::infinity()};
  const std::vector<Config> configs = {{2, 9, 8, 9, 3, 3, 1, 1, "SAME"},
                                       {1, 9, 9, 6, 5, 5, 1, 1, "SAME"},
                                       {1, 7, 8, 5, 4, 4, 1, 1, "VALID"},
                                       {1, 6, 7, 17, 3, 2, 2, 1, "SAME"}};
  std::mt19937 rng(11);
  for (const Config& cfg : configs) {
    Tensor x(DataTypeToEnum<T>::value, cfg.InputShape());
    for (int64_t i = 0; i < x.NumElements(); ++i) x.flat<T>()(i) = alphabet[rng() % 6];
    const RefResult ref = RefMedianPool<T>(cfg, x);
    auto y = RunOp(kOp, cfg.Attrs(), {x});
    ASSERT_TRUE(y.ok()) << y.status();
    for (int64_t o = 0; o < ref.shape.num_elements(); ++o) {
      const T got = (*y)[0].flat<T>()(o), want = x.flat<T>()(ref.arg[o]);
      ASSERT_EQ(std::memcmp(&got, &want, sizeof(T)), 0) << cfg.ToString() << " output " << o;
    }
  }
}

// ---- The 3x3 selection network against the general selection and a full sort. ----

template <typename T>
void ExpectNetworkAgrees(const T (&values)[9]) {
  using Key = functor::median_pool_internal::WindowKey<T>;
  typename Key::type keys[9];
  std::vector<std::pair<double, int64_t>> sorted;
  for (int i = 0; i < 9; ++i) {
    keys[i] = Key::Make(values[i], i);
    sorted.push_back({static_cast<double>(values[i]), i});
  }
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return !std::isnan(a.first) && (std::isnan(b.first) || a.first < b.first);
  });
  ASSERT_EQ(functor::median_pool_internal::LowerMedian9(values), sorted[4].second);
  ASSERT_EQ(functor::median_pool_internal::LowerMedianSelect<T>(keys, 9), sorted[4].second);
}

TEST(MedianPoolSelection, NetworkMatchesOnEveryPermutationOfDistinctValues) {
  double values[9] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  int64_t count = 0;
  do {
    ExpectNetworkAgrees(values);
    if (::testing::Test::HasFatalFailure()) return;
    ++count;
  } while (std::next_permutation(values, values + 9));
  EXPECT_EQ(count, 362880);
}

TEST(MedianPoolSelection, NetworkMatchesOnEveryWindowOfThreeValuesIncludingNaN) {
  // All 3^9 windows over {0, 1, 2} (ties everywhere), over {-0, +0, NaN} (equal zeros, NaN
  // payloads and signs) and over {-inf, 1, -NaN}, in both dtypes.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const double alphabets[3][3] = {{0, 1, 2}, {-0.0, 0.0, nan}, {-inf, 1, -nan}};
  for (const auto& alphabet : alphabets) {
    for (int code = 0; code < 19683; ++code) {
      double values[9];
      float fvalues[9];
      for (int i = 0, c = code; i < 9; ++i, c /= 3) {
        values[i] = alphabet[c % 3];
        fvalues[i] = static_cast<float>(values[i]);
      }
      ExpectNetworkAgrees(values);
      ExpectNetworkAgrees(fvalues);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(MedianPoolSelection, GeneralSelectionMatchesFullSortOnLargerWindows) {
  std::mt19937 rng(3);
  for (int64_t m : {1, 2, 3, 4, 8, 16, 25, 32, 33, 49, 100}) {  // rank count, nth_element
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<float> v(m);
      std::vector<uint64_t> keys(m);
      std::vector<std::pair<double, int64_t>> sorted;
      for (int64_t i = 0; i < m; ++i) {
        v[i] = rng() % 7 == 0 ? std::numeric_limits<float>::quiet_NaN()
                              : static_cast<float>(rng() % 5) - 2.f;
        keys[i] = functor::median_pool_internal::WindowKey<float>::Make(v[i], i);
        sorted.push_back({v[i], i});
      }
      std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
        return !std::isnan(a.first) && (std::isnan(b.first) || a.first < b.first);
      });
      ASSERT_EQ(functor::median_pool_internal::LowerMedianSelect<float>(keys.data(), m),
                sorted[(m - 1) / 2].second)
          << "m=" << m;
    }
  }
}

TEST(MedianPoolSelection, EqualValuesRankInRowMajorOrder) {
  // Through the op: a 3x3 VALID window (fast path) and the same window under SAME, where the
  // centre window is whole but its neighbours are clipped (general path). Equal values rank in
  // row-major order and the element of rank 4 is taken:
  //   {5,1,1,1,9,1,5,5,5} sorts 1(1) 1(2) 1(3) 1(5) [5(0)] 5(6) 5(7) 5(8) 9(4) -> index 0;
  //   {2,1,2,2,9,0,2,7,8} sorts 0(5) 1(1) 2(0) 2(2) [2(3)] 2(6) 7(7) 8(8) 9(4) -> index 3,
  // i.e. not the first 2: the rule is the stable sort's rank, not "first equal value".
  const std::vector<std::pair<std::vector<float>, int64_t>> cases = {
      {{5, 1, 1, 1, 9, 1, 5, 5, 5}, 0}, {{2, 1, 2, 2, 9, 0, 2, 7, 8}, 3}};
  for (const auto& [values, want] : cases) {
    Tensor x(DT_FLOAT, TensorShape({1, 3, 3, 1}));
    std::copy(values.begin(), values.end(), x.flat<float>().data());
    for (const char* padding : {"VALID", "SAME"}) {
      const bool valid = padding == std::string("VALID");
      Tensor dy(DT_FLOAT, valid ? TensorShape({1, 1, 1, 1}) : TensorShape({1, 3, 3, 1}));
      dy.flat<float>().setZero();
      dy.flat<float>()(dy.NumElements() / 2) = 1.f;  // only the centred window
      const OpAttrs attrs = {{"ksize", std::vector<int64_t>{3, 3}},
                             {"strides", std::vector<int64_t>{1, 1}},
                             {"padding", padding}};
      auto dx = RunOp(kGradOp, attrs, {x, dy});
      ASSERT_TRUE(dx.ok()) << dx.status();
      for (int64_t i = 0; i < 9; ++i) {
        EXPECT_EQ((*dx)[0].flat<float>()(i), i == want ? 1.f : 0.f) << padding << " " << i;
      }
      auto y = RunOp(kOp, attrs, {x});
      ASSERT_TRUE(y.ok()) << y.status();
      EXPECT_EQ((*y)[0].flat<float>()(dy.NumElements() / 2), values[want]) << padding;
    }
  }
}

TEST(MedianPoolSelection, EvenCountTakesTheLowerMedian) {
  Tensor x(DT_DOUBLE, TensorShape({1, 2, 2, 1}));
  x.flat<double>().setValues({4, 1, 3, 2});
  auto y = RunOp(kOp, {{"ksize", std::vector<int64_t>{2, 2}},
                       {"strides", std::vector<int64_t>{1, 1}},
                       {"padding", "VALID"}},
                 {x});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ((*y)[0].flat<double>()(0), 2.0);
}

// ---- Shape function. ----

absl::StatusOr<PartialTensorShape> InferShape(const std::string& op, const OpAttrs& attrs,
                                              const std::vector<PartialTensorShape>& inputs,
                                              DataType dtype = DT_FLOAT) {
  const OpRegistrationData* reg = nullptr;
  TF_RETURN_IF_ERROR(OpRegistry::Global()->LookUp(op, &reg));
  NodeDef def;
  def.set_name("op");
  def.set_op(op);
  for (const auto& [name, value] : attrs) (*def.mutable_attr())[name] = value.proto;
  (*def.mutable_attr())["T"].set_type(dtype);
  AddDefaultsToNodeDef(reg->op_def, &def);
  shape_inference::InferenceContext c(TF_GRAPH_DEF_VERSION, AttrSlice(def), reg->op_def, inputs,
                                      std::vector<const Tensor*>(inputs.size(), nullptr), {},
                                      {});
  TF_RETURN_IF_ERROR(c.Run(reg->shape_inference_fn));
  TensorShapeProto proto;
  c.ShapeHandleToProto(c.output(0), &proto);
  return PartialTensorShape(proto);
}

TEST(MedianPoolShapeFn, ComputesKnownDimsAndKeepsUnknownOnes) {
  const OpAttrs same = {{"ksize", std::vector<int64_t>{3, 2}},
                        {"strides", std::vector<int64_t>{2, 3}},
                        {"padding", "SAME"}};
  const OpAttrs valid = {{"ksize", std::vector<int64_t>{3, 2}},
                         {"strides", std::vector<int64_t>{2, 3}},
                         {"padding", "VALID"}};
  struct Case {
    OpAttrs attrs;
    PartialTensorShape in, want;
  };
  const std::vector<Case> cases = {
      {same, PartialTensorShape({4, 7, 8, 3}), PartialTensorShape({4, 4, 3, 3})},
      {valid, PartialTensorShape({4, 7, 8, 3}), PartialTensorShape({4, 3, 3, 3})},
      {valid, PartialTensorShape({4, 2, 1, 3}), PartialTensorShape({4, 0, 0, 3})},
      {same, PartialTensorShape({-1, 7, -1, 3}), PartialTensorShape({-1, 4, -1, 3})},
      {same, PartialTensorShape({0, 0, 1, 2}), PartialTensorShape({0, 0, 1, 2})},
      {same, PartialTensorShape(), PartialTensorShape({-1, -1, -1, -1})},
  };
  for (const Case& k : cases) {
    auto got = InferShape(kOp, k.attrs, {k.in});
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(got->IsIdenticalTo(k.want)) << k.in.DebugString() << " -> " << got->DebugString();
    // The grad op's dx is x's shape; its dy must match the forward output.
    auto dx = InferShape(kGradOp, k.attrs, {k.in, k.want});
    ASSERT_TRUE(dx.ok()) << dx.status();
    EXPECT_TRUE(dx->IsCompatibleWith(k.in)) << dx->DebugString();
    EXPECT_EQ(dx->dims(), 4);
  }
  auto bad_dy = InferShape(kGradOp, same, {PartialTensorShape({4, 7, 8, 3}),
                                           PartialTensorShape({4, 7, 8, 3})});
  ExpectInvalidArgument(bad_dy.status(), kGradOp, {"[4,7,8,3]"});
}

// ---- Validation: every path (shape fn via a Session with static shapes, the kernel
// constructor/Compute directly) fails with InvalidArgument naming the op and the value. ----

TEST(MedianPoolValidation, RejectsBadKsizeAndStrides) {
  Tensor x = MakeInput<float>(TensorShape({1, 4, 4, 1}), Fill::kDistinct, 3);
  Tensor dy = MakeInput<float>(TensorShape({1, 4, 4, 1}), Fill::kDistinct, 4);
  struct Case {
    std::vector<int64_t> ksize, strides;
    std::vector<std::string> fragments;
  };
  const std::vector<Case> cases = {
      {{3}, {1, 1}, {"ksize", "[3]"}},
      {{1, 2, 3}, {1, 1}, {"ksize", "[1, 2, 3]"}},
      {{3, 0}, {1, 1}, {"ksize", "[3, 0]"}},
      {{-2, 3}, {1, 1}, {"ksize", "[-2, 3]"}},
      {{3, 3000000000}, {1, 1}, {"ksize", "[3, 3000000000]"}},
      {{3, 3}, {0, 1}, {"strides", "[0, 1]"}},
      {{3, 3}, {2}, {"strides", "[2]"}},
      {{3, 3}, {}, {"strides", "[]"}},
  };
  for (const Case& k : cases) {
    const OpAttrs attrs = {{"ksize", k.ksize}, {"strides", k.strides}, {"padding", "SAME"}};
    SCOPED_TRACE(absl::StrCat("ksize [", absl::StrJoin(k.ksize, ","), "] strides [",
                              absl::StrJoin(k.strides, ","), "]"));
    for (RunPath path : {RunPath::kSessionConstants, RunPath::kKernel}) {
      ExpectInvalidArgument(RunOp(kOp, attrs, {x}, {path}).status(), kOp, k.fragments);
      ExpectInvalidArgument(RunOp(kGradOp, attrs, {x, dy}, {path}).status(), kGradOp,
                            k.fragments);
    }
  }
}

TEST(MedianPoolValidation, RejectsInputsThatAreNotRank4) {
  const OpAttrs attrs = Configs()[0].Attrs();
  for (const TensorShape& shape :
       {TensorShape({4, 4, 1}), TensorShape({}), TensorShape({1, 4, 4, 1, 1})}) {
    Tensor x(DT_FLOAT, shape);
    x.flat<float>().setZero();
    const std::string shown = shape.DebugString();
    for (RunPath path : {RunPath::kSessionFed, RunPath::kSessionConstants}) {
      ExpectInvalidArgument(RunOp(kOp, attrs, {x}, {path}).status(), kOp, {"rank 4", shown});
    }
    ExpectInvalidArgument(RunOp(kOp, attrs, {x}, {RunPath::kKernel}).status(), kOp,
                          {"rank 4", shown});
    ExpectInvalidArgument(RunOp(kGradOp, attrs, {x, x}, {RunPath::kKernel}).status(), kGradOp,
                          {"rank 4", shown});
  }
}

TEST(MedianPoolValidation, RejectsUnknownPadding) {
  Tensor x = MakeInput<float>(TensorShape({1, 4, 4, 1}), Fill::kDistinct, 3);
  const OpAttrs attrs = {{"ksize", std::vector<int64_t>{2, 2}},
                         {"strides", std::vector<int64_t>{1, 1}},
                         {"padding", "FULL"}};
  // TensorFlow's NodeDef check against the OpDef's enum rejects it on every path (even the
  // bare kernel is validated before its constructor runs), so the message is TensorFlow's:
  // "Value for attr 'padding' of "FULL" is not in the list ...; NodeDef: ...; Op<name=...>",
  // not the project's "<op>: ..." (ExpectInvalidArgument does not apply).
  for (RunPath path : {RunPath::kSessionFed, RunPath::kKernel}) {
    const absl::Status s = RunOp(kOp, attrs, {x}, {path}).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), kOp)) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "FULL")) << s;
  }
}

TEST(MedianPoolValidation, GradRejectsDyOfTheWrongShape) {
  const Config cfg{1, 5, 5, 2, 3, 3, 2, 2, "VALID"};  // forward output [1,2,2,2]
  Tensor x = MakeInput<double>(cfg.InputShape(), Fill::kDistinct, 5);
  for (const TensorShape& bad :
       {TensorShape({1, 5, 5, 2}), TensorShape({1, 2, 2, 3}), TensorShape({8})}) {
    Tensor dy(DT_DOUBLE, bad);
    dy.flat<double>().setZero();
    auto direct = RunOp(kGradOp, cfg.Attrs(), {x, dy}, {RunPath::kKernel});
    ExpectInvalidArgument(direct.status(), kGradOp, {"[1,2,2,2]", bad.DebugString()});
    ExpectInvalidArgument(RunOp(kGradOp, cfg.Attrs(), {x, dy}).status(), kGradOp,
                          {bad.DebugString()});
    ExpectInvalidArgument(
        RunOp(kGradOp, cfg.Attrs(), {x, dy}, {RunPath::kSessionConstants}).status(), kGradOp,
        {"[1,2,2,2]"});
  }
}

TEST(MedianPool, EveryDeclaredTypeHasACpuKernel) {
  const OpDef* def = nullptr;
  ASSERT_TRUE(OpRegistry::Global()->LookUpOpDef(kOp, &def).ok());
  const auto& types = def->attr(0).allowed_values().list().type();
  ASSERT_EQ(def->attr(0).name(), "T");
  ASSERT_GT(types.size(), 0);
  for (int t : types) {
    Tensor x(static_cast<DataType>(t), TensorShape({1, 2, 2, 1}));
    memset(x.data(), 0, x.TotalBytes());
    EXPECT_TRUE(RunOp(kOp, Configs()[0].Attrs(), {x}, {RunPath::kKernel}).ok())
        << DataTypeString(x.dtype());
    Tensor dy(static_cast<DataType>(t), TensorShape({1, 0, 0, 1}));
    EXPECT_TRUE(RunOp(kGradOp, Configs()[0].Attrs(), {x, dy}, {RunPath::kKernel}).ok())
        << DataTypeString(x.dtype());
  }
}

// ---- Gradient against the numeric Jacobian. ----

// Distinct, well separated values (a random permutation of 0.1 k): each median keeps its
// place under the finite-difference step, so the numeric Jacobian is the exact one.
template <typename T>
Tensor SeparatedInput(const TensorShape& shape, uint32_t seed) {
  Tensor t(DataTypeToEnum<T>::value, shape);
  std::vector<int64_t> perm(t.NumElements());
  std::iota(perm.begin(), perm.end(), 1);
  std::mt19937 rng(seed);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    t.flat<T>()(i) = static_cast<T>(0.1 * static_cast<double>(perm[i]) - 1.0);
  }
  return t;
}

TYPED_TEST(MedianPoolTyped, GradientMatchesNumericJacobian) {
  const double tol = std::is_same_v<TypeParam, double> ? 1e-6 : 1e-3;
  const std::vector<Config> configs = {
      {1, 4, 4, 1, 3, 3, 1, 1, "SAME"},   {2, 5, 4, 2, 2, 2, 1, 1, "VALID"},
      {1, 3, 3, 2, 3, 3, 1, 1, "VALID"},  {1, 1, 1, 1, 1, 1, 1, 1, "VALID"},
      {1, 2, 3, 1, 5, 5, 1, 1, "SAME"},   {2, 6, 7, 3, 3, 2, 2, 3, "SAME"},
      {1, 7, 7, 2, 3, 3, 1, 1, "SAME"},   {1, 12, 12, 4, 3, 3, 1, 1, "SAME"},  // > 512 rows
  };
  uint32_t seed = 11;
  for (const Config& cfg : configs) {
    Tensor x = SeparatedInput<TypeParam>(cfg.InputShape(), seed++);
    GradientCheckResult r;
    absl::Status s = CheckGradient(kOp, cfg.Attrs(), {x}, GradientCheckOptions(), &r);
    ASSERT_TRUE(s.ok()) << cfg.ToString() << ": " << s;
    EXPECT_TRUE(r.Passed(tol)) << cfg.ToString() << ": " << r.ToString();
    EXPECT_EQ(r.columns, x.NumElements()) << cfg.ToString();
    EXPECT_GT(r.rows, 0) << cfg.ToString();
  }
}

TEST(MedianPoolGrad, EmptyBatchGivesEmptyGradient) {
  const Config cfg{0, 5, 5, 3, 3, 3, 1, 1, "SAME"};
  Tensor x(DT_FLOAT, cfg.InputShape());
  Tensor dy(DT_FLOAT, TensorShape({0, 5, 5, 3}));
  auto g = RunSymbolicGradient(kOp, cfg.Attrs(), {x}, {dy});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)[0].shape(), x.shape());
}

TEST(MedianPoolGrad, GradOpIsNotDifferentiable) {
  const Config cfg = Configs()[0];
  Tensor x = MakeInput<float>(cfg.InputShape(), Fill::kDistinct, 1);
  Tensor dy = MakeDy<float>(TensorShape({2, 5, 4, 3}), 2);
  auto g = RunSymbolicGradient(kGradOp, cfg.Attrs(), {x, dy}, {x});
  ASSERT_FALSE(g.ok());
}

}  // namespace
}  // namespace tensorflow::tf_ext::test
