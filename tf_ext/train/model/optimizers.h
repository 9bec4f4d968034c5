// The optimizers the trainer adds to its step graph, with Keras 3's update formulas
// (keras.optimizers: SGD with momentum and Nesterov, Adam, AdamW, RMSprop, Adagrad), composed
// from stock ops on the model's resource variables, and Keras's learning-rate schedules
// (ExponentialDecay, CosineDecay) evaluated at the step's iteration count. As Keras's
// Optimizer.apply: weight decay first (AdamW), then each variable's update, then iterations + 1.
#ifndef TF_EXT_TRAIN_MODEL_OPTIMIZERS_H_
#define TF_EXT_TRAIN_MODEL_OPTIMIZERS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tf_ext/train/model/graph_ops.h"
#include "tf_ext/train/options/options.h"

namespace tensorflow::tf_ext::train {

// The learning rate Keras's `optimizer.learning_rate` reads after `iterations` steps: the
// initial rate (Keras's default for the optimizer when unset), or the schedule's value at
// `iterations`, the formula the step graph evaluates at that iteration count (in double; Keras
// and the step graph compute in the variables' dtype). The TensorBoard logger's
// epoch_learning_rate.
double LearningRateAt(const OptimizerSpec& spec, int64_t iterations);

struct TrainableVariable {
  std::string name;     // for messages and slot names
  GraphTensor handle;   // a VarHandleOp of the variable
  DataType dtype = DT_FLOAT;
};

// A variable's gradient: dense (`values` of the variable's shape), or sparse as TensorFlow's
// IndexedSlices (an Embedding's table): `values` the rows [n, ...] to add at `indices` [n], with
// repeated ids repeated. Sparse gradients are applied as Keras 3's optimizers apply a
// tf.IndexedSlices: where Keras mixes it with dense state it sums the rows of repeated ids
// (m, velocity, momentum), where it squares it first it squares each row and then sums (Adam's
// and RMSprop's second moments, Adagrad's accumulator), and its scatter updates of the variable
// add every row. With global_clipnorm Keras's clipping densifies the gradient (rows of repeated
// ids summed), so the rows of repeated ids are summed first. No [vocab, ...] gradient tensor is
// formed; the slots stay dense.
struct Gradient {
  GraphTensor values;
  GraphTensor indices;  // sparse only (int32 or int64)
  bool sparse() const { return indices.node != nullptr; }
};

struct OptimizerGraph {
  Node* init = nullptr;     // creates the optimizer's state (slots at Keras's initial values, iterations 0)
  Node* step = nullptr;     // applies one update and increments iterations
  GraphTensor iterations;         // int64, read in the step, before its update
  // The optimizer's state for checkpoints: "iterations" and "<variable>/<slot>", with dtypes.
  std::vector<std::pair<std::string, GraphTensor>> state;
  std::vector<DataType> state_types;
};

// Adds the updates of `variables` by `gradients` (one per variable). Each runs once its gradient
// and every node in `after` have run (the step's loss, so that every read of the forward comes
// first, and the trainer's other gradients but under a memory budget; a read's value outlives
// an update, which copies a buffer still referenced); the step's read of iterations comes
// before its increment.
absl::Status AddOptimizer(GraphOps* ops, const OptimizerSpec& spec,
                          const std::vector<TrainableVariable>& variables,
                          const std::vector<Gradient>& gradients, const std::vector<Node*>& after,
                          OptimizerGraph* out);

}  // namespace tensorflow::tf_ext::train

#endif  // TF_EXT_TRAIN_MODEL_OPTIMIZERS_H_
