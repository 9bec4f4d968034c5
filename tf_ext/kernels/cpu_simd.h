// Fixed-width SIMD blocks for the CPU functors, as GCC/Clang vector extensions: one block is
// kBytes of T (16 bytes: 4 floats, 2 doubles), operated on lane by lane with ordinary
// operators, plus run-time dispatch to wider blocks on CPUs that have them.
// Why not plain loops: GCC 12 at -O2 vectorises only with its "very cheap" cost model, which
// leaves loops of unknown trip count and branchy per-element code (NaN-aware selects, sign,
// key comparisons) scalar; a block type states the vectorisation instead of hoping for it.
// Why dispatch: the library's baseline target is x86-64 (SSE2, no -march=native: it must run
// on any x86-64 CPU), where 16-byte blocks are the widest that compile to single
// instructions. The hot loops are therefore written once as templates over the block width,
// and Dispatch<Kernel> compiles them three times - 16-byte blocks for the baseline, 32-byte
// blocks with AVX2 enabled, 64-byte blocks with AVX-512 (F, DQ, BW, VL) enabled (GCC's target attribute on
// that function only) - and picks the widest the running CPU supports. TF_EXT_CPU_ISA
// (baseline | avx2 | avx512) caps the choice, and tests run every kernel under every level the
// machine has. Results are bit-identical across levels: the kernels select and compare
// (no arithmetic whose rounding could differ), and -ffp-contract=off (build_defs.bzl) keeps
// AVX-512's FMA out of any a * b + c.
// Host code only (never seen by nvcc).
#ifndef TF_EXT_KERNELS_CPU_SIMD_H_
#define TF_EXT_KERNELS_CPU_SIMD_H_

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace tensorflow::tf_ext::simd {

constexpr int kBlockBytes = 16;  // the baseline block

// BlockTypes<T, kBytes>::Block: the value block; ::Mask: the same-width integer block, which
// comparisons of Blocks return (-1 for true, 0 for false per lane) and which holds T's bit
// patterns.
template <typename T, int kBytes = kBlockBytes>
struct BlockTypes;
template <int kBytes>
struct BlockTypes<float, kBytes> {
  typedef float Block __attribute__((vector_size(kBytes)));
  typedef int32_t Mask __attribute__((vector_size(kBytes)));
  using Int = int32_t;
};
template <int kBytes>
struct BlockTypes<double, kBytes> {
  typedef double Block __attribute__((vector_size(kBytes)));
  typedef int64_t Mask __attribute__((vector_size(kBytes)));
  using Int = int64_t;
};
template <int kBytes>
struct BlockTypes<int32_t, kBytes> {
  typedef int32_t Block __attribute__((vector_size(kBytes)));
  typedef int32_t Mask __attribute__((vector_size(kBytes)));
  using Int = int32_t;
};
template <int kBytes>
struct BlockTypes<int64_t, kBytes> {
  typedef int64_t Block __attribute__((vector_size(kBytes)));
  typedef int64_t Mask __attribute__((vector_size(kBytes)));
  using Int = int64_t;
};

template <typename T, int kBytes = kBlockBytes>
using Block = typename BlockTypes<T, kBytes>::Block;
template <typename T, int kBytes = kBlockBytes>
using Mask = typename BlockTypes<T, kBytes>::Mask;
template <typename T, int kBytes = kBlockBytes>
constexpr int64_t kLanes = kBytes / sizeof(T);

// The block helpers are always inlined: a wide block must never cross a call into code
// compiled for the baseline (its ABI differs there).
#define TF_EXT_SIMD_INLINE inline __attribute__((always_inline))

// Loads `count` (<= kLanes<T>) elements from p into the first lanes; the rest are zero. For
// partial blocks at the end of a channel run.
template <typename V, typename T>
TF_EXT_SIMD_INLINE V Load(const T* p, int64_t count) {
  V v{};
  std::memcpy(&v, p, static_cast<size_t>(count) * sizeof(T));
  return v;
}
// A whole block (a fixed-size copy: one unaligned load per register).
template <typename V, typename T>
TF_EXT_SIMD_INLINE V Load(const T* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}

// Stores the first `count` lanes of v at p.
template <typename V, typename T>
TF_EXT_SIMD_INLINE void Store(const V& v, T* p, int64_t count) {
  std::memcpy(p, &v, static_cast<size_t>(count) * sizeof(T));
}
template <typename V, typename T>
TF_EXT_SIMD_INLINE void Store(const V& v, T* p) {
  std::memcpy(p, &v, sizeof(V));
}

// Reinterprets a block's bits as another block type of the same size.
template <typename To, typename From>
TF_EXT_SIMD_INLINE To BitCast(const From& v) {
  static_assert(sizeof(To) == sizeof(From));
  To out;
  std::memcpy(&out, &v, sizeof(To));
  return out;
}

// ---- Run-time dispatch ----

// Instruction-set levels, each with its block width.
enum class Isa : int {
  kBaseline = 0,  // x86-64 baseline (SSE2) or any other CPU: 16-byte blocks
  kAvx2 = 1,      // 32-byte blocks
  kAvx512 = 2,    // AVX-512 F, DQ, BW and VL: 64-byte blocks
};
constexpr int kNumIsas = 3;

inline const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    default: return "baseline";
  }
}

// The widest level this CPU (and OS) supports.
inline Isa DetectedIsa() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const Isa detected = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
      return Isa::kAvx512;
    }
    if (__builtin_cpu_supports("avx2")) return Isa::kAvx2;
    return Isa::kBaseline;
  }();
  return detected;
#else
  return Isa::kBaseline;
#endif
}

// The cap set by SetIsaCap, initially from TF_EXT_CPU_ISA (unset or unknown: no cap).
inline std::atomic<int>& IsaCap() {
  static std::atomic<int> cap([] {
    const char* env = std::getenv("TF_EXT_CPU_ISA");
    const std::string v = env ? env : "";
    if (v == "baseline" || v == "sse2") return static_cast<int>(Isa::kBaseline);
    if (v == "avx2") return static_cast<int>(Isa::kAvx2);
    return static_cast<int>(Isa::kAvx512);
  }());
  return cap;
}

// Caps the level every later kernel call uses, as TF_EXT_CPU_ISA does at start-up
// (process-wide).
inline void SetIsaCap(Isa cap) { IsaCap().store(static_cast<int>(cap)); }

// The level kernels run at: the detected one, capped.
inline Isa ActiveIsa() {
  const int cap = IsaCap().load(std::memory_order_relaxed);
  const int detected = static_cast<int>(DetectedIsa());
  return static_cast<Isa>(cap < detected ? cap : detected);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TF_EXT_TARGET_AVX2 __attribute__((target("avx2"), flatten))
// DQ/BW/VL with F (every AVX-512 CPU since Skylake-SP): without DQ, GCC cannot turn a
// comparison's mask register back into a vector and falls back to scalar code.
#define TF_EXT_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl"), flatten))
#define TF_EXT_HAVE_WIDE_SIMD 1
#else
#define TF_EXT_HAVE_WIDE_SIMD 0
#endif

// Dispatch<Kernel>::Run(args...) calls Kernel::template Run<kBytes>(args...) with the block
// width of ActiveIsa(), that instantiation compiled for its instruction set. `flatten`
// inlines everything the kernel calls into the wide entry points, so no helper is left
// compiled for the baseline with a wide block type (GCC would lower that piecewise).
// Arguments are passed by value: pointers, sizes and small structs, never blocks.
template <typename Kernel>
struct Dispatch {
  template <typename... Args>
  static void Run(Args... args) {
#if TF_EXT_HAVE_WIDE_SIMD
    switch (ActiveIsa()) {
      case Isa::kAvx512: return RunAvx512(args...);
      case Isa::kAvx2: return RunAvx2(args...);
      default: break;
    }
#endif
    Kernel::template Run<16>(args...);
  }

#if TF_EXT_HAVE_WIDE_SIMD
  template <typename... Args>
  TF_EXT_TARGET_AVX2 static void RunAvx2(Args... args) {
    Kernel::template Run<32>(args...);
  }
  template <typename... Args>
  TF_EXT_TARGET_AVX512 static void RunAvx512(Args... args) {
    Kernel::template Run<64>(args...);
  }
#endif
};

}  // namespace tensorflow::tf_ext::simd

#endif  // TF_EXT_KERNELS_CPU_SIMD_H_
