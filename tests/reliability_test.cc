// Reliability regression tests: one validation per op, applied alike by the
// shape function, the kernel and the gradient creator; bounded work; accurate float32
// averages; flush-to-zero attrs and values; validated NodeDefs in the gradient registry and
// its C entry points.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "tensorflow/core/framework/function.pb.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/framework/tensor.h"
#include "tests/test_util.h"
#include "tf_ext/grads/registry.h"
#include "tf_ext/grads/c_api.h"
#include "tf_ext/grads/specialize.h"
#include "tf_ext/ops/median_pool_ops.h"
#include "tf_ext/ops/op_checks.h"
#include "tf_ext/ops/roi_ops.h"
#include "tf_ext/testing/gradient_checker.h"
#include "tf_ext/testing/op_runner.h"

namespace tensorflow::tf_ext {
namespace {

using test::ExpectInvalidArgument;
using test::kAllRunPaths;
using test::OpAttrs;
using test::RunOp;
using test::RunPath;
using test::RunSymbolicGradient;

constexpr float kTiny = 1e-45f;  // the smallest float32 denormal

// The call is rejected by the kernel alone (no shape function), by a Session whose shape
// function sees unknown shapes (placeholders), and by one whose shape function sees the
// static shapes (constants): the same error each time.
void ExpectRejectedOnEveryPath(const std::string& op, const OpAttrs& attrs,
                               const std::vector<Tensor>& inputs, const std::string& part) {
  SCOPED_TRACE(op + " / " + part);
  for (RunPath path : kAllRunPaths) {
    SCOPED_TRACE(static_cast<int>(path));
    ExpectInvalidArgument(RunOp(op, attrs, inputs, {path}).status(), op, {part});
  }
}

void ExpectAcceptedOnEveryPath(const std::string& op, const OpAttrs& attrs,
                               const std::vector<Tensor>& inputs) {
  SCOPED_TRACE(op);
  for (RunPath path : kAllRunPaths) {
    EXPECT_TRUE(RunOp(op, attrs, inputs, {path}).ok()) << static_cast<int>(path);
  }
}

Tensor Filled(DataType dt, const TensorShape& shape, double v) {
  Tensor t(dt, shape);
  if (dt == DT_FLOAT) t.flat<float>().setConstant(static_cast<float>(v));
  if (dt == DT_DOUBLE) t.flat<double>().setConstant(v);
  return t;
}

Tensor OneRoi(float x1, float y1, float x2, float y2) {
  Tensor t(DT_FLOAT, TensorShape({1, 5}));
  t.flat<float>().setValues({0.f, x1, y1, x2, y2});
  return t;
}

OpAttrs RoiAttrs(int64_t ph, int64_t pw, float scale) {
  return {{"pooled_height", ph}, {"pooled_width", pw}, {"spatial_scale", scale}};
}

OpAttrs PsAttrs(int64_t ph, int64_t pw, float scale, int64_t sampling_ratio) {
  OpAttrs a = RoiAttrs(ph, pw, scale);
  a.push_back({"sampling_ratio", sampling_ratio});
  return a;
}

// Bug: pooled_height * pooled_width wrapped around to 0 in PsRoiAlign's shape function, which
// then divided the channel count by it (SIGFPE, the process died at graph construction).
TEST(Reliability, PooledSizeProductCannotWrapInAnyPath) {
  const Tensor features = Filled(DT_FLOAT, TensorShape({1, 2, 2, 4}), 1);
  const Tensor rois = OneRoi(0, 0, 1, 1);
  const int64_t wraps = int64_t{1} << 32;  // 2^32 * 2^32 == 0 mod 2^64
  for (const char* op : {"TfExt>PsRoiAlign", "TfExt>RoiPool"}) {
    const OpAttrs attrs = std::string(op) == "TfExt>RoiPool" ? RoiAttrs(wraps, wraps, 1)
                                                             : PsAttrs(wraps, wraps, 1, 2);
    ExpectRejectedOnEveryPath(op, attrs, {features, rois}, "must be in [1, 1024]");
  }
  const Tensor d_output = Filled(DT_FLOAT, TensorShape({1, 1, 1, 4}), 1);
  ExpectRejectedOnEveryPath("TfExt>PsRoiAlignGrad", PsAttrs(wraps, wraps, 1, 2),
                            {features, rois, d_output}, "must be in [1, 1024]");
  // The shape check is overflow-safe on its own, whatever attrs reach it.
  PsRoiAlignAttrs a{wraps, wraps, 1.f, 2};
  PartialTensorShape out;
  ExpectInvalidArgument(ValidatePsRoiAlignShapes("TfExt>PsRoiAlign", a,
                                                 PartialTensorShape({1, 2, 2, 4}),
                                                 PartialTensorShape({1, 5}), &out),
                        "TfExt>PsRoiAlign", {"overflows"});
}

// Bug: a huge sampling_ratio (2^20: 2^40 samples per bin) never finished.
TEST(Reliability, SamplingRatioIsBounded) {
  const Tensor features = Filled(DT_FLOAT, TensorShape({1, 4, 4, 1}), 1);
  const Tensor rois = OneRoi(0, 0, 3, 3);
  for (int64_t bad : {kMaxSamplingRatio + 1, int64_t{1} << 20, int64_t{1} << 40}) {
    ExpectRejectedOnEveryPath("TfExt>PsRoiAlign", PsAttrs(1, 1, 1, bad), {features, rois},
                              "sampling_ratio must be in [0, 64]");
    ExpectRejectedOnEveryPath("TfExt>PsRoiAlignGrad", PsAttrs(1, 1, 1, bad),
                              {features, rois, Filled(DT_FLOAT, TensorShape({1, 1, 1, 1}), 1)},
                              "sampling_ratio must be in [0, 64]");
  }
  const auto start = std::chrono::steady_clock::now();
  ExpectAcceptedOnEveryPath("TfExt>PsRoiAlign", PsAttrs(1, 1, 1, kMaxSamplingRatio),
                            {features, rois});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

// Bug: the float32 average was a float32 running sum, which drifts by many ulps over
// thousands of samples (and stops growing past 2^24 of them).
TEST(Reliability, PsRoiAlignFloat32AverageIsAccurate) {
  const float c = 1.0f / 3.0f;
  const Tensor features = Filled(DT_FLOAT, TensorShape({1, 8, 8, 1}), c);
  // 64 x 64 = 4096 samples, all inside the image: the average of equal values is the value.
  auto out = RunOp("TfExt>PsRoiAlign", PsAttrs(1, 1, 1, kMaxSamplingRatio),
                   {features, OneRoi(0.5f, 0.5f, 6.5f, 6.5f)});
  ASSERT_TRUE(out.ok()) << out.status();
  const float got = (*out)[0].flat<float>()(0);
  const float ulp = std::nextafter(c, 1.0f) - c;
  EXPECT_LE(std::abs(got - c), 2 * ulp) << "got " << got << ", want " << c;
}

// Bug: tiny attrs were read unflushed by the shape function (and Python) but flushed by the
// kernel, so the same call was accepted in one mode and rejected in the other.
TEST(Reliability, DenormalAttrsAreJudgedAsTheKernelSeesThem) {
  const Tensor data = Filled(DT_FLOAT, TensorShape({1, 4, 4, 1}), 1);
  const Tensor rois = OneRoi(0, 0, 3, 3);
  for (float tiny : {kTiny, -kTiny, 1e-39f}) {
    ExpectRejectedOnEveryPath("TfExt>RoiPool", RoiAttrs(1, 1, tiny), {data, rois},
                              "spatial_scale must be a finite number > 0");
    ExpectRejectedOnEveryPath("TfExt>PsRoiAlign", PsAttrs(1, 1, tiny, 2), {data, rois},
                              "spatial_scale must be a finite number > 0");
  }
  const Tensor x = Filled(DT_FLOAT, TensorShape({3}), 0);
  ExpectAcceptedOnEveryPath("TfExt>SignSTE", {{"clip", -kTiny}}, {x});
  ExpectAcceptedOnEveryPath("TfExt>GradientReversal", {{"scale", kTiny}}, {x});
  // The gradient creator agrees: clip = -1e-45 is clip = 0, so only x == 0 passes dy.
  Tensor xs(DT_FLOAT, TensorShape({3}));
  xs.flat<float>().setValues({0.f, 1e-3f, -1e-3f});
  auto g = RunSymbolicGradient("TfExt>SignSTE", {{"clip", -kTiny}}, {xs},
                               {Filled(DT_FLOAT, TensorShape({3}), 1)});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)[0].flat<float>()(0), 1.f);
  EXPECT_EQ((*g)[0].flat<float>()(1), 0.f);
  EXPECT_EQ((*g)[0].flat<float>()(2), 0.f);
  // A gradient creator reading clip = -1 still refuses, naming the op.
  ExpectInvalidArgument(
      RunSymbolicGradient("TfExt>SignSTE", {{"clip", -1.f}}, {xs}, {xs}).status(),
      "TfExt>SignSTE", {"clip must be finite and >= 0"});
}

// Bug: the ROI ops' shape functions used TensorFlow's generic checks ("Shape must be rank 4
// but is rank 3"), which do not say which op failed.
TEST(Reliability, ShapeFunctionErrorsNameTheOp) {
  const Tensor rank3 = Filled(DT_FLOAT, TensorShape({4, 4, 1}), 1);
  const Tensor image = Filled(DT_FLOAT, TensorShape({1, 4, 4, 1}), 1);
  const Tensor rois = OneRoi(0, 0, 3, 3);
  Tensor rois4(DT_FLOAT, TensorShape({1, 4}));
  rois4.flat<float>().setZero();
  ExpectRejectedOnEveryPath("TfExt>RoiPool", RoiAttrs(1, 1, 1), {rank3, rois}, "data must have rank 4");
  ExpectRejectedOnEveryPath("TfExt>RoiPool", RoiAttrs(1, 1, 1), {image, rois4},
                            "rois must have shape [num_rois, 5]");
  ExpectRejectedOnEveryPath("TfExt>PsRoiAlign", PsAttrs(1, 1, 1, 2), {rank3, rois},
                            "features must have rank 4");
  ExpectRejectedOnEveryPath("TfExt>PsRoiAlignGrad", PsAttrs(1, 1, 1, 2),
                            {image, rois, Filled(DT_FLOAT, TensorShape({1, 1, 2, 1}), 1)},
                            "d_output must have shape [1,1,1,1]");
  Tensor argmax(DT_INT32, TensorShape({1, 1, 1, 2}));
  argmax.flat<int32_t>().setZero();
  ExpectRejectedOnEveryPath("TfExt>RoiPoolGrad", RoiAttrs(1, 1, 1),
                            {image, rois, argmax, Filled(DT_FLOAT, TensorShape({1, 1, 1, 1}), 1)},
                            "argmax must have shape [1,1,1,1]");
  const OpAttrs pool = {{"ksize", std::vector<int64_t>{2, 2}},
                        {"strides", std::vector<int64_t>{1, 1}},
                        {"padding", "VALID"}};
  ExpectRejectedOnEveryPath("TfExt>MedianPool2D", pool, {rank3}, "x must have rank 4");
  ExpectRejectedOnEveryPath("TfExt>MedianPool2DGrad", pool,
                            {image, Filled(DT_FLOAT, TensorShape({1, 4, 4, 1}), 1)},
                            "d_y must have shape [1,3,3,1]");
}

// MedianPool2D's work is outputs x clipped window; absurd requests are refused up front.
TEST(Reliability, MedianPoolCostIsChecked) {
  const Tensor x = Filled(DT_FLOAT, TensorShape({1, 1024, 1024, 1}), 1);
  const OpAttrs attrs = {{"ksize", std::vector<int64_t>{1024, 1024}},
                         {"strides", std::vector<int64_t>{1, 1}},
                         {"padding", "SAME"}};
  const auto start = std::chrono::steady_clock::now();
  ExpectRejectedOnEveryPath("TfExt>MedianPool2D", attrs, {x}, "too much work");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  // A huge ksize on a small image is fine: windows are clipped to the image.
  ExpectAcceptedOnEveryPath("TfExt>MedianPool2D",
                            {{"ksize", std::vector<int64_t>{int64_t{1} << 30, 3}},
                             {"strides", std::vector<int64_t>{1, 1}},
                             {"padding", "SAME"}},
                            {Filled(DT_FLOAT, TensorShape({1, 5, 5, 2}), 1)});
}

// Huge dims in empty tensors: shapes whose arithmetic would overflow are errors, not crashes.
TEST(Reliability, HugeEmptyDimsAreHandled) {
  const int64_t big = int64_t{1} << 40;
  Tensor empty_image(DT_FLOAT, TensorShape({0, big, big, 1}));
  ExpectRejectedOnEveryPath("TfExt>RoiPool", RoiAttrs(1, 1, 1), {empty_image, OneRoi(0, 0, 1, 1)},
                            "H * W must fit argmax's int32");
  Tensor no_rois(DT_FLOAT, TensorShape({0, 5}));
  Tensor many_channels(DT_FLOAT, TensorShape({1, 1, 0, big}));
  auto out = RunOp("TfExt>PsRoiAlign", PsAttrs(1, 1, 1, 2), {many_channels, no_rois},
                   {RunPath::kSessionConstants});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape(), TensorShape({0, 1, 1, big}));
}

// Bug (found by make fuzz): adaptive PsRoiAlign on features with an empty width and a huge
// height walked ~2^30 samples per bin along the height although no sample could read the
// image (hang). Now such a bin is 0 at once, forward and backward.
TEST(Reliability, PsRoiAlignBinWithNoImageSampleFinishesAtOnce) {
  const int64_t huge = int64_t{1} << 31;
  Tensor features(DT_DOUBLE, TensorShape({1, huge, 0, 3}));
  Tensor rois(DT_FLOAT, TensorShape({2, 5}));
  rois.flat<float>().setValues({0, 0, 0, 1, static_cast<float>(huge), 0, 0, 5, 1, 1e9f});
  const auto start = std::chrono::steady_clock::now();
  for (RunPath path : {RunPath::kSessionFed, RunPath::kSessionConstants}) {
    auto out = RunOp("TfExt>PsRoiAlign", PsAttrs(1, 3, 1, 0), {features, rois}, {path});
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ((*out)[0].shape(), TensorShape({2, 1, 3, 1}));
    for (int64_t i = 0; i < (*out)[0].NumElements(); ++i) EXPECT_EQ((*out)[0].flat<double>()(i), 0);
    Tensor d_output(DT_DOUBLE, TensorShape({2, 1, 3, 1}));
    d_output.flat<double>().setConstant(1);
    auto grad = RunOp("TfExt>PsRoiAlignGrad", PsAttrs(1, 3, 1, 0), {features, rois, d_output},
                      {path});
    ASSERT_TRUE(grad.ok()) << grad.status();
    EXPECT_EQ((*grad)[0].NumElements(), 0);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

template <typename T>
std::vector<T> SignOfEach(const std::vector<T>& values, bool direct) {
  Tensor x(DataTypeToEnum<T>::value, TensorShape({static_cast<int64_t>(values.size())}));
  for (size_t i = 0; i < values.size(); ++i) x.flat<T>()(i) = values[i];
  auto out = RunOp("TfExt>SignSTE", {}, {x}, {direct ? RunPath::kKernel : RunPath::kSessionFed});
  EXPECT_TRUE(out.ok()) << out.status();
  std::vector<T> y;
  if (out.ok()) for (int64_t i = 0; i < (*out)[0].NumElements(); ++i) y.push_back((*out)[0].flat<T>()(i));
  return y;
}

// Bug: SignSTE returned denormal inputs unchanged (kernels run with denormals flushed, so
// neither x > 0 nor x < 0 held); tf.sign gives 0 for them. Now a zero of the input's sign.
TEST(Reliability, SignSTEOfADenormalIsZero) {
  for (bool direct : {false, true}) {
    SCOPED_TRACE(direct ? "kernel" : "session");
    const float fmin = std::numeric_limits<float>::min();
    const std::vector<float> y =
        SignOfEach<float>({kTiny, -kTiny, 1e-39f, -1e-39f, fmin, -fmin, 0.f, -0.f}, direct);
    ASSERT_EQ(y.size(), 8u);
    const std::vector<float> want = {0.f, -0.f, 0.f, -0.f, 1.f, -1.f, 0.f, -0.f};
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(y[i], want[i]) << i;
      EXPECT_EQ(std::signbit(y[i]), std::signbit(want[i])) << i;
    }
    const double dmin = std::numeric_limits<double>::min();
    const std::vector<double> yd = SignOfEach<double>({5e-324, -5e-324, dmin, 1e-310}, direct);
    ASSERT_EQ(yd.size(), 4u);
    EXPECT_EQ(yd[0], 0.0);
    EXPECT_TRUE(std::signbit(yd[1]) && yd[1] == 0.0);
    EXPECT_EQ(yd[2], 1.0);
    EXPECT_EQ(yd[3], 0.0);
    // Half: kernels widen half to float, where its denormals are normal: like tf.sign, +-1.
    const Eigen::half h(Eigen::half_impl::raw_uint16_to_half(1));  // smallest half denormal
    const std::vector<Eigen::half> yh = SignOfEach<Eigen::half>({h, -h}, direct);
    ASSERT_EQ(yh.size(), 2u);
    EXPECT_EQ(static_cast<float>(yh[0]), 1.f);
    EXPECT_EQ(static_cast<float>(yh[1]), -1.f);
  }
}

NodeDef Node(const std::string& op) {
  NodeDef n;
  n.set_name("n");
  n.set_op(op);
  return n;
}

// Bug: SpecializedGradient (behind TfExt>GradientFunctionDef and the C entry point) handed
// unvalidated NodeDefs to TensorFlow's gradient creators: a missing or negative N aborted
// the process (CHECK) or crashed it, a huge N ran for minutes.
TEST(Reliability, GradientRegistryValidatesTheNodeDef) {
  FunctionDef fdef;
  const auto start = std::chrono::steady_clock::now();
  for (const char* op : {"_ListToArray", "_ArrayToList", "ConcatV2", "Concat", "AddN"}) {
    SCOPED_TRACE(op);
    NodeDef missing = Node(op);  // no N at all
    if (std::string(op) != "_ListToArray") (*missing.mutable_attr())["T"].set_type(DT_FLOAT);
    absl::Status s = SpecializedGradient(missing, &fdef);
    ExpectInvalidArgument(s, op);
    for (int64_t n : {int64_t{-1}, int64_t{0}, int64_t{1} << 20, int64_t{1} << 40}) {
      NodeDef bad = Node(op);
      (*bad.mutable_attr())["T"].set_type(DT_FLOAT);
      (*bad.mutable_attr())["N"].set_i(n);
      if (std::string(op) == "_ListToArray" || std::string(op) == "_ArrayToList") {
        (*bad.mutable_attr())["Tin"].mutable_list()->add_type(DT_FLOAT);
      }
      if (std::string(op) == "ConcatV2") (*bad.mutable_attr())["Tidx"].set_type(DT_INT32);
      ExpectInvalidArgument(SpecializedGradient(bad, &fdef), op);
    }
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));

  NodeDef unknown = Node("NoSuchOp");
  EXPECT_EQ(SpecializedGradient(unknown, &fdef).code(), absl::StatusCode::kNotFound);
  NodeDef extra = Node("TfExt>ZeroOut");
  (*extra.mutable_attr())["T"].set_type(DT_FLOAT);
  (*extra.mutable_attr())["bogus"].set_i(1);
  ExpectInvalidArgument(SpecializedGradient(extra, &fdef), "TfExt>ZeroOut", {"bogus"});
  NodeDef wrong_type = Node("TfExt>ZeroOut");
  (*wrong_type.mutable_attr())["T"].set_type(DT_STRING);
  ExpectInvalidArgument(SpecializedGradient(wrong_type, &fdef), "TfExt>ZeroOut");
  NodeDef bad_value = Node("TfExt>PsRoiAlign");
  (*bad_value.mutable_attr())["T"].set_type(DT_FLOAT);
  (*bad_value.mutable_attr())["pooled_height"].set_i(1);
  (*bad_value.mutable_attr())["pooled_width"].set_i(1);
  (*bad_value.mutable_attr())["spatial_scale"].set_f(1);
  (*bad_value.mutable_attr())["sampling_ratio"].set_i(1 << 20);
  ExpectInvalidArgument(SpecializedGradient(bad_value, &fdef), "TfExt>PsRoiAlign",
                        {"sampling_ratio"});

  // Valid NodeDefs still work, TensorFlow's and tf_ext's, with or without inputs listed.
  NodeDef matmul = Node("MatMul");
  (*matmul.mutable_attr())["T"].set_type(DT_FLOAT);
  (*matmul.mutable_attr())["transpose_a"].set_b(true);
  EXPECT_TRUE(SpecializedGradient(matmul, &fdef).ok()) << SpecializedGradient(matmul, &fdef);
  // A valid N passes validation (specialising list arguments is not supported, as before).
  NodeDef concat = Node("ConcatV2");
  (*concat.mutable_attr())["T"].set_type(DT_FLOAT);
  (*concat.mutable_attr())["N"].set_i(2);
  (*concat.mutable_attr())["Tidx"].set_type(DT_INT32);
  EXPECT_EQ(SpecializedGradient(concat, &fdef).code(), absl::StatusCode::kUnimplemented)
      << SpecializedGradient(concat, &fdef);
  NodeDef zero_out = Node("TfExt>ZeroOut");
  (*zero_out.mutable_attr())["T"].set_type(DT_DOUBLE);
  zero_out.add_input("x");
  EXPECT_TRUE(SpecializedGradient(zero_out, &fdef).ok()) << SpecializedGradient(zero_out, &fdef);
}

// The C entry points: clean errors for garbage, NULLs and absurd lengths; no crash.
TEST(Reliability, CEntryPointsRejectHostileArguments) {
  void* out = reinterpret_cast<void*>(0x1);
  size_t out_len = 123;
  char error[256];
  const char garbage[] = "\xff\xff\xff\xff\x0f garbage";
  EXPECT_EQ(TfExtGradientFunctionDef(garbage, sizeof(garbage), &out, &out_len, error, sizeof(error)), 1);
  EXPECT_NE(std::string(error).find("could not parse"), std::string::npos) << error;
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(TfExtGradientFunctionDef(nullptr, 5, &out, &out_len, error, sizeof(error)), 1);
  EXPECT_NE(std::string(error).find("NULL"), std::string::npos) << error;
  EXPECT_EQ(TfExtGradientFunctionDef(garbage, SIZE_MAX, &out, &out_len, error, sizeof(error)), 1);
  EXPECT_NE(std::string(error).find("too large"), std::string::npos) << error;
  EXPECT_EQ(TfExtGradientFunctionDef(garbage, 3, nullptr, &out_len, error, sizeof(error)), 1);
  EXPECT_EQ(TfExtGradientFunctionDef(garbage, 3, &out, nullptr, nullptr, 0), 1);  // no buffer

  NodeDef list = Node("_ListToArray");
  (*list.mutable_attr())["T"].set_type(DT_FLOAT);
  const std::string bytes = list.SerializeAsString();
  EXPECT_EQ(TfExtGradientFunctionDef(bytes.data(), bytes.size(), &out, &out_len, error, sizeof(error)), 1);
  EXPECT_TRUE(absl::StartsWith(error, "_ListToArray: ")) << error;
  // A tiny error buffer is NUL-terminated, not overrun.
  char small[4] = {'x', 'x', 'x', 'x'};
  EXPECT_EQ(TfExtGradientFunctionDef(bytes.data(), bytes.size(), &out, &out_len, small, 3), 1);
  EXPECT_EQ(small[2], '\0');
  EXPECT_EQ(small[3], 'x');

  NodeDef ok = Node("TfExt>SignSTE");
  (*ok.mutable_attr())["T"].set_type(DT_FLOAT);
  const std::string ok_bytes = ok.SerializeAsString();
  ASSERT_EQ(TfExtGradientFunctionDef(ok_bytes.data(), ok_bytes.size(), &out, &out_len, error,
                                     sizeof(error)), 0) << error;
  FunctionDef fdef;
  EXPECT_TRUE(fdef.ParseFromArray(out, static_cast<int>(out_len)));
  TfExtFree(out);

  EXPECT_EQ(TfExtGradientKind(nullptr, error, sizeof(error)), -1);
  EXPECT_NE(std::string(error).find("NULL"), std::string::npos);
  EXPECT_EQ(TfExtGradientKind("NoSuchOp", nullptr, 0), 2);
}

}  // namespace
}  // namespace tensorflow::tf_ext
