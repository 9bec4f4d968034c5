// TfExt>PsRoiAlign and TfExt>PsRoiAlignGrad: forward and backward against a naive reference per
// dtype, hand-computed cases, adaptive sampling, huge ROIs, validation, and the FDH gradient
// (SymbolicGradient + numeric Jacobian).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tests/roi_test_util.h"
#include "tests/test_util.h"
#include "tf_ext/testing/gradient_checker.h"
#include "tf_ext/testing/op_runner.h"

namespace tensorflow::tf_ext::test {
namespace {

constexpr char kOp[] = "TfExt>PsRoiAlign";
constexpr char kGradOp[] = "TfExt>PsRoiAlignGrad";

struct Config {
  int64_t n, h, w, d, ph, pw;
  float scale;
  int64_t sampling_ratio;
  int64_t num_rois;
};

OpAttrs Attrs(int64_t ph, int64_t pw, float scale, int64_t sampling_ratio) {
  return {{"pooled_height", ph},
          {"pooled_width", pw},
          {"spatial_scale", scale},
          {"sampling_ratio", sampling_ratio}};
}
OpAttrs Attrs(const Config& c) { return Attrs(c.ph, c.pw, c.scale, c.sampling_ratio); }
TensorShape FeatureShape(const Config& c) {
  return TensorShape({c.n, c.h, c.w, c.d * c.ph * c.pw});
}

// The op as a sparse linear map: output[out] = sum of weight * features[in] over its taps.
struct Tap {
  int64_t out, in;
  double weight;
};

// The reference: R-FCN PSROIAlign with Detectron's bilinear rule, visiting every sample of every
// bin (no range restriction), in NHWC. Sample positions are computed in T like the op; the
// interpolation and sums in double.
template <typename T>
std::vector<Tap> ReferenceTaps(const TensorShape& features, const Tensor& rois, int64_t ph,
                               int64_t pw, float scale, int64_t sampling_ratio) {
  const int64_t H = features.dim_size(1), W = features.dim_size(2), C = features.dim_size(3);
  const int64_t D = C / (ph * pw);
  auto b = rois.matrix<float>();
  std::vector<Tap> taps;
  for (int64_t r = 0; r < rois.dim_size(0); ++r) {
    const int64_t n = static_cast<int64_t>(b(r, 0));
    const T x1 = T(b(r, 1)) * T(scale), y1 = T(b(r, 2)) * T(scale);
    const T x2 = T(b(r, 3)) * T(scale), y2 = T(b(r, 4)) * T(scale);
    const T roi_w = std::max(x2 - x1, T(1)), roi_h = std::max(y2 - y1, T(1));
    const T bin_h = roi_h / T(ph), bin_w = roi_w / T(pw);
    const int64_t gh = sampling_ratio > 0 ? sampling_ratio : static_cast<int64_t>(std::ceil(bin_h));
    const int64_t gw = sampling_ratio > 0 ? sampling_ratio : static_cast<int64_t>(std::ceil(bin_w));
    const double count = static_cast<double>(gh * gw);
    for (int64_t i = 0; i < ph; ++i) {
      for (int64_t j = 0; j < pw; ++j) {
        for (int64_t iy = 0; iy < gh; ++iy) {
          const T y = y1 + T(i) * bin_h + (T(iy) + T(0.5)) * bin_h / T(gh);
          for (int64_t ix = 0; ix < gw; ++ix) {
            const T x = x1 + T(j) * bin_w + (T(ix) + T(0.5)) * bin_w / T(gw);
            if (y < -1 || y > H || x < -1 || x > W) continue;  // reads 0, still counted
            double yy = std::max<double>(y, 0), xx = std::max<double>(x, 0);
            int64_t yl = static_cast<int64_t>(yy), xl = static_cast<int64_t>(xx), yh, xh;
            if (yl >= H - 1) {
              yl = yh = H - 1;
              yy = static_cast<double>(yl);
            } else {
              yh = yl + 1;
            }
            if (xl >= W - 1) {
              xl = xh = W - 1;
              xx = static_cast<double>(xl);
            } else {
              xh = xl + 1;
            }
            const double ly = yy - yl, lx = xx - xl;
            const int64_t py[4] = {yl, yl, yh, yh}, px[4] = {xl, xh, xl, xh};
            const double w[4] = {(1 - ly) * (1 - lx), (1 - ly) * lx, ly * (1 - lx), ly * lx};
            for (int64_t d = 0; d < D; ++d) {
              const int64_t out = ((r * ph + i) * pw + j) * D + d;
              const int64_t channel = (d * ph + i) * pw + j;
              for (int k = 0; k < 4; ++k) {
                taps.push_back({out, ((n * H + py[k]) * W + px[k]) * C + channel, w[k] / count});
              }
            }
          }
        }
      }
    }
  }
  return taps;
}

template <typename T>
std::vector<double> ReferenceForward(const Tensor& features, const Tensor& rois, int64_t ph,
                                     int64_t pw, float scale, int64_t sampling_ratio) {
  const int64_t D = features.dim_size(3) / (ph * pw);
  std::vector<double> out(rois.dim_size(0) * ph * pw * D, 0.0);
  for (const Tap& t : ReferenceTaps<T>(features.shape(), rois, ph, pw, scale, sampling_ratio)) {
    out[t.out] += t.weight * static_cast<double>(features.flat<T>()(t.in));
  }
  return out;
}

template <typename T>
std::vector<double> ReferenceBackward(const Tensor& features, const Tensor& rois,
                                      const Tensor& d_output, int64_t ph, int64_t pw, float scale,
                                      int64_t sampling_ratio) {
  std::vector<double> d(features.NumElements(), 0.0);
  for (const Tap& t : ReferenceTaps<T>(features.shape(), rois, ph, pw, scale, sampling_ratio)) {
    d[t.in] += t.weight * static_cast<double>(d_output.flat<T>()(t.out));
  }
  return d;
}

// float: sample positions differ from the double reference in the last bits.
template <typename T>
double Tolerance() {
  return std::is_same_v<T, float> ? 2e-5 : 1e-12;
}

template <typename T>
void ExpectNear(const Tensor& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.NumElements(), static_cast<int64_t>(want.size())) << what;
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_NEAR(static_cast<double>(got.flat<T>()(k)), want[k],
                Tolerance<T>() * (1 + std::abs(want[k])))
        << what << " element " << k;
  }
}

template <typename T>
void ExpectMatchesReference(const Tensor& features, const Tensor& rois, const Config& c,
                            const std::string& what) {
  const std::vector<double> want =
      ReferenceForward<T>(features, rois, c.ph, c.pw, c.scale, c.sampling_ratio);
  for (RunPath path : {RunPath::kSessionFed, RunPath::kSessionConstants}) {
    auto out = RunOp(kOp, Attrs(c), {features, rois}, {path});
    ASSERT_TRUE(out.ok()) << what << ": " << out.status();
    ASSERT_EQ(out->size(), 1u);
    ASSERT_EQ((*out)[0].shape(),
              TensorShape({rois.dim_size(0), c.ph, c.pw, features.dim_size(3) / (c.ph * c.pw)}));
    ASSERT_EQ((*out)[0].dtype(), DataTypeToEnum<T>::value);
    ExpectNear<T>((*out)[0], want, what);
  }
}

template <typename T>
class PsRoiAlignTyped : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(PsRoiAlignTyped, FloatTypes);

TYPED_TEST(PsRoiAlignTyped, MatchesReferenceOnRandomRois) {
  std::mt19937 rng(21);
  const std::vector<Config> configs = {
      {1, 6, 8, 2, 2, 2, 1.0f, 2, 10},   {2, 7, 5, 3, 3, 2, 0.5f, 1, 12},
      {2, 9, 11, 1, 3, 3, 0.25f, 0, 9},  {1, 5, 5, 4, 1, 1, 1.0f, 3, 6},
      {3, 8, 6, 2, 2, 3, 0.125f, 0, 15}, {1, 12, 12, 2, 7, 7, 1.0f, 0, 5},
  };
  for (const Config& c : configs) {
    Tensor features = UniformValues<TypeParam>(FeatureShape(c), &rng);
    Tensor rois = RandomRois(&rng, c.num_rois, c.n, c.h / c.scale, c.w / c.scale);
    ExpectMatchesReference<TypeParam>(
        features, rois, c,
        absl::StrCat("config ", FeatureShape(c).DebugString(), " sr=", c.sampling_ratio));
  }
}

TYPED_TEST(PsRoiAlignTyped, MatchesReferenceOnLargeInputAcrossThreads) {
  // Enough bins, images and channels for both passes to be split across shards.
  std::mt19937 rng(23);
  for (int64_t sampling_ratio : {2, 0}) {
    const Config c{3, 20, 18, 8, 3, 3, 0.5f, sampling_ratio, 48};
    Tensor features = UniformValues<TypeParam>(FeatureShape(c), &rng);
    Tensor rois = RandomRois(&rng, c.num_rois, c.n, c.h / c.scale, c.w / c.scale);
    ExpectMatchesReference<TypeParam>(features, rois, c, "large");
    Tensor d_output = UniformValues<TypeParam>(TensorShape({c.num_rois, c.ph, c.pw, c.d}), &rng);
    auto grad = RunOp(kGradOp, Attrs(c), {features, rois, d_output});
    ASSERT_TRUE(grad.ok()) << grad.status();
    ASSERT_EQ((*grad)[0].shape(), features.shape());
    ExpectNear<TypeParam>((*grad)[0],
                          ReferenceBackward<TypeParam>(features, rois, d_output, c.ph, c.pw,
                                                       c.scale, c.sampling_ratio),
                          "large backward");
  }
}

TYPED_TEST(PsRoiAlignTyped, BinReadsItsPositionSensitiveChannel) {
  // Channel k holds the constant k, so every bin of every ROI inside the image averages to the
  // index of the channel it reads: (d * ph + i) * pw + j.
  const int64_t ph = 2, pw = 3, D = 2;
  Tensor features(DataTypeToEnum<TypeParam>::value, TensorShape({1, 6, 7, D * ph * pw}));
  for (int64_t k = 0; k < features.NumElements(); ++k) {
    features.flat<TypeParam>()(k) = TypeParam(k % (D * ph * pw));
  }
  auto out = RunOp(kOp, Attrs(ph, pw, 1.0f, 2), {features, Rois({{0, 0.5f, 1, 5.5f, 4.2f}})});
  ASSERT_TRUE(out.ok()) << out.status();
  auto o = (*out)[0].tensor<TypeParam, 4>();
  for (int64_t i = 0; i < ph; ++i) {
    for (int64_t j = 0; j < pw; ++j) {
      for (int64_t d = 0; d < D; ++d) {
        EXPECT_NEAR(o(0, i, j, d), TypeParam((d * ph + i) * pw + j), 1e-5) << i << j << d;
      }
    }
  }
}

TYPED_TEST(PsRoiAlignTyped, SamplesOutsideTheImageCountAsZero) {
  // All-ones 4x4 image, one bin. ROI x in [-6, 2] (8 wide), y in [0, 2].
  Tensor ones = Filled<TypeParam>(TensorShape({1, 4, 4, 1}), TypeParam(1));
  Tensor rois = Rois({{0, -6, 0, 2, 2}, {0, -20, -20, -10, -10}, {0, 0.5f, 0.5f, 3, 3}});
  // sampling_ratio 2: x samples at -4 (outside) and 0 (inside): half the samples read 1.
  auto fixed = RunOp(kOp, Attrs(1, 1, 1.0f, 2), {ones, rois});
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_NEAR((*fixed)[0].flat<TypeParam>()(0), 0.5, 1e-6);
  EXPECT_EQ((*fixed)[0].flat<TypeParam>()(1), TypeParam(0));  // fully outside
  EXPECT_NEAR((*fixed)[0].flat<TypeParam>()(2), 1.0, 1e-6);   // fully inside
  // Adaptive: grid ceil(8) x ceil(2); x samples at -5.5, ..., 1.5, of which -0.5, 0.5 and 1.5
  // lie in [-1, W]: 3 of 8.
  auto adaptive = RunOp(kOp, Attrs(1, 1, 1.0f, 0), {ones, rois});
  ASSERT_TRUE(adaptive.ok()) << adaptive.status();
  EXPECT_NEAR((*adaptive)[0].flat<TypeParam>()(0), 3.0 / 8.0, 1e-6);
}

TYPED_TEST(PsRoiAlignTyped, HugeRoiWithAdaptiveSamplingMatchesReference) {
  // A 2000-pixel ROI on a 3x5 map: 1000 x 1000 adaptive samples per bin, nearly all outside.
  std::mt19937 rng(29);
  const Config c{1, 3, 5, 2, 2, 2, 1.0f, 0, 2};
  Tensor features = UniformValues<TypeParam>(FeatureShape(c), &rng);
  Tensor rois = Rois({{0, -1000, -1200, 1000, 800}, {0, 1.5f, -998.3f, 3.5f, 1001.1f}});
  ExpectMatchesReference<TypeParam>(features, rois, c, "huge");
}

TYPED_TEST(PsRoiAlignTyped, AbsurdRoiFinishesAndStaysBounded) {
  // 4e8 x 4e8 samples per bin if every sample were visited; the op visits only those that
  // read the image (this test would time out otherwise).
  Tensor ones = Filled<TypeParam>(TensorShape({1, 4, 4, 1}), TypeParam(1));
  auto out = RunOp(kOp, Attrs(1, 1, 1.0f, 0), {ones, Rois({{0, -4e8f, -4e8f, 4e8f, 4e8f}})});
  ASSERT_TRUE(out.ok()) << out.status();
  const double v = (*out)[0].flat<TypeParam>()(0);
  EXPECT_GT(v, 0.0);
  EXPECT_LT(v, 1e-12);
}

TYPED_TEST(PsRoiAlignTyped, OneByOneImage) {
  std::mt19937 rng(31);
  const Config c{2, 1, 1, 3, 2, 2, 1.0f, 2, 4};
  Tensor features = UniformValues<TypeParam>(FeatureShape(c), &rng);
  Tensor rois = Rois({{1, 0, 0, 0, 0}, {0, -1, -1, 2, 2}, {1, -0.5f, -0.5f, 0.5f, 0.5f},
                      {0, 0.2f, 0.3f, 0.1f, 0.1f}});
  ExpectMatchesReference<TypeParam>(features, rois, c, "1x1");
  // ROI 0 = [0, 1] x [0, 1]: samples at 0.25 and 0.75 clamp to the single pixel.
  auto out = RunOp(kOp, Attrs(c), {features, rois});
  ASSERT_TRUE(out.ok()) << out.status();
  auto o = (*out)[0].tensor<TypeParam, 4>();
  auto f = features.tensor<TypeParam, 4>();
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 2; ++j) {
      for (int64_t d = 0; d < 3; ++d) {
        EXPECT_NEAR(o(0, i, j, d), f(1, 0, 0, (d * 2 + i) * 2 + j), 1e-6);
      }
    }
  }
}

TYPED_TEST(PsRoiAlignTyped, EmptyRoisAndEmptyBatch) {
  std::mt19937 rng(37);
  struct Case {
    TensorShape features;
    int64_t num_rois;
  };
  // R = 0; N = 0 (then R must be 0); D = 0 with ROIs; H = W = 0 with ROIs.
  for (const Case& k : {Case{TensorShape({2, 4, 4, 8}), 0}, Case{TensorShape({0, 4, 4, 8}), 0},
                        Case{TensorShape({2, 4, 4, 0}), 3}, Case{TensorShape({1, 0, 0, 4}), 2}}) {
    Tensor features = UniformValues<TypeParam>(k.features, &rng);
    Tensor rois = RandomRois(&rng, k.num_rois, std::max<int64_t>(k.features.dim_size(0), 1), 4, 4);
    for (RunPath path : {RunPath::kSessionFed, RunPath::kSessionConstants}) {
      auto out = RunOp(kOp, Attrs(2, 2, 1.0f, 2), {features, rois}, {path});
      ASSERT_TRUE(out.ok()) << k.features.DebugString() << ": " << out.status();
      EXPECT_EQ((*out)[0].shape(),
                TensorShape({k.num_rois, 2, 2, k.features.dim_size(3) / 4}));
      for (int64_t e = 0; e < (*out)[0].NumElements(); ++e) {
        EXPECT_EQ((*out)[0].flat<TypeParam>()(e), TypeParam(0));  // H = W = 0: nothing to read
      }
      auto grad = RunOp(kGradOp, Attrs(2, 2, 1.0f, 2), {features, rois, (*out)[0]},
                        {path});
      ASSERT_TRUE(grad.ok()) << grad.status();
      EXPECT_EQ((*grad)[0].shape(), k.features);
      for (int64_t e = 0; e < (*grad)[0].NumElements(); ++e) {
        EXPECT_EQ((*grad)[0].flat<TypeParam>()(e), TypeParam(0));
      }
    }
  }
}

TYPED_TEST(PsRoiAlignTyped, SymbolicGradientOfFeaturesAndRois) {
  std::mt19937 rng(41);
  const Config c{2, 5, 6, 2, 2, 2, 0.5f, 0, 5};
  Tensor features = UniformValues<TypeParam>(FeatureShape(c), &rng);
  Tensor rois = RandomRois(&rng, c.num_rois, c.n, c.h / c.scale, c.w / c.scale);
  Tensor d_output = UniformValues<TypeParam>(TensorShape({c.num_rois, c.ph, c.pw, c.d}), &rng);
  auto g = RunSymbolicGradient(kOp, Attrs(c), {features, rois}, {d_output});
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->size(), 2u);
  ExpectNear<TypeParam>((*g)[0],
                        ReferenceBackward<TypeParam>(features, rois, d_output, c.ph, c.pw,
                                                     c.scale, c.sampling_ratio),
                        "symbolic gradient");
  ASSERT_EQ((*g)[1].shape(), rois.shape());
  for (int64_t k = 0; k < rois.NumElements(); ++k) EXPECT_EQ((*g)[1].flat<float>()(k), 0.f);
}

TYPED_TEST(PsRoiAlignTyped, GradientMatchesNumericJacobian) {
  const double tol = std::is_same_v<TypeParam, double> ? 1e-6 : 1e-3;
  std::mt19937 rng(43);
  const std::vector<Config> configs = {
      {1, 4, 5, 1, 2, 2, 1.0f, 2, 3},    // small: full Jacobian rows
      {2, 6, 7, 2, 3, 2, 0.5f, 0, 4},    // adaptive, several images
      {1, 1, 1, 2, 2, 2, 1.0f, 1, 2},    // 1x1 image
      {3, 8, 8, 4, 3, 3, 0.25f, 3, 6},   // > max_rows outputs: random projections
  };
  for (const Config& c : configs) {
    Tensor features = UniformValues<TypeParam>(FeatureShape(c), &rng);
    Tensor rois = RandomRois(&rng, c.num_rois, c.n, c.h / c.scale, c.w / c.scale);
    GradientCheckOptions options;
    options.non_differentiable_inputs = {"rois"};
    GradientCheckResult r;
    absl::Status s = CheckGradient(kOp, Attrs(c), {features, rois}, options, &r);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_TRUE(r.Passed(tol)) << r.ToString();
    EXPECT_GT(r.rows, 0);
    EXPECT_EQ(r.columns, features.NumElements());
  }
}

TEST(PsRoiAlign, RejectsChannelCountNotDivisibleByBins) {
  Tensor rois = Rois({{0, 0, 0, 3, 3}});
  Tensor features = Filled<float>(TensorShape({1, 4, 4, 10}), 1.f);
  ExpectInvalidArgument(RunOp(kOp, Attrs(2, 2, 1.0f, 2), {features, rois}).status(), kOp,
                        {"channel count of features (10)", "pooled_height * pooled_width = 4"});
  // Static shapes: the shape function reports it when the graph is built.
  ExpectInvalidArgument(RunOp(kOp, Attrs(2, 2, 1.0f, 2), {features, rois},
                              {RunPath::kSessionConstants})
                            .status(),
                        kOp, {"channel count of features (10)"});
  Tensor d_output = Filled<float>(TensorShape({1, 2, 2, 2}), 1.f);
  ExpectInvalidArgument(RunOp(kGradOp, Attrs(2, 2, 1.0f, 2), {features, rois, d_output}).status(),
                        kGradOp, {"channel count of features (10)"});
}

TEST(PsRoiAlign, RejectsBadBatchIndex) {
  Tensor features = Filled<float>(TensorShape({2, 4, 4, 4}), 1.f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (float bad : {2.5f, -1.f, 2.f, nan}) {
    Tensor rois = Rois({{1, 0, 0, 3, 3}, {0, 1, 1, 2, 2}, {bad, 0, 0, 3, 3}});
    const std::string value = absl::StrCat(bad);
    ExpectInvalidArgument(RunOp(kOp, Attrs(2, 2, 1.0f, 2), {features, rois}).status(),
                          kOp, {"rois[2]", "batch_index " + value, "[0, 2)"});
    Tensor d_output = Filled<float>(TensorShape({3, 2, 2, 1}), 1.f);
    ExpectInvalidArgument(
        RunOp(kGradOp, Attrs(2, 2, 1.0f, 2), {features, rois, d_output}).status(),
        kGradOp, {"rois[2]", "batch_index " + value});
  }
}

TEST(PsRoiAlign, RejectsWrongRanks) {
  Tensor rois = Rois({{0, 0, 0, 3, 3}});
  ExpectInvalidArgument(
      RunOp(kOp, Attrs(1, 1, 1.0f, 2), {Filled<float>(TensorShape({4, 4, 1}), 1.f), rois})
          .status(),
      kOp, {"features must have rank 4", "[4,4,1]"});
  Tensor features = Filled<float>(TensorShape({1, 4, 4, 1}), 1.f);
  ExpectInvalidArgument(
      RunOp(kOp, Attrs(1, 1, 1.0f, 2), {features, Filled<float>(TensorShape({1, 5, 1}), 0.f)})
          .status(),
      kOp, {"rois must have shape [num_rois, 5]", "[1,5,1]"});
  ExpectInvalidArgument(
      RunOp(kOp, Attrs(1, 1, 1.0f, 2), {features, Filled<float>(TensorShape({3, 6}), 0.f)})
          .status(),
      kOp, {"rois must have shape [num_rois, 5]", "[3,6]"});
}

// Valid inputs of `op` (kOp or kGradOp) with T = `dtype` for pooled 1x1: the bare kernel then
// fails only where its constructor (or the OpDef's attr constraints) does.
std::vector<Tensor> KernelInputs(const std::string& op, DataType dtype) {
  std::vector<Tensor> in = {Zeros(dtype, TensorShape({1, 4, 4, 1})), Rois({{0, 0, 0, 3, 3}})};
  if (op == kGradOp) in.push_back(Zeros(dtype, TensorShape({1, 1, 1, 1})));
  return in;
}

TEST(PsRoiAlign, RejectsBadAttrs) {
  Tensor features = Filled<float>(TensorShape({1, 4, 4, 1}), 1.f);
  Tensor rois = Rois({{0, 0, 0, 3, 3}});
  for (float bad : {0.f, -2.f, std::numeric_limits<float>::infinity()}) {
    const std::string want = absl::StrCat(
        "spatial_scale must be a finite number > 0 (denormals count as 0), got ", bad);
    ExpectInvalidArgument(RunOp(kOp, Attrs(1, 1, bad, 2), {features, rois}).status(), kOp, {want});
    for (const char* op : {kOp, kGradOp}) {
      ExpectInvalidArgument(
          RunOp(op, Attrs(1, 1, bad, 2), KernelInputs(op, DT_DOUBLE), {RunPath::kKernel}).status(),
          op, {want});
    }
  }
  // sampling_ratio >= 0 and pooled sizes >= 1 are OpDef constraints, checked by TensorFlow.
  const std::vector<Tensor> in = KernelInputs(kOp, DT_FLOAT);
  EXPECT_EQ(RunOp(kOp, Attrs(1, 1, 1.0f, -1), in, {RunPath::kKernel}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunOp(kOp, Attrs(0, 1, 1.0f, 2), in, {RunPath::kKernel}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(RunOp(kOp, Attrs(1, 1, 1.0f, 0), in, {RunPath::kKernel}).ok());
}

TEST(PsRoiAlignGrad, RejectsMismatchedDOutput) {
  Tensor features = Filled<float>(TensorShape({1, 4, 4, 8}), 1.f);
  Tensor rois = Rois({{0, 0, 0, 3, 3}});
  ExpectInvalidArgument(
      RunOp(kGradOp, Attrs(2, 2, 1.0f, 2),
            {features, rois, Filled<float>(TensorShape({1, 2, 2, 3}), 1.f)})
          .status(),
      kGradOp, {"d_output must have shape", "[1,2,2,2]", "[1,2,2,3]"});
  ExpectInvalidArgument(
      RunOp(kGradOp, Attrs(2, 2, 1.0f, 2),
            {Filled<float>(TensorShape({4, 4, 8}), 1.f), rois,
             Filled<float>(TensorShape({1, 2, 2, 2}), 1.f)})
          .status(),
      kGradOp, {"features must have rank 4"});
}

}  // namespace
}  // namespace tensorflow::tf_ext::test
