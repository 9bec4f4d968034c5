// Data-parallel training over processes on TensorFlow's own distributed runtime, as Python's
// MultiWorkerMirroredStrategy does it: every process runs TensorFlow's gRPC server for its task
// (tensorflow::NewServer), loads the SavedModel into a session on that server (target grpc://,
// the group leader and a device filter for its own task set as the strategy sets them), and
// its step graph averages the gradients over the workers with CollectiveReduceV2 (packed by
// dtype: one all-reduce per dtype; the step's loss rides in the same pack, so the logged loss is the
// global batch's mean). Variables and the optimizer's state are broadcast from the chief
// (CollectiveBcastSendV2/RecvV2) before the first step, and a start-up check gathers every
// task's fingerprint (model, global batch size, cluster) so that a mismatched worker fails there.
//
// The cluster comes from the options (cluster=host:port,... and task_index) or from TF_CONFIG
// (cluster.worker, optional cluster.chief, task.type, task.index); with no chief job, worker 0
// is the chief. collective_timeout bounds every wait on a peer (start-up, broadcast, each
// step's all-reduce); a failed collective names the tasks that no longer answer.
//
// Metrics' state updates are summed over the workers each step (AllReduceSum), so every worker
// holds the global batch's running metrics; a sparse gradient (an Embedding's rows) is made dense
// before the all-reduce. With shard_by=files each step first agrees (AllHave) that every worker
// has a batch, so an epoch ends for all when one worker's files run out.
//
// Each task's server listens only on its cluster address (or listen_address): of its host
// name's answers, the one that is this machine's (host_address.h); listen_address.h says how,
// as TensorFlow's server itself listens on every interface. Start-up then asks the kernel where
// the server listens and refuses any other address or a wildcard. Its runtime is
// unauthenticated and belongs on a private network.
//
// Limits: BatchNormalization's moving statistics stay per worker. A process serves one cluster
// (TensorFlow's server cannot be stopped). Tested by tests/python/test_fit_distributed.py and, on
// hosts made as network namespaces, tests/python/test_cluster_bed.py.
#ifndef TF_EXT_TRAIN_DISTRIBUTE_DISTRIBUTED_H_
#define TF_EXT_TRAIN_DISTRIBUTE_DISTRIBUTED_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tensorflow/core/framework/partial_tensor_shape.h"
#include "tensorflow/core/graph/graph.h"
#include "tensorflow/core/graph/node_builder.h"
#include "tensorflow/core/protobuf/config.pb.h"
#include "tensorflow/core/public/session.h"
#include "tensorflow/core/public/session_options.h"
#include "tf_ext/graph/engine/path_check.h"
#include "tf_ext/train/options/options.h"

namespace tensorflow::tf_ext::train {

struct ClusterTask {
  std::string job;  // "chief" or "worker"
  int64_t index = 0;
  std::string address;  // host:port
};

struct Cluster {
  std::vector<ClusterTask> tasks;  // by rank: the chief first, then the workers
  int rank = 0;                    // this process's
  int size() const { return static_cast<int>(tasks.size()); }
  bool is_chief() const { return rank == 0; }
  // "/job:worker/replica:0/task:1"
  std::string Device(int rank) const;
  // "worker 1 (127.0.0.1:2223)"
  std::string TaskName(int rank) const;
};

// The cluster `options` name, else the one TF_CONFIG's JSON (`tf_config`; null or empty: none)
// names; nullopt when neither does (one process). InvalidArgument naming the bad value.
absl::StatusOr<std::optional<Cluster>> ResolveCluster(const DistributedOptions& options,
                                                      const char* tf_config);

// One process's part in a data-parallel job.
class Distributed {
 public:
  // Starts this task's gRPC server (once per process) and checks the options.
  // `threads` > 0: the server's CPU device runs that many intra-op threads and the
  // sessions' config that many inter-op ones (SetSessionThreads, saved_model.h).
  static absl::StatusOr<std::unique_ptr<Distributed>> Start(const Cluster& cluster,
                                                            const DistributedOptions& options,
                                                            int64_t threads = 0);

  const Cluster& cluster() const { return cluster_; }
  // The intra-op threads of the server's CPU device, where the steps' kernels run.
  int kernel_threads() const { return kernel_threads_; }
  // For LoadSavedModel: the server's target, the group leader, this task's devices alone.
  const SessionOptions& session_options() const { return session_options_; }
  // What a Session::Run that runs collectives passes: the collective graph key that keeps the
  // workers' step ids in step (one per kind of run).
  enum class RunKind { kAgree = 1, kBroadcast = 2, kStep = 3, kHave = 4 };
  RunOptions Run(RunKind kind) const;

  // Replaces each tensor by its mean over the workers: flattened, concatenated by dtype into
  // one pack each, CollectiveReduceV2 (Add, Div), split and reshaped back. The
  // instance keys are numbered in the order collectives are added, the same on every worker.
  absl::Status AllReduceMean(Graph* g, std::vector<GraphTensor>* tensors);
  // The same, each tensor replaced by its sum over the workers (metrics' state updates).
  absl::Status AllReduceSum(Graph* g, std::vector<GraphTensor>* tensors);

  // Whether every worker `has` (something: a batch), by a Min all-reduce of one int32 in
  // `session` (its graph added on the first call); every worker calls it equally often.
  absl::StatusOr<bool> AllHave(Session* session, bool has);

  // What a training step all-reduces: its tensors, their packs (one per dtype) and the packs'
  // bytes, i.e. the gradients and the loss as they are, no copy added (-1: a shape unknown).
  struct AllReduceSize {
    int64_t tensors = 0, packs = 0, bytes = 0;
  };
  // AllReduceMean of the step's `tensors`, whose shapes are `shapes`, counted in step_all_reduce.
  absl::Status AllReduceStep(Graph* g, std::vector<GraphTensor>* tensors,
                             const std::vector<PartialTensorShape>& shapes);
  const AllReduceSize& step_all_reduce() const { return step_all_reduce_; }

  // The chief's values of `variables` (handle, dtype) assigned on every other worker, and an
  // int64 scalar fed at `value` on the chief and fetched at `received` everywhere.
  struct Broadcast {
    std::string target;    // run it
    std::string value;     // feed (chief only)
    std::string received;  // fetch
  };
  absl::Status AddBroadcast(Graph* g, const std::vector<std::pair<GraphTensor, DataType>>& variables,
                            Broadcast* out);

  // Gathers `values` from every task (in `session`) and fails, naming the tasks and the values
  // that differ, unless every task has the same ones. `names` name each value for messages.
  absl::Status CheckAgree(Session* session, const std::vector<std::string>& names,
                          const std::vector<int64_t>& values);

  // `s` (a failed collective) with the tasks that no longer accept connections named.
  absl::Status Explain(const absl::Status& s) const;

 private:
  Distributed() = default;
  // A worker (not the chief) waits at most collective_timeout for the chief to accept
  // connections; Unavailable naming the chief's address and the reason when it does not.
  absl::Status WaitForChief() const;
  Node* Collective(Graph* g, const std::string& op, const std::string& name,
                   const std::vector<NodeBuilder::NodeOut>& inputs, DataType dtype,
                   absl::Status* status, const std::string& merge_op = "Add",
                   const std::string& final_op = "Div");
  absl::Status AllReduce(Graph* g, std::vector<GraphTensor>* tensors, bool mean);
  Cluster cluster_;
  DistributedOptions options_;
  std::string have_feed_, have_fetch_;  // AllHave's graph
  SessionOptions session_options_;
  int next_instance_key_ = 1;
  int kernel_threads_ = -1;
  AllReduceSize step_all_reduce_;
  int agree_calls_ = 0;
};

// shard_by=files: the TFRecord files of `data` this worker reads, comma-separated (i, i + N, ...
// of the sorted list, i its rank, N the workers). InvalidArgument for data that is not
// TFRecord files or has fewer files than workers.
absl::StatusOr<std::string> WorkerFiles(const std::string& data, const Cluster& cluster);

}  // namespace tensorflow::tf_ext::train

#endif  // TF_EXT_TRAIN_DISTRIBUTE_DISTRIBUTED_H_
