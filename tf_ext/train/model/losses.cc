#include "tf_ext/train/model/losses.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tensorflow::tf_ext::train {
namespace {

constexpr double kEpsilon = 1e-7;  // keras.config.epsilon()

// Through Identity and IdentityN (what inlined calls leave) to the producing op.
GraphTensor Producer(GraphTensor t) {
  while (t.node != nullptr &&
         (t.node->type_string() == "Identity" || t.node->type_string() == "IdentityN")) {
    const Edge* e = nullptr;
    if (!t.node->input_edge(t.node->type_string() == "IdentityN" ? t.index : 0, &e).ok()) break;
    t = {e->src(), e->src_output()};
  }
  return t;
}

// Keras's _get_logits: a Softmax/Sigmoid output is replaced by its input, now logits.
GraphTensor Logits(GraphTensor output, const char* activation, bool* from_logits) {
  const GraphTensor p = Producer(output);
  if (p.node != nullptr && p.node->type_string() == activation) {
    const Edge* e = nullptr;
    if (p.node->input_edge(0, &e).ok()) {
      *from_logits = true;
      return {e->src(), e->src_output()};
    }
  }
  return output;
}

// min(max(x, eps), 1 - eps): Keras's clip_by_value, whose gradient passes at both bounds as
// Maximum's and Minimum's do.
GraphTensor Clip(GraphOps* ops, GraphTensor x, DataType dtype) {
  return ops->Binary("Minimum", ops->Binary("Maximum", x, ops->Scalar(dtype, kEpsilon)),
                     ops->Scalar(dtype, 1 - kEpsilon));
}

}  // namespace

bool LossHasTargets(const LossSpec& spec) { return spec.kind != LossKind::kModelOutput; }

GraphTensor AddLoss(GraphOps* ops, const LossSpec& spec, GraphTensor output, GraphTensor targets,
                    GraphTensor weights) {
  const DataType dtype = output.node != nullptr ? output.node->output_type(output.index) : DT_FLOAT;
  GraphTensor per_example;
  bool from_logits = spec.from_logits;
  switch (spec.kind) {
    case LossKind::kModelOutput:
      per_example = output;
      break;
    case LossKind::kMeanSquaredError: {
      // mean((t - y)^2, axis=-1)
      GraphTensor d = ops->Binary("Sub", ops->Cast(targets, dtype), output);
      per_example = ops->ReduceLast("Mean", ops->Unary("Square", d));
      break;
    }
    case LossKind::kMeanAbsoluteError: {
      // mean(|t - y|, axis=-1)
      GraphTensor d = ops->Binary("Sub", ops->Cast(targets, dtype), output);
      per_example = ops->ReduceLast("Mean", ops->Unary("Abs", d));
      break;
    }
    case LossKind::kBinaryCrossentropy: {
      GraphTensor x = Logits(output, "Sigmoid", &from_logits);
      GraphTensor t = ops->Cast(targets, dtype);
      GraphTensor elementwise;
      if (from_logits) {
        // sigmoid_cross_entropy_with_logits: max(x, 0) - x t + log(1 + exp(-|x|))
        elementwise = ops->Binary(
            "AddV2", ops->Binary("Sub", ops->Unary("Relu", x), ops->Binary("Mul", x, t)),
            ops->Unary("Log1p", ops->Unary("Exp", ops->Unary("Neg", ops->Unary("Abs", x)))));
      } else {
        // -(t log(p) + (1 - t) log(1 - p)), p clipped to [eps, 1 - eps]
        GraphTensor p = Clip(ops, x, dtype);
        GraphTensor one = ops->Scalar(dtype, 1);
        elementwise = ops->Unary(
            "Neg", ops->Binary("AddV2", ops->Binary("Mul", t, ops->Unary("Log", p)),
                               ops->Binary("Mul", ops->Binary("Sub", one, t),
                                           ops->Unary("Log", ops->Binary("Sub", one, p)))));
      }
      per_example = ops->ReduceLast("Mean", elementwise);
      break;
    }
    case LossKind::kCategoricalCrossentropy: {
      GraphTensor x = Logits(output, "Softmax", &from_logits);
      GraphTensor t = ops->Cast(targets, dtype);
      if (from_logits) {
        per_example = ops->Op("SoftmaxCrossEntropyWithLogits", {x, t}, "softmax_xent");
      } else {
        // -sum(t log(clip(p / sum(p)))), axis=-1
        AttrValue keep;
        keep.set_b(true);
        GraphTensor sum = ops->Op("Sum", {x, ops->Scalar(DT_INT32, -1)}, "Sum", {{"keep_dims", keep}});
        GraphTensor p = Clip(ops, ops->Binary("RealDiv", x, sum), dtype);
        per_example =
            ops->Unary("Neg", ops->ReduceLast("Sum", ops->Binary("Mul", t, ops->Unary("Log", p))));
      }
      break;
    }
    case LossKind::kSparseCategoricalCrossentropy: {
      GraphTensor x = Logits(output, "Softmax", &from_logits);
      // log(clip(p)) as logits when p are probabilities
      if (!from_logits) x = ops->Unary("Log", Clip(ops, x, dtype));
      per_example = ops->Op("SparseSoftmaxCrossEntropyWithLogits", {x, ops->Cast(targets, DT_INT64)},
                            "sparse_softmax_xent");
      break;
    }
  }
  // sum_over_batch_size: sum(per_example * weights) / size(per_example)
  if (weights.node != nullptr) per_example = ops->Binary("Mul", per_example, ops->Cast(weights, dtype));
  return ops->Binary("RealDiv", ops->SumAll(per_example),
                     ops->Cast(ops->Size(per_example, DT_INT32), dtype));
}

}  // namespace tensorflow::tf_ext::train
