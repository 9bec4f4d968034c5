// Gradients of TensorFlow's CTC losses, which TensorFlow 2.21 has only in Python
// (python/ops/ctc_ops.py). Written from the maths; registered in both C++ registries when the
// op library loads, unless TensorFlow has one already (TF_EXT_REGISTER_TF_GRADIENT).
//
// CTCLoss(inputs [T, B, C], labels, sequence_length) = (loss [B], gradient [T, B, C]), the
// fused op computing d(loss_b)/d(inputs) itself: d(inputs) = d(loss)[b] * gradient[:, b, :].
// The `gradient` output is read through PreventGradient, as in Python: the fused op has no
// second derivative, so differentiating this gradient again fails (PreventGradient's error,
// with Python's message) instead of silently giving zeros. The incoming gradient of the
// `gradient` output is ignored (Python ignores it too); the labels and lengths get zeros.
//
// Forward outputs: front ends that have the forward node pass them (declared below), so the
// gradient reads the forward's own `gradient`. SymbolicGradient passes only the inputs: then
// CTCLoss is recomputed, and CTCLossV2 (whose kernel is cuDNN's, GPU only; blank label 0) is
// recomputed with CTCLoss (CPU; blank label C - 1) on the classes rotated by one, which is
// the same loss: Python's ctc_loss_v2 does this rotation for its CPU path.
//
// Tested in tests/tf_sparse_grads_test.cc (numeric Jacobians) and against Python's gradients
// in tests/python/test_tf_sparse_grads.py.
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tf_ext/grads/tf/tf_gradient.h"

namespace tensorflow::tf_ext {
namespace {

constexpr char kSecondDerivative[] =
    "Currently there is no way to take the second  derivative of ctc_loss due to the fused "
    "implementation's interaction  with tf.gradients()";

// The node output holding CTCLossV2's `gradient` output recomputed on the CPU: CTCLoss of the
// classes rotated so that the blank (0) is last, labels shifted down by one, and its gradient
// rotated back.
std::string RecomputeV2Gradient(grad::GradBuilder& b, const std::string& check) {
  b.Add(FDH::Const<int32>("axis", -1));
  b.Add({{"classes"}, "Shape", {"inputs"}, {{"T", DT_FLOAT}, {"out_type", DT_INT32}}});
  b.Add(FDH::Const<int32>("two", 2));
  b.Add(FDH::Const<int32>("zero", 0));
  b.Add({{"c"}, "GatherV2", {"classes", "two", "zero"},
         {{"Tparams", DT_INT32}, {"Tindices", DT_INT32}, {"Taxis", DT_INT32}}});
  b.Add(FDH::Const<int32>("one", 1));
  b.Add({{"c_minus_1"}, "Sub", {"c", "one"}, {{"T", DT_INT32}}});
  b.Add({{"rest_size"}, "ExpandDims", {"c_minus_1", "zero"}, {{"T", DT_INT32}, {"Tdim", DT_INT32}}});
  b.Add(FDH::Const<int32>("begin_blank", std::vector<int32>{0, 0, 0}));
  b.Add(FDH::Const<int32>("begin_rest", std::vector<int32>{0, 0, 1}));
  b.Add(FDH::Const<int32>("size_blank", std::vector<int32>{-1, -1, 1}));
  b.Add(FDH::Const<int32>("size_rest", std::vector<int32>{-1, -1, -1}));
  const NodeAttrs slice = {{"T", DT_FLOAT}, {"Index", DT_INT32}};
  const NodeAttrs concat = {{"N", 2}, {"T", DT_FLOAT}, {"Tidx", DT_INT32}};
  b.Add({{"x_blank"}, "Slice", {"inputs", "begin_blank", "size_blank"}, slice});
  b.Add({{"x_rest"}, "Slice", {"inputs", "begin_rest", "size_rest"}, slice});
  b.Add({{"x_v1"}, "ConcatV2", {"x_rest", "x_blank", "axis"}, concat});  // blank last
  b.Add({{"labels_v1"}, "Sub", {"labels_values", "one"}, {{"T", DT_INT32}}});
  b.Add({{"loss_v1", "grad_v1"}, "CTCLoss",
         {"x_v1", "labels_indices", "labels_v1", "sequence_length"},
         {{"T", DT_FLOAT}, {"preprocess_collapse_repeated", grad::Placeholder(
                                                                "preprocess_collapse_repeated")},
          {"ctc_merge_repeated", grad::Placeholder("ctc_merge_repeated")},
          {"ignore_longer_outputs_than_inputs",
           grad::Placeholder("ignore_longer_outputs_than_inputs")}},
         {check}});
  b.Add(FDH::Const<int32>("begin_last", std::vector<int32>{0, 0}));
  b.Add(FDH::Const<int32>("size_rest_2", std::vector<int32>{-1, -1}));
  b.Add({{"begin_g_blank"}, "ConcatV2", {"begin_last", "rest_size", "zero"},
         {{"N", 2}, {"T", DT_INT32}, {"Tidx", DT_INT32}}});  // [0, 0, C - 1]
  b.Add({{"size_g_rest"}, "ConcatV2", {"size_rest_2", "rest_size", "zero"},
         {{"N", 2}, {"T", DT_INT32}, {"Tidx", DT_INT32}}});  // [-1, -1, C - 1]
  b.Add({{"g_blank"}, "Slice", {"grad_v1", "begin_g_blank", "size_blank"}, slice});
  b.Add({{"g_rest"}, "Slice", {"grad_v1", "begin_blank", "size_g_rest"}, slice});
  // the blank's gradient back in front
  return b.Add({{"grad_v2"}, "ConcatV2", {"g_blank", "g_rest", "axis"}, concat});
}

// A node that fails unless every label is a class of inputs (0 <= label < C; for CTCLossV2,
// whose blank is 0, 1 <= label < C): CTCLoss's kernel accepts labels >= C and reads past the
// class axis. Returns its name.
std::string CheckLabels(grad::GradBuilder& b, const std::string& op) {
  b.Add(FDH::Const<int32>("check_two", 2));
  b.Add(FDH::Const<int32>("check_zero", 0));
  b.Add(FDH::Const<int32>("check_lowest", op == "CTCLossV2" ? 1 : 0));
  b.Add({{"check_shape"}, "Shape", {"inputs"}, {{"T", b.TypeOf("inputs")}, {"out_type", DT_INT32}}});
  b.Add({{"check_classes"}, "GatherV2", {"check_shape", "check_two", "check_zero"},
         {{"Tparams", DT_INT32}, {"Tindices", DT_INT32}, {"Taxis", DT_INT32}}});  // C
  b.Add({{"check_ge"}, "GreaterEqual", {"labels_values", "check_lowest"}, {{"T", DT_INT32}}});
  b.Add({{"check_lt"}, "Less", {"labels_values", "check_classes"}, {{"T", DT_INT32}}});
  b.Add({{"check_ok"}, "LogicalAnd", {"check_ge", "check_lt"}, {}});
  b.Add(FDH::Const<int32>("check_axes", std::vector<int32>{0}));
  b.Add({{"check_all"}, "All", {"check_ok", "check_axes"}, {{"Tidx", DT_INT32}}});
  b.Add(FDH::Const<float>("check_pass", 0.0f));
  b.Add(FDH::Const<float>("check_fail", std::numeric_limits<float>::quiet_NaN()));
  // NaN (fails the check below) unless every label is in range
  b.Add({{"check_flag"}, "Select", {"check_all", "check_pass", "check_fail"}, {{"T", DT_FLOAT}}});
  return b.Add({{"label_check"}, "CheckNumerics", {"check_flag"},
                {{"T", DT_FLOAT},
                 {"message", absl::StrCat(op, ": a label is out of range of the classes of "
                                              "inputs (in the gradient)")}}});
}

absl::Status CtcLossGrad(const std::string& op, const AttrSlice& attrs, FunctionDef* g) {
  grad::GradBuilder b(op, attrs);
  const bool v2 = op == "CTCLossV2";
  const FDH::AttrValueWrapper t = b.TypeOf("inputs");
  const std::string check = CheckLabels(b, op);
  // the fused gradient d(loss_b)/d(inputs): the forward's, or recomputed after the check
  std::string fused = "gradient";
  if (!b.with_outputs()) {
    if (v2) {
      fused = RecomputeV2Gradient(b, check);
    } else {
      b.Add({{"fwd_loss", "fwd_gradient"}, "CTCLoss",
             {"inputs", "labels_indices", "labels_values", "sequence_length"},
             b.PassAttrs({"T", "preprocess_collapse_repeated", "ctc_merge_repeated",
                          "ignore_longer_outputs_than_inputs"}),
             {check}});
      fused = "fwd_gradient";
    }
  }
  b.Add({{"fused"}, "PreventGradient", {fused},
         {{"T", t}, {"message", kSecondDerivative}}, {check}});
  b.Add(FDH::Const<int32>("last", -1));
  b.Add({{"dloss_col"}, "ExpandDims", {GradName("loss"), "last"}, {{"T", t}, {"Tdim", DT_INT32}}});
  // d(inputs)[t, b, c] = d(loss)[b] * gradient[t, b, c]
  b.Return("inputs", b.Add({{"dinputs"}, "Mul", {"dloss_col", "fused"}, {{"T", t}}}));
  b.NotDifferentiable("labels_indices");
  b.NotDifferentiable("labels_values");
  b.NotDifferentiable("sequence_length");
  return b.Build(g);
}

}  // namespace

TF_EXT_REGISTER_TF_GRADIENT("CTCLoss", [](const AttrSlice& a, FunctionDef* g) {
  return CtcLossGrad("CTCLoss", a, g);
});
TF_EXT_REGISTER_TF_GRADIENT("CTCLossV2", [](const AttrSlice& a, FunctionDef* g) {
  return CtcLossGrad("CTCLossV2", a, g);
});
// Front ends that have the forward node pass its outputs: the gradient then reads the
// forward's own fused gradient (no recomputation; CTCLossV2's is cuDNN's).
static const bool ctc_reads_outputs [[maybe_unused]] =
    (DeclareReadsForwardOutputs("CTCLoss"), DeclareReadsForwardOutputs("CTCLossV2"), true);

}  // namespace tensorflow::tf_ext
