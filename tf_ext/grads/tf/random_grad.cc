// Gradients of TensorFlow's gamma samplers that no C++ registry has in TensorFlow 2.21, written
// from Python's python/ops/random_grad.py: implicit reparameterisation (Figurnov et al., 2018),
// d(alpha) = sum over the sample axes of d(sample) * dsample/dalpha, the partial derivative
// from RandomGammaGrad(alpha, sample). Each is registered in both C++ registries when the op
// library loads, unless TensorFlow has one already (TF_EXT_REGISTER_TF_GRADIENT).
//
// The gradient reads the forward sample. The stateless samplers recompute it exactly (same
// seed, same sample); RandomGamma is stateful, so its gradient takes the sample from front ends
// that pass forward outputs (the C++ client registry: TF_AddGradients, cc AddSymbolicGradients)
// and refuses, naming the op, where none is passed (a bare SymbolicGradient would draw anew).
//
// Not a derivative a finite difference can check (a sampler's output for a fixed seed is not
// the quantile the implicit gradient holds fixed): checked in tests/tf_array_misc_grads_test.cc
// against RandomGammaGrad of the forward sample, and against Python's gradients
// (tests/python/test_tf_array_misc_grads.py).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/function.h"
#include "tf_ext/grads/grad_builder.h"
#include "tf_ext/grads/registry.h"

namespace tensorflow::tf_ext {
namespace {

using grad::FDH;
using grad::GradName;
using grad::Placeholder;

// d(alpha) for a sample of shape [n sample axes..., alpha's shape]: `sample_axes` (int32
// scalar node) = n; `alpha_type` = alpha's type attr; `shape` / `shape_type` = the shape input.
void GammaAlphaGrad(grad::GradBuilder& b, const std::string& alpha,
                    const std::string& alpha_type, bool stateless, const std::string& shape,
                    const std::string& shape_type) {
  const FDH::AttrValueWrapper t = Placeholder(alpha_type);
  b.Add(FDH::Const<int32>("zero", 0));
  b.Add(FDH::Const<int32>("one", 1));
  b.Add({{"shape_len"}, "Size", {shape}, {{"T", Placeholder(shape_type)}, {"out_type", DT_INT32}}});
  std::string n = "shape_len";  // RandomGamma: the sample is [shape..., alpha's shape]
  if (stateless) {               // stateless: the sample is [shape], alpha its trailing axes
    b.Add({{"alpha_rank"}, "Rank", {alpha}, {{"T", t}}});
    n = b.Add({{"sample_axes"}, "Sub", {"shape_len", "alpha_rank"}, {{"T", DT_INT32}}});
  }
  // alpha with n leading unit axes, broadcastable against the sample
  b.Add({{"n_v"}, "Pack", {n}, {{"N", 1}, {"T", DT_INT32}}});
  b.Add({{"ones"}, "Fill", {"n_v", "one"}, {{"T", DT_INT32}, {"index_type", DT_INT32}}});
  b.Add({{"alpha_shape"}, "Shape", {alpha}, {{"T", t}, {"out_type", DT_INT32}}});
  b.Add(FDH::Const<int32>("axis0", 0));
  b.Add({{"expanded_shape"}, "ConcatV2", {"ones", "alpha_shape", "axis0"},
         {{"N", 2}, {"T", DT_INT32}, {"Tidx", DT_INT32}}});
  b.Add({{"alpha_b"}, "Reshape", {alpha, "expanded_shape"}, {{"T", t}, {"Tshape", DT_INT32}}});
  // dsample/dalpha at the forward sample (implicit differentiation of the gamma CDF)
  b.Add({{"partial"}, "RandomGammaGrad", {"alpha_b", "output"}, {{"T", t}}});
  b.Add({{"weighted"}, "Mul", {GradName("output"), "partial"}, {{"T", t}}});
  b.Add({{"sample_axes_range"}, "Range", {"zero", n, "one"}, {{"Tidx", DT_INT32}}});
  // d(alpha) = sum over the sample axes of d(sample) * dsample/dalpha
  b.Return(alpha, b.Add({{"dalpha"}, "Sum", {"weighted", "sample_axes_range"},
                         {{"T", t}, {"Tidx", DT_INT32}, {"keep_dims", false}}}));
}

absl::Status RandomGammaGradFn(const AttrSlice& attrs, FunctionDef* g) {
  if (!grad::WantsForwardOutputs(attrs)) {
    return absl::InvalidArgumentError(
        "RandomGamma: its gradient reads the forward sample, and a stateful sampler cannot be "
        "recomputed; differentiate it where the forward outputs are passed (TF_AddGradients, "
        "cc AddSymbolicGradients), not through a bare SymbolicGradient");
  }
  grad::GradBuilder b("RandomGamma", attrs);
  b.RequireTypes("T", {DT_FLOAT, DT_DOUBLE});  // RandomGammaGrad's kernels
  GammaAlphaGrad(b, "alpha", "T", false, "shape", "S");
  b.NotDifferentiable("shape");
  return b.Build(g);
}

absl::Status StatelessRandomGammaV2Grad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("StatelessRandomGammaV2", attrs);
  b.RequireTypes("dtype", {DT_FLOAT, DT_DOUBLE});
  GammaAlphaGrad(b, "alpha", "dtype", true, "shape", "T");
  b.NotDifferentiable("shape");
  b.NotDifferentiable("seed");
  return b.Build(g);
}

absl::Status StatelessRandomGammaV3Grad(const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b("StatelessRandomGammaV3", attrs);
  b.RequireTypes("dtype", {DT_FLOAT, DT_DOUBLE});
  GammaAlphaGrad(b, "alpha", "dtype", true, "shape", "shape_dtype");
  b.NotDifferentiable("shape");
  b.NotDifferentiable("key");
  b.NotDifferentiable("counter");
  b.NotDifferentiable("alg");
  return b.Build(g);
}

}  // namespace

TF_EXT_REGISTER_TF_GRADIENT("RandomGamma", RandomGammaGradFn);
// Front ends that have the forward node pass RandomGamma's sample instead of recomputing it.
static const bool random_gamma_reads_outputs [[maybe_unused]] =
    (DeclareReadsForwardOutputs("RandomGamma"), true);
TF_EXT_REGISTER_TF_GRADIENT("StatelessRandomGammaV2", StatelessRandomGammaV2Grad);
TF_EXT_REGISTER_TF_GRADIENT("StatelessRandomGammaV3", StatelessRandomGammaV3Grad);

}  // namespace tensorflow::tf_ext
