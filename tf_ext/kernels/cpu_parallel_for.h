// CPU work splitting shared by every tf_ext CPU functor.
#ifndef TF_EXT_KERNELS_CPU_PARALLEL_FOR_H_
#define TF_EXT_KERNELS_CPU_PARALLEL_FOR_H_

#define EIGEN_USE_THREADS
#include <cstdint>
#include <functional>

#include "unsupported/Eigen/CXX11/Tensor"

namespace tensorflow::tf_ext {

using CPUDevice = Eigen::ThreadPoolDevice;

// Runs fn(begin, end) over [0, total) on the op's intra-op thread pool. This is the scheduler
// behind thread::ThreadPool::ParallelFor (the pool an OpKernel's eigen_cpu_device() wraps),
// reached through the Device so that functors stay free of op_kernel.h. `cost_per_unit` is an
// estimate in cycles per unit; small totals run inline on the calling thread.
inline void ParallelFor(const CPUDevice& d, int64_t total, int64_t cost_per_unit,
                        const std::function<void(int64_t, int64_t)>& fn) {
  if (total <= 0) return;
  d.parallelFor(total,
                Eigen::TensorOpCost(/*bytes_loaded=*/0, /*bytes_stored=*/0,
                                    /*compute_cycles=*/static_cast<double>(cost_per_unit)),
                [&fn](Eigen::Index begin, Eigen::Index end) { fn(begin, end); });
}

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_KERNELS_CPU_PARALLEL_FOR_H_
