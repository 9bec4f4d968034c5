// The few CUDA runtime calls gpu_harness.cu makes, emulated on the host (see the harness's
// TF_EXT_HARNESS_HOST_EMULATION): malloc'd "device" memory and launches run on the calling
// thread through gpu::RunGridOnHost. For checking the harness on machines without a GPU only.
#ifndef TESTS_GPU_HOST_EMULATION_H_
#define TESTS_GPU_HOST_EMULATION_H_

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "tests/gpu/host_grid.h"
#include "tf_ext/kernels/gpu/gpu_common.h"

using cudaError_t = int;
using cudaStream_t = void*;
using cudaEvent_t = std::chrono::steady_clock::time_point*;
constexpr cudaError_t cudaSuccess = 0;
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
struct cudaDeviceProp {
  char name[64] = "host emulation (no GPU involved)";
  int major = 0, minor = 0;
};

inline const char* cudaGetErrorString(cudaError_t) { return "host emulation error"; }
inline cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  *p = cudaDeviceProp();
  return cudaSuccess;
}
template <typename T>
cudaError_t cudaMalloc(T** p, size_t bytes) {
  *p = static_cast<T*>(std::malloc(bytes));
  return *p ? cudaSuccess : 2;
}
inline cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) {
  std::memcpy(d, s, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k) {
  return cudaMemcpy(d, s, n, k);
}
inline cudaError_t cudaMemset(void* d, int v, size_t n) {
  std::memset(d, v, n);
  return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
inline cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new std::chrono::steady_clock::time_point;
  return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e) {
  *e = std::chrono::steady_clock::now();
  return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  *ms = std::chrono::duration<float, std::milli>(*b - *a).count();
  return cudaSuccess;
}

namespace tensorflow::tf_ext::gpu {
template <typename Body>
cudaError_t LaunchGrid(cudaStream_t, int64_t n, const Body& body) {
  RunGridOnHost(n, body);
  return cudaSuccess;
}
}  // namespace tensorflow::tf_ext::gpu

#endif  // TESTS_GPU_HOST_EMULATION_H_
