// The CUDA kernels' per-thread bodies (tf_ext/kernels/gpu/*_body.h) run on the host over the
// whole grid, against the CPU functors, on hundreds of random and edge cases: empty tensors,
// 1x1 images, ROIs outside the image, ties, NaN, infinities, signed zeros. Selection ops
// (SignSTE and its gradient, MedianPool2D and its gradient, RoiPool and its gradient) and
// SmoothL1 (the same operations per element) must agree bit for bit; PsRoiAlign and its
// gradient within floating-point tolerance. So the GPU kernels' indexing, tie rules and NaN
// handling are checked on machines without a GPU (the standalone harness in tests/gpu then
// checks the device against these same bodies).
//
// Denormals stay out of the comparisons with the CPU functors: TensorFlow runs CPU kernels with
// denormals flushed (DAZ), which the bodies reproduce explicitly, but a functor called bare
// from a test runs without the flush. The flush itself has its own tests.
#include <gtest/gtest.h>

#define EIGEN_USE_THREADS

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "unsupported/Eigen/CXX11/Tensor"
#include "tests/gpu/host_grid.h"
#include "tf_ext/kernels/cpu_simd.h"
#include "tf_ext/kernels/gpu_bodies.h"
#include "tf_ext/kernels/half_float_functor.h"
#include "tf_ext/kernels/median_pool_functor.h"
#include "tf_ext/kernels/ps_roi_align_functor.h"
#include "tf_ext/kernels/roi_pool_functor.h"
#include "tf_ext/kernels/sign_ste_functor.h"
#include "tf_ext/kernels/smooth_l1_functor.h"

namespace tensorflow::tf_ext::test {
namespace {

constexpr int kCases = 300;

// Runs check() once per SIMD level of kernels/cpu_simd.h that this CPU supports (baseline,
// AVX2, AVX-512), so every dispatched path of the CPU functors meets the GPU bodies.
template <typename Fn>
void ForEachIsa(const Fn& check) {
  for (int l = 0; l <= static_cast<int>(simd::DetectedIsa()); ++l) {
    const simd::Isa isa = static_cast<simd::Isa>(l);
    SCOPED_TRACE(simd::IsaName(isa));
    simd::SetIsaCap(isa);
    ASSERT_EQ(simd::ActiveIsa(), isa);
    check();
    simd::SetIsaCap(simd::Isa::kAvx512);
    if (::testing::Test::HasFatalFailure()) return;
  }
  if (simd::DetectedIsa() != simd::Isa::kAvx512) {
    std::cerr << "note: this CPU's widest SIMD level is " << simd::IsaName(simd::DetectedIsa())
              << "; the wider dispatched paths were not run\n";
  }
}

class GpuBodyTest : public ::testing::Test {
 protected:
  GpuBodyTest() : pool_(2), device_(&pool_, 2) {}
  Eigen::ThreadPool pool_;
  Eigen::ThreadPoolDevice device_;
};

template <typename T>
::testing::AssertionResult SameBits(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      return ::testing::AssertionFailure()
             << "element " << i << " of " << got.size() << ": GPU body "
             << static_cast<double>(got[i]) << ", CPU functor " << static_cast<double>(want[i]);
    }
  }
  return ::testing::AssertionSuccess();
}

template <typename T>
::testing::AssertionResult Close(const std::vector<T>& got, const std::vector<T>& want,
                                 double rtol, double atol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < got.size(); ++i) {
    const double a = static_cast<double>(got[i]), b = static_cast<double>(want[i]);
    if (std::isnan(a) && std::isnan(b)) continue;
    if (!(std::fabs(a - b) <= atol + rtol * std::fabs(b))) {
      return ::testing::AssertionFailure() << "element " << i << ": GPU body " << a
                                           << ", CPU functor " << b;
    }
  }
  return ::testing::AssertionSuccess();
}

// kind 0: uniform in [-2, 2]; 1: integers in [-2, 2] (many ties, signed zeros); 2: uniform
// with NaN, +-inf and +-0 mixed in. Never denormal (see the top of the file).
template <typename T>
std::vector<T> Values(size_t n, std::mt19937* rng, int kind) {
  std::uniform_real_distribution<double> u(-2, 2);
  std::uniform_int_distribution<int> small(-2, 2), pick(0, 11);
  std::vector<T> v(n);
  for (T& x : v) {
    x = static_cast<T>(kind == 1 ? small(*rng) : u(*rng));
    if (kind == 1 && x == T(0) && pick(*rng) < 6) x = -T(0);
    if (kind == 2) {
      switch (pick(*rng)) {
        case 0: x = std::numeric_limits<T>::quiet_NaN(); break;
        case 1: x = -std::numeric_limits<T>::quiet_NaN(); break;
        case 2: x = std::numeric_limits<T>::infinity(); break;
        case 3: x = -std::numeric_limits<T>::infinity(); break;
        case 4: x = T(0); break;
        case 5: x = -T(0); break;
        default: break;
      }
    }
  }
  return v;
}

// Every exponent and both signs of float (each 8 times) with random mantissas: zeros,
// denormals, infinities and NaN payloads included.
std::vector<float> EveryExponentFloats(std::mt19937* rng) {
  std::vector<float> v(4096);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint32_t b = (static_cast<uint32_t>(i % 512) << 23) | ((*rng)() & 0x7fffffu);
    std::memcpy(&v[i], &b, 4);
  }
  return v;
}

// The same for double (each exponent and sign twice).
std::vector<double> EveryExponentDoubles(std::mt19937* rng) {
  std::vector<double> v(8192);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint64_t b = (static_cast<uint64_t>(i % 4096) << 52) |
                       ((static_cast<uint64_t>((*rng)()) << 20) & 0xfffffffffffffull);
    std::memcpy(&v[i], &b, 8);
  }
  return v;
}

// Valid ROI rows (what CheckRois lets through): integer batch index in [0, batch), finite
// coordinates, some wholly or partly outside the image, degenerate or huge.
std::vector<float> Rois(std::mt19937* rng, int64_t num_rois, int64_t batch, int64_t h,
                        int64_t w, float limit) {
  std::uniform_real_distribution<float> u(-0.5f, 1.5f);
  std::uniform_int_distribution<int> pick(0, 9);
  std::vector<float> r(5 * num_rois);
  for (int64_t i = 0; i < num_rois; ++i) {
    float* row = &r[5 * i];
    row[0] = static_cast<float>(std::uniform_int_distribution<int64_t>(0, batch - 1)(*rng));
    float x1 = u(*rng) * w, y1 = u(*rng) * h, x2 = u(*rng) * w, y2 = u(*rng) * h;
    switch (pick(*rng)) {
      case 0: x1 = x2 = -5; break;
      case 1: y1 = 2.f * h + 3; y2 = 3.f * h + 9; break;
      case 2: x2 = x1; y2 = y1; break;
      case 3: x1 = -limit; x2 = limit; break;
      case 4: std::swap(x1, x2); break;  // reversed: the ROI is widened to one pixel
      case 5:  // half-integers: rounding ties (half away from zero, not to even)
        x1 = std::floor(2 * x1) / 2 + 0.5f;
        y1 = std::floor(2 * y1) / 2 + 0.5f;
        x2 = x1 + 2.5f;
        y2 = y1 + 1.5f;
        break;
      default:
        if (x2 < x1) std::swap(x1, x2);
        if (y2 < y1) std::swap(y1, y2);
        break;
    }
    row[1] = x1;
    row[2] = y1;
    row[3] = x2;
    row[4] = y2;
  }
  return r;
}

// ---- SignSTE ----------------------------------------------------------------------------

template <typename T>
void CheckSign(const Eigen::ThreadPoolDevice& d, const std::vector<T>& x) {
  std::vector<T> want(x.size()), got(x.size());
  functor::SignSTE<CPUDevice, T>()(d, x.data(), x.size(), want.data());
  gpu::RunGridOnHost(x.size(), gpu::SignSteBody<T>{x.data(), got.data()});
  EXPECT_TRUE(SameBits(got, want));
}

TEST_F(GpuBodyTest, SignSteFloatDouble) {
  ForEachIsa([&] {
    std::mt19937 rng(1);
    for (int c = 0; c < kCases; ++c) {
      const size_t n = c % 10 == 0 ? 0 : std::uniform_int_distribution<size_t>(1, 500)(rng);
      CheckSign(device_, Values<float>(n, &rng, c % 3));
      CheckSign(device_, Values<double>(n, &rng, c % 3));
    }
    // Denormals: the functor flushes explicitly (FlushDenormal), so here they can be compared.
    CheckSign<float>(device_, {std::numeric_limits<float>::denorm_min(), -1e-40f, 1e-39f,
                               std::numeric_limits<float>::min()});
    CheckSign<double>(device_, {std::numeric_limits<double>::denorm_min(), -1e-310, 1e-308});
    CheckSign(device_, EveryExponentFloats(&rng));
  });
}

TEST_F(GpuBodyTest, SignSteHalfEveryBitPattern) {
  std::vector<Eigen::half> x(65536);
  std::vector<uint16_t> bits(65536), got(65536);
  for (int i = 0; i < 65536; ++i) {
    bits[i] = static_cast<uint16_t>(i);
    std::memcpy(static_cast<void*>(&x[i]), &bits[i], 2);
  }
  std::vector<Eigen::half> want(65536);
  functor::SignSTE<CPUDevice, Eigen::half>()(device_, x.data(), x.size(), want.data());
  gpu::RunGridOnHost(65536, gpu::SignSteBody<uint16_t>{bits.data(), got.data()});
  for (int i = 0; i < 65536; ++i) {
    uint16_t w;
    std::memcpy(&w, &want[i], 2);
    ASSERT_EQ(got[i], w) << "half bits 0x" << std::hex << i;
  }
}

// ---- SignSTEGrad ------------------------------------------------------------------------

// The CPU functor (dispatched SIMD for float/double) against the GPU body, bit for bit, and
// both against the scalar definition functor::SteGradOf.
template <typename T>
void CheckSteGrad(const Eigen::ThreadPoolDevice& d, const std::vector<T>& dy,
                  const std::vector<T>& x, T clip) {
  ASSERT_EQ(dy.size(), x.size());
  std::vector<T> want(x.size()), got(x.size()), scalar(x.size());
  functor::SignSTEGrad<CPUDevice, T>()(d, dy.data(), x.data(), clip, x.size(), want.data());
  gpu::RunGridOnHost(x.size(), gpu::SignSteGradBody<T>{dy.data(), x.data(), clip, got.data()});
  for (size_t i = 0; i < x.size(); ++i) scalar[i] = functor::SteGradOf(dy[i], x[i], clip);
  EXPECT_TRUE(SameBits(got, want)) << "clip " << clip;
  EXPECT_TRUE(SameBits(scalar, want)) << "clip " << clip;
}

template <typename T>
void CheckSteGradCases(const Eigen::ThreadPoolDevice& d, std::mt19937* rng) {
  for (const T clip : {T(1), T(0.5), T(0), T(2), std::numeric_limits<T>::min(),
                       std::numeric_limits<T>::max()}) {
    for (int c = 0; c < kCases; ++c) {
      const size_t n = c % 10 == 0 ? 0 : std::uniform_int_distribution<size_t>(1, 500)(*rng);
      CheckSteGrad(d, Values<T>(n, rng, c % 3), Values<T>(n, rng, (c + 1) % 3), clip);
    }
    // Denormal x (inside the band after the flush, even at clip 0) and the band's edges.
    const T tiny = std::numeric_limits<T>::denorm_min();
    CheckSteGrad<T>(d, {T(1), T(2), T(3), T(4), T(5), T(6), T(7)},
                    {tiny, -tiny, std::numeric_limits<T>::min(), clip, -clip,
                     std::nextafter(clip, std::numeric_limits<T>::infinity()), -T(0)},
                    clip);
  }
}

TEST_F(GpuBodyTest, SignSteGradFloatDouble) {
  ForEachIsa([&] {
    std::mt19937 rng(2);
    CheckSteGradCases<float>(device_, &rng);
    CheckSteGradCases<double>(device_, &rng);
    // Every exponent and both signs of x.
    const std::vector<float> bits_f = EveryExponentFloats(&rng);
    std::vector<float> dy(bits_f.size());
    for (size_t i = 0; i < dy.size(); ++i) dy[i] = static_cast<float>(i) - 2048.5f;
    for (const float clip : {0.0f, 1e-30f, 1.0f, 3e38f}) CheckSteGrad(device_, dy, bits_f, clip);
  });
}

TEST_F(GpuBodyTest, SignSteGradHalfEveryBitPattern) {
  std::vector<Eigen::half> x(65536), dy(65536), want(65536);
  std::vector<uint16_t> x_bits(65536), dy_bits(65536), got(65536);
  for (int i = 0; i < 65536; ++i) {
    x_bits[i] = static_cast<uint16_t>(i);
    dy_bits[i] = static_cast<uint16_t>(0x3C00u + (i & 0x3FF));  // 1 + k/1024
    std::memcpy(static_cast<void*>(&x[i]), &x_bits[i], 2);
    std::memcpy(static_cast<void*>(&dy[i]), &dy_bits[i], 2);
  }
  for (const float clip_f : {0.0f, 1.0f, 1.0006f, 6e-8f, 65504.0f}) {
    const Eigen::half clip = static_cast<Eigen::half>(clip_f);
    uint16_t clip_bits;
    std::memcpy(&clip_bits, &clip, 2);
    functor::SignSTEGrad<CPUDevice, Eigen::half>()(device_, dy.data(), x.data(), clip, x.size(),
                                                   want.data());
    gpu::RunGridOnHost(65536,
                       gpu::SignSteGradBody<uint16_t>{dy_bits.data(), x_bits.data(), clip_bits,
                                                      got.data()});
    for (int i = 0; i < 65536; ++i) {
      uint16_t w;
      std::memcpy(&w, &want[i], 2);
      ASSERT_EQ(got[i], w) << "clip " << clip_f << ", x half bits 0x" << std::hex << i;
    }
  }
}

// ---- SmoothL1 ---------------------------------------------------------------------------

// SmoothL1's CUDA kernel runs functor::SmoothL1Of per element; the CPU functor (dispatched
// SIMD blocks for float/double) must give the same bits at every level.
template <typename T>
void CheckSmoothL1(const Eigen::ThreadPoolDevice& d, const std::vector<T>& x, float delta) {
  std::vector<T> want(x.size()), got(x.size());
  functor::SmoothL1<CPUDevice, T>()(d, x.data(), x.size(), delta, got.data());
  for (size_t i = 0; i < x.size(); ++i) want[i] = functor::SmoothL1Of(x[i], delta);
  EXPECT_TRUE(SameBits(want, got)) << "delta " << delta;
}

template <typename T>
void CheckSmoothL1Cases(const Eigen::ThreadPoolDevice& d, std::mt19937* rng) {
  for (const float delta : {1.0f, 0.5f, 3.0f, 1e-30f, 3e38f,
                            std::numeric_limits<float>::min()}) {
    for (int c = 0; c < kCases; ++c) {
      const size_t n = c % 10 == 0 ? 0 : std::uniform_int_distribution<size_t>(1, 500)(*rng);
      CheckSmoothL1(d, Values<T>(n, rng, c % 3), delta);
    }
    // The pieces' edge (|x| = delta and its neighbours), signed zeros, and values whose square
    // overflows in the piece that is not selected.
    const T dt = static_cast<T>(delta), inf = std::numeric_limits<T>::infinity();
    CheckSmoothL1<T>(d, {dt, -dt, std::nextafter(dt, T(0)), std::nextafter(dt, inf),
                         -std::nextafter(dt, T(0)), T(0), -T(0), std::numeric_limits<T>::max(),
                         -std::numeric_limits<T>::max(), std::numeric_limits<T>::min()},
                     delta);
  }
}

TEST_F(GpuBodyTest, SmoothL1FloatDouble) {
  ForEachIsa([&] {
    std::mt19937 rng(3);
    CheckSmoothL1Cases<float>(device_, &rng);
    CheckSmoothL1Cases<double>(device_, &rng);
    const std::vector<float> bits_f = EveryExponentFloats(&rng);
    const std::vector<double> bits_d = EveryExponentDoubles(&rng);
    for (const float delta : {1.0f, 1e-30f, 3e38f}) {
      CheckSmoothL1(device_, bits_f, delta);
      CheckSmoothL1(device_, bits_d, delta);
    }
  });
}

// ---- MedianPool2D -----------------------------------------------------------------------

functor::MedianPool2DParams MedianParams(std::mt19937* rng, int c) {
  std::uniform_int_distribution<int64_t> hw(1, 9), ch(1, 3), k(1, 6), s(1, 3), b(1, 2);
  functor::MedianPool2DParams p;
  p.batch = c % 17 == 0 ? 0 : b(*rng);
  p.in_height = c % 13 == 0 ? 1 : hw(*rng);
  p.in_width = c % 13 == 0 ? 1 : hw(*rng);
  // Now and then wide enough for several SIMD blocks and a partial one at every width.
  p.channels = c % 19 == 0 ? 0 : (c % 7 == 3 ? 1 + (*rng)() % 40 : ch(*rng));
  p.window_height = c % 5 == 0 ? 3 : k(*rng);
  p.window_width = c % 5 == 0 ? 3 : k(*rng);
  p.stride_height = s(*rng);
  p.stride_width = s(*rng);
  if (c % 23 == 0) {  // windows of up to 49 elements: the radix-select path
    p.in_height = p.in_width = 8;
    p.window_height = p.window_width = 7;
    p.stride_height = p.stride_width = 1;
  }
  const bool same = c % 2 == 0;
  MedianPoolOutputSize(p.in_height, p.window_height, p.stride_height, same, &p.out_height,
                       &p.pad_top);
  MedianPoolOutputSize(p.in_width, p.window_width, p.stride_width, same, &p.out_width,
                       &p.pad_left);
  return p;
}

template <typename T>
void CheckMedian(const Eigen::ThreadPoolDevice& d, uint32_t seed) {
  std::mt19937 rng(seed);
  for (int c = 0; c < kCases; ++c) {
    SCOPED_TRACE(::testing::Message() << "case " << c);
    const functor::MedianPool2DParams p = MedianParams(&rng, c);
    const gpu::MedianPoolGeometry g = gpu::ToGeometry(p);
    const std::vector<T> x = Values<T>(p.InputSize(), &rng, c % 3);
    const std::vector<T> dy = Values<T>(p.OutputSize(), &rng, c % 2);
    // Forward (the op skips empty outputs; so do we).
    std::vector<T> want(p.OutputSize()), got(p.OutputSize());
    if (p.OutputSize() > 0) {
      functor::MedianPool2D<CPUDevice, T>()(d, p, x.data(), want.data());
      gpu::RunGridOnHost(g.OutputSize(), gpu::MedianPoolBody<T>{g, x.data(), got.data()});
    }
    ASSERT_TRUE(SameBits(got, want));
    // Backward: phase 1 (argmedian) and phase 2 (the gather) against the CPU scatter.
    if (p.InputSize() == 0) continue;
    std::vector<int64_t> cpu_arg(p.OutputSize()), arg(p.OutputSize());
    std::vector<T> dx_want(p.InputSize()), dx_got(p.InputSize());
    functor::MedianPool2DGrad<CPUDevice, T>()(d, p, x.data(), dy.data(), cpu_arg.data(),
                                              dx_want.data());
    gpu::RunGridOnHost(g.OutputSize(), gpu::MedianArgBody<T>{g, x.data(), arg.data()});
    ASSERT_TRUE(SameBits(arg, cpu_arg));
    gpu::RunGridOnHost(g.InputSize(),
                       gpu::MedianGradGatherBody<T>{g, arg.data(), dy.data(), dx_got.data()});
    ASSERT_TRUE(SameBits(dx_got, dx_want));
  }
}

// The half <-> float conversions of the half kernels (kernels/gpu/half_body.h, the same on
// both devices) against Eigen::half: every half value widened exactly; floats (random bit
// patterns, and values near every half, halfway between two halves, in the subnormal range and
// past the largest half) rounded to nearest even, through the CPU functors that run them.
TEST_F(GpuBodyTest, HalfConversionsAreEigens) {
  std::vector<uint16_t> bits(65536);
  std::iota(bits.begin(), bits.end(), 0);
  std::vector<float> wide(65536);
  functor::HalfToFloat<CPUDevice>()(device_, bits.data(), bits.size(), wide.data());
  for (int i = 0; i < 65536; ++i) {
    const float want = static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(bits[i]));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(wide[i])) << "half bits 0x" << std::hex << i;
      ASSERT_EQ(std::signbit(wide[i]), std::signbit(want)) << "half bits 0x" << std::hex << i;
    } else {
      ASSERT_EQ(Eigen::numext::bit_cast<uint32_t>(wide[i]), Eigen::numext::bit_cast<uint32_t>(want))
          << "half bits 0x" << std::hex << i;
    }
  }
  std::vector<float> f;
  std::mt19937 rng(21);
  for (int i = 0; i < 1000000; ++i) f.push_back(Eigen::numext::bit_cast<float>(static_cast<uint32_t>(rng())));
  for (int i = 0; i < 65536; ++i) {
    const uint32_t b = static_cast<uint32_t>(i) << 13;  // a half's float bits, shifted ...
    for (uint32_t tweak : {0u, 0xFFFu, 0x1000u, 0x1001u, 0x1FFFu}) {  // ... then below/at/past halfway
      f.push_back(Eigen::numext::bit_cast<float>(b + tweak));
    }
  }
  for (float v : {65504.f, 65519.f, 65520.f, 1e9f, 5.9604645e-8f, 2.9802322e-8f, 2.9802326e-8f,
                  6.1035156e-5f, 1e-40f, 0.f, -0.f}) {
    f.push_back(v);
    f.push_back(-v);
  }
  std::vector<uint16_t> narrow(f.size());
  functor::FloatToHalf<CPUDevice>()(device_, f.data(), f.size(), narrow.data());
  for (size_t i = 0; i < f.size(); ++i) {
    const Eigen::half want = static_cast<Eigen::half>(f[i]);
    if (Eigen::numext::isnan(want)) {
      ASSERT_EQ(narrow[i] & 0x7FFFu, 0x7E00u) << f[i];
    } else {  // float denormals included: both give +-0 (they are below 2^-25)
      ASSERT_EQ(narrow[i], Eigen::numext::bit_cast<uint16_t>(want))
          << f[i] << " (bits 0x" << std::hex << Eigen::numext::bit_cast<uint32_t>(f[i]) << ")";
    }
  }
}

TEST_F(GpuBodyTest, MedianPoolFloat) {
  ForEachIsa([&] { CheckMedian<float>(device_, 2); });
}
TEST_F(GpuBodyTest, MedianPoolDouble) {
  ForEachIsa([&] { CheckMedian<double>(device_, 3); });
}

// TensorFlow's CPU kernels compare under DAZ: a denormal orders as zero, so among
// {denormal, 0, 0} the median is the middle one by position, not the largest value.
TEST_F(GpuBodyTest, MedianKeyTreatsDenormalsAsZero) {
  EXPECT_EQ(gpu::OrderedBits(std::numeric_limits<float>::denorm_min()), gpu::OrderedBits(0.f));
  EXPECT_EQ(gpu::OrderedBits(-std::numeric_limits<float>::denorm_min()), gpu::OrderedBits(0.f));
  EXPECT_EQ(gpu::OrderedBits(-0.0), gpu::OrderedBits(0.0));
  EXPECT_EQ(gpu::OrderedBits(std::numeric_limits<double>::denorm_min()), gpu::OrderedBits(0.0));
  EXPECT_LT(gpu::OrderedBits(std::numeric_limits<float>::infinity()),
            gpu::OrderedBits(std::numeric_limits<float>::quiet_NaN()));
  EXPECT_EQ(gpu::OrderedBits(-std::numeric_limits<float>::quiet_NaN()),
            gpu::OrderedBits(std::numeric_limits<float>::quiet_NaN()));
  gpu::MedianPoolGeometry g;
  g.batch = g.in_height = g.channels = g.out_height = g.out_width = 1;
  g.in_width = g.window_width = 3;
  const float x[3] = {std::numeric_limits<float>::denorm_min(), 0.f, 0.f};
  EXPECT_EQ(gpu::MedianFlatIndex(g, x, 0), 1);
}

// ---- RoiPool ----------------------------------------------------------------------------

template <typename T>
void CheckRoiPool(const Eigen::ThreadPoolDevice& d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> dim(1, 8), pooled(1, 4), nr(1, 6);
  for (int c = 0; c < kCases; ++c) {
    SCOPED_TRACE(::testing::Message() << "case " << c);
    functor::RoiPoolShape s;
    s.batch = dim(rng) % 3 + 1;
    s.height = c % 11 == 0 ? 1 : dim(rng);
    s.width = c % 11 == 0 ? 1 : dim(rng);
    s.channels = c % 29 == 0 ? 0 : (c % 7 == 3 ? 1 + rng() % 40 : dim(rng) % 3 + 1);
    s.num_rois = c % 31 == 0 ? 0 : nr(rng);
    s.pooled_height = pooled(rng);
    s.pooled_width = pooled(rng);
    s.spatial_scale = c % 4 == 0 ? 0.5f : (c % 4 == 1 ? 0.37f : 1.0f);
    const gpu::RoiPoolGeometry g = gpu::ToGeometry(s);
    const std::vector<T> data = Values<T>(s.batch * s.height * s.width * s.channels, &rng, c % 3);
    const std::vector<float> rois = Rois(&rng, s.num_rois, s.batch, s.height, s.width, 1e6f);
    const int64_t out = s.num_rois * s.pooled_height * s.pooled_width * s.channels;
    const int64_t in = s.batch * s.height * s.width * s.channels;
    std::vector<T> pooled_want(out), pooled_got(out);
    std::vector<int32_t> arg_want(out), arg_got(out);
    if (out > 0) {
      functor::RoiPool<CPUDevice, T>()(d, s, data.data(), rois.data(), pooled_want.data(),
                                       arg_want.data());
      gpu::RunGridOnHost(out, gpu::RoiPoolBody<T>{g, data.data(), rois.data(), pooled_got.data(),
                                                  arg_got.data()});
    }
    ASSERT_TRUE(SameBits(pooled_got, pooled_want));
    ASSERT_TRUE(SameBits(arg_got, arg_want));
    if (in == 0) continue;
    const std::vector<T> d_pooled = Values<T>(out, &rng, 0);
    std::vector<T> dd_want(in), dd_got(in);
    functor::RoiPoolGrad<CPUDevice, T>()(d, s, rois.data(), arg_want.data(), d_pooled.data(),
                                         dd_want.data());
    gpu::RunGridOnHost(in, gpu::RoiPoolGradGatherBody<T>{g, rois.data(), arg_want.data(),
                                                         d_pooled.data(), dd_got.data()});
    ASSERT_TRUE(SameBits(dd_got, dd_want));
  }
}

TEST_F(GpuBodyTest, RoiPoolFloat) {
  ForEachIsa([&] { CheckRoiPool<float>(device_, 4); });
}
TEST_F(GpuBodyTest, RoiPoolDouble) {
  ForEachIsa([&] { CheckRoiPool<double>(device_, 5); });
}

// ---- PsRoiAlign -------------------------------------------------------------------------

template <typename T>
void CheckPsRoiAlign(const Eigen::ThreadPoolDevice& d, uint32_t seed) {
  const double rtol = sizeof(T) == 4 ? 2e-5 : 1e-12, atol = sizeof(T) == 4 ? 1e-5 : 1e-12;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> dim(1, 8), pooled(1, 3), nr(1, 5), dd(1, 3), sr(0, 3);
  for (int c = 0; c < kCases; ++c) {
    SCOPED_TRACE(::testing::Message() << "case " << c);
    functor::PsRoiAlignShape s;
    s.batch = dim(rng) % 3 + 1;
    s.height = c % 11 == 0 ? 1 : dim(rng);
    s.width = c % 11 == 0 ? 1 : dim(rng);
    s.pooled_height = pooled(rng);
    s.pooled_width = pooled(rng);
    s.output_channels = c % 29 == 0 ? 0 : dd(rng);
    s.channels = s.output_channels * s.pooled_height * s.pooled_width;
    s.num_rois = c % 31 == 0 ? 0 : nr(rng);
    s.spatial_scale = c % 4 == 0 ? 0.5f : 1.0f;
    s.sampling_ratio = sr(rng);
    const gpu::PsRoiAlignGeometry g = gpu::ToGeometry(s);
    const int64_t in = s.batch * s.height * s.width * s.channels;
    const int64_t out = s.num_rois * s.pooled_height * s.pooled_width * s.output_channels;
    const std::vector<T> features = Values<T>(in, &rng, 0);
    // Adaptive sampling (0) over a huge ROI would walk ~1e6 samples per bin: keep it small.
    const std::vector<float> rois =
        Rois(&rng, s.num_rois, s.batch, s.height, s.width, s.sampling_ratio == 0 ? 20.f : 1e6f);
    std::vector<T> want(out), got(out);
    if (out > 0) {
      functor::PsRoiAlign<CPUDevice, T>()(d, s, features.data(), rois.data(), want.data());
      gpu::RunGridOnHost(out, gpu::PsRoiAlignBody<T>{g, features.data(), rois.data(), got.data()});
    }
    ASSERT_TRUE(Close(got, want, rtol, atol));
    if (in == 0) continue;
    const std::vector<T> d_output = Values<T>(out, &rng, 0);
    std::vector<T> dwant(in), dgot(in);
    functor::PsRoiAlignGrad<CPUDevice, T>()(d, s, rois.data(), d_output.data(), dwant.data());
    gpu::RunGridOnHost(in, gpu::PsRoiAlignGradGatherBody<T>{g, rois.data(), d_output.data(),
                                                            dgot.data()});
    ASSERT_TRUE(Close(dgot, dwant, 10 * rtol, atol));
  }
}

TEST_F(GpuBodyTest, PsRoiAlignFloat) { CheckPsRoiAlign<float>(device_, 6); }
TEST_F(GpuBodyTest, PsRoiAlignDouble) { CheckPsRoiAlign<double>(device_, 7); }

// ---- SIMD dispatch --------------------------------------------------------------------------

TEST(CpuSimd, CapSelectsTheLevelAndNeverExceedsTheCpu) {
  for (int l = 0; l < simd::kNumIsas; ++l) {
    const simd::Isa cap = static_cast<simd::Isa>(l);
    simd::SetIsaCap(cap);
    EXPECT_EQ(static_cast<int>(simd::ActiveIsa()),
              std::min(l, static_cast<int>(simd::DetectedIsa())));
  }
  simd::SetIsaCap(simd::Isa::kAvx512);
  EXPECT_EQ(simd::ActiveIsa(), simd::DetectedIsa());
}

}  // namespace
}  // namespace tensorflow::tf_ext::test
