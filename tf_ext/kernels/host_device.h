// TF_EXT_HOST_DEVICE: marks a CUDA kernel's per-element (per-thread) body, a function of the
// element/thread index and the kernel's arguments, as compiled for both host and device. The
// CPU functor calls the same body, so a CPU test that runs it over the whole grid checks the
// CUDA kernel's indexing and maths on machines without a GPU.
#ifndef TF_EXT_KERNELS_HOST_DEVICE_H_
#define TF_EXT_KERNELS_HOST_DEVICE_H_

#if defined(__CUDACC__)
#define TF_EXT_HOST_DEVICE __host__ __device__
#else
#define TF_EXT_HOST_DEVICE
#endif

#endif  // TF_EXT_KERNELS_HOST_DEVICE_H_
