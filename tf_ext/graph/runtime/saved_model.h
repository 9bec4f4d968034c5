// The library's one SavedModel loader: a signature of a SavedModel as a forward graph to
// differentiate, with no Python. GradientSession (gradient_session.h) builds on it, and the
// C API's TfExtNewGradientSessionFromSavedModel (c_gradient_session.h).
//
// LoadSavedModelSignature loads the directory with TensorFlow's own loader (LoadSavedModel, tag
// "serve": SavedModels written by tf.saved_model.save, Keras's model.export and TF1's builder
// alike), keeps the nodes the signature's outputs need, inlines the function calls (TF2
// signatures are calls of functions that take the variables as resource inputs), and freezes
// the variables: each ReadVariableOp becomes a constant of the value restored from variables/,
// each ResourceGather/ResourceGatherNd a GatherV2/GatherNd of that constant; a loop whose body
// reads variables, or a conditional whose branches read them, takes their values instead
// (loop_variables.h). A variable used in any other way (assigned) is refused, naming the node.
#ifndef TF_EXT_GRAPH_RUNTIME_SAVED_MODEL_H_
#define TF_EXT_GRAPH_RUNTIME_SAVED_MODEL_H_

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tensorflow/cc/saved_model/loader.h"
#include "tensorflow/core/common_runtime/device_mgr.h"
#include "tensorflow/core/protobuf/config.pb.h"
#include "tensorflow/core/protobuf/meta_graph.pb.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tf_ext/graph/runtime/gradient_session.h"
#include "tf_ext/graph/io/graph_io.h"
#include "tf_ext/graph/io/tensor_ref.h"

namespace tensorflow::tf_ext {

struct SavedModelSignature {
  GraphDef graph;                              // frozen, calls inlined
  std::map<std::string, TensorRef> inputs;     // signature key -> placeholder of `graph`
  std::map<std::string, TensorRef> outputs;    // signature key -> tensor of `graph`
  int variables = 0;                           // variables frozen into constants
};

// The pieces the trainer shares (tf_ext/train/): the bundle, loaded so that its Session can be
// extended with new nodes (which reach the restored variables through VarHandleOps of the same
// shared names), and the variables a signature's function captures.
// `threads` > 0: its Session's kernels run on that many threads (SetSessionThreads), checked
// on its CPU device (Internal otherwise).
// `stage1_config` non-null: its Grappler runs the remapper alone (stage 3 of
// grappler_stages.h), and *stage1_config is set to the configuration it would have run, which
// the graphs added to it are optimized with first (stage 1).
absl::Status LoadSavedModelBundle(const std::string& export_dir, const std::string& tag,
                                  SavedModelBundle* bundle, int64_t threads = 0,
                                  ConfigProto* stage1_config = nullptr);

// A Session's kernel threads (the trainer's option threads): intra-op and inter-op parallelism
// `threads`; 0 leaves TensorFlow's defaults (one per core).
void SetSessionThreads(int64_t threads, ConfigProto* config);

// TensorFlow's CPU devices share one process-wide intra-op pool, sized by the options of the
// first device made in the process (often another Session's, or Python's eager context's).
// While an OwnIntraOpPools(true) lives, the CPU devices made get pools of their own, sized by
// their own SessionOptions (one at a time: it holds a lock).
class OwnIntraOpPools {
 public:
  explicit OwnIntraOpPools(bool own);
  ~OwnIntraOpPools();
  OwnIntraOpPools(const OwnIntraOpPools&) = delete;
  OwnIntraOpPools& operator=(const OwnIntraOpPools&) = delete;

 private:
  bool own_;
  bool was_global_ = true;
};

// The intra-op threads of the CPU device among `devices`; -1 when there is none.
int CpuIntraOpThreads(const DeviceMgr& devices);

// A signature, checked to exist (NotFound listing the keys otherwise).
absl::StatusOr<const SignatureDef*> FindSignature(const MetaGraphDef& meta,
                                                  const std::string& export_dir,
                                                  const std::string& signature_key);

struct CapturedVariable {
  std::string handle;  // the VarHandleOp node of the graph the signature's call takes
  std::string name;    // the variable's name in the object graph ("dense/kernel")
  bool trainable = false;
};

// The variables the signature's function call captures (its inputs after the signature's own,
// matched with the SavedObjectGraph's bound inputs), in the call's order. TF1 SavedModels
// (no object graph): every VarHandleOp the outputs need, trainable.
absl::StatusOr<std::vector<CapturedVariable>> SignatureVariables(const MetaGraphDef& meta,
                                                                 const SignatureDef& signature);

absl::StatusOr<SavedModelSignature> LoadSavedModelSignature(const std::string& export_dir,
                                                            const std::string& signature_key,
                                                            const std::string& tag = "serve");

// A GradientSession of a signature: ys and xs are its output and input keys (an x must be an
// input), requests feed the inputs by key, and incoming gradients as "d_<output key>".
absl::StatusOr<std::unique_ptr<GradientSession>> GradientSessionFromSavedModel(
    const std::string& export_dir, const std::string& signature_key,
    const std::vector<std::string>& y_keys, const std::vector<std::string>& x_keys,
    const std::vector<bool>& incoming_gradients = {}, const GradientSessionOptions& options = {});

}  // namespace tensorflow::tf_ext

#endif  // TF_EXT_GRAPH_RUNTIME_SAVED_MODEL_H_
