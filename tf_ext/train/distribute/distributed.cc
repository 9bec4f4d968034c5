#include "tf_ext/train/distribute/distributed.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "google/protobuf/json/json.h"
#include "google/protobuf/struct.pb.h"
#include "tensorflow/core/distributed_runtime/server_lib.h"
#include "tensorflow/core/distributed_runtime/worker_env.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/protobuf/cluster.pb.h"
#include "tensorflow/core/protobuf/tensorflow_server.pb.h"
#include "tf_ext/graph/runtime/saved_model.h"
#include "tf_ext/train/data/data.h"
#include "tf_ext/train/distribute/host_address.h"
#include "tf_ext/train/distribute/listen_address.h"

namespace tensorflow::tf_ext::train {
namespace {

constexpr char kWhat[] = "distributed: ";
constexpr char kPrefix[] = "tf_ext_train/distributed";
constexpr int32_t kGroupKey = 1;  // every worker: the one group

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(kWhat, message));
}

// TF_CONFIG's JSON as protobuf's JSON parser reads it (google.protobuf.Value: any JSON value).
using JsonValue = google::protobuf::Value;

// Member `key` of a JSON object; nullptr when `v` is no object or has no such member.
const JsonValue* Member(const JsonValue& v, const std::string& key) {
  if (v.kind_case() != JsonValue::kStructValue) return nullptr;
  const auto& fields = v.struct_value().fields();
  auto it = fields.find(key);
  return it == fields.end() ? nullptr : &it->second;
}

absl::Status CheckAddress(const std::string& address, const std::string& where) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 1 || port > 65535) {
    return Invalid(absl::StrCat(where, ": '", address, "' is not host:port"));
  }
  const std::string host = address.substr(0, colon);
  if (host.find(':') != std::string::npos && Unbracketed(host) == host) {
    return Invalid(absl::StrCat(where, ": '", address,
                                "' is not host:port (an IPv6 address is written [address]:port)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Cluster> FromFlag(const DistributedOptions& options) {
  Cluster c;
  int64_t index = 0;
  for (absl::string_view a : absl::StrSplit(options.cluster, ',')) {
    TF_RETURN_IF_ERROR(CheckAddress(std::string(a), "option 'cluster'"));
    c.tasks.push_back({"worker", index++, std::string(a)});
  }
  if (options.task_index < 0 || options.task_index >= c.size()) {
    return Invalid(absl::StrCat("option 'task_index': ", options.task_index,
                                " is not a task of the cluster (", c.size(),
                                " workers: 0 to ", c.size() - 1, ")"));
  }
  c.rank = static_cast<int>(options.task_index);
  return c;
}

absl::StatusOr<Cluster> FromTfConfig(const std::string& text) {
  JsonValue root;
  if (absl::Status s = google::protobuf::json::JsonStringToMessage(text, &root); !s.ok()) {
    return Invalid(absl::StrCat("TF_CONFIG is not valid JSON: ", s.message()));
  }
  const JsonValue* cluster = Member(root, "cluster");
  if (cluster == nullptr || cluster->kind_case() != JsonValue::kStructValue) {
    return Invalid("TF_CONFIG has no \"cluster\" object");
  }
  std::map<std::string, std::vector<std::string>> jobs;
  // In the jobs' name order (a JSON object's members have none).
  const std::map<std::string, JsonValue> members(cluster->struct_value().fields().begin(),
                                                 cluster->struct_value().fields().end());
  for (const auto& [job, tasks] : members) {
    if (job != "worker" && job != "chief") {
      return Invalid(absl::StrCat("TF_CONFIG's cluster has a '", job,
                                  "' job; only 'worker' and 'chief' are supported (data-parallel "
                                  "workers, no parameter servers)"));
    }
    if (tasks.kind_case() != JsonValue::kListValue) {
      return Invalid(absl::StrCat("TF_CONFIG's cluster.", job, " is not a list of host:port"));
    }
    for (const JsonValue& t : tasks.list_value().values()) {
      if (t.kind_case() != JsonValue::kStringValue) {
        return Invalid(absl::StrCat("TF_CONFIG's cluster.", job, " is not a list of host:port"));
      }
      TF_RETURN_IF_ERROR(CheckAddress(t.string_value(), absl::StrCat("TF_CONFIG's cluster.", job)));
      jobs[job].push_back(t.string_value());
    }
  }
  if (jobs["worker"].empty() && jobs["chief"].empty()) return Invalid("TF_CONFIG's cluster names no worker");
  if (jobs["chief"].size() > 1) {
    return Invalid(absl::StrCat("TF_CONFIG's cluster.chief has ", jobs["chief"].size(), " tasks; at most one"));
  }
  const JsonValue* task = Member(root, "task");
  const JsonValue* type = task != nullptr ? Member(*task, "type") : nullptr;
  const JsonValue* index = task != nullptr ? Member(*task, "index") : nullptr;
  if (type == nullptr || type->kind_case() != JsonValue::kStringValue || index == nullptr ||
      index->kind_case() != JsonValue::kNumberValue) {
    return Invalid("TF_CONFIG has no task.type (a string) and task.index (a number)");
  }
  const std::string& task_type = type->string_value();
  const double task_index = index->number_value();
  if (task_type != "worker" && task_type != "chief") {
    return Invalid(absl::StrCat("TF_CONFIG's task.type '", task_type, "' is not worker or chief"));
  }
  const int64_t i = static_cast<int64_t>(task_index);
  if (i != task_index || i < 0 || i >= static_cast<int64_t>(jobs[task_type].size())) {
    return Invalid(absl::StrCat("TF_CONFIG's task.index ", task_index, " is not a task of job '",
                                task_type, "' (", jobs[task_type].size(), " tasks)"));
  }
  Cluster c;
  for (const std::string& a : jobs["chief"]) c.tasks.push_back({"chief", 0, a});
  for (size_t k = 0; k < jobs["worker"].size(); ++k) {
    c.tasks.push_back({"worker", static_cast<int64_t>(k), jobs["worker"][k]});
  }
  for (int r = 0; r < c.size(); ++r) {
    if (c.tasks[r].job == task_type && c.tasks[r].index == i) c.rank = r;
  }
  return c;
}

// Why a TCP connection to one resolved address does not open within `timeout_ms`; "" when it
// does.
std::string ConnectFails(const addrinfo* a, int timeout_ms) {
  std::string why = "no answer";
  const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
  if (fd < 0) return std::strerror(errno);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK);
  if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
    why.clear();
  } else if (errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, timeout_ms) == 1) {
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      why = err == 0 ? "" : std::strerror(err);
    }
  } else {
    why = std::strerror(errno);
  }
  close(fd);
  return why;
}

// Whether a TCP connection to host:port opens within `timeout_ms` on any of the host's
// addresses (as gRPC tries each: a dual-stack name's peer listens on one family); the reason
// when none does (the first address's, as the others' usually repeat it).
std::string Unreachable(const std::string& address, int timeout_ms) {
  const size_t colon = address.rfind(':');
  const std::string host = Unbracketed(address.substr(0, colon)), port = address.substr(colon + 1);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) {
    return "its host does not resolve";
  }
  std::string first;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const std::string why = ConnectFails(a, timeout_ms);
    if (why.empty()) {
      first.clear();
      break;
    }
    if (a == found) first = why;
  }
  freeaddrinfo(found);
  return first;
}

// The process's server: TensorFlow's cannot be stopped, so one per process, kept to its end.
std::mutex server_mu;
std::string* server_def_text = nullptr;
std::string* server_target = nullptr;
int server_kernel_threads = -1;  // its CPU device's intra-op threads

Node* IntConst(Graph* g, int32_t value, absl::Status* status) {
  Tensor t(DT_INT32, TensorShape({}));
  t.scalar<int32_t>()() = value;
  Node* n = nullptr;
  if (status->ok()) {
    *status = NodeBuilder(g->NewName(absl::StrCat(kPrefix, "/key")), "Const")
                  .Attr("dtype", DT_INT32)
                  .Attr("value", t)
                  .Finalize(g, &n);
  }
  return n;
}

Node* Build(Graph* g, NodeBuilder& b, absl::Status* status) {
  Node* n = nullptr;
  if (status->ok()) *status = b.Finalize(g, &n);
  return status->ok() ? n : nullptr;
}

// Whether every task of the cluster is on loopback: then a task's own name may be too.
bool ClusterOnLoopback(const Cluster& cluster) {
  for (const ClusterTask& t : cluster.tasks) {
    if (!IsLoopbackHost(t.address.substr(0, t.address.rfind(':')))) return false;
  }
  return true;
}

// Refuses a server that the kernel says listens on `port` anywhere but `address` (or, for a
// wildcard `address`, anywhere but the wildcard), or nowhere.
absl::Status CheckListenScope(const Cluster& cluster, const std::string& address, int port) {
  auto listening = ListeningAddresses(port);
  if (!listening.ok()) return listening.status();
  const bool right = !listening->empty() &&
      std::all_of(listening->begin(), listening->end(), [&](const std::string& a) {
        return IsWildcardHost(address) ? IsWildcardHost(a) : SameAddress(a, address);
      });
  if (right) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(
      kWhat, "TensorFlow's gRPC server for task ", cluster.TaskName(cluster.rank), " was asked to listen on ",
      address, " port ", port, " but the kernel's socket table shows it listening on ",
      listening->empty() ? "nothing at that port" : absl::StrJoin(*listening, ", "),
      IsWildcardHost(address) ? "" : " (option 'listen_address=0.0.0.0' listens on every interface)"));
}

// TensorFlow's server, made (not started) to listen on this task's address (or listen_address)
// alone, through a ScopedListenAddress while it is made: by itself it would listen on every
// interface.
absl::StatusOr<std::unique_ptr<ServerInterface>> MakeServer(const Cluster& cluster,
                                                            const DistributedOptions& options,
                                                            const ServerDef& server, int64_t threads) {
  const ClusterTask& me = cluster.tasks[cluster.rank];
  const size_t colon = me.address.rfind(':');
  const std::string port = me.address.substr(colon + 1);
  const std::string task = absl::StrCat(kWhat, "task ", cluster.TaskName(cluster.rank), ": ");
  int port_number = 0;
  if (!absl::SimpleAtoi(port, &port_number)) {
    return Invalid(absl::StrCat("'", me.address, "' has no numeric port"));
  }
  const std::string asked =
      options.listen_address.empty() ? me.address.substr(0, colon) : options.listen_address;
  std::string listen;
  std::unique_ptr<ScopedListenAddress> scope;
  if (!IsWildcardHost(asked)) {
    auto chosen = ChooseListenAddress(asked, ClusterOnLoopback(cluster));
    if (!chosen.ok()) {
      return absl::Status(chosen.status().code(),
                          absl::StrCat(task, "cannot choose the address to listen on: ",
                                       chosen.status().message()));
    }
    listen = *chosen;
    auto made = ScopedListenAddress::Create(listen, port_number);
    if (!made.ok()) {
      return absl::Status(made.status().code(), absl::StrCat(
          task, made.status().message(), " (option 'listen_address'; 0.0.0.0 listens on every interface)"));
    }
    scope = std::move(*made);
  } else {
    listen = Unbracketed(asked);
  }
  std::unique_ptr<ServerInterface> s;
  absl::Status status;
  {
    OwnIntraOpPools own(threads > 0);
    status = NewServer(server, &s);
  }
  if (!status.ok() && scope != nullptr &&
      (scope->bind_errno(true) == EADDRNOTAVAIL || scope->bind_errno(false) == EADDRNOTAVAIL)) {
    return absl::Status(status.code(), absl::StrCat(
        kWhat, "cannot start TensorFlow's gRPC server for task ", cluster.TaskName(cluster.rank),
        ": ", listen, " is not an address of this machine (", scope->BindErrors(),
        "; set option 'listen_address' to one that is, or to 0.0.0.0 for every interface)"));
  }
  if (!status.ok()) {
    const std::string binds = scope == nullptr ? "" : scope->BindErrors();
    return absl::Status(status.code(), absl::StrCat(
        kWhat, "cannot start TensorFlow's gRPC server for task ", cluster.TaskName(cluster.rank),
        " on ", listen, " (is port ", port, " in use?", binds.empty() ? "" : " ", binds, "): ",
        status.message()));
  }
  scope.reset();
  // Not started yet, so it can still be destroyed.
  TF_RETURN_IF_ERROR(CheckListenScope(cluster, listen, port_number));
  return s;
}

}  // namespace

std::string Cluster::Device(int r) const {
  return absl::StrCat("/job:", tasks[r].job, "/replica:0/task:", tasks[r].index);
}

std::string Cluster::TaskName(int r) const {
  return absl::StrCat(tasks[r].job, " ", tasks[r].index, " (", tasks[r].address, ")");
}

absl::StatusOr<std::optional<Cluster>> ResolveCluster(const DistributedOptions& options,
                                                      const char* tf_config) {
  if (options.collective_timeout <= 0) {
    return Invalid(absl::StrCat("option 'collective_timeout': ", options.collective_timeout,
                                " is not a positive number of seconds"));
  }
  if (options.shard_by != "batch" && options.shard_by != "files") {
    return Invalid(absl::StrCat("option 'shard_by': '", options.shard_by,
                                "' is not one of batch, files"));
  }
  if (!options.cluster.empty()) {
    auto c = FromFlag(options);
    if (!c.ok()) return c.status();
    return std::optional<Cluster>(*c);
  }
  if (options.task_index >= 0) return Invalid("option 'task_index' needs option 'cluster'");
  if (tf_config == nullptr || *tf_config == '\0') return std::optional<Cluster>();
  auto c = FromTfConfig(tf_config);
  if (!c.ok()) return c.status();
  return std::optional<Cluster>(*c);
}

absl::StatusOr<std::unique_ptr<Distributed>> Distributed::Start(const Cluster& cluster,
                                                                const DistributedOptions& options,
                                                                int64_t threads) {
  if (options.communication_hint != "auto" && options.communication_hint != "ring" &&
      options.communication_hint != "nccl") {
    return Invalid(absl::StrCat("option 'communication_hint': '", options.communication_hint,
                                "' is not one of auto, ring, nccl"));
  }
  std::unique_ptr<Distributed> d(new Distributed());
  d->cluster_ = cluster;
  d->options_ = options;
  const ClusterTask& me = cluster.tasks[cluster.rank];
  ConfigProto config;
  // As MultiWorkerMirroredStrategy sets them: the chief leads the group; a session sees only
  // this task's devices (every node runs here; only collectives talk to peers).
  config.mutable_experimental()->set_collective_group_leader(cluster.Device(0));
  config.add_device_filters(absl::StrCat("/job:", me.job, "/task:", me.index));
  // The server's devices run every step's kernels: its default config sizes their pools.
  SetSessionThreads(threads, &config);
  ServerDef server;
  for (const std::string job : {"chief", "worker"}) {
    JobDef* def = nullptr;
    for (const ClusterTask& t : cluster.tasks) {
      if (t.job != job) continue;
      if (def == nullptr) {
        def = server.mutable_cluster()->add_job();
        def->set_name(job);
      }
      (*def->mutable_tasks())[t.index] = t.address;
    }
  }
  server.set_job_name(me.job);
  server.set_task_index(static_cast<int32_t>(me.index));
  server.set_protocol("grpc");
  *server.mutable_default_session_config() = config;
  const std::string text = server.SerializeAsString();
  {
    std::lock_guard<std::mutex> lock(server_mu);
    if (server_def_text != nullptr && *server_def_text != text) {
      return absl::FailedPreconditionError(absl::StrCat(
          kWhat, "this process already serves another cluster or task (TensorFlow's server "
          "cannot be stopped: one cluster per process)"));
    }
    if (server_def_text == nullptr) {
      auto made = MakeServer(cluster, options, server, threads);
      if (!made.ok()) return made.status();
      std::unique_ptr<ServerInterface> s = std::move(*made);
      if (absl::Status started = s->Start(); !started.ok()) {
        return absl::Status(started.code(), absl::StrCat(
            kWhat, "cannot start TensorFlow's gRPC server for task ", cluster.TaskName(cluster.rank),
            ": ", started.message()));
      }
      server_target = new std::string(s->target());
      server_def_text = new std::string(text);
      if (s->worker_env() != nullptr && s->worker_env()->device_mgr != nullptr) {
        server_kernel_threads = CpuIntraOpThreads(*s->worker_env()->device_mgr);
      }
      s.release();  // serves until the process ends
    }
  }
  if (threads > 0 && server_kernel_threads != threads) {
    return absl::InternalError(absl::StrCat(kWhat, "threads=", threads, ": the server's CPU device runs ",
                                            server_kernel_threads,
                                            " intra-op threads (is TF_NUM_INTRAOP_THREADS set?)"));
  }
  TF_RETURN_IF_ERROR(d->WaitForChief());
  d->kernel_threads_ = server_kernel_threads;
  d->session_options_.target = *server_target;
  d->session_options_.config = config;
  // Nodes are added to the loader's Session (Session::Extend) to read or train the variables.
  d->session_options_.config.mutable_experimental()->set_disable_optimize_for_static_graph(true);
  return d;
}

absl::Status Distributed::WaitForChief() const {
  // A worker's first collective run asks the chief, the group's leader, for its step ids, and
  // TensorFlow's master retries that forever while the chief cannot be reached
  // (MasterSession::NewStepId): so the chief is waited for here, within collective_timeout.
  if (cluster_.rank == 0) return absl::OkStatus();
  const absl::Time deadline = absl::Now() + absl::Seconds(options_.collective_timeout);
  std::string why;
  for (;;) {
    why = Unreachable(cluster_.tasks[0].address, 1000);
    if (why.empty()) return absl::OkStatus();
    if (absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(250));
  }
  return absl::UnavailableError(absl::StrCat(
      kWhat, "task ", cluster_.TaskName(cluster_.rank), " cannot reach the chief, task ",
      cluster_.TaskName(0), ", within ", options_.collective_timeout, " s: ", why,
      " (is it started, and is its address in the cluster right?)"));
}

RunOptions Distributed::Run(RunKind kind) const {
  RunOptions r;
  r.mutable_experimental()->set_collective_graph_key(0x7466000 + static_cast<int64_t>(kind));
  return r;
}

Node* Distributed::Collective(Graph* g, const std::string& op, const std::string& name,
                              const std::vector<NodeBuilder::NodeOut>& inputs, DataType dtype,
                              absl::Status* status, const std::string& merge_op,
                              const std::string& final_op) {
  Node* size = IntConst(g, cluster_.size(), status);
  Node* group = IntConst(g, kGroupKey, status);
  Node* instance = IntConst(g, next_instance_key_++, status);
  if (!status->ok()) return nullptr;
  NodeBuilder b(g->NewName(absl::StrCat(kPrefix, "/", name)), op);
  const bool recv = op == "CollectiveBcastRecvV2";
  if (!recv) b.Input(inputs[0]);
  b.Input(size).Input(group).Input(instance);
  if (recv) b.Input(inputs[0]);  // the shape
  if (op == "CollectiveReduceV2" || op == "CollectiveGatherV2") {
    b.Input(std::vector<NodeBuilder::NodeOut>{});  // no ordering token
  }
  b.Attr("T", dtype)
      .Attr("communication_hint", options_.communication_hint)
      .Attr("timeout_seconds", static_cast<float>(options_.collective_timeout));
  if (op == "CollectiveReduceV2") b.Attr("merge_op", merge_op).Attr("final_op", final_op);
  return Build(g, b, status);
}

absl::Status Distributed::AllReduceMean(Graph* g, std::vector<GraphTensor>* tensors) {
  return AllReduce(g, tensors, /*mean=*/true);
}

absl::Status Distributed::AllReduceSum(Graph* g, std::vector<GraphTensor>* tensors) {
  return AllReduce(g, tensors, /*mean=*/false);
}

absl::Status Distributed::AllReduce(Graph* g, std::vector<GraphTensor>* tensors, bool mean) {
  absl::Status status;
  auto op = [&](const std::string& type, const std::vector<NodeBuilder::NodeOut>& inputs,
                const std::string& name, std::vector<std::pair<std::string, AttrValue>> attrs = {}) {
    NodeBuilder b(g->NewName(absl::StrCat(kPrefix, "/", name)), type);
    for (const auto& in : inputs) b.Input(in);
    for (const auto& [k, v] : attrs) b.Attr(k, v);
    return Build(g, b, &status);
  };
  auto int_vector = [&](std::vector<int32_t> values) {
    Tensor t(DT_INT32, TensorShape({static_cast<int64_t>(values.size())}));
    for (size_t i = 0; i < values.size(); ++i) t.flat<int32_t>()(i) = values[i];
    AttrValue v, d;
    t.AsProtoTensorContent(v.mutable_tensor());
    d.set_type(DT_INT32);
    return op("Const", {}, "const", {{"value", v}, {"dtype", d}});
  };
  // One pack per dtype, in the tensors' order (the strategy's batch all-reduce without a pack
  // size limit): one CollectiveReduceV2 each.
  std::map<DataType, std::vector<size_t>> packs;
  for (size_t i = 0; i < tensors->size(); ++i) {
    const GraphTensor& t = (*tensors)[i];
    const DataType dtype = t.node->output_type(t.index);
    if (dtype != DT_FLOAT && dtype != DT_DOUBLE && dtype != DT_HALF) {
      return absl::UnimplementedError(absl::StrCat(kWhat, "cannot average ", DataTypeString(dtype),
                                                   " tensors over workers"));
    }
    packs[dtype].push_back(i);
  }
  Node* flat_shape = int_vector({-1});
  Node* axis = IntConst(g, 0, &status);
  for (const auto& [dtype, pack] : packs) {
    {
      std::vector<NodeBuilder::NodeOut> flats, sizes;
      std::vector<Node*> shapes;
      for (size_t i : pack) {
        const GraphTensor& t = (*tensors)[i];
        flats.push_back({op("Reshape", {{t.node, t.index}, flat_shape}, "flat"), 0});
        shapes.push_back(op("Shape", {{t.node, t.index}}, "shape"));
        sizes.push_back({op("Size", {{t.node, t.index}}, "size"), 0});
      }
      if (!status.ok()) return status;
      Node* packed = flats[0].node;
      if (flats.size() > 1) {
        NodeBuilder concat(g->NewName(absl::StrCat(kPrefix, "/pack")), "ConcatV2");
        concat.Input(flats).Input(axis);
        packed = Build(g, concat, &status);
      }
      Node* reduced = Collective(g, "CollectiveReduceV2", mean ? "all_reduce" : "all_reduce_sum",
                                 {{packed, 0}}, dtype, &status, "Add", mean ? "Div" : "Id");
      if (!status.ok()) return status;
      NodeBuilder stacked(g->NewName(absl::StrCat(kPrefix, "/sizes")), "Pack");
      stacked.Input(sizes);
      Node* size_splits = Build(g, stacked, &status);
      AttrValue num;
      num.set_i(static_cast<int64_t>(pack.size()));
      Node* split = op("SplitV", {{reduced, 0}, {size_splits, 0}, axis}, "unpack", {{"num_split", num}});
      for (size_t k = 0; k < pack.size(); ++k) {
        Node* r = op("Reshape", {{split, static_cast<int>(k)}, {shapes[k], 0}}, "mean");
        if (!status.ok()) return status;
        (*tensors)[pack[k]] = {r, 0};
      }
    }
  }
  return status;
}

absl::Status Distributed::AddBroadcast(Graph* g, const std::vector<std::pair<GraphTensor, DataType>>& variables,
                                       Broadcast* out) {
  absl::Status status;
  const bool chief = cluster_.is_chief();
  std::vector<Node*> done;
  auto builder = [&](const std::string& type, const std::string& name) {
    return NodeBuilder(g->NewName(absl::StrCat(kPrefix, "/", name)), type);
  };
  for (const auto& [handle, dtype] : variables) {
    if (chief) {
      NodeBuilder read = builder("ReadVariableOp", "read");
      read.Input(handle.node, handle.index).Attr("dtype", dtype);
      Node* value = Build(g, read, &status);
      if (!status.ok()) return status;
      done.push_back(Collective(g, "CollectiveBcastSendV2", "send", {{value, 0}}, dtype, &status));
    } else {
      NodeBuilder shape = builder("VariableShape", "shape");
      shape.Input(handle.node, handle.index).Attr("out_type", DT_INT32);
      Node* s = Build(g, shape, &status);
      if (!status.ok()) return status;
      Node* value = Collective(g, "CollectiveBcastRecvV2", "recv", {{s, 0}}, dtype, &status);
      if (!status.ok()) return status;
      NodeBuilder assign = builder("AssignVariableOp", "assign");
      assign.Input(handle.node, handle.index).Input(value, 0).Attr("dtype", dtype);
      done.push_back(Build(g, assign, &status));
    }
    if (!status.ok()) return status;
  }
  // The int64 value: fed on the chief, received by the others.
  Node* received = nullptr;
  Tensor one_shape(DT_INT32, TensorShape({1}));
  one_shape.flat<int32_t>()(0) = 1;
  if (chief) {
    NodeBuilder feed = builder("Placeholder", "value");
    feed.Attr("dtype", DT_INT64).Attr("shape", TensorShape({1}));
    Node* value = Build(g, feed, &status);
    if (!status.ok()) return status;
    out->value = value->name() + ":0";
    received = Collective(g, "CollectiveBcastSendV2", "send", {{value, 0}}, DT_INT64, &status);
  } else {
    NodeBuilder shape = builder("Const", "shape");
    shape.Attr("dtype", DT_INT32).Attr("value", one_shape);
    Node* s = Build(g, shape, &status);
    if (!status.ok()) return status;
    received = Collective(g, "CollectiveBcastRecvV2", "recv", {{s, 0}}, DT_INT64, &status);
  }
  if (!status.ok()) return status;
  out->received = received->name() + ":0";
  NodeBuilder group = builder("NoOp", "broadcast");
  for (Node* n : done) group.ControlInput(n);
  Node* target = Build(g, group, &status);
  if (!status.ok()) return status;
  out->target = target->name();
  return absl::OkStatus();
}

absl::StatusOr<bool> Distributed::AllHave(Session* session, bool has) {
  if (have_feed_.empty()) {
    Graph g(OpRegistry::Global());
    absl::Status status;
    Node* feed = nullptr;
    status = NodeBuilder(g.NewName(absl::StrCat(kPrefix, "/have")), "Placeholder")
                 .Attr("dtype", DT_INT32)
                 .Attr("shape", TensorShape({}))
                 .Finalize(&g, &feed);
    if (!status.ok()) return status;
    Node* all = Collective(&g, "CollectiveReduceV2", "all_have", {{feed, 0}}, DT_INT32, &status,
                           "Min", "Id");
    if (!status.ok()) return status;
    // Named apart from the other graphs' nodes, whose names a Graph of their own numbered.
    const std::string scope = absl::StrCat(kPrefix, "/all_have/");
    GraphDef def;
    g.ToGraphDef(&def);
    for (NodeDef& n : *def.mutable_node()) {
      n.set_name(scope + n.name());
      for (std::string& in : *n.mutable_input()) in = in[0] == '^' ? "^" + scope + in.substr(1) : scope + in;
    }
    TF_RETURN_IF_ERROR(session->Extend(def));
    have_feed_ = scope + feed->name() + ":0";
    have_fetch_ = scope + all->name() + ":0";
  }
  Tensor mine(DT_INT32, TensorShape({}));
  mine.scalar<int32_t>()() = has ? 1 : 0;
  std::vector<Tensor> out;
  RunMetadata unused;
  absl::Status s = session->Run(Run(RunKind::kHave), {{have_feed_, mine}}, {have_fetch_}, {}, &out, &unused);
  if (!s.ok()) return Explain(s);
  return out[0].scalar<int32_t>()() == 1;
}

absl::Status Distributed::CheckAgree(Session* session, const std::vector<std::string>& names,
                                     const std::vector<int64_t>& values) {
  Graph g(OpRegistry::Global());
  absl::Status status;
  Tensor mine(DT_INT64, TensorShape({static_cast<int64_t>(values.size())}));
  for (size_t i = 0; i < values.size(); ++i) mine.flat<int64_t>()(i) = values[i];
  const std::string scope = absl::StrCat(kPrefix, "/agree_", agree_calls_++);
  Node* input = nullptr;
  status = NodeBuilder(absl::StrCat(scope, "/values"), "Const")
               .Attr("dtype", DT_INT64)
               .Attr("value", mine)
               .Finalize(&g, &input);
  if (!status.ok()) return status;
  Node* gathered = Collective(&g, "CollectiveGatherV2", "gather", {{input, 0}}, DT_INT64, &status);
  if (!status.ok()) return status;
  GraphDef def;
  g.ToGraphDef(&def);
  TF_RETURN_IF_ERROR(session->Extend(def));
  std::vector<Tensor> out;
  RunMetadata unused;
  if (absl::Status s = session->Run(Run(RunKind::kAgree), {}, {gathered->name() + ":0"}, {}, &out, &unused);
      !s.ok()) {
    return Explain(absl::Status(s.code(), absl::StrCat("the workers did not all join within ",
                                                       options_.collective_timeout, " s: ", s.message())));
  }
  const auto all = out[0].flat<int64_t>();
  std::vector<std::string> differences;
  for (int r = 0; r < cluster_.size(); ++r) {
    for (size_t i = 0; i < values.size(); ++i) {
      const int64_t theirs = all(r * values.size() + i);
      if (theirs != values[i]) {
        differences.push_back(absl::StrCat("task ", cluster_.TaskName(r), " has ", names[i], " ", theirs,
                                           " where this task (", cluster_.TaskName(cluster_.rank),
                                           ") has ", values[i]));
      }
    }
  }
  if (!differences.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        kWhat, "the workers were not started alike: ", absl::StrJoin(differences, "; "),
        " (every worker takes the same model, flags and cluster)"));
  }
  return absl::OkStatus();
}

absl::Status Distributed::AllReduceStep(Graph* g, std::vector<GraphTensor>* tensors,
                                        const std::vector<PartialTensorShape>& shapes) {
  if (shapes.size() != tensors->size()) {
    return absl::InternalError(absl::StrCat(kWhat, shapes.size(), " shapes for ", tensors->size(), " tensors"));
  }
  // Counted as AllReduceMean packs them: by dtype, each tensor's elements once.
  std::set<DataType> dtypes;
  AllReduceSize size;
  size.tensors = static_cast<int64_t>(tensors->size());
  for (size_t i = 0; i < tensors->size(); ++i) {
    const DataType dtype = (*tensors)[i].node->output_type((*tensors)[i].index);
    dtypes.insert(dtype);
    const int64_t elements = shapes[i].num_elements();
    if (elements < 0 || size.bytes < 0) {
      size.bytes = -1;
    } else {
      size.bytes += elements * DataTypeSize(dtype);
    }
  }
  size.packs = static_cast<int64_t>(dtypes.size());
  step_all_reduce_ = size;
  return AllReduceMean(g, tensors);
}

absl::Status Distributed::Explain(const absl::Status& s) const {
  if (s.ok()) return s;
  // A task that refuses connections is gone. Its listening socket may outlive it for a moment:
  // probed again, and failing that, the task TensorFlow's error names as the remote end of a
  // failed call (the first: the others relay its failure).
  std::vector<std::string> lost;
  for (int attempt = 0; attempt < 3 && lost.empty(); ++attempt) {
    if (attempt > 0) usleep(500 * 1000);
    for (int r = 0; r < cluster_.size(); ++r) {
      if (r == cluster_.rank) continue;
      const std::string why = Unreachable(cluster_.tasks[r].address, 1000);
      if (!why.empty()) lost.push_back(absl::StrCat(cluster_.TaskName(r), ": ", why));
    }
  }
  size_t first = std::string::npos;
  for (int r = 0; r < cluster_.size() && lost.empty(); ++r) {
    const size_t at = s.message().find(absl::StrCat("remote target ", cluster_.Device(r), " "));
    if (r != cluster_.rank && at < first) first = at;
  }
  for (int r = 0; r < cluster_.size() && lost.empty() && first != std::string::npos; ++r) {
    if (s.message().find(absl::StrCat("remote target ", cluster_.Device(r), " ")) == first) {
      lost.push_back(absl::StrCat(cluster_.TaskName(r), ": its calls failed"));
    }
  }
  if (lost.empty()) return s;
  return absl::Status(s.code(), absl::StrCat(kWhat, "lost task ", absl::StrJoin(lost, "; lost task "),
                                             " (", s.message(), ")"));
}

absl::StatusOr<std::string> WorkerFiles(const std::string& data, const Cluster& cluster) {
  if (!IsTFRecordPath(data)) {
    return absl::InvalidArgumentError(
        absl::StrCat("option 'shard_by': 'files' shards TFRecord files over the workers; '", data,
                     "' is not TFRecord data (use shard_by=batch)"));
  }
  auto files = ExpandTFRecordFiles(data);
  if (!files.ok()) return files.status();
  if (static_cast<int64_t>(files->size()) < cluster.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("option 'shard_by': 'files' needs at least one file per worker; '", data,
                     "' has ", files->size(), " for ", cluster.size(),
                     " workers (use shard_by=batch)"));
  }
  std::vector<std::string> mine;
  for (size_t i = cluster.rank; i < files->size(); i += cluster.size()) mine.push_back((*files)[i]);
  return absl::StrJoin(mine, ",");
}

}  // namespace tensorflow::tf_ext::train
