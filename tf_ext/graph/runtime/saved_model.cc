#include "tf_ext/graph/runtime/saved_model.h"

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "tensorflow/cc/saved_model/loader.h"
#include "tensorflow/core/common_runtime/graph_constructor.h"
#include "tensorflow/core/common_runtime/local_device.h"
#include "tensorflow/core/framework/device.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/graph/algorithm.h"
#include "tensorflow/core/graph/node_builder.h"
#include "tensorflow/core/protobuf/meta_graph.pb.h"
#include "tf_ext/graph/io/graph_io.h"
#include "tf_ext/graph/engine/inline_calls.h"
#include "tf_ext/graph/passes/loop_variables.h"
#include "tf_ext/graph/runtime/grappler_stages.h"

namespace tensorflow {
namespace test {

// LocalDevice's choice between the process-wide intra-op pool and one per device is private to
// it and to this class (TensorFlow's kernel benchmarks switch it the same way).
class Benchmark {
 public:
  // Sets whether CPU devices made from now on share the process-wide pool; returns the setting.
  static bool UseGlobalThreadpool(bool use) {
    const bool was = LocalDevice::use_global_threadpool_;
    LocalDevice::set_use_global_threadpool(use);
    return was;
  }
};

}  // namespace test

namespace tf_ext {
namespace {

constexpr char kWhat[] = "SavedModel: ";

std::mutex& OwnPoolsMutex() {
  static auto* mu = new std::mutex;
  return *mu;
}

// Replaces `old` (whose output 0 it takes over, data and control edges) by `n`.
absl::Status Reroute(Graph* g, Node* old, Node* n) {
  std::vector<const Edge*> out(old->out_edges().begin(), old->out_edges().end());
  for (const Edge* e : out) {
    if (e->IsControlEdge()) {
      g->AddControlEdge(n, e->dst());
    } else {
      TF_RETURN_IF_ERROR(g->UpdateEdge(n, 0, e->dst(), e->dst_input()));
    }
  }
  g->RemoveNode(old);
  return absl::OkStatus();
}

}  // namespace

void SetSessionThreads(int64_t threads, ConfigProto* config) {
  if (threads <= 0) return;
  config->set_intra_op_parallelism_threads(static_cast<int32_t>(threads));
  config->set_inter_op_parallelism_threads(static_cast<int32_t>(threads));
}

OwnIntraOpPools::OwnIntraOpPools(bool own) : own_(own) {
  if (!own_) return;
  OwnPoolsMutex().lock();
  was_global_ = test::Benchmark::UseGlobalThreadpool(false);
}

OwnIntraOpPools::~OwnIntraOpPools() {
  if (!own_) return;
  test::Benchmark::UseGlobalThreadpool(was_global_);
  OwnPoolsMutex().unlock();
}

int CpuIntraOpThreads(const DeviceMgr& devices) {
  for (Device* d : devices.ListDevices()) {
    if (d->device_type() == DEVICE_CPU && d->tensorflow_cpu_worker_threads() != nullptr) {
      return d->tensorflow_cpu_worker_threads()->num_threads;
    }
  }
  return -1;
}

absl::Status LoadSavedModelBundle(const std::string& export_dir, const std::string& tag,
                                  SavedModelBundle* bundle, int64_t threads,
                                  ConfigProto* stage1_config) {
  SessionOptions session_options;
  // Nodes are added to the loader's Session (Session::Extend) to read or train the variables.
  session_options.config.mutable_experimental()->set_disable_optimize_for_static_graph(true);
  SetSessionThreads(threads, &session_options.config);
  // Its inter-op pool its own too (not the process-wide one the first Session sized).
  if (threads > 0) session_options.config.set_use_per_session_threads(true);
  if (stage1_config != nullptr) {
    *stage1_config = session_options.config;
    RemapOnly(&session_options.config);
  }
  {
    OwnIntraOpPools own(threads > 0);
    TF_RETURN_IF_ERROR(LoadSavedModel(session_options, RunOptions(), export_dir, {tag}, bundle));
  }
  const DeviceMgr* devices = nullptr;
  if (threads > 0 && bundle->session->LocalDeviceManager(&devices).ok()) {
    const int n = CpuIntraOpThreads(*devices);
    if (n != threads) {
      return absl::InternalError(absl::StrCat(kWhat, "threads=", threads, ": the Session's CPU device runs ", n,
                                              " intra-op threads (is TF_NUM_INTRAOP_THREADS set?)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<const SignatureDef*> FindSignature(const MetaGraphDef& meta,
                                                  const std::string& export_dir,
                                                  const std::string& signature_key) {
  const auto& signatures = meta.signature_def();
  auto sig = signatures.find(signature_key);
  if (sig == signatures.end()) {
    std::vector<std::string> keys;
    for (const auto& [k, v] : signatures) keys.push_back(k);
    return absl::NotFoundError(absl::StrCat(kWhat, export_dir, " has no signature '",
                                            signature_key, "'; it has: ", absl::StrJoin(keys, ", ")));
  }
  return &sig->second;
}

absl::StatusOr<std::vector<CapturedVariable>> SignatureVariables(const MetaGraphDef& meta,
                                                                 const SignatureDef& signature) {
  std::map<std::string, const NodeDef*> nodes;
  for (const NodeDef& n : meta.graph_def().node()) nodes[n.name()] = &n;
  std::vector<CapturedVariable> out;
  std::set<std::string> seen;
  const auto& objects = meta.object_graph_def();
  for (const auto& [key, info] : signature.outputs()) {
    auto ref = TensorRef::Parse(info.name());
    if (!ref.ok()) return ref.status();
    auto it = nodes.find(ref->node);
    if (it == nodes.end()) {
      return absl::NotFoundError(absl::StrCat(kWhat, "output '", key, "' names node '", ref->node,
                                              "', which the graph does not have"));
    }
    const NodeDef& call = *it->second;
    const auto f = call.attr().find("f");
    const auto cf = f == call.attr().end()
                        ? objects.concrete_functions().end()
                        : objects.concrete_functions().find(f->second.func().name());
    if (cf == objects.concrete_functions().end()) continue;
    const int bound = cf->second.bound_inputs_size();
    const int first = call.input_size() - bound;
    for (int i = 0; i < bound; ++i) {
      if (first + i < 0) break;
      const std::string handle = InputNodeName(call.input(first + i));
      const int id = cf->second.bound_inputs(i);
      if (id < 0 || id >= objects.nodes_size() || !objects.nodes(id).has_variable()) continue;
      if (!seen.insert(handle).second) continue;
      out.push_back({handle, objects.nodes(id).variable().name(),
                     objects.nodes(id).variable().trainable()});
    }
  }
  if (out.empty() && objects.nodes_size() == 0) {
    // TF1: the VarHandleOps the outputs need.
    std::set<std::string> roots;
    for (const auto& [key, info] : signature.outputs()) {
      auto ref = TensorRef::Parse(info.name());
      if (ref.ok()) roots.insert(ref->node);
    }
    const std::set<std::string> needed = NeededNodes(meta.graph_def(), roots);
    for (const NodeDef& n : meta.graph_def().node()) {
      if (n.op() == "VarHandleOp" && needed.count(n.name())) out.push_back({n.name(), n.name(), true});
    }
  }
  return out;
}

absl::StatusOr<SavedModelSignature> LoadSavedModelSignature(const std::string& export_dir,
                                                            const std::string& signature_key,
                                                            const std::string& tag) {
  SavedModelBundle bundle;
  TF_RETURN_IF_ERROR(LoadSavedModelBundle(export_dir, tag, &bundle));
  auto sig_def = FindSignature(bundle.meta_graph_def, export_dir, signature_key);
  if (!sig_def.ok()) return sig_def.status();
  SavedModelSignature out;
  for (const auto& [key, info] : (*sig_def)->inputs()) {
    auto ref = TensorRef::Parse(info.name());
    if (!ref.ok()) return ref.status();
    out.inputs[key] = *ref;
  }
  std::set<std::string> roots;
  for (const auto& [key, info] : (*sig_def)->outputs()) {
    auto ref = TensorRef::Parse(info.name());
    if (!ref.ok()) return ref.status();
    out.outputs[key] = *ref;
    roots.insert(ref->node);
  }
  GraphDef graph = bundle.meta_graph_def.graph_def();
  PruneGraphDef(roots, &graph);
  Graph g(OpRegistry::Global());
  TF_RETURN_IF_ERROR(ConvertGraphDefToGraph(GraphConstructorOptions(), graph, &g));
  GraphDef().Swap(&graph);
  TF_RETURN_IF_ERROR(InlineFunctionCalls(&g).status());
  // Loops that read variables (a Keras LSTM) take their values, read before the loop.
  TF_RETURN_IF_ERROR(ReadLoopVariablesOutside(&g, [](const Node*) { return true; }).status());

  // The variables the graph reads, and each read.
  std::vector<Node*> reads;
  std::map<Node*, int> variables;  // VarHandleOp -> index into values
  std::vector<Node*> handles;
  for (Node* n : g.op_nodes()) {
    const std::string& op = n->type_string();
    if (op != "ReadVariableOp" && op != "ResourceGather" && op != "ResourceGatherNd") continue;
    const Edge* e = nullptr;
    TF_RETURN_IF_ERROR(n->input_edge(0, &e));
    Node* v = VariableOfEdge(e);
    if (v == nullptr) continue;  // refused below, with the other resource uses
    if (variables.emplace(v, handles.size()).second) handles.push_back(v);
    reads.push_back(n);
  }
  // Their values, restored by the loader: read in the loader's Session (added nodes read the
  // same variables by container and shared name).
  std::vector<Tensor> values;
  if (!handles.empty()) {
    GraphDef extension;
    std::vector<std::string> fetches;
    for (size_t i = 0; i < handles.size(); ++i) {
      DataType dtype;
      TF_RETURN_IF_ERROR(GetNodeAttr(handles[i]->attrs(), "dtype", &dtype));
      NodeDef* handle = extension.add_node();
      *handle = handles[i]->def();
      handle->set_name(absl::StrCat("tf_ext_freeze/handle_", i));
      handle->clear_input();
      handle->clear_device();
      NodeDef* read = extension.add_node();
      read->set_name(absl::StrCat("tf_ext_freeze/read_", i));
      read->set_op("ReadVariableOp");
      read->add_input(handle->name());
      AddNodeAttr("dtype", dtype, read);
      fetches.push_back(read->name() + ":0");
    }
    TF_RETURN_IF_ERROR(bundle.session->Extend(extension));
    TF_RETURN_IF_ERROR(bundle.session->Run({}, fetches, {}, &values));
  }
  bundle.session.reset();  // its copy of the variables

  for (Node* n : reads) {
    const Edge* e = nullptr;
    TF_RETURN_IF_ERROR(n->input_edge(0, &e));
    const Tensor& value = values[variables.at(VariableOfEdge(e))];
    Node* c = nullptr;
    TF_RETURN_IF_ERROR(NodeBuilder(g.NewName(n->name() + "/frozen"), "Const")
                           .Attr("dtype", value.dtype())
                           .Attr("value", value)
                           .Finalize(&g, &c));
    Node* replacement = c;
    if (n->type_string() != "ReadVariableOp") {
      // gather(value, indices) in place of the resource gather.
      const Edge* indices = nullptr;
      TF_RETURN_IF_ERROR(n->input_edge(1, &indices));
      const bool nd = n->type_string() == "ResourceGatherNd";
      int batch_dims = 0;
      if (!nd) GetNodeAttr(n->attrs(), "batch_dims", &batch_dims).IgnoreError();
      NodeBuilder b(g.NewName(n->name() + "/frozen_gather"), nd ? "GatherNd" : "GatherV2");
      b.Input(c).Input(indices->src(), indices->src_output());
      if (!nd) {
        Tensor axis(DT_INT32, TensorShape({}));
        axis.scalar<int32>()() = batch_dims;
        Node* axis_node = nullptr;
        TF_RETURN_IF_ERROR(NodeBuilder(g.NewName(n->name() + "/axis"), "Const")
                               .Attr("dtype", DT_INT32)
                               .Attr("value", axis)
                               .Finalize(&g, &axis_node));
        b.Input(axis_node).Attr("batch_dims", batch_dims);
      }
      TF_RETURN_IF_ERROR(b.Finalize(&g, &replacement));
    }
    for (const Edge* in : n->in_edges()) {
      if (in->IsControlEdge()) g.AddControlEdge(in->src(), replacement);
    }
    TF_RETURN_IF_ERROR(Reroute(&g, n, replacement));
  }
  // What the outputs still need: no resource may be left.
  std::unordered_set<const Node*> keep;
  for (Node* n : g.op_nodes()) {
    if (roots.count(n->name())) keep.insert(n);
  }
  PruneForReverseReachability(&g, keep);
  for (Node* n : g.op_nodes()) {
    for (const Edge* e : n->in_edges()) {
      if (e->IsControlEdge() || e->src()->output_type(e->src_output()) != DT_RESOURCE) continue;
      if (n->type_string() == "Identity" || n->type_string() == "IdentityN") continue;
      Node* v = VariableOfEdge(e);
      return absl::UnimplementedError(absl::StrCat(
          kWhat, "node '", n->name(), "' (", n->type_string(), ") uses ",
          v != nullptr ? absl::StrCat("variable '", v->name(), "'") : "a resource",
          " in a way that cannot be frozen (only ReadVariableOp, ResourceGather and "
          "ResourceGatherNd can, also inside a loop body or a conditional branch: a variable "
          "assigned is not supported)"));
    }
  }
  out.variables = static_cast<int>(handles.size());
  g.ToGraphDef(&out.graph);
  return out;
}

absl::StatusOr<std::unique_ptr<GradientSession>> GradientSessionFromSavedModel(
    const std::string& export_dir, const std::string& signature_key,
    const std::vector<std::string>& y_keys, const std::vector<std::string>& x_keys,
    const std::vector<bool>& incoming_gradients, const GradientSessionOptions& options) {
  auto sig = LoadSavedModelSignature(export_dir, signature_key);
  if (!sig.ok()) return sig.status();
  GradientSessionSpec spec;
  for (const std::string& key : y_keys) {
    auto it = sig->outputs.find(key);
    if (it == sig->outputs.end()) {
      std::vector<std::string> keys;
      for (const auto& [k, v] : sig->outputs) keys.push_back(k);
      return absl::InvalidArgumentError(absl::StrCat("GradientSession: y '", key,
                                                     "' is not an output of signature '",
                                                     signature_key, "'; its outputs: ",
                                                     absl::StrJoin(keys, ", ")));
    }
    spec.ys.push_back(it->second);
    spec.y_names.push_back(key);
  }
  for (const std::string& key : x_keys) {
    auto it = sig->inputs.find(key);
    if (it == sig->inputs.end()) {
      std::vector<std::string> keys;
      for (const auto& [k, v] : sig->inputs) keys.push_back(k);
      return absl::InvalidArgumentError(absl::StrCat("GradientSession: x '", key,
                                                     "' is not an input of signature '",
                                                     signature_key, "'; its inputs: ",
                                                     absl::StrJoin(keys, ", ")));
    }
    spec.xs.push_back(it->second);
  }
  for (const auto& [key, ref] : sig->inputs) spec.input_names[ref.node] = key;
  spec.incoming_gradients = incoming_gradients;
  return GradientSession::Create(std::move(sig->graph), spec, options);
}

}  // namespace tf_ext
}  // namespace tensorflow
