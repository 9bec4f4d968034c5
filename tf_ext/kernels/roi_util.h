// CPU helpers shared by the ROI ops' functors (host code only).
#ifndef TF_EXT_KERNELS_ROI_UTIL_H_
#define TF_EXT_KERNELS_ROI_UTIL_H_

#include <cstdint>
#include <vector>

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

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_KERNELS_ROI_UTIL_H_
