// Gradients of TensorFlow's nn ops that no C++ registry has in TensorFlow 2.21, written from
// the formulas of Python's python/ops/nn_grad.py and nn_fused_batch_norm_grad.py. Most are the
// gradients of backward ops (ReluGrad, MaxPoolGrad, Conv2DBackpropFilter, ...): the building
// blocks of second derivatives (Hessian-vector products, gradient penalties). Each is
// registered in both C++ registries when the op library loads, unless TensorFlow has one
// already (TF_EXT_REGISTER_TF_GRADIENT). Where Python returns None the gradient is zeros.
//
// Checked against numeric Jacobians (tf_ext/tools/tf_core_gradcheck_spec.txt, run by
// tests/tf_grads_gradcheck_test.cc) and against Python's gradients on the same inputs
// (tests/python/test_tf_nn_math_grads.py).
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tf_ext/grads/manifest.h"
#include "tf_ext/grads/tf/tf_gradient.h"

namespace tensorflow::tf_ext {
namespace {

// ---------------------------------------------------------------------------------------------
// Activations' backward ops: f(gradients, z) = gradients * f'(z).

// ReluGrad(gradients, features) = gradients * (features > 0).
absl::Status ReluGradGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("ReluGrad", attrs);
  const NodeAttrs t = b.PassAttrs({"T"});
  // d(gradients) = d(backprops) * (features > 0): linear in gradients
  b.Return("gradients", b.Add({{"dg"}, "ReluGrad", {GradName("backprops"), "features"}, t}));
  // d(features) = 0: piecewise constant in features (Python: zeros_like)
  b.NotDifferentiable("features");
  return b.Build(g);
}

// Relu6Grad(gradients, features) = gradients * (0 < features < 6).
absl::Status Relu6GradGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("Relu6Grad", attrs);
  const NodeAttrs t = b.PassAttrs({"T"});
  // d(gradients) = d(backprops) * (0 < features < 6)
  b.Return("gradients", b.Add({{"dg"}, "Relu6Grad", {GradName("backprops"), "features"}, t}));
  // d(features) = 0: piecewise constant in features
  b.NotDifferentiable("features");
  return b.Build(g);
}

// EluGrad(gradients, outputs) = gradients * (outputs + 1) where outputs < 0, else gradients;
// SeluGrad(gradients, outputs) = gradients * (outputs + scale * alpha) where outputs < 0,
// else gradients * scale. Both are linear in `outputs` with slope `gradients` where
// outputs < 0, so the two gradients share one body.
absl::Status ExpLinearUnitGradGrad(const std::string& op, const AttrSlice& attrs,
                                   FunctionDef* g) {
  grad::GradBuilder b(op, attrs);
  const NodeAttrs t = b.PassAttrs({"T"});
  const std::string d = GradName("backprops");
  // d(gradients) = <op>(d(backprops), outputs): linear in gradients
  b.Return("gradients", b.Add({{"dg"}, op, {d, "outputs"}, t}));
  const std::string zero = b.TypedConst("zero", 0.0);
  b.Add({{"negative"}, "Less", {"outputs", zero}, t});          // outputs < 0
  b.Add({{"slope"}, "Mul", {d, "gradients"}, t});               // d(backprops) * gradients
  b.Add({{"zeros"}, "ZerosLike", {"outputs"}, t});
  // d(outputs) = where(outputs < 0, d(backprops) * gradients, 0)
  b.Return("outputs", b.Add({{"doutputs"}, "Select", {"negative", "slope", "zeros"}, t}));
  return b.Build(g);
}
absl::Status EluGradGrad(const AttrSlice& attrs, FunctionDef* g) {
  return ExpLinearUnitGradGrad("EluGrad", attrs, g);
}
absl::Status SeluGradGrad(const AttrSlice& attrs, FunctionDef* g) {
  return ExpLinearUnitGradGrad("SeluGrad", attrs, g);
}

// SoftplusGrad(gradients, features) = gradients * sigmoid(features).
absl::Status SoftplusGradGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("SoftplusGrad", attrs);
  const NodeAttrs t = b.PassAttrs({"T"});
  const std::string d = GradName("backprops");
  // d(gradients) = d(backprops) * sigmoid(features)
  b.Return("gradients", b.Add({{"dg"}, "SoftplusGrad", {d, "features"}, t}));
  // sigmoid'(x) = 1 / (exp(-x) + 2 + exp(x))
  const std::string two = b.TypedConst("two", 2.0);
  b.Add({{"neg_x"}, "Neg", {"features"}, t});
  b.Add({{"exp_neg_x"}, "Exp", {"neg_x"}, t});                   // exp(-x)
  b.Add({{"exp_x"}, "Exp", {"features"}, t});                    // exp(x)
  b.Add({{"sum1"}, "Add", {"exp_neg_x", two}, t});
  b.Add({{"denom"}, "Add", {"sum1", "exp_x"}, t});               // exp(-x) + 2 + exp(x)
  b.Add({{"num"}, "Mul", {d, "gradients"}, t});                  // d(backprops) * gradients
  // d(features) = d(backprops) * gradients / (exp(-x) + 2 + exp(x))
  b.Return("features", b.Add({{"dx"}, "RealDiv", {"num", "denom"}, t}));
  return b.Build(g);
}

// ---------------------------------------------------------------------------------------------
// Bias, pooling and convolution backward ops: each is linear in its incoming gradient, so its
// gradient with respect to that input is the matching forward op (the adjoint of an adjoint);
// integer size arguments get zeros.

// BiasAddGrad(out_backprop) = sum of out_backprop over every axis but the channel axis.
absl::Status BiasAddGradGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("BiasAddGrad", attrs);
  const NodeAttrs t = b.PassAttrs({"T"});
  b.Add({{"zeros"}, "ZerosLike", {"out_backprop"}, t});
  // d(out_backprop) = d(output) broadcast along the channel axis of data_format:
  // BiasAdd(0, d(output)) places d(output)[c] at every position of channel c.
  b.Return("out_backprop", b.Add({{"dout_backprop"}, "BiasAdd",
                                  {"zeros", GradName("output")},
                                  b.PassAttrs({"T", "data_format"})}));
  return b.Build(g);
}

// AvgPoolGrad(orig_input_shape, grad): the adjoint of AvgPool.
absl::Status AvgPoolGradGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("AvgPoolGrad", attrs);
  // d(orig_input_shape) = 0: an integer shape (Python: stop_gradient of it)
  b.NotDifferentiable("orig_input_shape");
  // d(grad) = AvgPool(d(output)): AvgPoolGrad is AvgPool's adjoint, whose adjoint is AvgPool
  b.Return("grad", b.Add({{"dgrad"}, "AvgPool", {GradName("output")},
                          b.PassAttrs({"ksize", "strides", "padding", "data_format", "T"})}));
  return b.Build(g);
}

// MaxPoolGradV2(orig_input, orig_output, grad, ksize, strides) routes grad to each window's
// argmax: piecewise constant in orig_input/orig_output, linear in grad.
absl::Status MaxPoolGradV2Grad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("MaxPoolGradV2", attrs);
  b.NotDifferentiable("orig_input");   // d(orig_input) = 0 (argmax positions only)
  b.NotDifferentiable("orig_output");  // d(orig_output) = 0
  // d(grad) = d(output) gathered at each window's argmax = MaxPoolGradGradV2(d(output))
  b.Return("grad", b.Add({{"dgrad"}, "MaxPoolGradGradV2",
                          {"orig_input", "orig_output", GradName("output"), "ksize", "strides"},
                          b.PassAttrs({"padding", "data_format", "T"})}));
  b.NotDifferentiable("ksize");    // integer window
  b.NotDifferentiable("strides");  // integer strides
  return b.Build(g);
}

// MaxPoolGradGrad(orig_input, orig_output, grad) gathers grad at each window's argmax: its
// adjoint scatters back, which is MaxPoolGrad.
absl::Status MaxPoolGradGradGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("MaxPoolGradGrad", attrs);
  b.NotDifferentiable("orig_input");   // d(orig_input) = 0 (argmax positions only)
  b.NotDifferentiable("orig_output");  // d(orig_output) = 0
  // d(grad) = d(output) scattered to each window's argmax = MaxPoolGrad(d(output))
  b.Return("grad", b.Add({{"dgrad"}, "MaxPoolGrad",
                          {"orig_input", "orig_output", GradName("output")},
                          b.PassAttrs({"ksize", "strides", "padding", "data_format", "T"})}));
  return b.Build(g);
}

// Conv2D(input, filter): bilinear. Overrides TensorFlow's function gradient (declared below).
absl::Status Conv2DGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("Conv2D", attrs);
  // Every attr of the convolution, dilations and explicit paddings included.
  const NodeAttrs conv = b.PassAttrs({"T", "strides", "use_cudnn_on_gpu", "padding",
                                      "explicit_paddings", "data_format", "dilations"});
  b.Add({{"input_shape"}, "Shape", {"input"}, {{"T", b.TypeOf("input")}, {"out_type", DT_INT32}}});
  b.Add({{"filter_shape"}, "Shape", {"filter"}, {{"T", b.TypeOf("filter")}, {"out_type", DT_INT32}}});
  // d(input) = Conv2DBackpropInput(shape(input), filter, d(output))
  b.Return("input", b.Add({{"dinput"}, "Conv2DBackpropInput",
                           {"input_shape", "filter", GradName("output")}, conv}));
  // d(filter) = Conv2DBackpropFilter(input, shape(filter), d(output))
  b.Return("filter", b.Add({{"dfilter"}, "Conv2DBackpropFilter",
                            {"input", "filter_shape", GradName("output")}, conv}));
  return b.Build(g);
}

// MaxPool(input): d(input) = d(output) scattered to each window's argmax, MaxPoolGrad with
// every attr of the pooling, explicit paddings included.
absl::Status MaxPoolGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("MaxPool", attrs);
  // d(input) = MaxPoolGrad(input, output, d(output))
  b.Return("input", b.Add({{"dinput"}, "MaxPoolGrad", {"input", "output", GradName("output")},
                           b.PassAttrs({"ksize", "strides", "padding", "explicit_paddings",
                                        "data_format", "T"})}));
  return b.Build(g);
}

// LRN(input) = output: d(input) = LRNGrad(d(output), input, output) with the LRN's
// depth_radius, bias, alpha and beta (Python's _LRNGrad).
absl::Status LrnGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("LRN", attrs);
  b.Return("input", b.Add({{"dinput"}, "LRNGrad", {GradName("output"), "input", "output"},
                           b.PassAttrs({"depth_radius", "bias", "alpha", "beta", "T"})}));
  return b.Build(g);
}

// MaxPoolGrad(orig_input, orig_output, grad) scatters grad to each window's argmax: piecewise
// constant in orig_input/orig_output, linear in grad, whose adjoint gathers at the argmax.
absl::Status MaxPoolGradGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("MaxPoolGrad", attrs);
  b.NotDifferentiable("orig_input");   // d(orig_input) = 0 (argmax positions only)
  b.NotDifferentiable("orig_output");  // d(orig_output) = 0
  // d(grad) = d(output) gathered at each window's argmax = MaxPoolGradGrad(d(output))
  b.Return("grad", b.Add({{"dgrad"}, "MaxPoolGradGrad",
                          {"orig_input", "orig_output", GradName("output")},
                          b.PassAttrs({"ksize", "strides", "padding", "data_format", "T"})}));
  return b.Build(g);
}

// Conv2DBackpropFilter(input, filter_sizes, out_backprop) = dFilter of Conv2D(input, filter)
// for incoming out_backprop: bilinear in (input, out_backprop).
absl::Status Conv2DBackpropFilterGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("Conv2DBackpropFilter", attrs);
  const NodeAttrs conv = b.PassAttrs({"T", "strides", "use_cudnn_on_gpu", "padding",
                                      "explicit_paddings", "data_format", "dilations"});
  b.Add({{"input_shape"}, "Shape", {"input"}, b.PassAttrs({"T"})});
  // d(input) = Conv2DBackpropInput(shape(input), d(output), out_backprop)
  b.Return("input", b.Add({{"dinput"}, "Conv2DBackpropInput",
                           {"input_shape", GradName("output"), "out_backprop"}, conv}));
  b.NotDifferentiable("filter_sizes");  // integer shape
  // d(out_backprop) = Conv2D(input, d(output))
  b.Return("out_backprop",
           b.Add({{"dout"}, "Conv2D", {"input", GradName("output")}, conv}));
  return b.Build(g);
}

// DepthwiseConv2dNativeBackpropInput(input_sizes, filter, out_backprop): bilinear in
// (filter, out_backprop).
absl::Status DepthwiseBackpropInputGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("DepthwiseConv2dNativeBackpropInput", attrs);
  const NodeAttrs conv = b.PassAttrs(
      {"T", "strides", "padding", "explicit_paddings", "data_format", "dilations"});
  b.NotDifferentiable("input_sizes");  // integer shape
  b.Add({{"filter_shape"}, "Shape", {"filter"}, b.PassAttrs({"T"})});
  // d(filter) = DepthwiseConv2dNativeBackpropFilter(d(output), shape(filter), out_backprop)
  b.Return("filter", b.Add({{"dfilter"}, "DepthwiseConv2dNativeBackpropFilter",
                            {GradName("output"), "filter_shape", "out_backprop"}, conv}));
  // d(out_backprop) = DepthwiseConv2dNative(d(output), filter)
  b.Return("out_backprop", b.Add({{"dout"}, "DepthwiseConv2dNative",
                                  {GradName("output"), "filter"}, conv}));
  return b.Build(g);
}

// DepthwiseConv2dNativeBackpropFilter(input, filter_sizes, out_backprop): bilinear in
// (input, out_backprop).
absl::Status DepthwiseBackpropFilterGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("DepthwiseConv2dNativeBackpropFilter", attrs);
  const NodeAttrs conv = b.PassAttrs(
      {"T", "strides", "padding", "explicit_paddings", "data_format", "dilations"});
  b.Add({{"input_shape"}, "Shape", {"input"}, b.PassAttrs({"T"})});
  // d(input) = DepthwiseConv2dNativeBackpropInput(shape(input), d(output), out_backprop)
  b.Return("input", b.Add({{"dinput"}, "DepthwiseConv2dNativeBackpropInput",
                           {"input_shape", GradName("output"), "out_backprop"}, conv}));
  b.NotDifferentiable("filter_sizes");  // integer shape
  // d(out_backprop) = DepthwiseConv2dNative(input, d(output))
  b.Return("out_backprop", b.Add({{"dout"}, "DepthwiseConv2dNative",
                                  {"input", GradName("output")}, conv}));
  return b.Build(g);
}

// BiasAddV1(value, bias) = value + bias (bias along the last axis).
absl::Status BiasAddV1Grad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("BiasAddV1", attrs);
  const NodeAttrs t = b.PassAttrs({"T"});
  b.Return("value", b.Add({{"dvalue"}, "Identity", {GradName("output")}, t}));  // d(value) = d(out)
  // d(bias) = sum of d(output) over every axis but the last
  b.Add({{"rank"}, "Rank", {GradName("output")}, t});
  b.Add(grad::FDH::Const<int32>("zero", 0));
  b.Add(grad::FDH::Const<int32>("one", 1));
  b.Add({{"rank_minus_1"}, "Sub", {"rank", "one"}, {{"T", DT_INT32}}});
  b.Add({{"axes"}, "Range", {"zero", "rank_minus_1", "one"}, {{"Tidx", DT_INT32}}});
  b.Return("bias", b.Add({{"dbias"}, "Sum", {GradName("output"), "axes"},
                          {{"T", grad::Placeholder("T")}, {"Tidx", DT_INT32}}}));
  return b.Build(g);
}

// 3-D convolution and pooling: the same adjoint pairs as in 2-D.
const std::initializer_list<std::string> kConv3DAttrs = {"T", "strides", "padding",
                                                         "data_format", "dilations"};

// Conv3D(input, filter).
absl::Status Conv3DGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("Conv3D", attrs);
  const NodeAttrs conv = b.PassAttrs(kConv3DAttrs);
  b.Add({{"input_shape"}, "Shape", {"input"}, b.PassAttrs({"T"})});
  b.Add({{"filter_shape"}, "Shape", {"filter"}, b.PassAttrs({"T"})});
  // d(input) = Conv3DBackpropInputV2(shape(input), filter, d(output))
  b.Return("input", b.Add({{"dinput"}, "Conv3DBackpropInputV2",
                           {"input_shape", "filter", GradName("output")}, conv}));
  // d(filter) = Conv3DBackpropFilterV2(input, shape(filter), d(output))
  b.Return("filter", b.Add({{"dfilter"}, "Conv3DBackpropFilterV2",
                            {"input", "filter_shape", GradName("output")}, conv}));
  return b.Build(g);
}

// Conv3DBackpropInputV2(input_sizes, filter, out_backprop): bilinear in (filter, out_backprop).
absl::Status Conv3DBackpropInputV2Grad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("Conv3DBackpropInputV2", attrs);
  const NodeAttrs conv = b.PassAttrs(kConv3DAttrs);
  b.NotDifferentiable("input_sizes");  // integer shape
  b.Add({{"filter_shape"}, "Shape", {"filter"}, b.PassAttrs({"T"})});
  // d(filter) = Conv3DBackpropFilterV2(d(output), shape(filter), out_backprop)
  b.Return("filter", b.Add({{"dfilter"}, "Conv3DBackpropFilterV2",
                            {GradName("output"), "filter_shape", "out_backprop"}, conv}));
  // d(out_backprop) = Conv3D(d(output), filter)
  b.Return("out_backprop", b.Add({{"dout"}, "Conv3D", {GradName("output"), "filter"}, conv}));
  return b.Build(g);
}

// Conv3DBackpropFilterV2(input, filter_sizes, out_backprop): bilinear in (input, out_backprop).
absl::Status Conv3DBackpropFilterV2Grad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("Conv3DBackpropFilterV2", attrs);
  const NodeAttrs conv = b.PassAttrs(kConv3DAttrs);
  b.Add({{"input_shape"}, "Shape", {"input"}, b.PassAttrs({"T"})});
  // d(input) = Conv3DBackpropInputV2(shape(input), d(output), out_backprop)
  b.Return("input", b.Add({{"dinput"}, "Conv3DBackpropInputV2",
                           {"input_shape", GradName("output"), "out_backprop"}, conv}));
  b.NotDifferentiable("filter_sizes");  // integer shape
  // d(out_backprop) = Conv3D(input, d(output))
  b.Return("out_backprop", b.Add({{"dout"}, "Conv3D", {"input", GradName("output")}, conv}));
  return b.Build(g);
}

// AvgPool3DGrad(orig_input_shape, grad): AvgPool3D's adjoint.
absl::Status AvgPool3DGradGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("AvgPool3DGrad", attrs);
  b.NotDifferentiable("orig_input_shape");  // integer shape
  // d(grad) = AvgPool3D(d(output))
  b.Return("grad", b.Add({{"dgrad"}, "AvgPool3D", {GradName("output")},
                          b.PassAttrs({"ksize", "strides", "padding", "data_format", "T"})}));
  return b.Build(g);
}

// MaxPool3DGrad(orig_input, orig_output, grad) scatters grad to each window's argmax; its
// adjoint gathers (MaxPool3DGradGrad). orig_input / orig_output: argmax positions only.
absl::Status MaxPool3DGradGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("MaxPool3DGrad", attrs);
  b.NotDifferentiable("orig_input");
  b.NotDifferentiable("orig_output");
  // d(grad) = MaxPool3DGradGrad(orig_input, orig_output, d(output)) (TInput = T, as Python)
  b.Return("grad", b.Add({{"dgrad"}, "MaxPool3DGradGrad",
                          {"orig_input", "orig_output", GradName("output")},
                          b.PassAttrs({"ksize", "strides", "padding", "data_format", "T"})}));
  return b.Build(g);
}

// MaxPool3DGradGrad(orig_input, orig_output, grad) gathers grad at each window's argmax; its
// adjoint scatters (MaxPool3DGrad).
absl::Status MaxPool3DGradGradGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("MaxPool3DGradGrad", attrs);
  b.NotDifferentiable("orig_input");
  b.NotDifferentiable("orig_output");
  NodeAttrs pool = b.PassAttrs({"ksize", "strides", "padding", "data_format", "T"});
  pool.push_back({"TInput", grad::Placeholder("T")});
  // d(grad) = MaxPool3DGrad(orig_input, orig_output, d(output))
  b.Return("grad", b.Add({{"dgrad"}, "MaxPool3DGrad",
                          {"orig_input", "orig_output", GradName("output")}, pool}));
  return b.Build(g);
}

// ---------------------------------------------------------------------------------------------
// Batch normalisation.

// Axes of a batch-norm data_format: the reduction axes (all but the channel axis) and the
// shape that makes a per-channel vector broadcast against x.
struct BatchNormLayout {
  std::vector<int32> reduce;
  std::vector<int32> channel_shape;
};
absl::StatusOr<BatchNormLayout> LayoutOf(const std::string& op, const std::string& format) {
  if (format == "NHWC") return BatchNormLayout{{0, 1, 2}, {1, 1, 1, -1}};
  if (format == "NCHW") return BatchNormLayout{{0, 2, 3}, {1, -1, 1, 1}};
  if (format == "NDHWC") return BatchNormLayout{{0, 1, 2, 3}, {1, 1, 1, 1, -1}};
  if (format == "NCDHW") return BatchNormLayout{{0, 2, 3, 4}, {1, -1, 1, 1, 1}};
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": gradient: unsupported data_format '", format, "'"));
}

// FusedBatchNormGrad{,V2,V3}(y_backprop = g, x, scale = s, reserve spaces) computes, per
// channel over the reduction axes (m elements, xc = x - mean(x), v = mean(xc^2),
// r = 1/sqrt(v + eps)):
//   training:  x_backprop = s r (g - mean(g) - xc mean(g xc) r^2)
//              scale_backprop = r sum(g xc), offset_backprop = sum(g);
//   inference (pop_mean pm = reserve_space_1, pop_var pv = reserve_space_2,
//              rp = 1/sqrt(pv + eps)):
//              x_backprop = g s rp, scale_backprop = sum(g (x - pm) rp), offset_backprop = sum(g).
// As in Python, the reserve spaces get no gradient (the statistics are recomputed from x in
// training mode) and the incoming gradients of reserve-space outputs are ignored. With
// gx, gs, go the incoming gradients of (x_backprop, scale_backprop, offset_backprop), the
// gradients below are those of <gx, x_backprop> + <gs, scale_backprop> + <go, offset_backprop>.
// half / bfloat16 x is computed in float (U), as Python does.
absl::Status FusedBatchNormGradGrad(const std::string& op, const AttrSlice& attrs,
                                    FunctionDef* g) {
  grad::GradBuilder b(op, attrs);
  const bool has_u = op != "FusedBatchNormGrad";
  const DataType t_type = b.GetAttr<DataType>("T");
  const DataType u_type = has_u ? b.GetAttr<DataType>("U") : t_type;
  const float epsilon = b.GetAttr<float>("epsilon");
  const bool training = b.GetAttr<bool>("is_training");
  const std::string format = b.GetAttr<std::string>("data_format");
  auto layout = LayoutOf(op, format);
  if (!layout.ok()) return layout.status();
  if (u_type != DT_FLOAT) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": gradient: U must be float, got ",
                                                   DataTypeString(u_type)));
  }
  const NodeAttrs u = {{"T", DT_FLOAT}};
  // Everything is computed in float: T is float, half or bfloat16.
  auto to_u = [&](const std::string& name) {
    if (t_type == DT_FLOAT) return name;
    return b.Add({{name + "_u"}, "Cast", {name}, {{"SrcT", t_type}, {"DstT", DT_FLOAT}}});
  };
  auto to_t = [&](const std::string& name) {
    if (t_type == DT_FLOAT) return name;
    return b.Add({{name + "_t"}, "Cast", {name}, {{"SrcT", DT_FLOAT}, {"DstT", t_type}}});
  };
  b.Add(grad::FDH::Const<int32>("axes", layout->reduce));
  b.Add(grad::FDH::Const<int32>("channel_shape", layout->channel_shape));
  b.Add(grad::FDH::Const<int32>("flat", std::vector<int32>{-1}));
  b.Add(grad::FDH::Const<float>("eps", epsilon));
  const NodeAttrs keep = {{"T", DT_FLOAT}, {"keep_dims", true}};
  auto per_channel = [&](const std::string& name, const std::string& v) {  // [C] -> broadcastable
    return b.Add({{name}, "Reshape", {v, "channel_shape"}, u});
  };
  auto mean = [&](const std::string& name, const std::string& v) {  // per-channel mean
    return b.Add({{name}, "Mean", {v, "axes"}, keep});
  };
  auto sum = [&](const std::string& name, const std::string& v) {   // per-channel sum
    return b.Add({{name}, "Sum", {v, "axes"}, keep});
  };
  auto mul = [&](const std::string& name, const std::string& x, const std::string& y) {
    return b.Add({{name}, "Mul", {x, y}, u});
  };
  auto add = [&](const std::string& name, const std::string& x, const std::string& y) {
    return b.Add({{name}, "AddV2", {x, y}, u});
  };
  auto sub = [&](const std::string& name, const std::string& x, const std::string& y) {
    return b.Add({{name}, "Sub", {x, y}, u});
  };
  auto flat = [&](const std::string& name, const std::string& v) {  // broadcastable -> [C]
    return b.Add({{name}, "Reshape", {v, "flat"}, u});
  };

  const std::string gy = to_u("y_backprop");
  const std::string x = to_u("x");
  const std::string gx = to_u(GradName("x_backprop"));
  const std::string s = per_channel("s", "scale");
  const std::string gs = per_channel("gs", GradName("scale_backprop"));
  const std::string go = per_channel("go", GradName("offset_backprop"));
  std::string d_gy, d_x, d_s;
  if (training) {
    const std::string mu = mean("mu", x);                        // mean(x)
    const std::string xc = sub("xc", x, mu);                     // xc = x - mean(x)
    b.Add({{"xc2"}, "Square", {xc}, u});
    const std::string v = mean("v", "xc2");                      // v = mean(xc^2)
    const std::string ve = add("ve", v, "eps");                  // v + eps
    const std::string r = b.Add({{"r"}, "Rsqrt", {ve}, u});      // r = 1/sqrt(v + eps)
    const std::string r2 = b.Add({{"r2"}, "Square", {r}, u});    // r^2
    const std::string r3 = mul("r3", r2, r);                     // r^3
    const std::string gy_mean = mean("gy_mean", gy);
    const std::string gyc = sub("gyc", gy, gy_mean);             // g - mean(g)
    const std::string a = mean("a", mul("gy_xc", gy, xc));       // A = mean(g xc)
    const std::string gx_mean = mean("gx_mean", gx);
    const std::string gxc = sub("gxc", gx, gx_mean);             // gx - mean(gx)
    const std::string gx_gyc = mul("gx_gyc", gx, gyc);
    const std::string p_sum = sum("p_sum", gx_gyc);              // P = sum(gx (g - mean(g)))
    const std::string p_mean = mean("p_mean", gx_gyc);           // P / m
    const std::string gx_xc = mul("gx_xc", gx, xc);
    const std::string q_sum = sum("q_sum", gx_xc);               // Q = sum(gx xc)
    const std::string q_mean = mean("q_mean", gx_xc);            // Q / m
    // d(y_backprop) = s (r (gx - mean(gx)) - r^3 xc Q/m) + gs r xc + go
    const std::string t1 = mul("t1", r, gxc);
    const std::string t2 = mul("t2", mul("r3_qm", r3, q_mean), xc);
    const std::string t3 = mul("t3", s, sub("t1_t2", t1, t2));
    const std::string t4 = mul("t4", mul("gs_r", gs, r), xc);
    d_gy = add("dgy", add("t3_t4", t3, t4), go);
    // d(x) = r^3 (s ((3 r^2 A Q/m - P/m) xc - (Q/m)(g - mean(g)) - A (gx - mean(gx)))
    //             - gs A xc) + gs r (g - mean(g))
    b.Add(grad::FDH::Const<float>("three", 3.0f));
    const std::string c1 = sub("c1", mul("three_r2_a_qm",
                                         mul("three_r2", "three", r2), mul("a_qm", a, q_mean)),
                               p_mean);                          // 3 r^2 A Q/m - P/m
    const std::string e1 = mul("e1", c1, xc);
    const std::string e2 = mul("e2", q_mean, gyc);
    const std::string e3 = mul("e3", a, gxc);
    const std::string e4 = mul("e4", s, sub("e1_e2_e3", sub("e1_e2", e1, e2), e3));
    const std::string e5 = mul("e5", mul("gs_a", gs, a), xc);
    const std::string e6 = mul("e6", r3, sub("e4_e5", e4, e5));
    d_x = add("dx_v", e6, mul("gs_r_gyc", mul("gs_r2", gs, r), gyc));
    // d(scale) = r P - r^3 A Q
    d_s = flat("ds_flat",
               sub("ds_c", mul("r_p", r, p_sum), mul("r3_a_q", mul("r3_a", r3, a), q_sum)));
  } else {
    const std::string pm = per_channel("pm", "reserve_space_1");      // population mean
    const std::string pv = per_channel("pv", "reserve_space_2");      // population variance
    const std::string rp = b.Add({{"rp"}, "Rsqrt", {add("pve", pv, "eps")}, u});  // rp
    const std::string xm = sub("xm", x, pm);                          // x - pm
    // d(y_backprop) = gx s rp + gs (x - pm) rp + go
    d_gy = add("dgy", add("t12", mul("t1", gx, mul("s_rp", s, rp)),
                           mul("t2", mul("gs_rp", gs, rp), xm)),
               go);
    // d(x) = gs g rp
    d_x = mul("dx_v", gy, mul("gs_rp2", gs, rp));
    // d(scale) = sum(gx g rp)
    d_s = flat("ds_flat", sum("ds_c", mul("gx_gy_rp", mul("gx_gy", gx, gy), rp)));
  }
  b.Return("y_backprop", to_t(d_gy));
  b.Return("x", to_t(d_x));
  b.Return("scale", d_s);
  // The reserve spaces (batch or population statistics) get zeros, as in Python.
  b.NotDifferentiable("reserve_space_1");
  b.NotDifferentiable("reserve_space_2");
  if (op == "FusedBatchNormGradV3") b.NotDifferentiable("reserve_space_3");
  return b.Build(g);
}
absl::Status FusedBatchNormGradV1Grad(const AttrSlice& attrs, FunctionDef* g) {
  return FusedBatchNormGradGrad("FusedBatchNormGrad", attrs, g);
}
absl::Status FusedBatchNormGradV2Grad(const AttrSlice& attrs, FunctionDef* g) {
  return FusedBatchNormGradGrad("FusedBatchNormGradV2", attrs, g);
}
absl::Status FusedBatchNormGradV3Grad(const AttrSlice& attrs, FunctionDef* g) {
  return FusedBatchNormGradGrad("FusedBatchNormGradV3", attrs, g);
}

// FusedBatchNorm{,V2}(x, scale, offset, mean, variance): the fused backward op on the incoming
// gradient of y (the statistics outputs' gradients are ignored, as in Python). Training mode
// reads the forward's saved statistics (reserve spaces); inference mode passes the population
// statistics and, as Python does, runs the backward op in NHWC (x and d(y) transposed).
absl::Status FusedBatchNormBaseGrad(const std::string& op, const std::string& grad_op,
                                    const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(op, attrs);
  const bool training = b.GetAttr<bool>("is_training");
  const std::string format = b.GetAttr<std::string>("data_format");
  const bool has_u = op != "FusedBatchNorm";
  NodeAttrs grad_attrs = has_u ? b.PassAttrs({"T", "U", "epsilon"}) : b.PassAttrs({"T", "epsilon"});
  grad_attrs.push_back({"is_training", training});
  const std::vector<std::string> rets = {"dx", "dscale", "doffset", "unused_3", "unused_4"};
  std::string dx;
  if (training) {
    grad_attrs.push_back({"data_format", grad::Placeholder("data_format")});
    // (d(x), d(scale), d(offset)) = <grad_op>(d(y), x, scale, saved mean, saved variance)
    b.Add({rets, grad_op, {GradName("y"), "x", "scale", "reserve_space_1", "reserve_space_2"},
           grad_attrs});
    dx = "dx";
  } else {
    grad_attrs.push_back({"data_format", "NHWC"});
    const NodeAttrs t = b.PassAttrs({"T"});
    std::string x = "x", dy = GradName("y");
    if (format == "NCHW") {
      b.Add(grad::FDH::Const<int32>("to_nhwc", std::vector<int32>{0, 2, 3, 1}));
      x = b.Add({{"x_nhwc"}, "Transpose", {"x", "to_nhwc"}, t});       // NCHW -> NHWC
      dy = b.Add({{"dy_nhwc"}, "Transpose", {dy, "to_nhwc"}, t});
    }
    // (d(x), d(scale), d(offset)) = <grad_op>(d(y), x, scale, pop mean, pop variance)
    b.Add({rets, grad_op, {dy, x, "scale", "mean", "variance"}, grad_attrs});
    dx = "dx";
    if (format == "NCHW") {
      b.Add(grad::FDH::Const<int32>("to_nchw", std::vector<int32>{0, 3, 1, 2}));
      dx = b.Add({{"dx_nchw"}, "Transpose", {"dx", "to_nchw"}, t});    // NHWC -> NCHW
    }
  }
  b.Return("x", dx);
  b.Return("scale", "dscale");
  b.Return("offset", "doffset");
  b.NotDifferentiable("mean");      // Python: None
  b.NotDifferentiable("variance");  // Python: None
  return b.Build(g);
}
absl::Status FusedBatchNormGrad(const AttrSlice& attrs, FunctionDef* g) {
  return FusedBatchNormBaseGrad("FusedBatchNorm", "FusedBatchNormGrad", attrs, g);
}
absl::Status FusedBatchNormV2Grad(const AttrSlice& attrs, FunctionDef* g) {
  return FusedBatchNormBaseGrad("FusedBatchNormV2", "FusedBatchNormGradV2", attrs, g);
}

// MaxPoolWithArgmax(input) = (output, argmax): d(input) = d(output) scattered to the argmax
// positions the forward recorded (its argmax output; recomputed: MaxPoolWithArgmax is
// deterministic). The argmax output's gradient is ignored (integers).
absl::Status MaxPoolWithArgmaxGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("MaxPoolWithArgmax", attrs);
  b.Return("input", b.Add({{"dinput"}, "MaxPoolGradWithArgmax",
                           {"input", GradName("output"), "argmax"},
                           b.PassAttrs({"ksize", "strides", "padding", "include_batch_in_index",
                                        "Targmax", "T"})}));
  return b.Build(g);
}

// TopKV2(input, k) = (values, indices) along the last axis: d(input) = d(values) scattered
// to the positions in indices (row r, column indices[r, j] of input viewed as [rows, n]); k is
// an integer; the indices output's gradient is ignored.
absl::Status TopKV2Grad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("TopKV2", attrs);
  const grad::FDH::AttrValueWrapper index_type = grad::Placeholder("index_type");
  const NodeAttrs i64 = {{"T", DT_INT64}};
  b.Add(grad::FDH::Const<int32>("zero", 0));
  b.Add(grad::FDH::Const<int32>("one", 1));
  b.Add(grad::FDH::Const<int32>("minus_one", -1));
  b.Add(grad::FDH::Const<int32>("flat", std::vector<int32>{-1}));
  b.Add(grad::FDH::Const<int64_t>("zero64", 0));
  b.Add(grad::FDH::Const<int64_t>("one64", 1));
  // n = input's last dimension, k = indices' last dimension (int64)
  b.Add({{"in_shape"}, "Shape", {"input"},
         {{"T", grad::Placeholder("T")}, {"out_type", DT_INT64}}});
  b.Add({{"idx_shape"}, "Shape", {"indices"}, {{"T", index_type}, {"out_type", DT_INT64}}});
  const NodeAttrs last = {{"Tparams", DT_INT64}, {"Tindices", DT_INT32}, {"Taxis", DT_INT32}};
  b.Add({{"in_rank"}, "Size", {"in_shape"}, {{"T", DT_INT64}}});
  b.Add({{"in_last"}, "Sub", {"in_rank", "one"}, {{"T", DT_INT32}}});
  b.Add({{"idx_rank"}, "Size", {"idx_shape"}, {{"T", DT_INT64}}});
  b.Add({{"idx_last"}, "Sub", {"idx_rank", "one"}, {{"T", DT_INT32}}});
  b.Add({{"n"}, "GatherV2", {"in_shape", "in_last", "zero"}, last});
  b.Add({{"k_dim"}, "GatherV2", {"idx_shape", "idx_last", "zero"}, last});
  // linear index of each selected element: (position / k) * n + indices
  b.Add({{"count"}, "Size", {"indices"}, {{"T", index_type}, {"out_type", DT_INT64}}});
  b.Add({{"positions"}, "Range", {"zero64", "count", "one64"}, {{"Tidx", DT_INT64}}});
  b.Add({{"row"}, "FloorDiv", {"positions", "k_dim"}, i64});
  b.Add({{"row_start"}, "Mul", {"row", "n"}, i64});
  b.Add({{"idx64"}, "Cast", {"indices"}, {{"SrcT", index_type}, {"DstT", DT_INT64}}});
  b.Add({{"idx_flat"}, "Reshape", {"idx64", "flat"}, i64});
  b.Add({{"linear"}, "AddV2", {"row_start", "idx_flat"}, i64});
  b.Add({{"linear_col"}, "ExpandDims", {"linear", "minus_one"},
         {{"T", DT_INT64}, {"Tdim", DT_INT32}}});
  b.Add({{"grad_flat"}, "Reshape", {GradName("values"), "flat"}, b.PassAttrs({"T"})});
  b.Add({{"size"}, "Size", {"input"}, {{"T", grad::Placeholder("T")}, {"out_type", DT_INT64}}});
  b.Add({{"size_1d"}, "ExpandDims", {"size", "zero"}, {{"T", DT_INT64}, {"Tdim", DT_INT32}}});
  b.Add({{"scattered"}, "ScatterNd", {"linear_col", "grad_flat", "size_1d"},
         {{"T", grad::Placeholder("T")}, {"Tindices", DT_INT64}}});
  // d(input) = d(values) at the selected positions, zeros elsewhere
  b.Return("input", b.Add({{"dinput"}, "Reshape", {"scattered", "in_shape"},
                           {{"T", grad::Placeholder("T")}, {"Tshape", DT_INT64}}}));
  b.NotDifferentiable("k");
  return b.Build(g);
}

// TopK(input; k) (v1, k an attr) = TopKV2(input, k): TopKV2's gradient (one SymbolicGradient
// node), which recomputes the indices with TopKV2. TensorFlow 2.21 runs no TopK node (its kernel
// requires an index_type attr TopK lacks), so the gradient must not recompute TopK itself.
absl::Status TopKGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("TopK", attrs);
  const DataType t = b.GetAttr<DataType>("T");
  const int k = b.GetAttr<int>("k");
  const bool sorted = b.GetAttr<bool>("sorted");
  b.Add(grad::FDH::Const<int32>("k_value", k));
  // d(input) = TopKV2's gradient for k
  b.Add({{"dinput", "dk"}, "SymbolicGradient",
         {"input", "k_value", GradName("values"), GradName("indices")},
         {{"Tin", DataTypeVector{t, DT_INT32, t, DT_INT32}},
          {"Tout", DataTypeVector{t, DT_INT32}},
          {"f", grad::FDH::FunctionRef("TopKV2", {{"T", t}, {"sorted", sorted},
                                                  {"Tk", DT_INT32},
                                                  {"index_type", DT_INT32}})}}});
  b.Return("input", "dinput");
  return b.Build(g);
}

// ApproxTopK(input; k, reduction_dimension) = (values, indices) along reduction_dimension:
// d(input) = d(values) scattered to the positions in indices (the forward's, given or
// recomputed: they need not be the exact top k), zeros elsewhere, as Python. The reduction
// axis is swapped with the last one, where TopKV2's linear-index scatter applies, and back.
absl::Status ApproxTopKGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("ApproxTopK", attrs);
  const int64_t dim = b.GetAttr<int64_t>("reduction_dimension");
  const grad::FDH::AttrValueWrapper t = grad::Placeholder("T");
  const NodeAttrs i64 = {{"T", DT_INT64}};
  const NodeAttrs tr = {{"T", t}, {"Tperm", DT_INT64}};
  b.Add(grad::FDH::Const<int64_t>("zero64", 0));
  b.Add(grad::FDH::Const<int64_t>("one64", 1));
  b.Add(grad::FDH::Const<int64_t>("dim", dim));
  b.Add(grad::FDH::Const<int32>("axis0", 0));
  b.Add(grad::FDH::Const<int32>("flat", std::vector<int32>{-1}));
  // perm: 0..R-1 with the reduction axis (mod R) and the last one swapped
  b.Add({{"in_shape"}, "Shape", {"input"}, {{"T", t}, {"out_type", DT_INT64}}});
  b.Add({{"rank"}, "Size", {"in_shape"}, {{"T", DT_INT64}, {"out_type", DT_INT64}}});
  b.Add({{"axis"}, "FloorMod", {"dim", "rank"}, i64});
  b.Add({{"last"}, "Sub", {"rank", "one64"}, i64});
  b.Add({{"iota"}, "Range", {"zero64", "rank", "one64"}, {{"Tidx", DT_INT64}}});
  b.Add({{"where"}, "Pack", {"axis", "last"}, {{"N", 2}, {"T", DT_INT64}}});
  b.Add({{"where_col"}, "ExpandDims", {"where", "flat"}, {{"T", DT_INT64}, {"Tdim", DT_INT32}}});
  b.Add({{"what"}, "Pack", {"last", "axis"}, {{"N", 2}, {"T", DT_INT64}}});
  b.Add({{"perm"}, "TensorScatterUpdate", {"iota", "where_col", "what"},
         {{"T", DT_INT64}, {"Tindices", DT_INT64}}});
  b.Add({{"idx_t"}, "Transpose", {"indices", "perm"}, {{"T", DT_INT32}, {"Tperm", DT_INT64}}});
  b.Add({{"grad_t"}, "Transpose", {GradName("values"), "perm"}, tr});
  b.Add({{"shape_t"}, "GatherV2", {"in_shape", "perm", "axis0"},
         {{"Tparams", DT_INT64}, {"Tindices", DT_INT64}, {"Taxis", DT_INT32}}});
  // n = the reduction axis' size, k = the indices' (now last)
  b.Add({{"n"}, "GatherV2", {"in_shape", "axis", "axis0"},
         {{"Tparams", DT_INT64}, {"Tindices", DT_INT64}, {"Taxis", DT_INT32}}});
  b.Add({{"idx_shape"}, "Shape", {"idx_t"}, {{"T", DT_INT32}, {"out_type", DT_INT64}}});
  b.Add({{"k_dim"}, "GatherV2", {"idx_shape", "last", "axis0"},
         {{"Tparams", DT_INT64}, {"Tindices", DT_INT64}, {"Taxis", DT_INT32}}});
  // linear index of each selected element: (position / k) * n + index
  b.Add({{"count"}, "Size", {"idx_t"}, {{"T", DT_INT32}, {"out_type", DT_INT64}}});
  b.Add({{"positions"}, "Range", {"zero64", "count", "one64"}, {{"Tidx", DT_INT64}}});
  b.Add({{"k_pos"}, "Maximum", {"k_dim", "one64"}, i64});  // k = 0: no positions anyway
  b.Add({{"row"}, "FloorDiv", {"positions", "k_pos"}, i64});
  b.Add({{"row_start"}, "Mul", {"row", "n"}, i64});
  b.Add({{"idx64"}, "Cast", {"idx_t"}, {{"SrcT", DT_INT32}, {"DstT", DT_INT64}}});
  b.Add({{"idx_flat"}, "Reshape", {"idx64", "flat"}, {{"T", DT_INT64}, {"Tshape", DT_INT32}}});
  b.Add({{"linear"}, "AddV2", {"row_start", "idx_flat"}, i64});
  b.Add({{"linear_col"}, "ExpandDims", {"linear", "flat"}, {{"T", DT_INT64}, {"Tdim", DT_INT32}}});
  b.Add({{"grad_flat"}, "Reshape", {"grad_t", "flat"}, {{"T", t}, {"Tshape", DT_INT32}}});
  b.Add({{"size"}, "Size", {"input"}, {{"T", t}, {"out_type", DT_INT64}}});
  b.Add({{"size_1d"}, "ExpandDims", {"size", "axis0"}, {{"T", DT_INT64}, {"Tdim", DT_INT32}}});
  b.Add({{"scattered"}, "ScatterNd", {"linear_col", "grad_flat", "size_1d"},
         {{"T", t}, {"Tindices", DT_INT64}}});
  b.Add({{"scattered_t"}, "Reshape", {"scattered", "shape_t"}, {{"T", t}, {"Tshape", DT_INT64}}});
  // d(input) = d(values) at the selected positions, zeros elsewhere (axes swapped back)
  b.Return("input", b.Add({{"dinput"}, "Transpose", {"scattered_t", "perm"}, tr}));
  return b.Build(g);
}

// Dilation2D(input, filter) (grayscale morphological dilation): its two backprop ops.
absl::Status Dilation2DGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("Dilation2D", attrs);
  const NodeAttrs a = b.PassAttrs({"T", "strides", "rates", "padding"});
  // d(input) = d(output) routed to each window's argmax input position
  b.Return("input", b.Add({{"dinput"}, "Dilation2DBackpropInput",
                           {"input", "filter", GradName("output")}, a}));
  // d(filter) = d(output) routed to each window's argmax filter position
  b.Return("filter", b.Add({{"dfilter"}, "Dilation2DBackpropFilter",
                            {"input", "filter", GradName("output")}, a}));
  return b.Build(g);
}

// NthElement(input, n) = the n-th smallest (largest with reverse) of the last axis: d(input)
// = d(values) shared equally among the elements equal to the value (ties), as Python.
absl::Status NthElementGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("NthElement", attrs);
  b.RequireTypes("T", {DT_HALF, DT_BFLOAT16, DT_FLOAT, DT_DOUBLE});
  const NodeAttrs t = b.PassAttrs({"T"});
  b.Add(grad::FDH::Const<int32>("last_axis", -1));
  const NodeAttrs expand = {{"T", grad::Placeholder("T")}, {"Tdim", DT_INT32}};
  b.Add({{"values_col"}, "ExpandDims", {"values", "last_axis"}, expand});
  b.Add({{"equal"}, "Equal", {"values_col", "input"}, t});              // input == value
  b.Add({{"indicators"}, "Cast", {"equal"}, {{"SrcT", DT_BOOL}, {"DstT", grad::Placeholder("T")}}});
  b.Add({{"count"}, "Sum", {"indicators", "last_axis"},
         {{"T", grad::Placeholder("T")}, {"Tidx", DT_INT32}, {"keep_dims", true}}});
  b.Add({{"share"}, "RealDiv", {"indicators", "count"}, t});            // 1 / (number of ties)
  b.Add({{"grad_col"}, "ExpandDims", {GradName("values"), "last_axis"}, expand});
  // d(input) = d(value) / ties at every element equal to the value
  b.Return("input", b.Add({{"dinput"}, "Mul", {"share", "grad_col"}, t}));
  b.NotDifferentiable("n");
  return b.Build(g);
}

// IsotonicRegression(input [rows, n]) = (output, segments): each output is the mean of the
// inputs of its segment (pooled adjacent violators), so d(input) = the mean of d(output) over
// its segment (Python's _MeanAggregator); segments are integers.
absl::Status IsotonicRegressionGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("IsotonicRegression", attrs);
  b.RequireTypes("T", {DT_HALF, DT_BFLOAT16, DT_FLOAT, DT_DOUBLE});
  const NodeAttrs i32 = {{"T", DT_INT32}};
  const NodeAttrs out = {{"T", grad::Placeholder("output_dtype")}};
  b.Add(grad::FDH::Const<int32>("zero", 0));
  b.Add(grad::FDH::Const<int32>("one", 1));
  b.Add(grad::FDH::Const<int32>("flat", std::vector<int32>{-1}));
  // one segment id per (row, segment): row * n + segment
  b.Add({{"shape"}, "Shape", {"segments"}, i32});
  b.Add({{"n"}, "GatherV2", {"shape", "one", "zero"},
         {{"Tparams", DT_INT32}, {"Tindices", DT_INT32}, {"Taxis", DT_INT32}}});
  b.Add({{"total"}, "Size", {"segments"}, i32});
  b.Add({{"positions"}, "Range", {"zero", "total", "one"}, {{"Tidx", DT_INT32}}});
  b.Add({{"row"}, "FloorDiv", {"positions", "n"}, i32});
  b.Add({{"row_start"}, "Mul", {"row", "n"}, i32});
  b.Add({{"seg_flat"}, "Reshape", {"segments", "flat"}, i32});
  b.Add({{"ids"}, "AddV2", {"row_start", "seg_flat"}, i32});
  const NodeAttrs seg = {{"T", grad::Placeholder("output_dtype")},
                         {"Tindices", DT_INT32},
                         {"Tnumsegments", DT_INT32}};
  b.Add({{"grad_flat"}, "Reshape", {GradName("output"), "flat"}, out});
  b.Add({{"sums"}, "UnsortedSegmentSum", {"grad_flat", "ids", "total"}, seg});  // per segment
  b.Add({{"ones"}, "OnesLike", {"grad_flat"}, out});
  b.Add({{"counts"}, "UnsortedSegmentSum", {"ones", "ids", "total"}, seg});
  b.Add({{"means"}, "DivNoNan", {"sums", "counts"}, out});                   // segment means
  b.Add({{"spread"}, "GatherV2", {"means", "ids", "zero"},
         {{"Tparams", grad::Placeholder("output_dtype")},
          {"Tindices", DT_INT32},
          {"Taxis", DT_INT32}}});
  b.Add({{"spread_2d"}, "Reshape", {"spread", "shape"}, out});
  // d(input) = mean of d(output) over the element's segment (in the input's type)
  b.Return("input", b.Add({{"dinput"}, "Cast", {"spread_2d"},
                           {{"SrcT", grad::Placeholder("output_dtype")},
                            {"DstT", grad::Placeholder("T")}}}));
  return b.Build(g);
}

// ---------------------------------------------------------------------------------------------
// Losses.

// (Sparse)SoftmaxCrossEntropyWithLogits(features, labels) = (loss, backprop), with
// backprop = softmax(features) - labels (onehot(labels)) = d loss / d features. Through loss:
// d(loss)[:, None] * backprop; through backprop (the softmax's Jacobian, symmetric):
// (d(backprop) - sum(d(backprop) * softmax, -1)) * softmax. Dense labels: d(labels) =
// d(loss)[:, None] * -log_softmax(features) - d(backprop), the derivative (Python's leaves out
// the backprop output's term); sparse labels are integers (zeros). Dense features and labels
// broadcast against each other (a [1, n] or [n] operand): each gradient is summed back to its
// operand's shape (Python's fails there, tests/python/test_audit_gradients.py).
absl::Status SoftmaxCrossEntropyGradOf(const std::string& op, const AttrSlice& attrs,
                                       FunctionDef* g) {
  grad::GradBuilder b(op, attrs);
  const NodeAttrs t = b.PassAttrs({"T"});
  b.Add(grad::FDH::Const<int32>("last_axis", -1));
  b.Add({{"dloss_col"}, "ExpandDims", {GradName("loss"), "last_axis"},
         {{"T", grad::Placeholder("T")}, {"Tdim", DT_INT32}}});                  // d(loss)[:, None]
  b.Add({{"through_loss"}, "Mul", {"dloss_col", "backprop"}, t});
  b.Add({{"softmax"}, "Softmax", {"features"}, t});                               // softmax
  b.Add({{"dbp_softmax"}, "Mul", {GradName("backprop"), "softmax"}, t});
  b.Add({{"dbp_dot"}, "Sum", {"dbp_softmax", "last_axis"},
         {{"T", grad::Placeholder("T")}, {"Tidx", DT_INT32}, {"keep_dims", true}}});
  b.Add({{"dbp_centered"}, "Sub", {GradName("backprop"), "dbp_dot"}, t});
  b.Add({{"through_backprop"}, "Mul", {"dbp_centered", "softmax"}, t});
  // d(features) = through loss + through backprop
  const std::string dfeatures =
      b.Add({{"dfeatures"}, "AddV2", {"through_loss", "through_backprop"}, t});
  if (op == "SparseSoftmaxCrossEntropyWithLogits") {
    b.Return("features", dfeatures);
    b.NotDifferentiable("labels");
  } else {
    b.Add({{"log_softmax"}, "LogSoftmax", {"features"}, t});
    b.Add({{"neg_log_softmax"}, "Neg", {"log_softmax"}, t});
    b.Add({{"labels_through_loss"}, "Mul", {"dloss_col", "neg_log_softmax"}, t});
    // d(labels) = d(loss)[:, None] * -log_softmax(features) - d(backprop)
    const std::string dlabels =
        b.Add({{"dlabels"}, "Sub", {"labels_through_loss", GradName("backprop")}, t});
    // Both shaped like backprop: summed over the axes each operand was broadcast along.
    // The op's shape function Merges features and labels (grad_builder.h, Shapes).
    const auto [df, dl] = b.ReduceForBroadcast("features", "labels", dfeatures, dlabels, "T",
                                               grad::GradBuilder::Shapes::kMergedByShapeFn);
    b.Return("features", df).Return("labels", dl);
  }
  return b.Build(g);
}
absl::Status SparseSoftmaxCrossEntropyGrad(const AttrSlice& attrs, FunctionDef* g) {
  return SoftmaxCrossEntropyGradOf("SparseSoftmaxCrossEntropyWithLogits", attrs, g);
}
absl::Status SoftmaxCrossEntropyGrad(const AttrSlice& attrs, FunctionDef* g) {
  return SoftmaxCrossEntropyGradOf("SoftmaxCrossEntropyWithLogits", attrs, g);
}

// BatchNormWithGlobalNormalization(t, m, v, beta, gamma) = (t - m) * r * [gamma] + beta,
// r = rsqrt(v + epsilon), gamma applied when scale_after_normalization; m, v, beta, gamma
// [depth] vectors of t's last axis. As Python, the dedicated op gives every gradient (the
// sums over all but the last axis):
//   d(t) = d(result) * r * [gamma]
//   d(m) = -sum(d(result)) * r * [gamma]
//   d(v) = -1/2 sum(d(result) * (t - m)) * r^3 * [gamma]
//   d(beta) = sum(d(result))
//   d(gamma) = sum(d(result) * (t - m)) * r (zeros without scale_after_normalization)
// The op (and its gradient op) run only in graphs of GraphDef version < 9.
absl::Status BatchNormWithGlobalNormalizationGrad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("BatchNormWithGlobalNormalization", attrs);
  b.DedicatedOp("BatchNormWithGlobalNormalizationGrad",
                {"t", "m", "v", "gamma", grad::GradName("result")},
                {"T", "variance_epsilon", "scale_after_normalization"},
                {"t", "m", "v", "beta", "gamma"});
  return b.Build(g);
}

}  // namespace

TF_EXT_REGISTER_TF_GRADIENT("BatchNormWithGlobalNormalization",
                            BatchNormWithGlobalNormalizationGrad);
TF_EXT_REGISTER_TF_GRADIENT("ReluGrad", ReluGradGrad);
TF_EXT_REGISTER_TF_GRADIENT("Relu6Grad", Relu6GradGrad);
TF_EXT_REGISTER_TF_GRADIENT("EluGrad", EluGradGrad);
TF_EXT_REGISTER_TF_GRADIENT("SeluGrad", SeluGradGrad);
TF_EXT_REGISTER_TF_GRADIENT("SoftplusGrad", SoftplusGradGrad);
TF_EXT_REGISTER_TF_GRADIENT("BiasAddGrad", BiasAddGradGrad);
TF_EXT_REGISTER_TF_GRADIENT("AvgPoolGrad", AvgPoolGradGrad);
// Gradients of TensorFlow's that are wrong: replaced in every registry (docs/registries.md).
TF_EXT_DECLARE_OP("Conv2D")
    .Doc("2-D convolution (TensorFlow's op).")
    .Gradient(&Conv2DGrad,
              "d(input) = Conv2DBackpropInput(shape(input), filter, d(output)); "
              "d(filter) = Conv2DBackpropFilter(input, shape(filter), d(output)), with every "
              "attr of the convolution")
    .Overrides("TensorFlow 2.21's Conv2D gradient (core/ops/nn_grad.cc) passes neither "
               "dilations nor explicit_paddings on: a dilated convolution got an undilated "
               "one's gradient (silently wrong), an explicitly padded one failed")
    .Register();
TF_EXT_DECLARE_OP("MaxPool")
    .Doc("2-D max pooling (TensorFlow's op).")
    .Gradient(&MaxPoolGrad,
              "d(input) = MaxPoolGrad(input, output, d(output)), with every attr of the pooling")
    .Overrides("TensorFlow 2.21's MaxPool gradient (core/ops/nn_grad.cc) does not pass "
               "explicit_paddings on: an explicitly padded max pooling's gradient failed")
    .Register();
TF_EXT_DECLARE_OP("LRN")
    .Doc("Local response normalisation (TensorFlow's op).")
    .Gradient(&LrnGrad, "d(input) = LRNGrad(d(output), input, output), with the LRN's "
                        "depth_radius, bias, alpha and beta")
    .Overrides("TensorFlow 2.21's only gradient, a client one (cc/gradients/nn_grad.cc), "
               "builds LRNGrad without the LRN's attrs: every LRN but one with the default "
               "depth_radius, bias, alpha and beta got a wrong gradient (silently)")
    .Register();
TF_EXT_DECLARE_OP("SoftmaxCrossEntropyWithLogits")
    .Doc("Softmax cross entropy with dense labels (TensorFlow's op).")
    .Gradient(&SoftmaxCrossEntropyGrad,
              "d(features) = d(loss)[:, None] * backprop + (d(backprop) - "
              "sum(d(backprop) * softmax, -1)) * softmax; d(labels) = d(loss)[:, None] * "
              "-log_softmax(features) - d(backprop); each summed back to its operand's shape "
              "where features and labels broadcast")
    .Overrides("TensorFlow 2.21's only gradient, a client one (cc/gradients/nn_grad.cc), "
               "builds a float32 node: it fails for float64 (and half)")
    .Register();
TF_EXT_DECLARE_OP("MaxPoolGrad")
    .Doc("The backward op of MaxPool (TensorFlow's op).")
    .Gradient(&MaxPoolGradGrad,
              "d(grad) = MaxPoolGradGrad(orig_input, orig_output, d(output)); "
              "d(orig_input) = d(orig_output) = 0")
    .Overrides("TensorFlow 2.21's function gradient of MaxPoolGrad has MaxPool's signature "
               "(2 arguments for MaxPoolGrad's 3 inputs and 1 incoming gradient): a second "
               "derivative of max pooling could not be built")
    .Register();
TF_EXT_REGISTER_TF_GRADIENT("MaxPoolGradV2", MaxPoolGradV2Grad);
TF_EXT_REGISTER_TF_GRADIENT("MaxPoolGradGrad", MaxPoolGradGradGrad);
TF_EXT_REGISTER_TF_GRADIENT("Conv2DBackpropFilter", Conv2DBackpropFilterGrad);
TF_EXT_REGISTER_TF_GRADIENT("DepthwiseConv2dNativeBackpropInput", DepthwiseBackpropInputGrad);
TF_EXT_REGISTER_TF_GRADIENT("DepthwiseConv2dNativeBackpropFilter", DepthwiseBackpropFilterGrad);
TF_EXT_REGISTER_TF_GRADIENT("FusedBatchNormGrad", FusedBatchNormGradV1Grad);
TF_EXT_REGISTER_TF_GRADIENT("FusedBatchNormGradV2", FusedBatchNormGradV2Grad);
TF_EXT_REGISTER_TF_GRADIENT("FusedBatchNormGradV3", FusedBatchNormGradV3Grad);
TF_EXT_REGISTER_TF_GRADIENT("FusedBatchNorm", FusedBatchNormGrad);
TF_EXT_REGISTER_TF_GRADIENT("FusedBatchNormV2", FusedBatchNormV2Grad);
TF_EXT_REGISTER_TF_GRADIENT("BiasAddV1", BiasAddV1Grad);
TF_EXT_REGISTER_TF_GRADIENT("Conv3D", Conv3DGrad);
TF_EXT_REGISTER_TF_GRADIENT("Conv3DBackpropInputV2", Conv3DBackpropInputV2Grad);
TF_EXT_REGISTER_TF_GRADIENT("Conv3DBackpropFilterV2", Conv3DBackpropFilterV2Grad);
TF_EXT_REGISTER_TF_GRADIENT("AvgPool3DGrad", AvgPool3DGradGrad);
TF_EXT_REGISTER_TF_GRADIENT("MaxPool3DGrad", MaxPool3DGradGrad);
TF_EXT_REGISTER_TF_GRADIENT("MaxPool3DGradGrad", MaxPool3DGradGradGrad);
TF_EXT_REGISTER_TF_GRADIENT("MaxPoolWithArgmax", MaxPoolWithArgmaxGrad);
TF_EXT_REGISTER_TF_GRADIENT("TopKV2", TopKV2Grad);
TF_EXT_REGISTER_TF_GRADIENT("TopK", TopKGrad);
TF_EXT_REGISTER_TF_GRADIENT("ApproxTopK", ApproxTopKGrad);
TF_EXT_REGISTER_TF_GRADIENT("Dilation2D", Dilation2DGrad);
TF_EXT_REGISTER_TF_GRADIENT("NthElement", NthElementGrad);
TF_EXT_REGISTER_TF_GRADIENT("IsotonicRegression", IsotonicRegressionGrad);
TF_EXT_REGISTER_TF_GRADIENT("SparseSoftmaxCrossEntropyWithLogits",
                            SparseSoftmaxCrossEntropyGrad);

}  // namespace tensorflow::tf_ext
