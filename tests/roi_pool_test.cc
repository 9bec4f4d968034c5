// TfExt>RoiPool and TfExt>RoiPoolGrad: forward and backward against a naive reference per dtype,
// tie and edge-case semantics, validation, and the FDH gradient (SymbolicGradient + numeric
// Jacobian).
#define EIGEN_USE_THREADS

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tests/roi_test_util.h"
#include "tf_ext/kernels/roi_pool_functor.h"
#include "tests/test_util.h"
#include "tf_ext/testing/gradient_checker.h"
#include "tf_ext/testing/op_runner.h"

namespace tensorflow::tf_ext::test {
namespace {

constexpr char kOp[] = "TfExt>RoiPool";
constexpr char kGradOp[] = "TfExt>RoiPoolGrad";

struct Config {
  int64_t n, h, w, c, ph, pw;
  float scale;
  int64_t num_rois;
};

OpAttrs Attrs(int64_t ph, int64_t pw, float scale) {
  return {{"pooled_height", ph}, {"pooled_width", pw}, {"spatial_scale", scale}};
}
OpAttrs Attrs(const Config& c) { return Attrs(c.ph, c.pw, c.scale); }

// The reference: the Caffe RoIPool layer transcribed loop by loop (integer ROI corners, float
// bin sizes), NHWC.
template <typename T>
struct Reference {
  std::vector<T> pooled;
  std::vector<int32_t> argmax;
};

template <typename T>
Reference<T> ReferenceRoiPool(const Tensor& data, const Tensor& rois, int64_t ph, int64_t pw,
                              float scale) {
  const int64_t H = data.dim_size(1), W = data.dim_size(2), C = data.dim_size(3);
  const int64_t R = rois.dim_size(0);
  auto x = data.tensor<T, 4>();
  auto b = rois.matrix<float>();
  Reference<T> ref;
  for (int64_t r = 0; r < R; ++r) {
    const int n = static_cast<int>(b(r, 0));
    const int x1 = static_cast<int>(std::round(b(r, 1) * scale));
    const int y1 = static_cast<int>(std::round(b(r, 2) * scale));
    const int x2 = static_cast<int>(std::round(b(r, 3) * scale));
    const int y2 = static_cast<int>(std::round(b(r, 4) * scale));
    const int roi_w = std::max(x2 - x1 + 1, 1), roi_h = std::max(y2 - y1 + 1, 1);
    const float bin_h = static_cast<float>(roi_h) / static_cast<float>(ph);
    const float bin_w = static_cast<float>(roi_w) / static_cast<float>(pw);
    for (int64_t i = 0; i < ph; ++i) {
      for (int64_t j = 0; j < pw; ++j) {
        int hs = static_cast<int>(std::floor(static_cast<float>(i) * bin_h)) + y1;
        int he = static_cast<int>(std::ceil(static_cast<float>(i + 1) * bin_h)) + y1;
        int ws = static_cast<int>(std::floor(static_cast<float>(j) * bin_w)) + x1;
        int we = static_cast<int>(std::ceil(static_cast<float>(j + 1) * bin_w)) + x1;
        hs = std::min<int>(std::max(hs, 0), H);
        he = std::min<int>(std::max(he, 0), H);
        ws = std::min<int>(std::max(ws, 0), W);
        we = std::min<int>(std::max(we, 0), W);
        for (int64_t c = 0; c < C; ++c) {
          bool empty = true;
          T best = 0;
          int32_t arg = -1;
          for (int h = hs; h < he; ++h) {
            for (int w = ws; w < we; ++w) {
              if (empty || x(n, h, w, c) > best) {
                best = x(n, h, w, c);
                arg = h * static_cast<int>(W) + w;
                empty = false;
              }
            }
          }
          ref.pooled.push_back(empty ? T(0) : best);
          ref.argmax.push_back(arg);
        }
      }
    }
  }
  return ref;
}

// d(data) by the definition: every bin's d(pooled) added at its argmax.
template <typename T>
std::vector<double> ReferenceRoiPoolGrad(const Tensor& data, const Tensor& rois,
                                         const std::vector<int32_t>& argmax,
                                         const Tensor& d_pooled) {
  const int64_t H = data.dim_size(1), W = data.dim_size(2), C = data.dim_size(3);
  std::vector<double> d(data.NumElements(), 0.0);
  const int64_t per_roi = argmax.size() / std::max<int64_t>(rois.dim_size(0), 1);
  for (size_t k = 0; k < argmax.size(); ++k) {
    if (argmax[k] < 0) continue;
    const int64_t n = static_cast<int64_t>(rois.matrix<float>()(k / per_roi, 0));
    d[(n * H * W + argmax[k]) * C + k % C] += static_cast<double>(d_pooled.flat<T>()(k));
  }
  return d;
}

template <typename T>
void ExpectMatchesReference(const Tensor& data, const Tensor& rois, int64_t ph, int64_t pw,
                            float scale, const std::string& what) {
  const Reference<T> ref = ReferenceRoiPool<T>(data, rois, ph, pw, scale);
  for (RunPath path : {RunPath::kSessionFed, RunPath::kSessionConstants}) {
    auto out = RunOp(kOp, Attrs(ph, pw, scale), {data, rois}, {path});
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->size(), 2u);
    const TensorShape want({rois.dim_size(0), ph, pw, data.dim_size(3)});
    ASSERT_EQ((*out)[0].shape(), want);
    ASSERT_EQ((*out)[1].shape(), want);
    ASSERT_EQ((*out)[0].dtype(), DataTypeToEnum<T>::value);
    ASSERT_EQ((*out)[1].dtype(), DT_INT32);
    auto pooled = (*out)[0].flat<T>();
    auto argmax = (*out)[1].flat<int32_t>();
    for (int64_t k = 0; k < pooled.size(); ++k) {
      // A max is a selection, so the result is exact.
      ASSERT_EQ(pooled(k), ref.pooled[k]) << what << " element " << k;
      ASSERT_EQ(argmax(k), ref.argmax[k]) << what << " element " << k;
    }
  }
}

template <typename T>
class RoiPoolTyped : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(RoiPoolTyped, FloatTypes);

TYPED_TEST(RoiPoolTyped, MatchesReferenceOnRandomRois) {
  std::mt19937 rng(7);
  const std::vector<Config> configs = {
      {1, 6, 8, 3, 2, 2, 1.0f, 10},   {2, 7, 5, 4, 3, 2, 0.5f, 12},
      {3, 9, 11, 2, 7, 7, 0.25f, 9},  {2, 5, 5, 1, 1, 1, 1.0f, 6},
      {1, 4, 13, 5, 2, 5, 0.125f, 8}, {2, 10, 10, 3, 4, 3, 0.0625f, 20},
  };
  for (const Config& c : configs) {
    Tensor data = DistinctValues<TypeParam>(TensorShape({c.n, c.h, c.w, c.c}), &rng);
    Tensor rois = RandomRois(&rng, c.num_rois, c.n, c.h / c.scale, c.w / c.scale);
    ExpectMatchesReference<TypeParam>(data, rois, c.ph, c.pw, c.scale,
                                      absl::StrCat("config ", c.n, "x", c.h, "x", c.w, "x", c.c));
  }
}

TYPED_TEST(RoiPoolTyped, MatchesReferenceOnLargeInputAcrossThreads) {
  // Enough bins, images and channels for both passes to be split across shards.
  std::mt19937 rng(11);
  const Config c{3, 24, 20, 32, 7, 7, 0.5f, 64};
  Tensor data = UniformValues<TypeParam>(TensorShape({c.n, c.h, c.w, c.c}), &rng);
  Tensor rois = RandomRois(&rng, c.num_rois, c.n, c.h / c.scale, c.w / c.scale);
  ExpectMatchesReference<TypeParam>(data, rois, c.ph, c.pw, c.scale, "large");

  auto fwd = RunOp(kOp, Attrs(c), {data, rois});
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  Tensor d_pooled = UniformValues<TypeParam>((*fwd)[0].shape(), &rng);
  auto grad = RunOp(kGradOp, Attrs(c), {data, rois, (*fwd)[1], d_pooled});
  ASSERT_TRUE(grad.ok()) << grad.status();
  const Reference<TypeParam> ref = ReferenceRoiPool<TypeParam>(data, rois, c.ph, c.pw, c.scale);
  const std::vector<double> want = ReferenceRoiPoolGrad<TypeParam>(data, rois, ref.argmax, d_pooled);
  ASSERT_EQ((*grad)[0].shape(), data.shape());
  const double tol = std::is_same_v<TypeParam, float> ? 1e-5 : 1e-12;
  for (int64_t k = 0; k < data.NumElements(); ++k) {
    ASSERT_NEAR((*grad)[0].flat<TypeParam>()(k), want[k], tol * (1 + std::abs(want[k]))) << k;
  }
}

TYPED_TEST(RoiPoolTyped, TiesResolveToFirstPixelInRowMajorOrder) {
  // 4x4 image, one ROI covering it, 2x2 bins of 2x2 pixels each.
  Tensor data = Filled<TypeParam>(TensorShape({1, 4, 4, 2}), TypeParam(1));
  // Channel 1: the bin (0, 0) maximum 5 appears at (0, 1) and (1, 0); the first wins.
  auto x = data.tensor<TypeParam, 4>();
  x(0, 0, 1, 1) = 5;
  x(0, 1, 0, 1) = 5;
  auto out = RunOp(kOp, Attrs(2, 2, 1.0f), {data, Rois({{0, 0, 0, 3, 3}})});
  ASSERT_TRUE(out.ok()) << out.status();
  auto argmax = (*out)[1].tensor<int32_t, 4>();
  auto pooled = (*out)[0].tensor<TypeParam, 4>();
  // Channel 0 is constant: every bin reports its top-left pixel.
  EXPECT_EQ(argmax(0, 0, 0, 0), 0);
  EXPECT_EQ(argmax(0, 0, 1, 0), 2);
  EXPECT_EQ(argmax(0, 1, 0, 0), 8);
  EXPECT_EQ(argmax(0, 1, 1, 0), 10);
  EXPECT_EQ(argmax(0, 0, 0, 1), 1);
  EXPECT_EQ(pooled(0, 0, 0, 1), TypeParam(5));
  EXPECT_EQ(pooled(0, 1, 1, 0), TypeParam(1));
}

TYPED_TEST(RoiPoolTyped, RoiOutsideImageGivesZerosAndMinusOne) {
  std::mt19937 rng(3);
  Tensor data = DistinctValues<TypeParam>(TensorShape({2, 5, 6, 3}), &rng);
  // Fully left of, below, and right of the image; the last one is in image 1.
  Tensor rois = Rois({{0, -20, 0, -10, 4}, {1, 0, 30, 5, 40}, {1, 100, 100, 120, 130}});
  auto out = RunOp(kOp, Attrs(3, 2, 1.0f), {data, rois});
  ASSERT_TRUE(out.ok()) << out.status();
  for (int64_t k = 0; k < (*out)[0].NumElements(); ++k) {
    EXPECT_EQ((*out)[0].flat<TypeParam>()(k), TypeParam(0)) << k;
    EXPECT_EQ((*out)[1].flat<int32_t>()(k), -1) << k;
  }
}

TYPED_TEST(RoiPoolTyped, RoiPartlyOutsideImagePoolsTheInsidePart) {
  std::mt19937 rng(5);
  Tensor data = DistinctValues<TypeParam>(TensorShape({1, 6, 6, 2}), &rng);
  // Overhanging each border; 4x4 bins, so some bins are empty and some clipped.
  Tensor rois = Rois({{0, -5, -5, 2, 2}, {0, 3, 3, 12, 9}, {0, -3, 2, 8, 3}});
  ExpectMatchesReference<TypeParam>(data, rois, 4, 4, 1.0f, "partly outside");
  auto out = RunOp(kOp, Attrs(4, 4, 1.0f), {data, rois});
  ASSERT_TRUE(out.ok()) << out.status();
  // ROI 0 spans [-5, 2]: its first bin [-5, -3) is outside, so empty.
  auto argmax = (*out)[1].tensor<int32_t, 4>();
  EXPECT_EQ(argmax(0, 0, 0, 0), -1);
  EXPECT_NE(argmax(0, 3, 3, 0), -1);
}

TYPED_TEST(RoiPoolTyped, OneByOneImage) {
  Tensor data(DataTypeToEnum<TypeParam>::value, TensorShape({2, 1, 1, 3}));
  for (int k = 0; k < 6; ++k) data.flat<TypeParam>()(k) = TypeParam(k - 2);
  Tensor rois = Rois({{1, 0, 0, 0, 0}, {0, -1, -1, 2, 2}, {1, 0.4f, 0.2f, 0.3f, 0.1f}});
  ExpectMatchesReference<TypeParam>(data, rois, 2, 3, 1.0f, "1x1");
  auto out = RunOp(kOp, Attrs(2, 3, 1.0f), {data, rois});
  ASSERT_TRUE(out.ok()) << out.status();
  // ROI 0 is the single pixel of image 1: every bin is that pixel.
  auto pooled = (*out)[0].tensor<TypeParam, 4>();
  auto argmax = (*out)[1].tensor<int32_t, 4>();
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int c = 0; c < 3; ++c) {
        EXPECT_EQ(pooled(0, i, j, c), TypeParam(c + 1));
        EXPECT_EQ(argmax(0, i, j, c), 0);
      }
    }
  }
}

TYPED_TEST(RoiPoolTyped, NaNPropagates) {
  Tensor data = Filled<TypeParam>(TensorShape({1, 2, 2, 1}), TypeParam(1));
  data.flat<TypeParam>()(2) = std::numeric_limits<TypeParam>::quiet_NaN();
  auto out = RunOp(kOp, Attrs(1, 1, 1.0f), {data, Rois({{0, 0, 0, 1, 1}})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(std::isnan((*out)[0].flat<TypeParam>()(0)));
  EXPECT_EQ((*out)[1].flat<int32_t>()(0), 2);
}

TYPED_TEST(RoiPoolTyped, EmptyRoisAndEmptyBatch) {
  std::mt19937 rng(1);
  struct Case {
    TensorShape data;
    int64_t num_rois;
  };
  // R = 0; N = 0 (then R must be 0); C = 0 with ROIs; H = W = 0 with ROIs.
  for (const Case& k : {Case{TensorShape({2, 4, 4, 3}), 0}, Case{TensorShape({0, 4, 4, 3}), 0},
                        Case{TensorShape({2, 4, 4, 0}), 3}, Case{TensorShape({1, 0, 0, 2}), 2}}) {
    Tensor data = UniformValues<TypeParam>(k.data, &rng);
    Tensor rois = RandomRois(&rng, k.num_rois, std::max<int64_t>(k.data.dim_size(0), 1), 4, 4);
    for (RunPath path : {RunPath::kSessionFed, RunPath::kSessionConstants}) {
      auto out = RunOp(kOp, Attrs(2, 3, 1.0f), {data, rois}, {path});
      ASSERT_TRUE(out.ok()) << k.data.DebugString() << ": " << out.status();
      const TensorShape want({k.num_rois, 2, 3, k.data.dim_size(3)});
      EXPECT_EQ((*out)[0].shape(), want);
      EXPECT_EQ((*out)[1].shape(), want);
      for (int64_t e = 0; e < (*out)[1].NumElements(); ++e) {
        EXPECT_EQ((*out)[1].flat<int32_t>()(e), -1);  // H = W = 0: every bin is empty
        EXPECT_EQ((*out)[0].flat<TypeParam>()(e), TypeParam(0));
      }
      auto grad = RunOp(kGradOp, Attrs(2, 3, 1.0f), {data, rois, (*out)[1], (*out)[0]},
                        {path});
      ASSERT_TRUE(grad.ok()) << grad.status();
      EXPECT_EQ((*grad)[0].shape(), k.data);
      for (int64_t e = 0; e < (*grad)[0].NumElements(); ++e) {
        EXPECT_EQ((*grad)[0].flat<TypeParam>()(e), TypeParam(0));
      }
    }
  }
}

TYPED_TEST(RoiPoolTyped, GradOpScattersThroughArgmaxIntoTheRoisImage) {
  // Two overlapping ROIs on image 1 whose maxima coincide: the gradients add up; image 0 gets
  // nothing; an empty bin (-1) contributes nothing.
  Tensor data = Filled<TypeParam>(TensorShape({2, 3, 3, 1}), TypeParam(0));
  data.tensor<TypeParam, 4>()(1, 1, 2, 0) = 9;  // position 1 * 3 + 2 = 5
  Tensor rois = Rois({{1, 0, 0, 2, 2}, {1, 1, 1, 2, 2}, {1, 10, 10, 12, 12}});
  auto fwd = RunOp(kOp, Attrs(1, 1, 1.0f), {data, rois});
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  EXPECT_EQ((*fwd)[1].flat<int32_t>()(0), 5);
  EXPECT_EQ((*fwd)[1].flat<int32_t>()(1), 5);
  EXPECT_EQ((*fwd)[1].flat<int32_t>()(2), -1);
  Tensor d_pooled(DataTypeToEnum<TypeParam>::value, TensorShape({3, 1, 1, 1}));
  d_pooled.flat<TypeParam>().setValues({TypeParam(0.5), TypeParam(2), TypeParam(100)});
  auto grad = RunOp(kGradOp, Attrs(1, 1, 1.0f), {data, rois, (*fwd)[1], d_pooled});
  ASSERT_TRUE(grad.ok()) << grad.status();
  auto d = (*grad)[0].flat<TypeParam>();
  for (int64_t k = 0; k < d.size(); ++k) {
    EXPECT_EQ(d(k), k == 9 + 5 ? TypeParam(2.5) : TypeParam(0)) << k;
  }
}

TYPED_TEST(RoiPoolTyped, SymbolicGradientOfDataAndRois) {
  std::mt19937 rng(13);
  Tensor data = DistinctValues<TypeParam>(TensorShape({2, 5, 4, 3}), &rng);
  Tensor rois = RandomRois(&rng, 6, 2, 5, 4);
  auto fwd = RunOp(kOp, Attrs(2, 2, 1.0f), {data, rois});
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  Tensor d_pooled = UniformValues<TypeParam>((*fwd)[0].shape(), &rng);
  // The incoming gradient of argmax must be ignored, whatever it holds.
  Tensor d_argmax = Filled<int32_t>((*fwd)[1].shape(), 12345);
  auto g = RunSymbolicGradient(kOp, Attrs(2, 2, 1.0f), {data, rois}, {d_pooled, d_argmax});
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->size(), 2u);
  const Reference<TypeParam> ref = ReferenceRoiPool<TypeParam>(data, rois, 2, 2, 1.0f);
  const std::vector<double> want = ReferenceRoiPoolGrad<TypeParam>(data, rois, ref.argmax, d_pooled);
  for (int64_t k = 0; k < data.NumElements(); ++k) {
    EXPECT_NEAR((*g)[0].flat<TypeParam>()(k), want[k], 1e-6) << k;
  }
  ASSERT_EQ((*g)[1].shape(), rois.shape());
  for (int64_t k = 0; k < rois.NumElements(); ++k) EXPECT_EQ((*g)[1].flat<float>()(k), 0.f);
}

TYPED_TEST(RoiPoolTyped, GradientMatchesNumericJacobian) {
  const double tol = std::is_same_v<TypeParam, double> ? 1e-6 : 1e-3;
  std::mt19937 rng(17);
  const std::vector<Config> configs = {
      {1, 4, 5, 2, 2, 2, 1.0f, 3},   // small: full Jacobian rows
      {2, 6, 7, 3, 3, 2, 0.5f, 5},   // several images, scale < 1
      {1, 1, 1, 2, 2, 3, 1.0f, 2},   // 1x1 image: every bin is the pixel (or empty)
      {3, 8, 8, 4, 7, 7, 0.25f, 6},  // > max_rows outputs: random projections
  };
  for (const Config& c : configs) {
    Tensor data = DistinctValues<TypeParam>(TensorShape({c.n, c.h, c.w, c.c}), &rng);
    Tensor rois = RandomRois(&rng, c.num_rois, c.n, c.h / c.scale, c.w / c.scale);
    GradientCheckOptions options;
    options.non_differentiable_inputs = {"rois"};
    GradientCheckResult r;
    absl::Status s = CheckGradient(kOp, Attrs(c), {data, rois}, options, &r);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_TRUE(r.Passed(tol)) << r.ToString();
    EXPECT_GT(r.rows, 0);
    EXPECT_EQ(r.columns, data.NumElements());
  }
}

// RoiPoolGrad's CPU functor splits each image into bands of rows, one per work unit, and reads
// only the bins whose rows meet a band; an argmax outside its bin's rows (the op is public:
// any value in [-1, H * W) is accepted) sends it to the exact pass. Either way the result is
// the definition's scatter, and identical bits for every thread count.
TYPED_TEST(RoiPoolTyped, GradFunctorScattersAnyArgmaxExactlyAtEveryThreadCount) {
  std::mt19937 rng(23);
  for (const bool from_forward : {true, false}) {
    for (const int64_t batch : {1, 3}) {
      SCOPED_TRACE(::testing::Message() << "batch " << batch << (from_forward ? " forward" : " any"));
      const Config c{batch, 17, 13, 21, 3, 2, 0.5f, 40};
      Tensor data = UniformValues<TypeParam>(TensorShape({c.n, c.h, c.w, c.c}), &rng);
      Tensor rois = RandomRois(&rng, c.num_rois, c.n, c.h / c.scale, c.w / c.scale);
      std::vector<int32_t> argmax =
          ReferenceRoiPool<TypeParam>(data, rois, c.ph, c.pw, c.scale).argmax;
      if (!from_forward) {
        std::uniform_int_distribution<int32_t> pos(-1, c.h * c.w - 1);
        for (int32_t& a : argmax) a = pos(rng);
      }
      Tensor d_pooled = UniformValues<TypeParam>(
          TensorShape({c.num_rois, c.ph, c.pw, c.c}), &rng);
      const std::vector<double> want = ReferenceRoiPoolGrad<TypeParam>(data, rois, argmax, d_pooled);
      functor::RoiPoolShape s;
      s.batch = c.n;
      s.height = c.h;
      s.width = c.w;
      s.channels = c.c;
      s.num_rois = c.num_rois;
      s.pooled_height = c.ph;
      s.pooled_width = c.pw;
      s.spatial_scale = c.scale;
      std::vector<TypeParam> first;
      for (const int threads : {1, 2, 5}) {
        Eigen::ThreadPool pool(threads);
        Eigen::ThreadPoolDevice device(&pool, threads);
        std::vector<TypeParam> got(data.NumElements(), TypeParam(-7));  // overwritten
        functor::RoiPoolGrad<CPUDevice, TypeParam>()(device, s, rois.flat<float>().data(),
                                                     argmax.data(),
                                                     d_pooled.flat<TypeParam>().data(),
                                                     got.data());
        const double tol = std::is_same_v<TypeParam, float> ? 1e-5 : 1e-12;
        for (int64_t k = 0; k < data.NumElements(); ++k) {
          ASSERT_NEAR(got[k], want[k], tol * (1 + std::abs(want[k]))) << threads << " threads, " << k;
        }
        if (first.empty()) {
          first = got;
        } else {
          ASSERT_EQ(std::memcmp(got.data(), first.data(), got.size() * sizeof(TypeParam)), 0)
              << threads << " threads";
        }
      }
    }
  }
}

TEST(RoiPool, RejectsBadBatchIndex) {
  Tensor data = Filled<float>(TensorShape({2, 4, 4, 1}), 1.f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (float bad : {2.5f, -1.f, 2.f, nan}) {
    Tensor rois = Rois({{0, 0, 0, 3, 3}, {bad, 0, 0, 3, 3}});
    const std::string value = absl::StrCat(bad);  // "2.5", "-1", "2", "nan"
    auto out = RunOp(kOp, Attrs(2, 2, 1.0f), {data, rois});
    ExpectInvalidArgument(out.status(), kOp, {"rois[1]", "batch_index " + value, "[0, 2)"});
    // The backward op validates the same way.
    Tensor argmax = Filled<int32_t>(TensorShape({2, 2, 2, 1}), 0);
    Tensor d_pooled = Filled<float>(TensorShape({2, 2, 2, 1}), 1.f);
    auto grad = RunOp(kGradOp, Attrs(2, 2, 1.0f), {data, rois, argmax, d_pooled});
    ExpectInvalidArgument(grad.status(), kGradOp, {"rois[1]", "batch_index " + value});
  }
}

TEST(RoiPool, RejectsNonFiniteCoordinates) {
  Tensor data = Filled<float>(TensorShape({1, 4, 4, 1}), 1.f);
  Tensor rois = Rois({{0, 0, 0, std::numeric_limits<float>::infinity(), 3}});
  ExpectInvalidArgument(RunOp(kOp, Attrs(2, 2, 1.0f), {data, rois}).status(),
                        kOp, {"rois[0]", "inf"});
}

TEST(RoiPool, RejectsWrongRanks) {
  Tensor rois = Rois({{0, 0, 0, 3, 3}});
  ExpectInvalidArgument(
      RunOp(kOp, Attrs(2, 2, 1.0f), {Filled<float>(TensorShape({4, 4, 1}), 1.f), rois}).status(),
      kOp, {"data must have rank 4", "[4,4,1]"});
  Tensor data = Filled<float>(TensorShape({1, 4, 4, 1}), 1.f);
  ExpectInvalidArgument(
      RunOp(kOp, Attrs(2, 2, 1.0f), {data, Filled<float>(TensorShape({5}), 0.f)}).status(),
      kOp, {"rois must have shape [num_rois, 5]", "[5]"});
  ExpectInvalidArgument(
      RunOp(kOp, Attrs(2, 2, 1.0f), {data, Filled<float>(TensorShape({2, 4}), 0.f)}).status(),
      kOp, {"rois must have shape [num_rois, 5]", "[2,4]"});
  // With static shapes the shape function rejects them when the graph is built.
  auto s = RunOp(kOp, Attrs(2, 2, 1.0f), {data, Filled<float>(TensorShape({2, 4}), 0.f)},
                 {RunPath::kSessionConstants});
  ExpectInvalidArgument(s.status(), kOp);
}

// Valid inputs of `op` (kOp or kGradOp) with T = `dtype` for pooled 2x2: the bare kernel then
// fails only where its constructor does.
std::vector<Tensor> KernelInputs(const std::string& op, DataType dtype) {
  std::vector<Tensor> in = {Zeros(dtype, TensorShape({1, 4, 4, 1})), Rois({{0, 0, 0, 3, 3}})};
  if (op == kGradOp) {
    in.push_back(Zeros(DT_INT32, TensorShape({1, 2, 2, 1})));
    in.push_back(Zeros(dtype, TensorShape({1, 2, 2, 1})));
  }
  return in;
}

TEST(RoiPool, RejectsNonPositiveSpatialScale) {
  Tensor data = Filled<float>(TensorShape({1, 4, 4, 1}), 1.f);
  Tensor rois = Rois({{0, 0, 0, 3, 3}});
  for (float bad : {0.f, -0.5f, std::numeric_limits<float>::quiet_NaN()}) {
    const std::string want = absl::StrCat(
        "spatial_scale must be a finite number > 0 (denormals count as 0), got ", bad);
    // Graph construction (shape function) ...
    ExpectInvalidArgument(RunOp(kOp, Attrs(2, 2, bad), {data, rois}).status(), kOp, {want});
    // ... and the kernel constructor, for graphs built without shape inference.
    for (const char* op : {kOp, kGradOp}) {
      ExpectInvalidArgument(
          RunOp(op, Attrs(2, 2, bad), KernelInputs(op, DT_FLOAT), {RunPath::kKernel}).status(), op,
          {want});
    }
  }
  EXPECT_TRUE(RunOp(kOp, Attrs(2, 2, 0.5f), KernelInputs(kOp, DT_DOUBLE), {RunPath::kKernel}).ok());
}

TEST(RoiPoolGrad, RejectsInconsistentInputs) {
  Tensor data = Filled<float>(TensorShape({1, 3, 4, 2}), 1.f);
  Tensor rois = Rois({{0, 0, 0, 3, 3}});
  Tensor good = Filled<int32_t>(TensorShape({1, 2, 2, 2}), 0);
  Tensor d_pooled = Filled<float>(TensorShape({1, 2, 2, 2}), 1.f);
  ASSERT_TRUE(RunOp(kGradOp, Attrs(2, 2, 1.0f), {data, rois, good, d_pooled}).ok());
  // argmax values must be positions in the 3x4 image or -1.
  for (int32_t bad : {12, -2}) {
    Tensor argmax = good;
    argmax.flat<int32_t>()(5) = bad;
    ExpectInvalidArgument(RunOp(kGradOp, Attrs(2, 2, 1.0f), {data, rois, argmax, d_pooled}).status(),
                          kGradOp, {absl::StrCat("argmax[5] = ", bad), "[-1, H * W = 12)"});
  }
  ExpectInvalidArgument(
      RunOp(kGradOp, Attrs(2, 2, 1.0f),
            {data, rois, Filled<int32_t>(TensorShape({1, 2, 3, 2}), 0), d_pooled})
          .status(),
      kGradOp, {"argmax must have shape", "[1,2,2,2]", "[1,2,3,2]"});
  ExpectInvalidArgument(
      RunOp(kGradOp, Attrs(2, 2, 1.0f),
            {data, rois, good, Filled<float>(TensorShape({1, 2, 2, 1}), 1.f)})
          .status(),
      kGradOp, {"d_pooled must have shape", "[1,2,2,1]"});
  ExpectInvalidArgument(
      RunOp(kGradOp, Attrs(2, 2, 1.0f),
            {Filled<float>(TensorShape({3, 4, 2}), 1.f), rois, good, d_pooled})
          .status(),
      kGradOp, {"data must have rank 4"});
}

}  // namespace
}  // namespace tensorflow::tf_ext::test
