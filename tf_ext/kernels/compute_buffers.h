// Half precision for kernels whose functors compute in float (MedianPool2D, RoiPool,
// PsRoiAlign and their gradients): the kernel for T = Eigen::half widens its half inputs to
// float temporaries (exact), runs the float functor and rounds the float results into its half
// outputs (to nearest even), once. So a half op gives exactly its float op's result on the
// widened inputs, rounded; selections (median, max, argmax) are exact; sums are taken in float
// and rounded once. The same integer-only conversions run on the CPU and the GPU
// (kernels/gpu/half_body.h), so half results agree bit for bit across devices whenever the
// float ones do. For every other T this is the tensors' own buffers, at no cost.
//
//   ComputeBuffers<Device, T> io(ctx);
//   const ComputeType<T>* x;  ComputeType<T>* y;
//   OP_REQUIRES_OK(ctx, io.In(x_tensor, &x));
//   OP_REQUIRES_OK(ctx, io.Out(y_tensor, &y));   // y_tensor: an allocated output
//   functor::Foo<Device, ComputeType<T>>()(device, ..., x, y);
//   io.Finish();                                 // rounds y into y_tensor
#ifndef TF_EXT_KERNELS_COMPUTE_BUFFERS_H_
#define TF_EXT_KERNELS_COMPUTE_BUFFERS_H_

#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tf_ext/kernels/half_float_functor.h"

namespace tensorflow::tf_ext {

// The type a functor computes in for tensors of type T.
template <typename T>
struct ComputeTypeOf {
  using type = T;
};
template <>
struct ComputeTypeOf<Eigen::half> {
  using type = float;
};
template <typename T>
using ComputeType = typename ComputeTypeOf<T>::type;

template <typename Device, typename T>
class ComputeBuffers {
 public:
  using C = ComputeType<T>;
  static constexpr bool kWidened = !std::is_same_v<T, C>;

  explicit ComputeBuffers(OpKernelContext* ctx) : ctx_(ctx) {}

  // The elements of input `t` as C: its own buffer, or a widened copy of a half tensor.
  absl::Status In(const Tensor& t, const C** data) {
    if constexpr (!kWidened) {
      *data = t.flat<T>().data();
    } else {
      Tensor wide;
      TF_RETURN_IF_ERROR(ctx_->allocate_temp(DT_FLOAT, t.shape(), &wide));
      functor::HalfToFloat<Device>()(ctx_->eigen_device<Device>(), Bits(t), t.NumElements(),
                                     wide.flat<float>().data());
      *data = wide.flat<float>().data();
      temps_.push_back(std::move(wide));
    }
    return absl::OkStatus();
  }

  // Where to write output `t` (allocated) as C: its own buffer, or a float temporary that
  // Finish() rounds into it.
  absl::Status Out(Tensor* t, C** data) {
    if constexpr (!kWidened) {
      *data = t->flat<T>().data();
    } else {
      Tensor wide;
      TF_RETURN_IF_ERROR(ctx_->allocate_temp(DT_FLOAT, t->shape(), &wide));
      *data = wide.flat<float>().data();
      outputs_.emplace_back(std::move(wide), t);
    }
    return absl::OkStatus();
  }

  // Rounds every Out() temporary into its output; call once, after the functor.
  void Finish() {
    if constexpr (kWidened) {
      for (auto& [wide, out] : outputs_) {
        functor::FloatToHalf<Device>()(ctx_->eigen_device<Device>(), wide.template flat<float>().data(),
                                       out->NumElements(),
                                       reinterpret_cast<uint16_t*>(out->template flat<T>().data()));
      }
    }
  }

 private:
  static const uint16_t* Bits(const Tensor& t) {
    static_assert(sizeof(T) == sizeof(uint16_t), "ComputeBuffers widens 16-bit types only");
    return reinterpret_cast<const uint16_t*>(t.flat<T>().data());
  }

  OpKernelContext* ctx_;
  std::vector<Tensor> temps_;                          // widened inputs, alive until done
  std::vector<std::pair<Tensor, Tensor*>> outputs_;    // (float temporary, half output)
};

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_KERNELS_COMPUTE_BUFFERS_H_
