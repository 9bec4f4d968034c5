// The elementwise CPU kernels behind the test-only ops (TfExtTest>Cube, >CubeDedicated,
// >BadScale, >Expo, >Twice, ...): y(i) = F()(x(i)), or y(i) = F()(a(i), b(i)) for two inputs of
// one shape, for a stateless functor F, registered for float and double. Test op libraries
// declare their op and functor and register it with one line:
//
//   TF_EXT_TEST_REGISTER_ELEMENTWISE_KERNEL("TfExtTest>Cube", CubeF);
#ifndef TF_EXT_TESTS_TESTLIB_ELEMENTWISE_OP_H_
#define TF_EXT_TESTS_TESTLIB_ELEMENTWISE_OP_H_

#include <algorithm>
#include <type_traits>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "absl/strings/str_cat.h"

namespace tensorflow::tf_ext::test {

template <typename T, typename F>
class ElementwiseOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    constexpr bool kBinary = std::is_invocable_v<F, T, T>;
    const Tensor& a = ctx->input(0);
    if constexpr (kBinary) {
      const Tensor& b = ctx->input(1);
      OP_REQUIRES(ctx, a.shape() == b.shape(),
                  absl::InvalidArgumentError(absl::StrCat(
                      type_string(), ": input shapes differ: ", a.shape().DebugString(), " vs ",
                      b.shape().DebugString())));
    }
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, a.shape(), &y));
    const T* in = a.flat<T>().data();
    T* out = y->flat<T>().data();
    if constexpr (kBinary) {
      const T* in2 = ctx->input(1).flat<T>().data();
      std::transform(in, in + a.NumElements(), in2, out, [](T u, T v) { return F()(u, v); });
    } else {
      std::transform(in, in + a.NumElements(), out, [](T u) { return F()(u); });
    }
  }
};

// y = x^3 (the shared test op's maths).
struct CubeF {
  template <typename T>
  T operator()(T x) const { return x * x * x; }
};

// d(x) of y = x^3: 3 x^2 d(y).
struct CubeGradF {
  template <typename T>
  T operator()(T x, T dy) const { return T(3) * x * x * dy; }
};

// y = kFactor * x.
template <int kFactor>
struct ScaleF {
  template <typename T>
  T operator()(T x) const { return T(kFactor) * x; }
};

}  // namespace tensorflow::tf_ext::test

// CPU kernels for float and double of an op with one or two inputs of type T and one output.
#define TF_EXT_TEST_REGISTER_ELEMENTWISE_KERNEL(op_name, ...)                                 \
  REGISTER_KERNEL_BUILDER(Name(op_name).Device(DEVICE_CPU).TypeConstraint<float>("T"),        \
                          ::tensorflow::tf_ext::test::ElementwiseOp<float, __VA_ARGS__>);     \
  REGISTER_KERNEL_BUILDER(Name(op_name).Device(DEVICE_CPU).TypeConstraint<double>("T"),       \
                          ::tensorflow::tf_ext::test::ElementwiseOp<double, __VA_ARGS__>)

#endif  // TF_EXT_TESTS_TESTLIB_ELEMENTWISE_OP_H_
