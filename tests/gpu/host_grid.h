// A grid's bodies run on the host: body(i) for i in [0, n) on the calling thread, the CPU
// picture of a grid. The harness's references and its host emulation use it.
#ifndef TESTS_GPU_HOST_GRID_H_
#define TESTS_GPU_HOST_GRID_H_

#include <cstdint>

namespace tensorflow::tf_ext::gpu {

template <typename Body>
inline void RunGridOnHost(int64_t n, const Body& body) {
  for (int64_t i = 0; i < n; ++i) body(i);
}

}  // namespace tensorflow::tf_ext::gpu

#endif  // TESTS_GPU_HOST_GRID_H_
