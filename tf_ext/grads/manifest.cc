// THE place that lists every tf_ext op, its gradient rule and its non-differentiable
// inputs/outputs. Registration into all of TensorFlow's C++ gradient registries happens here,
// the docs table in README.md mirrors it, and tests/manifest_test.cc checks that every op
// registered under "TfExt>" appears here exactly once.
#include "tf_ext/grads/manifest.h"

#include "tensorflow/core/platform/logging.h"

#include "tf_ext/grads/gradients.h"
#include "tf_ext/grads/registry.h"
#include "tf_ext/grads/unify.h"
#include "tf_ext/kernels/single_copy.h"

namespace tensorflow::tf_ext {

const std::vector<GradientManifestEntry>& GradientManifest() {
  static const auto* manifest = new std::vector<GradientManifestEntry>{
      {"TfExt>ZeroOut", &ZeroOutGrad,
       "d(to_zero) = ZeroOut(d(zeroed), preserve_index): dy routed to preserve_index only",
       {}, {}, "float, double"},
      {"TfExt>RoiPool", &RoiPoolGrad,
       "d(data) = RoiPoolGrad(data, rois, argmax, d(pooled)): d(pooled) added into each ROI's "
       "image at argmax (argmax recomputed by a forward node)",
       {"rois"}, {"argmax"}, "float, double"},
      {"TfExt>RoiPoolGrad", nullptr,
       "TfExt>RoiPoolGrad is the backward op of TfExt>RoiPool; second-order gradients of TfExt>RoiPool are "
       "not implemented",
       {"data", "rois", "argmax", "d_pooled"}, {}, "", nullptr, NoGradient::kUnimplemented},
      {"TfExt>PsRoiAlign", &PsRoiAlignGrad,
       "d(features) = PsRoiAlignGrad(features, rois, d(output)): each bilinear sample adds "
       "weight * d(output) / (grid_h * grid_w) into the pixels it read",
       {"rois"}, {}, "float, double"},
      {"TfExt>PsRoiAlignGrad", nullptr,
       "TfExt>PsRoiAlignGrad is the backward op of TfExt>PsRoiAlign; second-order gradients of TfExt>PsRoiAlign are "
       "not implemented",
       {"features", "rois", "d_output"}, {}, "", nullptr, NoGradient::kUnimplemented},
      {"TfExt>MedianPool2D", &MedianPool2DGrad,
       "d(x) = MedianPool2DGrad(x, d(y)): d(y) scatter-added onto each window's median element "
       "(rank (m-1)/2 of a stable sort by value; argmedian recomputed by the grad op)",
       {}, {}, "float, double"},
      {"TfExt>MedianPool2DGrad", nullptr,
       "TfExt>MedianPool2DGrad is the backward op of TfExt>MedianPool2D; second-order gradients of TfExt>MedianPool2D are "
       "not implemented",
       {"x", "dy"}, {}, "", nullptr, NoGradient::kUnimplemented},
      {"TfExt>SignSTE", &SignSTEGrad,
       "d(x) = d(y) where |x| <= clip, else 0 (straight-through estimator; surrogate forward "
       "clamp(x, -clip, clip))",
       {}, {}, "half, float, double", &SignSTESurrogate},
      {"TfExt>GradientReversal", &GradientReversalGrad,
       "d(x) = -scale * d(y) (surrogate forward -scale * x)", {}, {}, "half, float, double",
       &GradientReversalSurrogate},
      {"TfExt>GradientFunctionDef", nullptr, "utility op (returns a FunctionDef)",
       {"node_def"}, {}, ""},
  };
  return *manifest;
}

namespace {

bool RegisterManifest() {
  // A second copy of the library registers nothing (its load fails; see single_copy.h).
  if (!IsFirstCopy()) return false;
  for (const GradientManifestEntry& e : GradientManifest()) {
    if (e.gradient != nullptr) {
      RegisterGradient(e.op, e.gradient);
    } else if (e.no_gradient == NoGradient::kUnimplemented) {
      RegisterUnimplementedGradient(e.op, e.rule);
    } else {
      RegisterNoGradient(e.op);
    }
    if (e.surrogate_forward != nullptr) RegisterSurrogateForward(e.op, e.surrogate_forward);
  }
  // Loading the library also makes every TensorFlow op differentiable through both C++
  // registries (see unify.h): tf_ext_grad, Sessions and TF_AddGradients then agree.
  if (absl::Status s = UnifyGradientRegistries(); !s.ok()) {
    LOG(ERROR) << "tf_ext: unifying the gradient registries failed: " << s;
  }
  return true;
}

const bool manifest_registered [[maybe_unused]] = RegisterManifest();

}  // namespace
}  // namespace tensorflow::tf_ext
