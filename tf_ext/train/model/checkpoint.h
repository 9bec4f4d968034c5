// The trainer's checkpoints, in TensorFlow's object-based format, laid out as
// tf.train.Checkpoint(root=loaded) writes one: the SavedModel's own object graph and variables
// (as its saver wrote them) as the root, with the children tf.train.Checkpoint adds ("root",
// itself; "save_counter") and "tf_ext_optimizer", the optimizer's state (slot variables and
// the iteration count). So
// tf.train.Checkpoint(root=tf.saved_model.load(dir)).restore(prefix) restores the trained model
// in Python, and the trainer resumes from it with the optimizer's state.
#ifndef TF_EXT_TRAIN_MODEL_CHECKPOINT_H_
#define TF_EXT_TRAIN_MODEL_CHECKPOINT_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "tensorflow/core/framework/tensor.h"

namespace tensorflow::tf_ext::train {

// Writes `prefix` from `model_prefix` (a checkpoint the SavedModel's save function wrote) and
// the optimizer's state by name.
absl::Status WriteTrainingCheckpoint(const std::string& model_prefix,
                                     const std::vector<std::pair<std::string, Tensor>>& optimizer_state,
                                     const std::string& prefix);

// Reads `prefix`: its model part is written back at `model_prefix` in the SavedModel's own
// layout (for the SavedModel's restore function), its optimizer state returned by name.
absl::Status ReadTrainingCheckpoint(const std::string& prefix, const std::string& model_prefix,
                                    std::map<std::string, Tensor>* optimizer_state);

}  // namespace tensorflow::tf_ext::train

#endif  // TF_EXT_TRAIN_MODEL_CHECKPOINT_H_
