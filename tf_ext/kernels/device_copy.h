// Inputs that a GPU kernel takes in host memory (HostMemory(...) in its registration) so that
// the host validates them with the CPU kernel's own checks (CheckRois; RoiPoolGrad's argmax
// range check) before any device code sees them: hostile ROI rows (a batch index out of range,
// NaN or infinite coordinates) are rejected with the CPU kernel's error and never reach a CUDA
// kernel. The functors take device pointers, so after validation the GPU kernel copies such an
// input to a device temp; on the CPU the tensor is used as it is.
#ifndef TF_EXT_KERNELS_DEVICE_COPY_H_
#define TF_EXT_KERNELS_DEVICE_COPY_H_

#include "absl/status/status.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tensorflow::tf_ext {

template <typename Device>
struct HostInput;

// CPU: host memory is the kernel's memory.
template <>
struct HostInput<Eigen::ThreadPoolDevice> {
  static absl::Status ToDevice(OpKernelContext*, const Tensor& host, Tensor* on_device) {
    *on_device = host;
    return absl::OkStatus();
  }
};

#if GOOGLE_CUDA
// GPU: a device temp filled on the op's stream. The stream is synchronised before returning:
// the source may be pinned host memory, whose copy is truly asynchronous, and TensorFlow may
// reuse the input's buffer once Compute returns. These inputs are small (R x 5 floats; argmax
// is the size of the pooled output), so the copy is cheap; the synchronisation is the price
// of validating on the host (a follow-up could keep the source alive with an event instead).
template <>
struct HostInput<Eigen::GpuDevice> {
  static absl::Status ToDevice(OpKernelContext* ctx, const Tensor& host, Tensor* on_device) {
    TF_RETURN_IF_ERROR(ctx->allocate_temp(host.dtype(), host.shape(), on_device));
    const size_t bytes = host.TotalBytes();
    if (bytes == 0) return absl::OkStatus();
    const Eigen::GpuDevice& d = ctx->eigen_device<Eigen::GpuDevice>();
    d.memcpyHostToDevice(on_device->data(), host.data(), bytes);
    d.synchronize();
    return absl::OkStatus();
  }
};
#endif  // GOOGLE_CUDA

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_KERNELS_DEVICE_COPY_H_
