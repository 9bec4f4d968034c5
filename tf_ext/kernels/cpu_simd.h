// Fixed-width SIMD blocks for the CPU functors, as GCC/Clang vector extensions: one block is
// 16 bytes of T (4 floats, 2 doubles), operated on lane by lane with ordinary operators.
// Why not plain loops: GCC 12 at -O2 vectorises only with its "very cheap" cost model, which
// leaves loops of unknown trip count and branchy per-element code (NaN-aware selects, sign,
// key comparisons) scalar; a block type states the vectorisation instead of hoping for it.
// Why 16 bytes: the library's baseline target is x86-64 (SSE2, no -march=native), and wider
// generic vectors were measured 2-4x slower there (GCC lowers them piecewise through memory).
// Host code only (never seen by nvcc).
#ifndef TF_EXT_KERNELS_CPU_SIMD_H_
#define TF_EXT_KERNELS_CPU_SIMD_H_

#include <cstdint>
#include <cstring>

namespace tensorflow::tf_ext::simd {

constexpr int kBlockBytes = 16;

// Block<T>: the value block; Mask<T>: the same-width integer block, which comparisons of
// Blocks return (-1 for true, 0 for false per lane) and which holds T's bit patterns.
template <typename T>
struct BlockTypes;
template <>
struct BlockTypes<float> {
  typedef float Block __attribute__((vector_size(kBlockBytes)));
  typedef int32_t Mask __attribute__((vector_size(kBlockBytes)));
  using Int = int32_t;
};
template <>
struct BlockTypes<double> {
  typedef double Block __attribute__((vector_size(kBlockBytes)));
  typedef int64_t Mask __attribute__((vector_size(kBlockBytes)));
  using Int = int64_t;
};
template <>
struct BlockTypes<int32_t> {
  typedef int32_t Block __attribute__((vector_size(kBlockBytes)));
  typedef int32_t Mask __attribute__((vector_size(kBlockBytes)));
  using Int = int32_t;
};
template <>
struct BlockTypes<int64_t> {
  typedef int64_t Block __attribute__((vector_size(kBlockBytes)));
  typedef int64_t Mask __attribute__((vector_size(kBlockBytes)));
  using Int = int64_t;
};

template <typename T>
using Block = typename BlockTypes<T>::Block;
template <typename T>
using Mask = typename BlockTypes<T>::Mask;
template <typename T>
constexpr int64_t kLanes = kBlockBytes / sizeof(T);

// Loads `count` (<= kLanes<T>) elements from p into the first lanes; the rest are zero. For
// partial blocks at the end of a channel run.
template <typename V, typename T>
inline V Load(const T* p, int64_t count) {
  V v{};
  std::memcpy(&v, p, static_cast<size_t>(count) * sizeof(T));
  return v;
}
// A whole block (a fixed-size copy: one unaligned load per register).
template <typename V, typename T>
inline V Load(const T* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}

// Stores the first `count` lanes of v at p.
template <typename V, typename T>
inline void Store(const V& v, T* p, int64_t count) {
  std::memcpy(p, &v, static_cast<size_t>(count) * sizeof(T));
}
template <typename V, typename T>
inline void Store(const V& v, T* p) {
  std::memcpy(p, &v, sizeof(V));
}

// Reinterprets a block's bits as another block type of the same size.
template <typename To, typename From>
inline To BitCast(const From& v) {
  static_assert(sizeof(To) == sizeof(From));
  To out;
  std::memcpy(&out, &v, sizeof(To));
  return out;
}

}  // namespace tensorflow::tf_ext::simd

#endif  // TF_EXT_KERNELS_CPU_SIMD_H_
