// CPU helpers shared by the ROI ops' functors (host code only).
#ifndef TF_EXT_KERNELS_ROI_UTIL_H_
#define TF_EXT_KERNELS_ROI_UTIL_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "tf_ext/kernels/cpu_parallel_for.h"
#include "tf_ext/kernels/cpu_simd.h"

namespace tensorflow::tf_ext {

// The ROIs of each image, for backward passes that shard by image so that no two shards write
// the same element. Within an image the ROIs keep ascending order, which fixes the summation
// order and so makes the gradients deterministic.
class RoisByImage {
 public:
  // rois: [num_rois, 5] rows whose first entry is an integer-valued batch index in
  // [0, num_images) (validated by the kernel).
  RoisByImage(const float* rois, int64_t num_rois, int64_t num_images)
      : first_(num_images + 1, 0), order_(num_rois) {
    for (int64_t r = 0; r < num_rois; ++r) ++first_[static_cast<int64_t>(rois[5 * r]) + 1];
    for (int64_t n = 0; n < num_images; ++n) first_[n + 1] += first_[n];
    std::vector<int64_t> next(first_.begin(), first_.end() - 1);
    for (int64_t r = 0; r < num_rois; ++r) order_[next[static_cast<int64_t>(rois[5 * r])]++] = r;
  }

  // The indices of image n's ROIs, ascending.
  const int64_t* begin(int64_t n) const { return order_.data() + first_[n]; }
  const int64_t* end(int64_t n) const { return order_.data() + first_[n + 1]; }

 private:
  std::vector<int64_t> first_;  // image n's ROIs are order_[first_[n], first_[n + 1])
  std::vector<int64_t> order_;
};

// AllInRange's scan of one shard, blocks of kBytes.
struct InRangeScan {
  template <int kBytes>
  static void Run(const int32_t* v, int64_t n, int32_t lo, int32_t hi, bool* ok) {
    using B = simd::Block<int32_t, kBytes>;
    constexpr int64_t kLanes = simd::kLanes<int32_t, kBytes>;
    // Running minimum and maximum (compare-and-select compiles to vector min/max at every
    // width; GCC 12 scalarises OR-ed 64-byte integer comparison masks).
    B mn = B{} + lo, mx = B{} + lo;
    int64_t k = 0;
    for (; k + kLanes <= n; k += kLanes) {
      const B x = simd::Load<B>(v + k);
      mn = x < mn ? x : mn;
      mx = x > mx ? x : mx;
    }
    bool any = false;
    for (int64_t l = 0; l < kLanes; ++l) any |= mn[l] < lo || mx[l] >= hi;
    for (; k < n; ++k) any |= v[k] < lo || v[k] >= hi;
    *ok = !any;
  }
};

// Whether every one of the n values lies in [lo, hi): a parallel scan in SIMD blocks, for
// validating large index tensors (RoiPool's argmax) before they are used as positions.
inline bool AllInRange(const CPUDevice& d, const int32_t* values, int64_t n, int32_t lo,
                       int32_t hi) {
  std::atomic<bool> ok{true};
  ParallelFor(d, n, /*cost_per_unit=*/1, [&](int64_t begin, int64_t end) {
    bool shard_ok = true;
    simd::Dispatch<InRangeScan>::Run(values + begin, end - begin, lo, hi, &shard_ok);
    if (!shard_ok) ok.store(false, std::memory_order_relaxed);
  });
  return ok.load();
}

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_KERNELS_ROI_UTIL_H_
