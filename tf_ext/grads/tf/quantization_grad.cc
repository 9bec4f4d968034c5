// Gradients of TensorFlow's fake-quantisation ops that no C++ registry has in TensorFlow 2.21,
// written from Python's python/ops/array_ops.py and array_grad.py. Each is registered in both
// C++ registries when the op library loads, unless TensorFlow has one already
// (TF_EXT_REGISTER_TF_GRADIENT); QuantizeAndDequantizeV4's replaces TensorFlow's, which fails
// (TF_EXT_DECLARE_OP ... Overrides). Where Python returns None the gradient is zeros.
//
// Checked against numeric Jacobians (tests/tf_array_misc_grads_test.cc) and against Python's
// gradients on the same inputs (tests/python/test_tf_array_misc_grads.py).
#include <string>

#include "tf_ext/grads/manifest.h"
#include "tf_ext/grads/tf/tf_gradient.h"

namespace tensorflow::tf_ext {
namespace {

// FakeQuantWithMinMaxArgs(inputs; min, max) = inputs rounded to the quantisation grid of
// [min, max] (nudged), clamped: straight-through inside the range, 0 outside:
// d(inputs) = FakeQuantWithMinMaxArgsGradient(d(outputs), inputs), with the forward's attrs.
absl::Status FakeQuantArgsGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("FakeQuantWithMinMaxArgs", attrs);
  b.DedicatedOp("FakeQuantWithMinMaxArgsGradient", {GradName("outputs"), "inputs"},
                {"min", "max", "num_bits", "narrow_range"}, {"inputs"});
  return b.Build(g);
}

// FakeQuantWithMinMaxVars[PerChannel](inputs, min, max): the dedicated backward op gives
// d(inputs) (straight-through inside the nudged range) and d(min), d(max) (the gradient of the
// inputs clamped to them, summed; per channel: per last-axis channel).
absl::Status FakeQuantVarsGrad(const std::string& op, const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(op, attrs);
  b.DedicatedOp(op + "Gradient", {GradName("outputs"), "inputs", "min", "max"},
                {"num_bits", "narrow_range"}, {"inputs", "min", "max"});
  return b.Build(g);
}

// QuantizeAndDequantizeV2(input, input_min, input_max): Python's straight-through estimator,
// d(input) = d(output); the range gets zeros (Python: None).
absl::Status QuantizeAndDequantizeV2Grad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("QuantizeAndDequantizeV2", attrs);
  b.Return("input", b.Add({{"dinput"}, "Identity", {GradName("output")}, b.PassAttrs({"T"})}));
  b.NotDifferentiable("input_min");
  b.NotDifferentiable("input_max");
  return b.Build(g);
}

// QuantizeAndDequantizeV4(input, input_min, input_max): Python's gradient, the backward op
// QuantizeAndDequantizeV4Grad(d(output), input, input_min, input_max) with the op's axis: the
// incoming gradient masked to the range, and the range's gradients. Overrides TensorFlow's
// (declared below).
absl::Status QuantizeAndDequantizeV4Grad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("QuantizeAndDequantizeV4", attrs);
  b.RequireTypes("T", {DT_HALF, DT_BFLOAT16, DT_FLOAT, DT_DOUBLE});
  b.DedicatedOp("QuantizeAndDequantizeV4Grad",
                {GradName("output"), "input", "input_min", "input_max"}, {"T", "axis"},
                {"input", "input_min", "input_max"});
  return b.Build(g);
}

// QuantizeAndDequantizeV4Grad(gradients, input, input_min, input_max) = (gradients masked to
// input_min <= input <= input_max (per channel along `axis`), 0, 0): linear in `gradients`
// with the same mask, piecewise constant in the rest. Python's registered gradient of this op
// cannot run (it calls a two-argument function with the op's three incoming gradients); this
// is the derivative: d(gradients) = the mask applied to d(input_backprop), the rest zeros.
absl::Status QuantizeAndDequantizeV4GradGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("QuantizeAndDequantizeV4Grad", attrs);
  b.RequireTypes("T", {DT_HALF, DT_BFLOAT16, DT_FLOAT, DT_DOUBLE});
  // d(gradients) = d(input_backprop) * [input_min <= input <= input_max]
  b.Return("gradients",
           b.Add({{"masked", "masked_min", "masked_max"}, "QuantizeAndDequantizeV4Grad",
                  {GradName("input_backprop"), "input", "input_min", "input_max"},
                  b.PassAttrs({"T", "axis"})}));
  b.NotDifferentiable("input");      // the mask is piecewise constant in input
  b.NotDifferentiable("input_min");  // ... and in the range
  b.NotDifferentiable("input_max");
  return b.Build(g);
}

}  // namespace

TF_EXT_REGISTER_TF_GRADIENT("FakeQuantWithMinMaxArgs", FakeQuantArgsGrad);
TF_EXT_REGISTER_TF_GRADIENT("FakeQuantWithMinMaxVars", [](const AttrSlice& a, FunctionDef* g) {
  return FakeQuantVarsGrad("FakeQuantWithMinMaxVars", a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("FakeQuantWithMinMaxVarsPerChannel",
                            [](const AttrSlice& a, FunctionDef* g) {
                              return FakeQuantVarsGrad("FakeQuantWithMinMaxVarsPerChannel", a, g);
                            });
TF_EXT_REGISTER_TF_GRADIENT("QuantizeAndDequantizeV2", QuantizeAndDequantizeV2Grad);
TF_EXT_REGISTER_TF_GRADIENT("QuantizeAndDequantizeV4Grad", QuantizeAndDequantizeV4GradGrad);
// TensorFlow's gradient of this one is wrong: replaced in every registry (docs/registries.md).
TF_EXT_DECLARE_OP("QuantizeAndDequantizeV4")
    .Doc("Quantizes then dequantizes a tensor (TensorFlow's op; tf.quantization."
         "quantize_and_dequantize_v2 runs it).")
    .Gradient(&QuantizeAndDequantizeV4Grad,
              "QuantizeAndDequantizeV4Grad(d(output), input, input_min, input_max)")
    .Overrides("TensorFlow 2.21's gradient (cc/gradients/array_grad.cc, a client gradient) "
               "passes an int32 tensor where QuantizeAndDequantizeV4Grad takes the input: it "
               "fails to build for every dtype (\"Inconsistent values for attr 'T' DT_FLOAT vs. "
               "DT_INT32\")")
    .Register();
// The backward ops themselves: not differentiable, as in Python (array_grad.py).
TF_EXT_REGISTER_TF_GRADIENT("FakeQuantWithMinMaxArgsGradient", nullptr);
TF_EXT_REGISTER_TF_GRADIENT("FakeQuantWithMinMaxVarsGradient", nullptr);
TF_EXT_REGISTER_TF_GRADIENT("FakeQuantWithMinMaxVarsPerChannelGradient", nullptr);

}  // namespace tensorflow::tf_ext
