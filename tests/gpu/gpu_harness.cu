// Standalone CUDA harness for tf_ext's GPU kernels: no TensorFlow, no Eigen. Build and run
// with `make gpu-test` (also under compute-sanitizer memcheck and racecheck) or
// `make gpu-bench`; `make gpu-harness-build` only compiles it.
//
// It launches the very kernels the op library launches (gpu::LaunchGrid over the bodies of
// tf_ext/kernels/gpu/*_body.h) on hundreds of random and edge cases (empty tensors, 1x1
// images, ROIs partly or wholly outside the image, ties, NaN, infinities, denormals) and
// compares every output with
//   - the same bodies run on the host over the whole grid (bitwise for SignSTE and its
//     gradient, MedianPool2D and its gradient, RoiPool and its gradient; relative tolerance
//     for PsRoiAlign), which tests/gpu_body_test.cc in turn compares with the CPU functors,
//     and
//   - an independent brute-force reference where one is short (median: a stable sort).
// Every GPU run happens twice and must be bitwise identical (deterministic kernels).
//
//   gpu_harness [--cases N] [--seed S] [--quick] [--bench [--bench-out DIR]]
// --bench: the GB/s table and the ROI ops at detection-head sizes (--quick: tiny sizes, ROI
// ops only, to check the plumbing); --bench-out DIR also writes DIR/bench.json and the ROI
// sets for tests/gpu/torchvision_bench.py.
// Exit status: 0 all passed, 1 a check failed, 2 no CUDA device (nothing tested).
#if defined(TF_EXT_HARNESS_HOST_EMULATION)
// `make gpu-harness-host`: the harness compiled by the host compiler, "device" buffers in host
// memory and every launch run by gpu::RunGridOnHost. It tests the harness itself (references,
// case generators, determinism plumbing) on machines without a GPU; it proves nothing about
// the device.
#include "tests/gpu/host_emulation.h"
#else
#include <cuda_runtime.h>
#endif

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tests/gpu/host_grid.h"
#include "tf_ext/kernels/gpu/gpu_common.h"
#if !defined(TF_EXT_HARNESS_HOST_EMULATION)
#include "tf_ext/kernels/gpu/gpu_launch.cu.h"
#endif
#include "tf_ext/kernels/gpu/half_body.h"
#include "tf_ext/kernels/gpu/median_pool_body.h"
#include "tf_ext/kernels/gpu/ps_roi_align_body.h"
#include "tf_ext/kernels/gpu/roi_pool_body.h"
#include "tf_ext/kernels/gpu/sign_ste_body.h"

namespace gpu = tensorflow::tf_ext::gpu;

namespace {

#define CUDA_OK(expr)                                                                  \
  do {                                                                                 \
    const cudaError_t e_ = (expr);                                                     \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr,               \
                   cudaGetErrorString(e_));                                            \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

int g_failures = 0;
int64_t g_checks = 0;

void Fail(const std::string& what) {
  if (++g_failures <= 20) std::fprintf(stderr, "FAIL: %s\n", what.c_str());
}

// A device copy of a host vector (nullptr for an empty one: kernels must not touch it).
template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  size_t n = 0;
  explicit DeviceBuffer(size_t count) : n(count) {
    if (n) CUDA_OK(cudaMalloc(&ptr, n * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) {
    if (n) CUDA_OK(cudaMemcpy(ptr, host.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  // Poisons the buffer (0xFF bytes: NaN / -1) so that an element a kernel fails to write
  // shows up as a mismatch.
  void Poison() {
    if (n) CUDA_OK(cudaMemset(ptr, 0xFF, n * sizeof(T)));
  }
  std::vector<T> ToHost() const {
    std::vector<T> h(n);
    if (n) CUDA_OK(cudaMemcpy(h.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
};

template <typename T>
bool SameBits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

template <typename T>
void ExpectBitwise(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  ++g_checks;
  if (SameBits(got, want)) return;
  size_t i = 0;
  while (i < got.size() && i < want.size() && std::memcmp(&got[i], &want[i], sizeof(T)) == 0) ++i;
  Fail(what + ": first bitwise difference at element " + std::to_string(i) + " of " +
       std::to_string(want.size()) + " (got " +
       (i < got.size() ? std::to_string(static_cast<double>(got[i])) : "-") + ", want " +
       (i < want.size() ? std::to_string(static_cast<double>(want[i])) : "-") + ")");
}

template <typename T>
void ExpectClose(const std::vector<T>& got, const std::vector<T>& want, double rtol, double atol,
                 const std::string& what) {
  ++g_checks;
  if (got.size() != want.size()) return Fail(what + ": size differs");
  for (size_t i = 0; i < got.size(); ++i) {
    const double a = got[i], b = want[i];
    if (std::isnan(a) && std::isnan(b)) continue;
    if (!(std::fabs(a - b) <= atol + rtol * std::fabs(b))) {
      return Fail(what + ": element " + std::to_string(i) + " got " + std::to_string(a) +
                  " want " + std::to_string(b));
    }
  }
}

// Runs `body` (built by make(output pointers)) on the GPU twice, checks that both runs agree
// bitwise, and returns the first run's output.
template <typename Out, typename MakeBody>
std::vector<Out> RunTwice(int64_t n, size_t out_size, MakeBody make, const std::string& what) {
  DeviceBuffer<Out> a(out_size), b(out_size);
  a.Poison();
  b.Poison();
  CUDA_OK(gpu::LaunchGrid(nullptr, n, make(a.ptr)));
  CUDA_OK(gpu::LaunchGrid(nullptr, n, make(b.ptr)));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<Out> ha = a.ToHost(), hb = b.ToHost();
  ++g_checks;
  if (!SameBits(ha, hb)) Fail(what + ": two runs differ (non-deterministic)");
  return ha;
}

// ---- value generators -------------------------------------------------------------------

template <typename T>
std::vector<T> RandomValues(size_t n, std::mt19937& rng, int kind) {
  // kind 0: uniform; 1: few distinct values (ties); 2: uniform with NaN/inf/denormals/zeros.
  std::uniform_real_distribution<double> u(-2, 2);
  std::uniform_int_distribution<int> small(-2, 2), pick(0, 15);
  std::vector<T> v(n);
  for (auto& x : v) {
    if (kind == 1) {
      x = static_cast<T>(small(rng));
    } else {
      x = static_cast<T>(u(rng));
      if (kind == 2) {
        switch (pick(rng)) {
          case 0: x = std::numeric_limits<T>::quiet_NaN(); break;
          case 1: x = std::numeric_limits<T>::infinity(); break;
          case 2: x = -std::numeric_limits<T>::infinity(); break;
          case 3: x = std::numeric_limits<T>::denorm_min() * 3; break;
          case 4: x = -std::numeric_limits<T>::denorm_min(); break;
          case 5: x = T(0); break;
          case 6: x = -T(0); break;
          default: break;
        }
      }
    }
  }
  return v;
}

// ---- SignSTE ----------------------------------------------------------------------------

template <typename S>
void CheckSign(const std::vector<S>& x, const std::string& what) {
  const int64_t n = static_cast<int64_t>(x.size());
  DeviceBuffer<S> dx(x);
  std::vector<S> want(x.size());
  gpu::RunGridOnHost(n, gpu::SignSteBody<S>{x.data(), want.data()});
  auto got = RunTwice<S>(n, x.size(), [&](S* y) { return gpu::SignSteBody<S>{dx.ptr, y}; }, what);
  ExpectBitwise(got, want, what);
}

void TestSign(std::mt19937& rng, int cases) {
  std::vector<uint16_t> all_half(65536);
  std::iota(all_half.begin(), all_half.end(), 0);
  CheckSign(all_half, "SignSTE half: every bit pattern");
  for (int c = 0; c < cases; ++c) {
    std::uniform_int_distribution<int> size(0, c % 10 == 0 ? 0 : 5000);
    const size_t n = size(rng);
    CheckSign(RandomValues<float>(n, rng, 2), "SignSTE float case " + std::to_string(c));
    CheckSign(RandomValues<double>(n, rng, 2), "SignSTE double case " + std::to_string(c));
  }
}

// ---- SignSTEGrad ------------------------------------------------------------------------

template <typename S>
void CheckSteGrad(const std::vector<S>& dy, const std::vector<S>& x, S clip,
                  const std::string& what) {
  const int64_t n = static_cast<int64_t>(x.size());
  DeviceBuffer<S> d_dy(dy), d_x(x);
  std::vector<S> want(x.size());
  gpu::RunGridOnHost(n, gpu::SignSteGradBody<S>{dy.data(), x.data(), clip, want.data()});
  auto got = RunTwice<S>(
      n, x.size(), [&](S* out) { return gpu::SignSteGradBody<S>{d_dy.ptr, d_x.ptr, clip, out}; },
      what);
  ExpectBitwise(got, want, what);
}

void TestSteGrad(std::mt19937& rng, int cases) {
  std::vector<uint16_t> all_half(65536), dy_half(65536);
  std::iota(all_half.begin(), all_half.end(), 0);
  for (size_t i = 0; i < dy_half.size(); ++i) {
    dy_half[i] = static_cast<uint16_t>(0x3C00u + (i & 0x3FF));  // 1 + k/1024
  }
  for (const uint16_t clip : {uint16_t{0}, uint16_t{0x3C00u}, uint16_t{0x3C01u}, uint16_t{1}}) {
    CheckSteGrad(dy_half, all_half, clip, "SignSTEGrad half: every bit pattern, clip bits " +
                                              std::to_string(clip));
  }
  for (int c = 0; c < cases; ++c) {
    std::uniform_int_distribution<int> size(0, c % 10 == 0 ? 0 : 5000);
    const size_t n = size(rng);
    const float clip = static_cast<float>(c % 4) * 0.5f;
    CheckSteGrad(RandomValues<float>(n, rng, 2), RandomValues<float>(n, rng, 2), clip,
                 "SignSTEGrad float case " + std::to_string(c));
    CheckSteGrad(RandomValues<double>(n, rng, 2), RandomValues<double>(n, rng, 2),
                 static_cast<double>(clip), "SignSTEGrad double case " + std::to_string(c));
  }
}

// ---- MedianPool2D -----------------------------------------------------------------------

gpu::MedianPoolGeometry RandomMedianGeometry(std::mt19937& rng, int c) {
  std::uniform_int_distribution<int64_t> b(0, 2), hw(1, 9), ch(1, 3), k(1, 6), s(1, 3);
  gpu::MedianPoolGeometry g;
  g.batch = c % 17 == 0 ? 0 : b(rng) + 1;
  g.in_height = c % 13 == 0 ? 1 : hw(rng);
  g.in_width = c % 13 == 0 ? 1 : hw(rng);
  g.channels = c % 19 == 0 ? 0 : ch(rng);
  g.window_height = c % 5 == 0 ? 3 : k(rng);
  g.window_width = c % 5 == 0 ? 3 : k(rng);
  g.stride_height = s(rng);
  g.stride_width = s(rng);
  const bool same = c % 2 == 0;
  auto size = [same](int64_t in, int64_t kk, int64_t st, int64_t* out, int64_t* pad) {
    *pad = 0;
    if (!same) {
      *out = in >= kk ? (in - kk) / st + 1 : 0;
      return;
    }
    *out = in == 0 ? 0 : (in - 1) / st + 1;
    if (*out > 0) *pad = std::max<int64_t>(kk - (in - (*out - 1) * st), 0) / 2;
  };
  size(g.in_height, g.window_height, g.stride_height, &g.out_height, &g.pad_top);
  size(g.in_width, g.window_width, g.stride_width, &g.out_width, &g.pad_left);
  return g;
}

// Brute force: stable sort of the window by the body's key order.
template <typename T>
std::vector<int64_t> MedianReference(const gpu::MedianPoolGeometry& g, const std::vector<T>& x) {
  std::vector<int64_t> arg(g.OutputSize());
  for (int64_t o = 0; o < g.OutputSize(); ++o) {
    const int64_t c = o % g.channels, ow = (o / g.channels) % g.out_width;
    const int64_t oh = (o / (g.channels * g.out_width)) % g.out_height;
    const int64_t n = o / (g.channels * g.out_width * g.out_height);
    std::vector<int64_t> idx;
    const int64_t h0 = oh * g.stride_height - g.pad_top, w0 = ow * g.stride_width - g.pad_left;
    for (int64_t h = h0; h < h0 + g.window_height; ++h) {
      for (int64_t w = w0; w < w0 + g.window_width; ++w) {
        if (h >= 0 && h < g.in_height && w >= 0 && w < g.in_width) {
          idx.push_back(((n * g.in_height + h) * g.in_width + w) * g.channels + c);
        }
      }
    }
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
      return gpu::OrderedBits(x[a]) < gpu::OrderedBits(x[b]);
    });
    arg[o] = idx[(idx.size() - 1) / 2];
  }
  return arg;
}

template <typename T>
void TestMedianType(std::mt19937& rng, int cases, const char* type) {
  for (int c = 0; c < cases; ++c) {
    gpu::MedianPoolGeometry g = RandomMedianGeometry(rng, c);
    if (c % 23 == 0) {  // a large window: the radix-select path
      g.batch = 1;
      g.in_height = g.in_width = 8;
      g.window_height = g.window_width = 7;
      g.stride_height = g.stride_width = 1;
      g.out_height = g.out_width = 8;
      g.pad_top = g.pad_left = 3;
    }
    const std::string what = std::string("MedianPool2D ") + type + " case " + std::to_string(c);
    const std::vector<T> x = RandomValues<T>(g.InputSize(), rng, c % 3);
    const std::vector<T> dy = RandomValues<T>(g.OutputSize(), rng, 0);
    DeviceBuffer<T> dx_in(x), ddy(dy);
    // Forward.
    std::vector<T> want(g.OutputSize());
    gpu::RunGridOnHost(g.OutputSize(), gpu::MedianPoolBody<T>{g, x.data(), want.data()});
    auto got = RunTwice<T>(g.OutputSize(), want.size(),
                           [&](T* y) { return gpu::MedianPoolBody<T>{g, dx_in.ptr, y}; }, what);
    ExpectBitwise(got, want, what + " (vs host bodies)");
    const std::vector<int64_t> ref = MedianReference(g, x);
    std::vector<T> ref_y(ref.size());
    for (size_t o = 0; o < ref.size(); ++o) ref_y[o] = x[ref[o]];
    ExpectBitwise(got, ref_y, what + " (vs stable sort)");
    // Backward: argmedian then the gather.
    std::vector<int64_t> arg_want(g.OutputSize());
    gpu::RunGridOnHost(g.OutputSize(), gpu::MedianArgBody<T>{g, x.data(), arg_want.data()});
    ExpectBitwise(arg_want, ref, what + " argmedian (host bodies vs stable sort)");
    auto arg_got = RunTwice<int64_t>(
        g.OutputSize(), arg_want.size(),
        [&](int64_t* a) { return gpu::MedianArgBody<T>{g, dx_in.ptr, a}; }, what + " argmedian");
    ExpectBitwise(arg_got, arg_want, what + " argmedian");
    std::vector<T> dx_want(g.InputSize(), T(0));
    for (size_t o = 0; o < ref.size(); ++o) dx_want[ref[o]] += dy[o];  // scatter, ascending o
    DeviceBuffer<int64_t> darg(arg_want);
    auto dx_got = RunTwice<T>(g.InputSize(), dx_want.size(), [&](T* dx) {
      return gpu::MedianGradGatherBody<T>{g, darg.ptr, ddy.ptr, dx};
    }, what + " grad");
    ExpectBitwise(dx_got, dx_want, what + " grad (vs ascending scatter)");
  }
}

// The half kernels' conversions (half_body.h): every half widened, and random floats plus
// values at and around every halfway point rounded, on the device vs on the host (bitwise;
// tests/gpu_body_test.cc holds the host functions to Eigen::half).
void TestHalfConversions(std::mt19937& rng) {
  std::vector<uint16_t> all_half(65536);
  std::iota(all_half.begin(), all_half.end(), 0);
  DeviceBuffer<uint16_t> dh(all_half);
  std::vector<float> wide_want(65536);
  gpu::RunGridOnHost(65536, gpu::HalfToFloatBody{all_half.data(), wide_want.data()});
  ExpectBitwise(RunTwice<float>(65536, 65536, [&](float* out) {
    return gpu::HalfToFloatBody{dh.ptr, out};
  }, "half to float"), wide_want, "half to float: every bit pattern");
  std::vector<float> f = RandomValues<float>(1 << 20, rng, 2);
  for (uint32_t i = 0; i < 65536; ++i) {
    for (uint32_t tweak : {0u, 0xFFFu, 0x1000u, 0x1001u}) {
      const uint32_t b = (i << 13) + tweak;
      float v;
      std::memcpy(&v, &b, sizeof(v));
      f.push_back(v);
    }
  }
  const int64_t n = static_cast<int64_t>(f.size());
  DeviceBuffer<float> df(f);
  std::vector<uint16_t> narrow_want(f.size());
  gpu::RunGridOnHost(n, gpu::FloatToHalfBody{f.data(), narrow_want.data()});
  ExpectBitwise(RunTwice<uint16_t>(n, f.size(), [&](uint16_t* out) {
    return gpu::FloatToHalfBody{df.ptr, out};
  }, "float to half"), narrow_want, "float to half: random and halfway values");
}

// ---- ROI ops ----------------------------------------------------------------------------

std::vector<float> RandomRois(std::mt19937& rng, int64_t num_rois, int64_t batch, int64_t h,
                              int64_t w) {
  std::uniform_real_distribution<float> u(-0.5f, 1.5f);
  std::uniform_int_distribution<int> pick(0, 9);
  std::vector<float> r(5 * num_rois);
  for (int64_t i = 0; i < num_rois; ++i) {
    float* row = &r[5 * i];
    row[0] = static_cast<float>(std::uniform_int_distribution<int64_t>(0, batch - 1)(rng));
    float x1 = u(rng) * w, y1 = u(rng) * h, x2 = u(rng) * w, y2 = u(rng) * h;
    switch (pick(rng)) {
      case 0: x1 = x2 = -5; break;                       // wholly left of the image
      case 1: y1 = 2.f * h + 3; y2 = 3.f * h + 9; break; // wholly below
      case 2: x2 = x1; y2 = y1; break;                   // degenerate
      case 3: x1 = -1e6f; x2 = 1e6f; break;              // huge
      case 4: x1 = std::floor(2 * x1) / 2 + 0.5f; y1 = std::floor(2 * y1) / 2 + 0.5f;
              x2 = x1 + 2.5f; y2 = y1 + 1.5f; break;       // rounding ties
      default: if (x2 < x1) std::swap(x1, x2); if (y2 < y1) std::swap(y1, y2); break;
    }
    row[1] = x1; row[2] = y1; row[3] = x2; row[4] = y2;
  }
  return r;
}

template <typename T>
void TestRoiPoolType(std::mt19937& rng, int cases, const char* type) {
  for (int c = 0; c < cases; ++c) {
    std::uniform_int_distribution<int64_t> dim(1, 8), pooled(1, 4), nr(0, 6);
    gpu::RoiPoolGeometry g;
    g.batch = dim(rng) % 3 + 1;
    g.height = c % 11 == 0 ? 1 : dim(rng);
    g.width = c % 11 == 0 ? 1 : dim(rng);
    g.channels = c % 29 == 0 ? 0 : dim(rng) % 3 + 1;
    g.num_rois = c % 31 == 0 ? 0 : nr(rng);
    g.pooled_height = pooled(rng);
    g.pooled_width = pooled(rng);
    g.spatial_scale = c % 4 == 0 ? 0.5f : 1.0f;
    const std::string what = std::string("RoiPool ") + type + " case " + std::to_string(c);
    const int64_t in = g.batch * g.height * g.width * g.channels;
    const std::vector<T> data = RandomValues<T>(in, rng, c % 3);
    const std::vector<float> rois = RandomRois(rng, g.num_rois, g.batch, g.height, g.width);
    const int64_t out = g.num_rois * g.pooled_height * g.pooled_width * g.channels;
    DeviceBuffer<T> ddata(data);
    DeviceBuffer<float> drois(rois);
    std::vector<T> pooled_want(out);
    std::vector<int32_t> arg_want(out);
    gpu::RunGridOnHost(out, gpu::RoiPoolBody<T>{g, data.data(), rois.data(), pooled_want.data(),
                                                arg_want.data()});
    DeviceBuffer<int32_t> arg_scratch(out);
    auto pooled_got = RunTwice<T>(out, out, [&](T* p) {
      return gpu::RoiPoolBody<T>{g, ddata.ptr, drois.ptr, p, arg_scratch.ptr};
    }, what);
    ExpectBitwise(pooled_got, pooled_want, what + " pooled");
    DeviceBuffer<T> pooled_scratch(out);
    auto arg_got = RunTwice<int32_t>(out, out, [&](int32_t* a) {
      return gpu::RoiPoolBody<T>{g, ddata.ptr, drois.ptr, pooled_scratch.ptr, a};
    }, what + " argmax");
    ExpectBitwise(arg_got, arg_want, what + " argmax");
    // Backward: vs the host bodies and vs a plain ascending scatter.
    const std::vector<T> dpooled = RandomValues<T>(out, rng, 0);
    std::vector<T> dd_want(in, T(0));
    for (int64_t r = 0; r < g.num_rois; ++r) {
      const int64_t n = static_cast<int64_t>(rois[5 * r]);
      for (int64_t b = 0; b < g.pooled_height * g.pooled_width; ++b) {
        for (int64_t ch = 0; ch < g.channels; ++ch) {
          const int64_t o = (r * g.pooled_height * g.pooled_width + b) * g.channels + ch;
          if (arg_want[o] < 0) continue;
          dd_want[(n * g.height * g.width + arg_want[o]) * g.channels + ch] += dpooled[o];
        }
      }
    }
    std::vector<T> dd_host(in);
    gpu::RunGridOnHost(in, gpu::RoiPoolGradGatherBody<T>{g, rois.data(), arg_want.data(),
                                                         dpooled.data(), dd_host.data()});
    ExpectBitwise(dd_host, dd_want, what + " grad (host bodies vs scatter)");
    DeviceBuffer<int32_t> darg(arg_want);
    DeviceBuffer<T> ddp(dpooled);
    auto dd_got = RunTwice<T>(in, in, [&](T* dd) {
      return gpu::RoiPoolGradGatherBody<T>{g, drois.ptr, darg.ptr, ddp.ptr, dd};
    }, what + " grad");
    ExpectBitwise(dd_got, dd_want, what + " grad");
  }
}

template <typename T>
void TestPsRoiAlignType(std::mt19937& rng, int cases, const char* type) {
  const double rtol = sizeof(T) == 4 ? 1e-4 : 1e-10, atol = sizeof(T) == 4 ? 1e-5 : 1e-12;
  for (int c = 0; c < cases; ++c) {
    std::uniform_int_distribution<int64_t> dim(1, 8), pooled(1, 3), nr(0, 5), dd(1, 3), sr(0, 3);
    gpu::PsRoiAlignGeometry g;
    g.batch = dim(rng) % 3 + 1;
    g.height = c % 11 == 0 ? 1 : dim(rng);
    g.width = c % 11 == 0 ? 1 : dim(rng);
    g.pooled_height = pooled(rng);
    g.pooled_width = pooled(rng);
    g.output_channels = c % 29 == 0 ? 0 : dd(rng);
    g.channels = g.output_channels * g.pooled_height * g.pooled_width;
    g.num_rois = c % 31 == 0 ? 0 : nr(rng);
    g.spatial_scale = c % 4 == 0 ? 0.5f : 1.0f;
    g.sampling_ratio = sr(rng);
    const std::string what = std::string("PsRoiAlign ") + type + " case " + std::to_string(c);
    const int64_t in = g.batch * g.height * g.width * g.channels;
    const int64_t out = g.num_rois * g.pooled_height * g.pooled_width * g.output_channels;
    const std::vector<T> feat = RandomValues<T>(in, rng, 0);
    std::vector<float> rois = RandomRois(rng, g.num_rois, g.batch, g.height, g.width);
    if (g.sampling_ratio == 0) {  // adaptive: keep the sample grid small
      for (int64_t r = 0; r < g.num_rois; ++r) {
        for (int k = 1; k < 5; ++k) {
          rois[5 * r + k] = std::max(-20.f, std::min(20.f, rois[5 * r + k]));
        }
      }
    }
    DeviceBuffer<T> dfeat(feat);
    DeviceBuffer<float> drois(rois);
    std::vector<T> want(out);
    gpu::RunGridOnHost(out, gpu::PsRoiAlignBody<T>{g, feat.data(), rois.data(), want.data()});
    auto got = RunTwice<T>(
        out, out, [&](T* o) { return gpu::PsRoiAlignBody<T>{g, dfeat.ptr, drois.ptr, o}; }, what);
    ExpectClose(got, want, rtol, atol, what);
    const std::vector<T> dout = RandomValues<T>(out, rng, 0);
    std::vector<T> dwant(in);
    gpu::RunGridOnHost(in,
                       gpu::PsRoiAlignGradGatherBody<T>{g, rois.data(), dout.data(), dwant.data()});
    DeviceBuffer<T> ddout(dout);
    auto dgot = RunTwice<T>(in, in, [&](T* d) {
      return gpu::PsRoiAlignGradGatherBody<T>{g, drois.ptr, ddout.ptr, d};
    }, what + " grad");
    ExpectClose(dgot, dwant, rtol, atol, what + " grad");
    // The adjoint identity <PsRoiAlign(f), dout> == <f, PsRoiAlignGrad(dout)> ties the
    // gather formulation to the forward pass independently of the CPU functor.
    double lhs = 0, rhs = 0;
    for (int64_t i = 0; i < out; ++i) lhs += static_cast<double>(want[i]) * dout[i];
    for (int64_t i = 0; i < in; ++i) rhs += static_cast<double>(feat[i]) * dwant[i];
    ++g_checks;
    if (!(std::fabs(lhs - rhs) <= 1e-3 * (1 + std::fabs(lhs)))) {
      Fail(what + ": adjoint identity " + std::to_string(lhs) + " vs " + std::to_string(rhs));
    }
  }
}

// ---- bench ------------------------------------------------------------------------------

double TimeMs(const std::function<void()>& fn, int reps) {
  cudaEvent_t a, b;
  CUDA_OK(cudaEventCreate(&a));
  CUDA_OK(cudaEventCreate(&b));
  fn();  // warm-up
  CUDA_OK(cudaEventRecord(a));
  for (int i = 0; i < reps; ++i) fn();
  CUDA_OK(cudaEventRecord(b));
  CUDA_OK(cudaEventSynchronize(b));
  float ms = 0;
  CUDA_OK(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / reps;
}

// Detection-head boxes in image coordinates (features are 1/16 of the image): inside the
// image, 16 to 512 pixels on a side. The same rows go to torchvision (tests/gpu/
// torchvision_bench.py), so both sides pool the same bins.
std::vector<float> DetectionRois(std::mt19937& rng, int64_t num_rois, int64_t batch,
                                 float image) {
  std::uniform_real_distribution<float> pos(0.f, image), side(16.f, 512.f);
  std::vector<float> r(5 * num_rois);
  for (int64_t i = 0; i < num_rois; ++i) {
    float* row = &r[5 * i];
    row[0] = static_cast<float>(i % batch);
    row[1] = pos(rng);
    row[2] = pos(rng);
    row[3] = std::min(image - 1, row[1] + side(rng));
    row[4] = std::min(image - 1, row[2] + side(rng));
  }
  return r;
}

// One line of the ROI table, and one JSON object for torchvision_bench.py.
void ReportRoi(std::FILE* json, int* rows, const char* op, int64_t rois, const char* shape, double fwd_ms,
               double bwd_ms, const std::string& rois_file) {
  std::printf("%-12s %5" PRId64 " ROIs %-22s fwd %8.3f ms  bwd %8.3f ms  fwd+bwd %8.3f ms\n", op,
              rois, shape, fwd_ms, bwd_ms, fwd_ms + bwd_ms);
  if (json) {
    std::fprintf(json,
                 "%s{\"op\": \"%s\", \"rois\": %" PRId64 ", \"rois_file\": \"%s\", "
                 "\"fwd_ms\": %.6f, \"bwd_ms\": %.6f}",
                 (*rows)++ > 0 ? ",\n " : "", op, rois, rois_file.c_str(), fwd_ms, bwd_ms);
  }
}

// RoiPool and PsRoiAlign (float, features [2, 64, 64, C] NHWC at 1/16 of a 1024x1024 image,
// 7x7 bins) at detection-head sizes, forward and backward (the deterministic gather). With
// `out_dir`, writes each ROI set (raw float32 rows) and bench.json there for
// torchvision_bench.py, which times torchvision's CUDA kernels on the same boxes.
void BenchRoi(const std::string& out_dir, bool quick) {
  const int64_t batch = 2, side = quick ? 8 : 64, roi_pool_c = quick ? 8 : 256;
  const int64_t ps_d = quick ? 2 : 10;  // R-FCN style: D output channels, D * 49 inputs
  const float image = 16.f * side;
  std::FILE* json = nullptr;
  if (!out_dir.empty()) {
    json = std::fopen((out_dir + "/bench.json").c_str(), "w");
    if (!json) {
      std::fprintf(stderr, "gpu_harness: cannot write %s/bench.json\n", out_dir.c_str());
      std::exit(1);
    }
    std::fprintf(json, "{\"batch\": %" PRId64 ", \"height\": %" PRId64 ", \"width\": %" PRId64
                 ", \"roi_pool_channels\": %" PRId64 ", \"ps_output_channels\": %" PRId64
                 ", \"pooled\": 7, \"spatial_scale\": 0.0625, \"sampling_ratio\": 2,"
                 " \"results\": [", batch, side, side, roi_pool_c, ps_d);
  }
  const std::vector<int64_t> roi_counts = quick ? std::vector<int64_t>{16}
                                                : std::vector<int64_t>{512, 2000};
  const int reps = quick ? 2 : 10;
  int rows = 0;
  std::mt19937 rng(7);
  for (int64_t num_rois : roi_counts) {
    const std::vector<float> rois = DetectionRois(rng, num_rois, batch, image);
    std::string rois_file;
    if (json) {
      rois_file = "rois_" + std::to_string(num_rois) + ".f32";
      std::FILE* f = std::fopen((out_dir + "/" + rois_file).c_str(), "wb");
      if (!f || std::fwrite(rois.data(), sizeof(float), rois.size(), f) != rois.size()) {
        std::fprintf(stderr, "gpu_harness: cannot write %s\n", rois_file.c_str());
        std::exit(1);
      }
      std::fclose(f);
    }
    DeviceBuffer<float> drois(rois);
    {
      gpu::RoiPoolGeometry g;
      g.batch = batch; g.height = g.width = side; g.channels = roi_pool_c;
      g.num_rois = num_rois; g.pooled_height = g.pooled_width = 7; g.spatial_scale = 0.0625f;
      const int64_t in = batch * side * side * roi_pool_c, out = num_rois * 49 * roi_pool_c;
      DeviceBuffer<float> data(RandomValues<float>(in, rng, 0)), pooled(out), d_pooled(out),
          d_data(in);
      DeviceBuffer<int32_t> argmax(out);
      CUDA_OK(cudaMemset(d_pooled.ptr, 0, out * sizeof(float)));
      const double fwd = TimeMs([&] {
        CUDA_OK(gpu::LaunchGrid(nullptr, out, gpu::RoiPoolBody<float>{g, data.ptr, drois.ptr,
                                                                      pooled.ptr, argmax.ptr}));
      }, reps);
      const double bwd = TimeMs([&] {
        CUDA_OK(gpu::LaunchGrid(nullptr, in, gpu::RoiPoolGradGatherBody<float>{
                                                 g, drois.ptr, argmax.ptr, d_pooled.ptr,
                                                 d_data.ptr}));
      }, reps);
      const std::string shape = "[2," + std::to_string(side) + "," + std::to_string(side) + "," +
                                std::to_string(roi_pool_c) + "] 7x7";
      ReportRoi(json, &rows, "roi_pool", num_rois, shape.c_str(), fwd, bwd, rois_file);
    }
    {
      gpu::PsRoiAlignGeometry g;
      g.batch = batch; g.height = g.width = side; g.output_channels = ps_d;
      g.channels = ps_d * 49; g.num_rois = num_rois; g.pooled_height = g.pooled_width = 7;
      g.spatial_scale = 0.0625f; g.sampling_ratio = 2;
      const int64_t in = batch * side * side * g.channels, out = num_rois * 49 * ps_d;
      DeviceBuffer<float> features(RandomValues<float>(in, rng, 0)), output(out),
          d_output(out), d_features(in);
      CUDA_OK(cudaMemset(d_output.ptr, 0, out * sizeof(float)));
      const double fwd = TimeMs([&] {
        CUDA_OK(gpu::LaunchGrid(nullptr, out, gpu::PsRoiAlignBody<float>{g, features.ptr,
                                                                         drois.ptr, output.ptr}));
      }, reps);
      const double bwd = TimeMs([&] {
        CUDA_OK(gpu::LaunchGrid(nullptr, in, gpu::PsRoiAlignGradGatherBody<float>{
                                                 g, drois.ptr, d_output.ptr, d_features.ptr}));
      }, reps);
      const std::string shape = "[2," + std::to_string(side) + "," + std::to_string(side) + "," +
                                std::to_string(g.channels) + "] 7x7";
      ReportRoi(json, &rows, "ps_roi_align", num_rois, shape.c_str(), fwd, bwd, rois_file);
    }
  }
  if (json) {
    std::fprintf(json, "]}\n");
    std::fclose(json);
  }
}

void Bench(const std::string& out_dir, bool quick) {
  BenchRoi(out_dir, quick);
  if (quick) return;
  const int64_t n = int64_t{1} << 26;  // 64 Mi floats, 256 MiB
  DeviceBuffer<float> x(n), y(n);
  CUDA_OK(cudaMemset(x.ptr, 0, n * sizeof(float)));
  const double bytes = 2.0 * n * sizeof(float);  // read + write
  const double memcpy_ms = TimeMs(
      [&] {
        CUDA_OK(cudaMemcpyAsync(y.ptr, x.ptr, n * sizeof(float), cudaMemcpyDeviceToDevice));
      },
      20);
  const double memcpy_gbs = bytes / memcpy_ms / 1e6;
  std::printf("cudaMemcpy D2D            %8.3f ms  %8.1f GB/s (reference)\n", memcpy_ms,
              memcpy_gbs);
  const double sign_ms = TimeMs(
      [&] { CUDA_OK(gpu::LaunchGrid(nullptr, n, gpu::SignSteBody<float>{x.ptr, y.ptr})); }, 20);
  std::printf("SignSTE float  64Mi       %8.3f ms  %8.1f GB/s (%5.1f%% of memcpy)\n", sign_ms,
              bytes / sign_ms / 1e6, 100 * memcpy_ms / sign_ms);
  DeviceBuffer<double> xd(n / 2), yd(n / 2);
  CUDA_OK(cudaMemset(xd.ptr, 0, n / 2 * sizeof(double)));
  const double signd_ms = TimeMs(
      [&] {
        CUDA_OK(gpu::LaunchGrid(nullptr, n / 2, gpu::SignSteBody<double>{xd.ptr, yd.ptr}));
      },
      20);
  std::printf("SignSTE double 32Mi       %8.3f ms  %8.1f GB/s (%5.1f%% of memcpy)\n", signd_ms,
              bytes / signd_ms / 1e6, 100 * memcpy_ms / signd_ms);
  // MedianPool2D 3x3 SAME stride 1 over [16, 256, 256, 64] floats (the input read once ideally).
  gpu::MedianPoolGeometry g;
  g.batch = 16; g.in_height = g.in_width = 256; g.channels = 64;
  g.out_height = g.out_width = 256;
  g.window_height = g.window_width = 3;
  g.pad_top = g.pad_left = 1;
  std::mt19937 rng(1);
  std::vector<float> hx = RandomValues<float>(g.InputSize(), rng, 0);
  DeviceBuffer<float> mx(hx), my(g.OutputSize());
  const double med_bytes = static_cast<double>(g.InputSize() + g.OutputSize()) * sizeof(float);
  const double med_ms = TimeMs(
      [&] {
        CUDA_OK(gpu::LaunchGrid(nullptr, g.OutputSize(),
                                gpu::MedianPoolBody<float>{g, mx.ptr, my.ptr}));
      },
      5);
  std::printf("MedianPool2D 3x3 float    %8.3f ms  %8.1f GB/s (%5.1f%% of memcpy; in+out bytes)\n",
              med_ms, med_bytes / med_ms / 1e6, 100 * (med_bytes / med_ms / 1e6) / memcpy_gbs);
}

}  // namespace

int main(int argc, char** argv) {
  int cases = 200;
  unsigned seed = 1;
  bool bench = false, quick = false;
  std::string bench_out;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--bench") bench = true;
    else if (a == "--bench-out" && i + 1 < argc) bench_out = argv[++i];
    else if (a == "--quick") cases = 20, quick = true;
    else if (a == "--cases" && i + 1 < argc) cases = std::atoi(argv[++i]);
    else if (a == "--seed" && i + 1 < argc) seed = static_cast<unsigned>(std::atoi(argv[++i]));
    else {
      std::fprintf(stderr,
                   "usage: %s [--cases N] [--seed S] [--quick] [--bench [--bench-out DIR]]\n",
                   argv[0]);
      return 1;
    }
  }
  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "gpu_harness: no CUDA device (%s); nothing was tested\n",
                 err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return 2;
  }
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("gpu_harness: %s (sm_%d%d), %d cases per op, seed %u\n", prop.name, prop.major,
              prop.minor, cases, seed);
  if (bench) {
    Bench(bench_out, quick);
    return 0;
  }
  std::mt19937 rng(seed);
  TestSign(rng, cases);
  TestSteGrad(rng, cases);
  TestHalfConversions(rng);
  TestMedianType<float>(rng, cases, "float");
  TestMedianType<double>(rng, cases, "double");
  TestRoiPoolType<float>(rng, cases, "float");
  TestRoiPoolType<double>(rng, cases, "double");
  TestPsRoiAlignType<float>(rng, cases, "float");
  TestPsRoiAlignType<double>(rng, cases, "double");
  std::printf("gpu_harness: %" PRId64 " checks, %d failures\n", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}
