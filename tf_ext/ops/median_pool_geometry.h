// The geometry of TfExt>MedianPool2D that its shape function and its kernels share: one
// spatial dimension's output size and padding, and the largest window the kernels take. Plain
// inline code, compilable by nvcc (the functors in tf_ext/kernels/median_pool_functor.h use it).
#ifndef TF_EXT_OPS_MEDIAN_POOL_GEOMETRY_H_
#define TF_EXT_OPS_MEDIAN_POOL_GEOMETRY_H_

#include <algorithm>
#include <cstdint>

namespace tensorflow::tf_ext {

// Output size and leading padding of one spatial dimension, MaxPool's rules:
//   VALID: out = ceil((in - k + 1) / s) windows lying fully inside, or 0 if none fits
//          (k > in): an empty output, not an error; pad_before = 0.
//   SAME:  out = ceil(in / s); pad_before = max((out - 1)*s + k - in, 0) / 2.
// Requires in >= 0, k >= 1, s >= 1. Written so that no intermediate overflows int64.
// With SAME every window holds at least one image element (pad_before <= (k-1)/2).
inline void MedianPoolOutputSize(int64_t in, int64_t k, int64_t s, bool same, int64_t* out,
                                 int64_t* pad_before) {
  *pad_before = 0;
  if (!same) {
    *out = in >= k ? (in - k) / s + 1 : 0;
    return;
  }
  *out = in == 0 ? 0 : (in - 1) / s + 1;
  if (*out > 0) {
    const int64_t covered_by_last = in - (*out - 1) * s;  // in [1, s]
    *pad_before = std::max<int64_t>(k - covered_by_last, 0) / 2;
  }
}

// The most in-image elements one window may hold: window indices must fit the float sort
// key's low 32 bits, so the shape function and the kernels reject larger windows (a window
// clipped to the image holds this many elements only in planes of > 16 GiB).
inline constexpr int64_t kMaxMedianPoolWindowElements = int64_t{0xFFFFFFFF};

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_OPS_MEDIAN_POOL_GEOMETRY_H_
