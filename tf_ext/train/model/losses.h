// The losses the trainer adds to its step graph, with Keras 3's formulas (keras.losses, the
// TensorFlow backend's nn.py) and its reduction "sum_over_batch_size": the per-example losses,
// times the optional per-example weights, summed and divided by the number of examples.
#ifndef TF_EXT_TRAIN_MODEL_LOSSES_H_
#define TF_EXT_TRAIN_MODEL_LOSSES_H_

#include <string>

#include "absl/status/statusor.h"
#include "tf_ext/train/model/graph_ops.h"
#include "tf_ext/train/options/options.h"

namespace tensorflow::tf_ext::train {

// Whether the loss reads targets (all but kModelOutput), and the dtype they are fed as:
// integer class ids for the sparse loss, else the output's dtype.
bool LossHasTargets(const LossSpec& spec);

// The scalar loss of `output` against `targets` (ignored for kModelOutput), weighted by
// `weights` (per example; node null: none). As Keras, a Softmax (a Sigmoid for the binary loss)
// producing the output is looked through: its input is used as logits.
GraphTensor AddLoss(GraphOps* ops, const LossSpec& spec, GraphTensor output, GraphTensor targets,
                    GraphTensor weights);

}  // namespace tensorflow::tf_ext::train

#endif  // TF_EXT_TRAIN_MODEL_LOSSES_H_
