#include "tf_ext/train/model/trainer.h"

#include <unistd.h>

#include <cstdlib>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "tensorflow/core/common_runtime/graph_constructor.h"
#include "tensorflow/core/framework/node_def_util.h"
#include "tensorflow/core/framework/partial_tensor_shape.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/graph/algorithm.h"
#include "tensorflow/core/platform/env.h"
#include "tensorflow/core/platform/hash.h"
#include "tensorflow/core/platform/path.h"
#include "tf_ext/graph/io/graph_io.h"
#include "tf_ext/graph/passes/loop_variables.h"
#include "tf_ext/graph/passes/xla_cluster.h"
#include "tf_ext/graph/pipeline/gradient_pipeline.h"
#include "tf_ext/graph/runtime/export.h"
#include "tf_ext/graph/runtime/grappler_stages.h"
#include "tf_ext/graph/runtime/saved_model.h"
#include "tf_ext/train/model/checkpoint.h"
#include "tf_ext/train/model/graph_ops.h"

namespace tensorflow::tf_ext {
namespace {

constexpr char kPrefix[] = "tf_ext_train";
constexpr char kEvalPrefix[] = "tf_ext_eval";  // the inference forward Evaluate runs
constexpr char kLocalMetricsPrefix[] = "tf_ext_local_metrics";  // Evaluate's, with a cluster
constexpr char kGlobalMetricsPrefix[] = "tf_ext_global_metrics";  // Step's, with a cluster
constexpr char kWhat[] = "trainer: ";

// Every node of `graph` renamed "<prefix>/<name>" (inputs too). Variables keep their identity:
// a VarHandleOp names its resource by shared_name (set to the old node name where empty).
void Rename(GraphDef* graph, const std::string& prefix) {
  auto renamed = [&](const std::string& input) {
    const bool control = absl::StartsWith(input, "^");
    return absl::StrCat(control ? "^" : "", prefix, "/", absl::StripPrefix(input, "^"));
  };
  for (NodeDef& n : *graph->mutable_node()) {
    if (n.op() == "VarHandleOp") {
      auto& shared = (*n.mutable_attr())["shared_name"];
      if (shared.s().empty()) shared.set_s(n.name());
    }
    n.set_name(absl::StrCat(prefix, "/", n.name()));
    for (std::string& in : *n.mutable_input()) in = renamed(in);
  }
}

// The dtype as Python spells it (float32, not TensorFlow's C++ "float").
std::string PythonDtypeName(DataType dtype) {
  switch (dtype) {
    case DT_HALF: return "float16";
    case DT_FLOAT: return "float32";
    case DT_DOUBLE: return "float64";
    default: return DataTypeString(dtype);
  }
}

Tensor StringTensor(const std::string& s) {
  Tensor t(DT_STRING, TensorShape({}));
  t.scalar<tstring>()() = s;
  return t;
}

// A temporary directory, deleted with everything in it when this goes out of scope.
class ScopedTempDir {
 public:
  ~ScopedTempDir() {
    if (path_.empty()) return;
    int64_t files = 0, dirs = 0;
    Env::Default()->DeleteRecursively(path_, &files, &dirs).IgnoreError();
  }
  absl::Status Create() {
    if (!Env::Default()->LocalTempFilename(&path_)) {
      path_.clear();
      return absl::InternalError("trainer: no temporary file name");
    }
    return Env::Default()->RecursivelyCreateDir(path_);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Copies the files under `from` to `to` (created), recursively.
absl::Status CopyTree(Env* env, const std::string& from, const std::string& to) {
  TF_RETURN_IF_ERROR(env->RecursivelyCreateDir(to));
  std::vector<std::string> children;
  TF_RETURN_IF_ERROR(env->GetChildren(from, &children));
  for (const std::string& c : children) {
    const std::string src = io::JoinPath(from, c), dst = io::JoinPath(to, c);
    if (env->IsDirectory(src).ok()) {
      TF_RETURN_IF_ERROR(CopyTree(env, src, dst));
    } else {
      TF_RETURN_IF_ERROR(env->CopyFile(src, dst));
    }
  }
  return absl::OkStatus();
}

// The placeholder nodes a run feeds: the inputs' (key -> tensor), the targets' and the sample
// weights' (tensors; empty: none).
std::vector<std::string> FedNodes(const std::map<std::string, std::string>& inputs,
                                  const std::string& targets, const std::string& weights) {
  std::vector<std::string> nodes;
  for (const auto& [key, tensor] : inputs) nodes.push_back(InputNodeName(tensor));
  if (!targets.empty()) nodes.push_back(InputNodeName(targets));
  if (!weights.empty()) nodes.push_back(InputNodeName(weights));
  return nodes;
}

// The pipeline options of a forward renamed apart under `prefix`.
PipelineOptions ForwardPipelineOptions(const std::string& prefix) {
  PipelineOptions options;
  options.name_prefix = absl::StrCat(prefix, "/gradients");
  // The variable reads are found by pointer; nothing is fed or fetched by a forward name.
  options.merge_equal_nodes = false;
  options.fold_weight_layouts = true;  // weights are variables here: nothing to fold
  return options;
}

// The forward of a signature's output: the nodes of `graph` that `output_node` needs, renamed
// apart under `prefix` (the variables keep their resources), with the pipeline's forward steps
// (pipeline/gradient_pipeline.h: function calls inlined) applied, into the empty `g`.
absl::Status BuildForward(const GraphDef& graph, const std::string& output_node,
                          const std::string& prefix, GradientPipeline* pipeline, Graph* g) {
  GraphDef forward = graph;
  PruneGraphDef({output_node}, &forward);
  Rename(&forward, prefix);
  TF_RETURN_IF_ERROR(ConvertGraphDefToGraph(GraphConstructorOptions(), forward, g));
  GraphDef().Swap(&forward);
  return pipeline->PrepareForward(g);
}

// The nodes `graph` defines renamed "<prefix>/<name>", and its inputs naming them; inputs that
// name other nodes (the Session's) are kept.
void RenameDefined(GraphDef* graph, const std::string& prefix) {
  std::set<std::string> defined;
  for (const NodeDef& n : graph->node()) defined.insert(n.name());
  for (NodeDef& n : *graph->mutable_node()) {
    n.set_name(absl::StrCat(prefix, "/", n.name()));
    for (std::string& in : *n.mutable_input()) {
      const bool control = absl::StartsWith(in, "^");
      const std::string name(absl::StripPrefix(in, "^"));
      const std::string node = name.substr(0, name.find(':'));
      if (defined.count(node)) in = absl::StrCat(control ? "^" : "", prefix, "/", name);
    }
  }
}

}  // namespace

Trainer::~Trainer() {
  if (bundle_.session != nullptr) bundle_.session->Close().IgnoreError();
}

namespace train {

// What Trainer::Create's phases share: the signature and output trained, the forward graph the
// step is built in (renamed apart under kPrefix) and its variables.
struct StepModel {
  const MetaGraphDef* meta = nullptr;
  std::string signature_key, output_key;
  const SignatureDef* sig = nullptr;
  const TensorInfo* out_info = nullptr;
  TensorRef output_ref;
  std::vector<CapturedVariable> captured;
  std::map<std::string, std::string> trainable;  // handle node -> variable name
  Graph g{OpRegistry::Global()};
  train::GraphOps ops{&g, kPrefix};
  std::map<std::string, Node*> nodes;  // the forward's, by (renamed) name
  // Each trainable variable's reads and ResourceGathers, by (original) handle.
  std::map<std::string, std::vector<GraphTensor>> reads;
  std::map<std::string, std::vector<Node*>> gathers;
  // The forward's own variable updates (BatchNormalization's moving averages in a training-mode
  // function): nothing fetched depends on them, so the step runs them explicitly.
  std::vector<Node*> forward_updates;
  GraphTensor output, targets, weights, loss;

  static std::string Renamed(const std::string& name) { return absl::StrCat(kPrefix, "/", name); }
  static std::string Original(const Node* n) {
    return std::string(absl::StripPrefix(n->name(), std::string(kPrefix) + "/"));
  }
};

}  // namespace train

namespace {

// The signature trained (the one asked for, else a training-mode "train" one when there is
// one), the output the loss reads, and the trainable variables the signature captures.
absl::Status ChooseOutput(const std::string& export_dir, const TrainerOptions& options,
                          train::StepModel* m) {
  const MetaGraphDef& meta = *m->meta;
  m->signature_key = options.signature_key;
  if (m->signature_key.empty()) {
    m->signature_key = meta.signature_def().count("train") ? "train" : "serving_default";
  }
  auto sig = FindSignature(meta, export_dir, m->signature_key);
  if (!sig.ok()) return sig.status();
  m->sig = *sig;
  m->output_key = options.output_key;
  if (m->output_key.empty()) {
    if (m->sig->outputs_size() != 1) {
      std::vector<std::string> keys;
      for (const auto& [k, v] : m->sig->outputs()) keys.push_back(k);
      return absl::InvalidArgumentError(absl::StrCat(kWhat, "signature '", m->signature_key,
                                                     "' has several outputs (",
                                                     absl::StrJoin(keys, ", "),
                                                     "): name the one the loss reads"));
    }
    m->output_key = m->sig->outputs().begin()->first;
  }
  auto out_info = m->sig->outputs().find(m->output_key);
  if (out_info == m->sig->outputs().end()) {
    return absl::InvalidArgumentError(absl::StrCat(kWhat, "signature '", m->signature_key,
                                                   "' has no output '", m->output_key, "'"));
  }
  m->out_info = &out_info->second;
  auto output_ref = TensorRef::Parse(m->out_info->name());
  if (!output_ref.ok()) return output_ref.status();
  m->output_ref = *output_ref;
  auto captured = SignatureVariables(meta, *m->sig);
  if (!captured.ok()) return captured.status();
  m->captured = std::move(*captured);
  for (const CapturedVariable& v : m->captured) {
    if (v.trainable) m->trainable[v.handle] = v.name;
  }
  if (m->trainable.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(kWhat, "signature '", m->signature_key,
                                                   "' reads no trainable variable"));
  }
  return absl::OkStatus();
}

// Variables the loaded graph initializes from the captured ones (AssignVariableOp(copy,
// ReadVariableOp(captured))): an export reassigns them, or it would save their old values.
std::vector<std::string> SyncOps(const MetaGraphDef& meta,
                                 const std::vector<CapturedVariable>& captured) {
  std::vector<std::string> sync;
  std::set<std::string> captured_handles;
  for (const CapturedVariable& v : captured) captured_handles.insert(v.handle);
  std::map<std::string, const NodeDef*> by_name;
  for (const NodeDef& n : meta.graph_def().node()) by_name[n.name()] = &n;
  for (const NodeDef& n : meta.graph_def().node()) {
    if (n.op() != "AssignVariableOp" || n.input_size() < 2) continue;
    auto read = by_name.find(std::string(absl::StripSuffix(n.input(1), ":0")));
    if (read == by_name.end() || read->second->op() != "ReadVariableOp" ||
        read->second->input_size() < 1) {
      continue;
    }
    if (captured_handles.count(read->second->input(0))) sync.push_back(n.name());
  }
  return sync;
}

// Each trainable variable's reads and gathers in the forward (m->reads, m->gathers) and the
// forward's own variable updates; any other use of a trainable variable is refused.
absl::Status FindVariableUses(train::StepModel* m) {
  for (Node* n : m->g.op_nodes()) {
    for (const Edge* e : n->in_edges()) {
      if (e->IsControlEdge() || e->src()->output_type(e->src_output()) != DT_RESOURCE) continue;
      if (n->type_string() == "Identity" || n->type_string() == "IdentityN") continue;
      Node* v = VariableOfEdge(e);
      if (v == nullptr) continue;
      const std::string original = train::StepModel::Original(v);
      if (!m->trainable.count(original)) continue;
      if (n->type_string() == "ResourceGather" && e->dst_input() == 0) {
        int32_t batch_dims = 0;
        if (!TryGetNodeAttr(n->attrs(), "batch_dims", &batch_dims)) batch_dims = 0;
        if (batch_dims == 0) {
          m->gathers[original].push_back(n);
          continue;
        }
      }
      if (n->type_string() != "ReadVariableOp") {
        return absl::UnimplementedError(absl::StrCat(
            kWhat, "trainable variable '", m->trainable[original], "' is used by node '", n->name(),
            "' (", n->type_string(), "); only variables read by ReadVariableOp or gathered by "
            "ResourceGather (batch_dims 0) in the signature's function, its loop bodies or its "
            "conditional branches can be trained yet (not one assigned there, or passed on to "
            "another function)"));
      }
      m->reads[original].push_back({n, 0});
    }
  }
  for (Node* n : m->g.op_nodes()) {
    const std::string& op = n->type_string();
    if (op == "AssignVariableOp" || op == "AssignAddVariableOp" || op == "AssignSubVariableOp") {
      m->forward_updates.push_back(n);
    }
  }
  return absl::OkStatus();
}

// What each variable's gradient is taken from. A read whose every use is a GatherV2 of rows
// (axis 0, batch_dims 0: Keras 3's Embedding) or a shape (Shape, Size, Rank: no gradient), and
// a ResourceGather of the variable, give a sparse gradient: the gradient of the gathered
// values, reshaped to rows at the flattened indices (TensorFlow's IndexedSlices), so that no
// [vocab, ...] gradient is formed. A variable with any other use of a read value gets the
// dense gradient of its reads, to which its gathers' rows are added (as tf.GradientTape sums
// IndexedSlices and a dense gradient).
struct GradientSources {
  std::vector<GraphTensor> dense;                             // reads
  std::vector<std::pair<GraphTensor, GraphTensor>> gathered;  // (gathered values, indices)
};

bool IsRowsGather(const Edge* e) {
  const Node* n = e->dst();
  if (n->type_string() != "GatherV2" || e->dst_input() != 0) return false;
  int32_t batch_dims = 0;
  if (TryGetNodeAttr(n->attrs(), "batch_dims", &batch_dims) && batch_dims != 0) return false;
  const Edge* axis = nullptr;
  if (!n->input_edge(2, &axis).ok() || axis->src()->type_string() != "Const") return false;
  Tensor value;
  if (!GetNodeAttr(axis->src()->attrs(), "value", &value).ok() || value.NumElements() != 1) return false;
  if (value.dtype() == DT_INT32) return value.flat<int32>()(0) == 0;
  if (value.dtype() == DT_INT64) return value.flat<int64_t>()(0) == 0;
  return false;
}

bool IsNoGradientUse(const Node* n) {
  const std::string& op = n->type_string();
  return op == "Shape" || op == "ShapeN" || op == "Size" || op == "Rank";
}

// The variables in the order their gradients are taken (read ones, then only gathered ones),
// and each one's sources.
absl::Status ClassifySources(train::StepModel* m, std::vector<std::string>* order,
                             std::map<std::string, GradientSources>* sources) {
  for (const auto& [handle, rs] : m->reads) order->push_back(handle);
  for (const auto& [handle, gs] : m->gathers) {
    if (!m->reads.count(handle)) order->push_back(handle);
  }
  for (const std::string& handle : *order) {
    GradientSources& src = (*sources)[handle];
    for (Node* g : m->gathers[handle]) {
      const Edge* indices = nullptr;
      TF_RETURN_IF_ERROR(g->input_edge(1, &indices));
      src.gathered.push_back({{g, 0}, {indices->src(), indices->src_output()}});
    }
    for (const GraphTensor& r : m->reads[handle]) {
      std::vector<const Edge*> rows;
      bool dense = false;
      for (const Edge* e : r.node->out_edges()) {
        if (e->IsControlEdge() || IsNoGradientUse(e->dst())) continue;
        if (IsRowsGather(e)) {
          rows.push_back(e);
        } else {
          dense = true;
        }
      }
      if (dense) {
        src.dense.push_back(r);
        continue;
      }
      for (const Edge* e : rows) {
        const Edge* indices = nullptr;
        TF_RETURN_IF_ERROR(e->dst()->input_edge(1, &indices));
        src.gathered.push_back({{e->dst(), 0}, {indices->src(), indices->src_output()}});
      }
    }
    // Nothing the loss can depend on (every read only measured): the reads, as before.
    if (src.dense.empty() && src.gathered.empty()) src.dense = m->reads[handle];
  }
  return absl::OkStatus();
}

GraphTensor IntConst(train::GraphOps* ops, DataType dtype, const std::vector<int64_t>& values) {
  Tensor v(dtype, TensorShape({static_cast<int64_t>(values.size())}));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DT_INT32) v.flat<int32>()(i) = static_cast<int32>(values[i]);
    else v.flat<int64_t>()(i) = values[i];
  }
  return ops->Const(v);
}

// The variable's first dimension (its vocabulary, for rows at ids).
GraphTensor FirstDimension(train::GraphOps* ops, GraphTensor handle) {
  AttrValue shrink;
  shrink.set_i(1);
  return ops->Op("StridedSlice",
                 {ops->Op("VariableShape", {handle}, "shape"), IntConst(ops, DT_INT32, {0}),
                  IntConst(ops, DT_INT32, {1}), IntConst(ops, DT_INT32, {1})},
                 "vocab", {{"shrink_axis_mask", shrink}});
}

// ConcatV2 of `parts` on axis 0 (the part itself when there is one).
absl::StatusOr<GraphTensor> Concat(train::StepModel* m, const std::vector<GraphTensor>& parts,
                                   const char* name) {
  if (parts.size() == 1) return parts[0];
  TF_RETURN_IF_ERROR(m->ops.status());
  std::vector<NodeBuilder::NodeOut> outs;
  for (const GraphTensor& p : parts) outs.push_back({p.node, p.index});
  Node* n = nullptr;
  TF_RETURN_IF_ERROR(NodeBuilder(m->g.NewName(absl::StrCat(kPrefix, "/", name)), "ConcatV2")
                         .Input(outs)
                         .Input(m->ops.Scalar(DT_INT32, 0).node)
                         .Finalize(&m->g, &n));
  return GraphTensor{n, 0};
}

// One variable's gradient from its sources' gradients (dxs from *next on): sparse, the gathers'
// gradients as rows [n, dims of the variable after the first] at indices [n]; dense, the reads'
// gradients plus the gathered rows summed into [vocab, ...]. Each source's gradient node is
// added to `gradient_nodes`.
absl::StatusOr<train::Gradient> AssembleGradient(train::StepModel* m,
                                                 const train::TrainableVariable& var,
                                                 const GradientSources& src,
                                                 const std::vector<GraphTensor>& dxs, size_t* next,
                                                 std::vector<Node*>* gradient_nodes) {
  train::GraphOps& ops = m->ops;
  std::vector<GraphTensor> dense(dxs.begin() + *next, dxs.begin() + *next + src.dense.size());
  *next += src.dense.size();
  std::vector<GraphTensor> rows, ids;
  GraphTensor row_shape;
  bool int64_ids = false;
  for (const auto& [values, indices] : src.gathered) {
    if (indices.node->output_type(indices.index) == DT_INT64) int64_ids = true;
  }
  if (!src.gathered.empty()) {
    // concat([-1], shape(variable)[1:])
    GraphTensor shape = ops.Op("VariableShape", {var.handle}, "shape");
    GraphTensor inner = ops.Op("Slice", {shape, IntConst(&ops, DT_INT32, {1}), IntConst(&ops, DT_INT32, {-1})},
                               "row_shape");
    auto joined = Concat(m, {IntConst(&ops, DT_INT32, {-1}), inner}, "row_shape");
    if (!joined.ok()) return joined.status();
    row_shape = *joined;
  }
  for (const auto& [values, indices] : src.gathered) {
    const GraphTensor& d = dxs[(*next)++];
    gradient_nodes->push_back(d.node);
    rows.push_back(ops.Op("Reshape", {d, row_shape}, "rows"));
    GraphTensor flat = ops.Op("Reshape", {indices, IntConst(&ops, DT_INT32, {-1})}, "ids");
    if (int64_ids && indices.node->output_type(indices.index) != DT_INT64) flat = ops.Cast(flat, DT_INT64);
    ids.push_back(flat);
  }
  train::Gradient grad;
  if (dense.empty()) {
    auto values = Concat(m, rows, "rows");
    if (!values.ok()) return values.status();
    auto indices = Concat(m, ids, "ids");
    if (!indices.ok()) return indices.status();
    grad.values = *values;
    grad.indices = *indices;
    TF_RETURN_IF_ERROR(ops.status());
    if (grad.values.node == nullptr || grad.indices.node == nullptr) {
      return absl::InternalError(absl::StrCat(kWhat, "cannot join the rows of '", var.name, "'"));
    }
  } else {
    for (size_t i = 0; i < rows.size(); ++i) {
      dense.push_back(ops.Op("UnsortedSegmentSum", {rows[i], ids[i], FirstDimension(&ops, var.handle)},
                             "dense_rows"));
    }
    grad.values = dense[0];
    if (dense.size() > 1) {
      std::vector<NodeBuilder::NodeOut> outs;
      for (const GraphTensor& p : dense) outs.push_back({p.node, p.index});
      Node* sum = nullptr;
      TF_RETURN_IF_ERROR(NodeBuilder(m->g.NewName(absl::StrCat(kPrefix, "/grad_sum")), "AddN")
                             .Input(outs)
                             .Finalize(&m->g, &sum));
      grad.values = {sum, 0};
    }
  }
  TF_RETURN_IF_ERROR(ops.status());
  for (const GraphTensor& p : dense) gradient_nodes->push_back(p.node);
  return grad;
}

}  // namespace

absl::Status Trainer::LoadModel(const std::string& export_dir, const TrainerOptions& options) {
  auto cluster = train::ResolveCluster(options.distributed, std::getenv("TF_CONFIG"));
  if (!cluster.ok()) return cluster.status();
  if (options.jit_compile && (options.memory_budget.set() || cluster->has_value())) {
    return absl::InvalidArgumentError(absl::StrCat(
        kWhat, "jit_compile with ", options.memory_budget.set() ? "a memory budget" : "a cluster",
        ": not supported (", options.memory_budget.set()
            ? "XLA plans the memory of its cluster itself"
            : "XLA on the CPU has no cross-process collectives", "); drop one"));
  }
  jit_.enabled = options.jit_compile;
  jit_.cache = options.jit_compile_cache;
  if (!cluster->has_value()) {
    TF_RETURN_IF_ERROR(
        LoadSavedModelBundle(export_dir, options.tag, &bundle_, options.threads,
                             options.memory_budget.set() ? &stage1_config_ : nullptr));
    const DeviceMgr* devices = nullptr;
    if (bundle_.session->LocalDeviceManager(&devices).ok()) kernel_threads_ = CpuIntraOpThreads(*devices);
    return absl::OkStatus();
  }
  if (options.fit.batch_size % (*cluster)->size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        kWhat, "batch_size=", options.fit.batch_size, " (the global batch) does not split over ",
        (*cluster)->size(), " workers: use a multiple of ", (*cluster)->size()));
  }
  if (options.distributed.shard_by == "files" && !options.fit.data.empty()) {
    // Refused before any peer is waited for.
    TF_RETURN_IF_ERROR(train::WorkerFiles(options.fit.data, **cluster).status());
  }
  auto d = train::Distributed::Start(**cluster, options.distributed, options.threads);
  if (!d.ok()) return d.status();
  distributed_ = std::move(*d);
  kernel_threads_ = distributed_->kernel_threads();
  SessionOptions session_options = distributed_->session_options();
  stage1_config_ = session_options.config;
  if (options.memory_budget.set()) RemapOnly(&session_options.config);
  TF_RETURN_IF_ERROR(LoadSavedModel(session_options, RunOptions(), export_dir, {options.tag},
                                    &bundle_));
  // Every worker trains the same model on the same global batch in the same cluster.
  std::string model, tasks;
  TF_RETURN_IF_ERROR(ReadFileToString(Env::Default(), io::JoinPath(export_dir, "saved_model.pb"), &model));
  for (const train::ClusterTask& task : (*cluster)->tasks) absl::StrAppend(&tasks, task.job, task.address, ";");
  return distributed_->CheckAgree(
      bundle_.session.get(), {"model fingerprint", "batch_size", "cluster fingerprint"},
      {static_cast<int64_t>(Hash64(model)), options.fit.batch_size,
       static_cast<int64_t>(Hash64(tasks))});
}

void Trainer::NoteTrainingMode(const train::StepModel& m) {
  // The mode the function runs in: a training-mode one updates variables (BatchNormalization's
  // moving statistics) or draws random numbers (dropout's masks). An inference-mode dropout
  // leaves no op at all; BatchNormalization leaves reads of its moving statistics.
  training_mode_ = !m.forward_updates.empty();
  for (Node* n : m.g.op_nodes()) {
    if (absl::StrContains(n->type_string(), "Random")) training_mode_ = true;
  }
  if (training_mode_) return;
  std::vector<std::string> statistics;
  for (const CapturedVariable& v : m.captured) {
    if (!v.trainable && m.nodes.count(train::StepModel::Renamed(v.handle)) &&
        (absl::EndsWith(v.name, "moving_mean") || absl::EndsWith(v.name, "moving_variance"))) {
      statistics.push_back(absl::StrCat("'", v.name, "'"));
    }
  }
  if (statistics.empty()) return;
  warnings_.push_back(absl::StrCat(
      "signature '", m.signature_key, "' runs BatchNormalization in inference mode: it "
      "normalizes with its moving statistics (", absl::StrJoin(statistics, ", "),
      "), which training leaves as they are, and dropout does nothing. ",
      m.meta->signature_def().count("train")
          ? "This SavedModel's 'train' signature runs the model in training mode."
          : "Export the model with tf_ext.export_for_training to train it in training mode, "
            "as model.fit does."));
}

absl::Status Trainer::AddFeedsLossAndMetrics(const TrainerOptions& options,
                                             const std::vector<train::MetricSpec>& metric_specs,
                                             train::StepModel* m) {
  train::GraphOps& ops = m->ops;
  // The placeholders requests feed: the signature's inputs.
  for (const auto& [key, info] : m->sig->inputs()) {
    auto ref = TensorRef::Parse(info.name());
    if (!ref.ok()) return ref.status();
    if (!m->nodes.count(train::StepModel::Renamed(ref->node))) continue;  // not needed by the output
    input_keys_.push_back(key);
    input_specs_[key] = absl::StrCat(PythonDtypeName(info.dtype()), " ",
                                     PartialTensorShape(info.tensor_shape()).DebugString());
    input_types_[key] = {info.dtype(), PartialTensorShape(info.tensor_shape())};
    input_tensors_[key] = absl::StrCat(train::StepModel::Renamed(ref->node), ":", ref->index);
  }
  auto out_node = m->nodes.find(train::StepModel::Renamed(m->output_ref.node));
  if (out_node == m->nodes.end()) return absl::InternalError("trainer: the output node is gone");
  m->output = {out_node->second, m->output_ref.index};
  const DataType out_type = m->output.node->output_type(m->output.index);
  // Targets: class ids for the sparse loss, else the output's dtype; weights: the output's dtype.
  has_targets_ = train::LossHasTargets(options.loss);
  output_shape_ = PartialTensorShape(m->out_info->tensor_shape());
  sparse_targets_ = options.loss.kind == train::LossKind::kSparseCategoricalCrossentropy;
  auto placeholder = [&](const std::string& name, DataType dtype) {
    AttrValue d;
    d.set_type(dtype);
    return ops.Op("Placeholder", {}, name, {{"dtype", d}});
  };
  if (has_targets_) {
    m->targets = placeholder("targets", sparse_targets_ ? DT_INT64 : out_type);
    targets_tensor_ = m->targets.node != nullptr ? m->targets.node->name() + ":0" : "";
  }
  sample_weights_ = options.sample_weights;
  if (options.sample_weights) {
    m->weights = placeholder("sample_weights", out_type);
    weights_tensor_ = m->weights.node != nullptr ? m->weights.node->name() + ":0" : "";
  }
  m->loss = train::AddLoss(&ops, options.loss, m->output, m->targets, m->weights);
  TF_RETURN_IF_ERROR(ops.status());
  loss_tensor_ = absl::StrCat(m->loss.node->name(), ":", m->loss.index);
  if (!metric_specs.empty()) {
    TF_RETURN_IF_ERROR(train::AddMetrics(&ops, metric_specs, m->output,
                                         PartialTensorShape(m->out_info->tensor_shape()),
                                         m->targets, m->weights, &metrics_));
    for (const train::MetricSpec& spec : metric_specs) metric_names_.push_back(spec.key);
  }
  return absl::OkStatus();
}

absl::Status Trainer::AllReduceGradients(train::StepModel* m,
                                         const std::vector<train::TrainableVariable>& variables,
                                         std::vector<train::Gradient>* grads,
                                         GraphTensor* step_loss) {
  // With a cluster, the optimizer takes the workers' mean gradients; the loss is averaged in
  // the same all-reduce. A sparse gradient (rows at ids) is made dense first, its rows summed
  // into the variable's shape (repeated ids added), and the optimizer takes it dense.
  train::GraphOps& ops = m->ops;
  std::vector<GraphTensor> averaged = {m->loss};
  for (size_t i = 0; i < grads->size(); ++i) {
    train::Gradient& grad = (*grads)[i];
    if (grad.sparse()) {
      grad.values = ops.Op("UnsortedSegmentSum",
                           {grad.values, grad.indices, FirstDimension(&ops, variables[i].handle)},
                           "densified");
      grad.indices = {};
      TF_RETURN_IF_ERROR(ops.status());
    }
    averaged.push_back(grad.values);
  }
  // Each gradient has its variable's shape (declared by its VarHandleOp), the loss none.
  std::vector<PartialTensorShape> shapes = {PartialTensorShape({})};
  for (const train::TrainableVariable& v : variables) {
    PartialTensorShape shape;
    if (!GetNodeAttr(v.handle.node->attrs(), "shape", &shape).ok()) shape = PartialTensorShape();
    shapes.push_back(shape);
  }
  TF_RETURN_IF_ERROR(distributed_->AllReduceStep(&m->g, &averaged, shapes));
  *step_loss = averaged[0];
  for (size_t i = 0; i < grads->size(); ++i) (*grads)[i].values = averaged[i + 1];
  return absl::OkStatus();
}

absl::Status Trainer::AddStateIO(const train::OptimizerGraph& opt, train::StepModel* m) {
  train::GraphOps& ops = m->ops;
  // The optimizer's state, read for checkpoints and assigned from feeds to restore them.
  std::vector<std::pair<GraphTensor, DataType>> synced;  // what the chief broadcasts
  for (size_t i = 0; i < opt.state.size(); ++i) {
    const auto& [name, handle] = opt.state[i];
    const DataType dtype = opt.state_types[i];
    synced.push_back({handle, dtype});
    GraphTensor value = ops.Read(handle, dtype);
    AttrValue d;
    d.set_type(dtype);
    GraphTensor feed = ops.Op("Placeholder", {}, "restore", {{"dtype", d}});
    Node* assign = ops.Assign("AssignVariableOp", handle, feed);
    TF_RETURN_IF_ERROR(ops.status());
    state_names_.push_back(name);
    state_reads_.push_back(value.node->name() + ":0");
    state_feeds_.push_back(feed.node->name() + ":0");
    state_assigns_.push_back(assign->name());
  }
  for (const CapturedVariable& v : m->captured) {
    auto handle = m->nodes.find(train::StepModel::Renamed(v.handle));
    if (handle == m->nodes.end()) continue;  // not used by this output
    DataType dtype;
    TF_RETURN_IF_ERROR(GetNodeAttr(handle->second->attrs(), "dtype", &dtype));
    GraphTensor value = ops.Read({handle->second, 0}, dtype);
    TF_RETURN_IF_ERROR(ops.status());
    synced.push_back({{handle->second, 0}, dtype});
    variable_names_.push_back(v.name);
    variable_reads_.push_back(value.node->name() + ":0");
  }
  step_op_ = opt.step->name();
  if (distributed_ != nullptr) TF_RETURN_IF_ERROR(distributed_->AddBroadcast(&m->g, synced, &broadcast_));
  return absl::OkStatus();
}

absl::Status Trainer::ExtendSession(const TrainerOptions& options, const train::OptimizerGraph& opt,
                                    OptimizedRunSpec* step_run, train::StepModel* m) {
  GraphDef step_graph;
  m->g.ToGraphDef(&step_graph);
  if (options.memory_budget.set()) {
    // The Session runs Grappler's remapper alone (grappler_stages.h): the step's graph is
    // optimized here as its Session would optimize the step (its feeds, fetch and target), the
    // budget planned on that, and the other runs keep the nodes as they were.
    step_run->fetches = {step_loss_tensor_, step_op_};
    step_run->feeds = FedNodes(input_tensors_, targets_tensor_, weights_tensor_);
    GraphDef optimized = step_graph;
    TF_RETURN_IF_ERROR(
        PlanAfterOptimization(*step_run, stage1_config_, &optimized, &*memory_plan_));
    KeepUnoptimizedNodes(step_graph, &optimized);
    step_graph.Swap(&optimized);
  }
  if (jit_.enabled) jit_.graph = step_graph;
  TF_RETURN_IF_ERROR(bundle_.session->Extend(step_graph));
  TF_RETURN_IF_ERROR(bundle_.session->Run({}, {}, {opt.init->name()}, nullptr));
  if (training_mode_) TF_RETURN_IF_ERROR(AddEvaluation(options, m->output_key));
  TF_RETURN_IF_ERROR(ResetMetrics());
  if (distributed_ != nullptr) TF_RETURN_IF_ERROR(BroadcastFromChief(0).status());
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const std::string& export_dir,
                                                         const TrainerOptions& options) {
  TF_RETURN_IF_ERROR(train::ValidateOptimizer(options.optimizer));
  auto metric_specs = train::ParseMetrics(options.metrics);
  if (!metric_specs.ok()) return metric_specs.status();
  if (!metric_specs->empty() && !train::LossHasTargets(options.loss)) {
    return absl::InvalidArgumentError(absl::StrCat(
        kWhat, "metric '", metric_specs->front().key,
        "' compares the output with targets, and the 'output' loss has none"));
  }
  std::unique_ptr<Trainer> t(new Trainer());
  t->export_dir_ = export_dir;
  TF_RETURN_IF_ERROR(t->LoadModel(export_dir, options));
  auto m = std::make_unique<train::StepModel>();
  m->meta = &t->bundle_.meta_graph_def;
  TF_RETURN_IF_ERROR(ChooseOutput(export_dir, options, m.get()));
  t->signature_key_ = m->signature_key;
  t->sync_ops_ = SyncOps(*m->meta, m->captured);

  // The forward: the nodes the output needs, renamed apart from the loaded graph, calls inlined
  // by the one gradient pipeline's forward steps, before the variables' reads are found
  // (inlined calls hold them); its backward steps below.
  GradientPipeline pipeline(ForwardPipelineOptions(kPrefix));
  TF_RETURN_IF_ERROR(BuildForward(m->meta->graph_def(), m->output_ref.node, kPrefix, &pipeline, &m->g));
  // Loops that read trainable variables (a Keras LSTM's While) take their values instead.
  auto is_trainable = [&](const Node* v) { return m->trainable.count(train::StepModel::Original(v)) > 0; };
  TF_RETURN_IF_ERROR(ReadLoopVariablesOutside(&m->g, is_trainable).status());
  for (Node* n : m->g.op_nodes()) m->nodes[n->name()] = n;
  TF_RETURN_IF_ERROR(FindVariableUses(m.get()));
  t->NoteTrainingMode(*m);
  TF_RETURN_IF_ERROR(t->AddFeedsLossAndMetrics(options, *metric_specs, m.get()));

  std::vector<std::string> order;
  std::map<std::string, GradientSources> sources;
  TF_RETURN_IF_ERROR(ClassifySources(m.get(), &order, &sources));
  // d loss / d (each source), combined per variable.
  std::vector<GraphTensor> xs;
  for (const std::string& handle : order) {
    const GradientSources& src = sources[handle];
    xs.insert(xs.end(), src.dense.begin(), src.dense.end());
    for (const auto& [values, indices] : src.gathered) xs.push_back(values);
  }
  if (xs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(kWhat, "output '", m->output_key,
                                                   "' reads none of the trainable variables"));
  }
  GraphTensor one = m->ops.Op("OnesLike", {m->loss}, "d_loss");
  TF_RETURN_IF_ERROR(m->ops.status());
  // The backward steps, with the memory budget's options once the feeds are known.
  PipelineOptions backward_options = pipeline.options();
  if (options.memory_budget.set()) {
    TF_RETURN_IF_ERROR(t->BudgetOptions(options, m->g, &backward_options));
  }
  GradientPipeline backward(std::move(backward_options));
  std::vector<GraphTensor> dxs;
  TF_RETURN_IF_ERROR(backward.AddBackward(&m->g, {m->loss}, {one}, xs, &dxs));
  // With a budget, the step is planned once TensorFlow's optimizations ran (ExtendSession).
  OptimizedRunSpec step_run;
  if (options.memory_budget.set()) {
    t->memory_plan_ = backward.stats().memory;
    step_run.prefix = backward.options().name_prefix;
    step_run.deferred = DeferredGradientNodes(m->g, step_run.prefix, {one.node->name()});
    step_run.keep = backward.options().keep;
    step_run.feed_shapes = backward.options().feed_shapes;
    step_run.budget = options.memory_budget;
  }
  std::vector<train::TrainableVariable> variables;
  std::vector<train::Gradient> grads;
  std::vector<Node*> gradient_nodes;  // each source's gradient, before they are combined
  size_t next = 0;
  for (const std::string& handle : order) {
    train::TrainableVariable var;
    var.name = m->trainable[handle];
    var.handle = {m->nodes.at(train::StepModel::Renamed(handle)), 0};
    TF_RETURN_IF_ERROR(GetNodeAttr(var.handle.node->attrs(), "dtype", &var.dtype));
    auto grad = AssembleGradient(m.get(), var, sources[handle], dxs, &next, &gradient_nodes);
    if (!grad.ok()) return grad.status();
    variables.push_back(var);
    grads.push_back(*grad);
    t->trainable_names_.push_back(var.name);
    GraphTensor value = m->ops.Read(var.handle, var.dtype);
    if (value.node != nullptr) t->trainable_reads_.push_back(value.node->name() + ":0");
  }
  GraphTensor step_loss = m->loss;
  if (t->distributed_ != nullptr) {
    TF_RETURN_IF_ERROR(t->AllReduceGradients(m.get(), variables, &grads, &step_loss));
  }
  t->step_loss_tensor_ = absl::StrCat(step_loss.node->name(), ":", step_loss.index);
  train::OptimizerGraph opt;
  // The updates run once the loss and every gradient are computed. With a budget, each runs
  // once the loss and its own gradient are (optimizers.h), as tf.function's automatic control
  // dependencies let Keras's: a gradient is freed when its update has run, rather than held
  // until the last one is computed (memory no recomputation can save: ResNet-18's weight
  // gradients are 42.7 MB, and with them held half its estimate could not be met).
  std::vector<Node*> after = {m->loss.node};
  if (!options.memory_budget.set()) {
    after.insert(after.end(), gradient_nodes.begin(), gradient_nodes.end());
  }
  TF_RETURN_IF_ERROR(train::AddOptimizer(&m->ops, options.optimizer, variables, grads, after, &opt));
  for (Node* n : m->forward_updates) m->g.AddControlEdge(n, opt.step);
  TF_RETURN_IF_ERROR(t->AddStateIO(opt, m.get()));
  TF_RETURN_IF_ERROR(t->ExtendSession(options, opt, &step_run, m.get()));
  return t;
}

absl::Status Trainer::BudgetOptions(const TrainerOptions& options, const Graph& g,
                                    PipelineOptions* out) const {
  // The estimate sizes every tensor by shape inference from the feeds' shapes: a full batch
  // (this worker's share of it with a cluster) of each input, the targets and the weights.
  int64_t batch = options.fit.batch_size;
  if (distributed_ != nullptr) batch /= distributed_->cluster().size();
  if (batch <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(kWhat, "batch_size=", options.fit.batch_size,
                                                   " is not positive"));
  }
  auto with_batch = [batch](const PartialTensorShape& shape, int drop_last,
                            TensorShape* full) -> bool {
    if (shape.unknown_rank() || shape.dims() < 1 + drop_last) return false;
    std::vector<int64_t> dims = {batch};
    for (int d = 1; d < shape.dims() - drop_last; ++d) dims.push_back(shape.dim_size(d));
    return TensorShape::BuildTensorShape(dims, full).ok();
  };
  auto node = [](const std::string& tensor) { return tensor.substr(0, tensor.rfind(':')); };
  for (const std::string& key : input_keys_) {
    TensorShape full;
    if (!with_batch(input_types_.at(key).second, 0, &full)) {
      return absl::InvalidArgumentError(absl::StrCat(
          kWhat, "memory budget: input '", key, "' has shape ",
          input_types_.at(key).second.DebugString(), "; the memory estimate needs every input's "
          "shape but the batch's (signature inputs: ", InputsText(), ")"));
    }
    out->feed_shapes[node(input_tensors_.at(key))] = full;
  }
  TensorShape full;
  // Targets as MatchTargetsRank feeds them: the output's shape, class ids without its last axis.
  if (!targets_tensor_.empty() && with_batch(output_shape_, sparse_targets_ ? 1 : 0, &full)) {
    out->feed_shapes[node(targets_tensor_)] = full;
  }
  if (!weights_tensor_.empty()) out->feed_shapes[node(weights_tensor_)] = TensorShape({batch});
  out->plan_memory = true;
  out->backward_memory_budget = options.memory_budget;
  out->plan_budget_after_optimization = true;
  // A variable's value depends on when it is read (the optimizer updates it): the forward's
  // reads, and whatever else takes a handle, are kept, never recomputed after an update.
  for (const Node* n : g.op_nodes()) {
    if (absl::StartsWith(n->name(), out->name_prefix + "/")) continue;
    for (int i = 0; i < n->num_inputs(); ++i) {
      if (n->input_type(i) == DT_RESOURCE) {
        out->keep.insert(n->name());
        break;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Trainer::AddEvaluation(const TrainerOptions& options, const std::string& output_key) {
  const MetaGraphDef& meta = bundle_.meta_graph_def;
  constexpr char kInference[] = "serving_default";
  if (signature_key_ == kInference) return absl::OkStatus();
  auto sig = meta.signature_def().find(kInference);
  if (sig == meta.signature_def().end()) return absl::OkStatus();
  auto out_info = sig->second.outputs().find(output_key);
  if (out_info == sig->second.outputs().end()) return absl::OkStatus();
  auto output_ref = TensorRef::Parse(out_info->second.name());
  if (!output_ref.ok()) return output_ref.status();
  Graph g(OpRegistry::Global());
  GradientPipeline pipeline(ForwardPipelineOptions(kEvalPrefix));
  TF_RETURN_IF_ERROR(BuildForward(meta.graph_def(), output_ref->node, kEvalPrefix, &pipeline, &g));
  std::map<std::string, Node*> nodes;
  for (Node* n : g.op_nodes()) {
    // Only an inference-mode function: no variable updated, no random number drawn.
    const std::string& op = n->type_string();
    if (op == "AssignVariableOp" || op == "AssignAddVariableOp" || op == "AssignSubVariableOp" ||
        absl::StrContains(op, "Random")) {
      return absl::OkStatus();
    }
    nodes[n->name()] = n;
  }
  auto renamed = [](const std::string& name) { return absl::StrCat(kEvalPrefix, "/", name); };
  // The same inputs (keys, dtypes) as the trained signature's.
  std::map<std::string, std::string> inputs;
  for (const auto& [key, info] : sig->second.inputs()) {
    auto ref = TensorRef::Parse(info.name());
    if (!ref.ok()) return ref.status();
    if (!nodes.count(renamed(ref->node))) continue;
    auto trained = input_types_.find(key);
    if (trained == input_types_.end() || trained->second.first != info.dtype()) return absl::OkStatus();
    inputs[key] = absl::StrCat(renamed(ref->node), ":", ref->index);
  }
  if (inputs.size() != input_keys_.size()) return absl::OkStatus();
  auto out_node = nodes.find(renamed(output_ref->node));
  if (out_node == nodes.end()) return absl::InternalError("trainer: the inference output node is gone");
  const GraphTensor output{out_node->second, output_ref->index};
  const DataType out_type = output.node->output_type(output.index);

  train::GraphOps ops(&g, kEvalPrefix);
  GraphTensor targets, weights;
  auto placeholder = [&](const std::string& name, DataType dtype) {
    AttrValue d;
    d.set_type(dtype);
    return ops.Op("Placeholder", {}, name, {{"dtype", d}});
  };
  EvalNodes eval;
  if (has_targets_) {
    targets = placeholder("targets", sparse_targets_ ? DT_INT64 : out_type);
    eval.targets = targets.node != nullptr ? targets.node->name() + ":0" : "";
  }
  if (sample_weights_) {
    weights = placeholder("sample_weights", out_type);
    eval.weights = weights.node != nullptr ? weights.node->name() + ":0" : "";
  }
  GraphTensor loss = train::AddLoss(&ops, options.loss, output, targets, weights);
  TF_RETURN_IF_ERROR(ops.status());
  eval.loss = absl::StrCat(loss.node->name(), ":", loss.index);
  if (!metrics_.specs.empty()) {
    // The trained metrics' state, updated from the inference output.
    eval.metrics = metrics_;
    GraphTensor predictions = ops.Unary("Identity", output);
    eval.metrics.predictions = predictions.node != nullptr ? predictions.node->name() : "";
    eval.metrics.targets = targets.node != nullptr ? targets.node->name() : "";
    eval.metrics.weights = weights.node != nullptr ? weights.node->name() : "";
  }
  TF_RETURN_IF_ERROR(ops.status());
  GraphDef graph;
  g.ToGraphDef(&graph);
  if (options.memory_budget.set()) {
    // Optimized here as the Session would optimize an evaluation run (the Session runs the
    // remapper alone: Create).
    OptimizedRunSpec run;
    run.fetches = {eval.loss};
    run.feeds = FedNodes(inputs, eval.targets, eval.weights);
    GraphDef optimized = graph;
    TF_RETURN_IF_ERROR(OptimizeBeforePlanning(run, stage1_config_, &optimized));
    KeepUnoptimizedNodes(graph, &optimized);
    graph.Swap(&optimized);
  }
  TF_RETURN_IF_ERROR(bundle_.session->Extend(graph));
  eval.inputs = std::move(inputs);
  eval.signature_key = kInference;
  eval_ = std::move(eval);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Trainer::BroadcastFromChief(int64_t value) {
  if (distributed_ == nullptr) return value;
  std::vector<std::pair<std::string, Tensor>> feeds;
  if (distributed_->cluster().is_chief()) {
    Tensor v(DT_INT64, TensorShape({1}));
    v.flat<int64_t>()(0) = value;
    feeds.push_back({broadcast_.value, v});
  }
  std::vector<Tensor> out;
  RunMetadata unused;
  absl::Status s = bundle_.session->Run(distributed_->Run(train::Distributed::RunKind::kBroadcast), feeds,
                                        {broadcast_.received}, {broadcast_.target}, &out, &unused);
  if (!s.ok()) {
    return distributed_->Explain(absl::Status(
        s.code(), absl::StrCat(kWhat, "broadcasting the chief's variables: ", s.message())));
  }
  return out[0].flat<int64_t>()(0);
}

absl::StatusOr<bool> Trainer::AllWorkersHave(bool has) {
  if (distributed_ == nullptr) return has;
  return distributed_->AllHave(bundle_.session.get(), has);
}

absl::StatusOr<double> Trainer::Step(const std::vector<std::pair<std::string, Tensor>>& inputs,
                                     const Tensor& targets, const Tensor& weights,
                                     RunMetadata* trace) {
  return Run(inputs, targets, weights, /*train=*/true, trace);
}

absl::StatusOr<double> Trainer::Evaluate(const std::vector<std::pair<std::string, Tensor>>& inputs,
                                         const Tensor& targets, const Tensor& weights) {
  return Run(inputs, targets, weights, /*train=*/false);
}

absl::StatusOr<double> Trainer::Run(const std::vector<std::pair<std::string, Tensor>>& inputs,
                                    const Tensor& targets, const Tensor& weights, bool train,
                                    RunMetadata* trace) {
  std::vector<std::pair<std::string, Tensor>> feeds;
  std::vector<std::string> names;
  for (const auto& [name, value] : inputs) names.push_back(name);
  auto keys = ResolveInputs(names);
  if (!keys.ok()) return keys.status();
  // Evaluate runs the inference forward when there is one (AddEvaluation).
  const bool inference = !train && eval_.has_value();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string& key = (*keys)[i];
    feeds.push_back({inference ? eval_->inputs.at(key) : input_tensors_.at(key), inputs[i].second});
  }
  // Targets and weights have one entry per example of the inputs.
  const int64_t examples = inputs.empty() || inputs[0].second.dims() == 0 ? -1 : inputs[0].second.dim_size(0);
  auto check = [&](const Tensor& t, const char* what) -> absl::Status {
    if (t.dims() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(kWhat, what, " need an examples axis; got a scalar"));
    }
    if (examples >= 0 && t.dim_size(0) != examples) {
      return absl::InvalidArgumentError(absl::StrCat(kWhat, what, " have ", t.dim_size(0),
                                                     " examples; input '", inputs[0].first,
                                                     "' has ", examples));
    }
    return absl::OkStatus();
  };
  // The targets as the loss and the metrics read them (the output's rank).
  const Tensor matched = has_targets_ ? MatchTargetsRank(targets) : targets;
  if (has_targets_) {
    TF_RETURN_IF_ERROR(check(targets, "targets"));
    feeds.push_back({inference ? eval_->targets : targets_tensor_, matched});
  }
  if (sample_weights_) {
    TF_RETURN_IF_ERROR(check(weights, "sample weights"));
    feeds.push_back({inference ? eval_->weights : weights_tensor_, weights});
  }
  if (!metrics_.specs.empty()) TF_RETURN_IF_ERROR(AddMetricUpdate(matched, inference));
  std::vector<Tensor> out;
  std::vector<std::string> targets_run;
  if (train) targets_run.push_back(step_op_);
  const std::string& metric_update = inference                                         ? eval_->metric_update
                                     : !train && distributed_ != nullptr ? metric_update_local_
                                                                         : metric_update_;
  if (!metric_update.empty()) targets_run.push_back(metric_update);
  // A training step with a cluster runs collectives: its step ids are kept in step.
  const bool collective = train && distributed_ != nullptr;
  std::string loss_name = train ? step_loss_tensor_ : inference ? eval_->loss : loss_tensor_;
  const XlaCompileStats compiled = XlaCompilations();
  const bool jit = train && jit_.enabled && JitRuns(inputs);
  if (jit) {  // the step, metrics included, as one XLA cluster
    if (jit_.target.empty()) TF_RETURN_IF_ERROR(BuildStepCluster());
    loss_name = jit_.loss;
    targets_run = {jit_.target};
  }
  if (trace != nullptr || collective) {
    RunOptions run_options = collective ? distributed_->Run(train::Distributed::RunKind::kStep) : RunOptions();
    if (trace != nullptr) run_options.set_trace_level(RunOptions::FULL_TRACE);
    RunMetadata unused;
    absl::Status s = bundle_.session->Run(run_options, feeds, {loss_name}, targets_run, &out,
                                          trace != nullptr ? trace : &unused);
    if (!s.ok()) return collective ? distributed_->Explain(s) : s;
  } else {
    TF_RETURN_IF_ERROR(bundle_.session->Run(feeds, {loss_name}, targets_run, &out));
  }
  if (jit) {
    jit_.compile_seconds += (XlaCompilations().micros - compiled.micros) * 1e-6;
  }
  const Tensor& loss = out[0];
  return loss.dtype() == DT_DOUBLE ? loss.scalar<double>()() : loss.scalar<float>()();
}

Tensor Trainer::MatchTargetsRank(const Tensor& targets) const {
  // Keras's losses first bring targets and predictions to the same rank
  // (squeeze_or_expand_to_same_rank; the sparse cross-entropy squeezes class ids [N, 1]), or
  // class ids [N] against predictions [N, 1] would broadcast to [N, N].
  const int rank = output_shape_.dims();
  if (rank < 1 || targets.dims() < 1) return targets;
  TensorShape shape = targets.shape();
  const int64_t last = targets.dim_size(targets.dims() - 1);
  if (sparse_targets_) {
    if (targets.dims() == rank && last == 1) shape.RemoveLastDims(1);
  } else if (targets.dims() == rank - 1 && output_shape_.dim_size(rank - 1) == 1) {
    shape.AddDim(1);
  } else if (targets.dims() == rank + 1 && last == 1) {
    shape.RemoveLastDims(1);
  }
  if (shape == targets.shape()) return targets;
  Tensor reshaped;
  if (!reshaped.CopyFrom(targets, shape)) return targets;  // same number of elements: never
  return reshaped;
}

std::string Trainer::InputsText() const {
  std::vector<std::string> parts;  // by name (the signature's map has no order)
  for (const auto& [key, spec] : input_specs_) parts.push_back(absl::StrCat(key, ": ", spec));
  return absl::StrJoin(parts, ", ");
}

absl::StatusOr<std::vector<std::string>> Trainer::ResolveInputs(
    const std::vector<std::string>& names, const std::vector<bool>& named) const {
  auto error = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(kWhat, what, "; signature '", signature_key_,
                                                   "' takes ", InputsText()));
  };
  std::vector<std::string> keys;
  std::set<std::string> given;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    std::string key = name;
    if (!input_tensors_.count(name)) {
      // One input: whatever its name (Keras names an unnamed Input keras_tensor_<N>), unless
      // the name was given as the input's.
      const bool as_input = i < named.size() && named[i];
      if (input_keys_.size() != 1 || names.size() != 1 || as_input) {
        return error(absl::StrCat("input '", name, "' is not one of the signature's inputs"));
      }
      key = input_keys_[0];
    }
    if (!given.insert(key).second) return error(absl::StrCat("input '", key, "' is fed twice"));
    keys.push_back(key);
  }
  for (const std::string& key : input_keys_) {
    if (!given.count(key)) {
      return error(absl::StrCat("input '", key, "' (", input_specs_.at(key), ") is missing"));
    }
  }
  return keys;
}

absl::StatusOr<std::pair<DataType, PartialTensorShape>> Trainer::InputSpec(
    const std::string& key) const {
  auto it = input_types_.find(key);
  if (it == input_types_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(kWhat, "input '", key, "' is not one of the signature's inputs; signature '",
                                                   signature_key_, "' takes ", InputsText()));
  }
  return it->second;
}

absl::Status Trainer::AddMetricUpdate(const Tensor& targets, bool inference) {
  std::vector<int64_t> dims;
  for (int i = 0; i < targets.dims(); ++i) dims.push_back(targets.dim_size(i));
  dims[0] = -1;  // any batch size
  const PartialTensorShape shape(dims);
  // The first batch's shape, training's or evaluation's, holds for both.
  if (metric_targets_shape_.dims() >= 0 && !shape.IsIdenticalTo(metric_targets_shape_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        kWhat, "the metrics were built for targets of shape ", metric_targets_shape_.DebugString(),
        " (the first batch's); these have shape ", targets.shape().DebugString()));
  }
  std::string& update = inference ? eval_->metric_update : metric_update_;
  if (!update.empty()) return absl::OkStatus();
  auto graph = train::MetricUpdateGraph(inference ? eval_->metrics : metrics_, shape, &update);
  if (!graph.ok()) return graph.status();
  // The two updates are built alike: the inference one's nodes are renamed apart.
  if (inference) {
    RenameDefined(&*graph, kEvalPrefix);
    update = absl::StrCat(kEvalPrefix, "/", update);
  }
  if (distributed_ != nullptr && !inference) {
    // A step's update with a cluster adds the increments summed over the workers (each worker
    // saw its slice); the one built above, renamed apart, stays Evaluate's (every worker
    // evaluates all the validation data).
    RenameDefined(&*graph, kLocalMetricsPrefix);
    metric_update_local_ = absl::StrCat(kLocalMetricsPrefix, "/", update);
    TF_RETURN_IF_ERROR(bundle_.session->Extend(*graph));
    auto global = train::MetricUpdateGraph(
        metrics_, shape, &update, [this](Graph* g, std::vector<GraphTensor>* increments) {
          return distributed_->AllReduceSum(g, increments);
        });
    if (!global.ok()) return global.status();
    graph = std::move(global);
    // Its collectives' nodes are named by a graph of their own: renamed apart from the step's.
    RenameDefined(&*graph, kGlobalMetricsPrefix);
    update = absl::StrCat(kGlobalMetricsPrefix, "/", update);
  }
  TF_RETURN_IF_ERROR(bundle_.session->Extend(*graph));
  if (jit_.enabled && !inference) {  // the step's cluster computes the metrics too
    for (const NodeDef& n : graph->node()) *jit_.graph.add_node() = n;
    for (const FunctionDef& f : graph->library().function()) {
      *jit_.graph.mutable_library()->add_function() = f;
    }
  }
  metric_targets_shape_ = shape;
  return absl::OkStatus();
}

bool Trainer::JitRuns(const std::vector<std::pair<std::string, Tensor>>& inputs) {
  // XLA compiles the cluster once per batch shape: at most two in a fit (a last partial
  // batch), and whatever Step's caller feeds, up to jit_compile_cache shapes.
  const std::string shape = inputs.empty() ? "[]" : inputs[0].second.shape().DebugString();
  if (absl::c_linear_search(jit_.shapes, shape)) return true;
  if (static_cast<int64_t>(jit_.shapes.size()) < jit_.cache) {
    jit_.shapes.push_back(shape);
    return true;
  }
  if (!absl::c_linear_search(jit_.uncompiled, shape)) {
    if (jit_.uncompiled.empty()) {
      LOG(WARNING) << kWhat << "jit_compile: a batch of shape " << shape << " after "
                   << jit_.shapes.size() << " compiled shapes (jit_compile_cache); steps of "
                   << "shapes past them run without XLA";
    }
    jit_.uncompiled.push_back(shape);
  }
  return false;
}

absl::Status Trainer::BuildStepCluster() {
  XlaClusterSpec spec;
  spec.feeds = FedNodes(input_tensors_, targets_tensor_, weights_tensor_);
  spec.fetches = {step_loss_tensor_};
  spec.targets = {step_op_};
  if (!metric_update_.empty()) spec.targets.push_back(metric_update_);
  spec.keep_originals = true;  // checkpoints, metrics and evaluation run them
  spec.name = "tf_ext_train_step";
  GraphDef graph = jit_.graph;
  TF_ASSIGN_OR_RETURN(XlaCluster cluster, AddXlaCluster(&graph, spec));
  // The Session has every other node: extend it with the call, its NoOp and its function.
  GraphDef added;
  for (int i = jit_.graph.node_size(); i < graph.node_size(); ++i) *added.add_node() = graph.node(i);
  *added.mutable_library()->add_function() =
      graph.library().function(graph.library().function_size() - 1);
  *added.mutable_versions() = graph.versions();
  TF_RETURN_IF_ERROR(bundle_.session->Extend(added));
  jit_.loss = cluster.fetches[0];
  jit_.target = cluster.target;
  jit_.nodes = cluster.nodes;
  jit_.graph.Clear();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> Trainer::MetricValues() {
  std::vector<double> values;
  if (metrics_.results.empty()) return values;
  std::vector<std::string> fetches;
  for (const std::string& r : metrics_.results) fetches.push_back(r + ":0");
  std::vector<Tensor> out;
  TF_RETURN_IF_ERROR(bundle_.session->Run({}, fetches, {}, &out));
  for (const Tensor& v : out) values.push_back(v.scalar<float>()());
  return values;
}

absl::Status Trainer::ResetMetrics() {
  if (metrics_.reset.empty()) return absl::OkStatus();
  return bundle_.session->Run({}, {}, {metrics_.reset}, nullptr);
}

absl::Status Trainer::RestoreModelVariables(const std::string& prefix) {
  const SaverDef& saver = bundle_.meta_graph_def.saver_def();
  if (saver.filename_tensor_name().empty() || saver.restore_op_name().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(kWhat, export_dir_, " has no saver"));
  }
  return bundle_.session->Run({{saver.filename_tensor_name(), StringTensor(prefix)}}, {},
                              {saver.restore_op_name()}, nullptr);
}

absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> Trainer::TrainableValues() {
  std::vector<Tensor> values;
  TF_RETURN_IF_ERROR(bundle_.session->Run({}, trainable_reads_, {}, &values));
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < values.size(); ++i) out.push_back({trainable_names_[i], values[i]});
  return out;
}

absl::Status Trainer::SaveModelVariables(const std::string& prefix) {
  const SaverDef& saver = bundle_.meta_graph_def.saver_def();
  if (saver.filename_tensor_name().empty() || saver.save_tensor_name().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(kWhat, export_dir_, " has no saver"));
  }
  // Keras's second set of tracked variables first takes the trained values.
  if (!sync_ops_.empty()) TF_RETURN_IF_ERROR(bundle_.session->Run({}, {}, sync_ops_, nullptr));
  std::vector<Tensor> ignored;
  return bundle_.session->Run({{saver.filename_tensor_name(), StringTensor(prefix)}},
                              {saver.save_tensor_name()}, {}, &ignored);
}

absl::Status Trainer::SaveCheckpoint(const std::string& prefix) {
  ScopedTempDir tmp;
  TF_RETURN_IF_ERROR(tmp.Create());
  const std::string model = io::JoinPath(tmp.path(), "model");
  TF_RETURN_IF_ERROR(SaveModelVariables(model));
  std::vector<Tensor> values;
  TF_RETURN_IF_ERROR(bundle_.session->Run({}, state_reads_, {}, &values));
  std::vector<std::pair<std::string, Tensor>> state;
  for (size_t i = 0; i < values.size(); ++i) state.push_back({state_names_[i], values[i]});
  std::string parent(io::Dirname(prefix));
  if (!parent.empty()) TF_RETURN_IF_ERROR(Env::Default()->RecursivelyCreateDir(parent));
  return train::WriteTrainingCheckpoint(model, state, prefix);
}

absl::Status Trainer::RestoreCheckpoint(const std::string& prefix) {
  const SaverDef& saver = bundle_.meta_graph_def.saver_def();
  if (saver.filename_tensor_name().empty() || saver.restore_op_name().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(kWhat, export_dir_, " has no saver"));
  }
  ScopedTempDir tmp;
  TF_RETURN_IF_ERROR(tmp.Create());
  const std::string model = io::JoinPath(tmp.path(), "model");
  std::map<std::string, Tensor> state;
  if (absl::Status s = train::ReadTrainingCheckpoint(prefix, model, &state); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(kWhat, "checkpoint '", prefix, "': ", s.message()));
  }
  // Every state variable must be in it, of the right dtype, before anything is assigned.
  std::vector<std::pair<std::string, Tensor>> feeds;
  for (size_t i = 0; i < state_names_.size(); ++i) {
    auto it = state.find(state_names_[i]);
    if (it == state.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          kWhat, "checkpoint '", prefix, "' has no optimizer state '", state_names_[i],
          "' (written with another optimizer?)"));
    }
    feeds.push_back({state_feeds_[i], it->second});
  }
  TF_RETURN_IF_ERROR(bundle_.session->Run({{saver.filename_tensor_name(), StringTensor(model)}}, {},
                                          {saver.restore_op_name()}, nullptr));
  return bundle_.session->Run(feeds, {}, state_assigns_, nullptr);
}

absl::Status Trainer::Export(const std::string& dir) {
  TF_RETURN_IF_ERROR(CheckExportTarget(dir));
  Env* env = Env::Default();
  const std::string tmp = absl::StrCat(dir, ".tf_ext_export_", getpid());
  auto cleanup = [&](absl::Status s) {
    int64_t files = 0, dirs = 0;
    env->DeleteRecursively(tmp, &files, &dirs).IgnoreError();
    return s;
  };
  std::string parent(io::Dirname(dir));
  if (!parent.empty()) TF_RETURN_IF_ERROR(env->RecursivelyCreateDir(parent));
  if (absl::Status s = env->RecursivelyCreateDir(io::JoinPath(tmp, "variables")); !s.ok()) {
    return cleanup(s);
  }
  // The graph and its assets as loaded (not fingerprint.pb: its checkpoint hash would be stale).
  if (absl::Status s = env->CopyFile(io::JoinPath(export_dir_, "saved_model.pb"),
                                     io::JoinPath(tmp, "saved_model.pb"));
      !s.ok()) {
    return cleanup(s);
  }
  const std::string assets = io::JoinPath(export_dir_, "assets");
  if (env->IsDirectory(assets).ok()) {
    if (absl::Status s = CopyTree(env, assets, io::JoinPath(tmp, "assets")); !s.ok()) return cleanup(s);
  }
  if (absl::Status s = SaveModelVariables(io::JoinPath(tmp, "variables", "variables")); !s.ok()) {
    return cleanup(s);
  }
  if (env->FileExists(dir).ok()) env->DeleteDir(dir).IgnoreError();  // empty, checked above
  if (absl::Status s = env->RenameFile(tmp, dir); !s.ok()) return cleanup(s);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> Trainer::VariableValues() {
  std::vector<Tensor> values;
  TF_RETURN_IF_ERROR(bundle_.session->Run({}, variable_reads_, {}, &values));
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < values.size(); ++i) out.push_back({variable_names_[i], values[i]});
  return out;
}

absl::StatusOr<int64_t> Trainer::Iterations() {
  // "iterations" is part of the optimizer's state (optimizers.h), read as a checkpoint reads it.
  for (size_t i = 0; i < state_names_.size(); ++i) {
    if (state_names_[i] != "iterations") continue;
    std::vector<Tensor> values;
    TF_RETURN_IF_ERROR(bundle_.session->Run({}, {state_reads_[i]}, {}, &values));
    return values[0].scalar<int64_t>()();
  }
  return absl::InternalError("trainer: the optimizer has no iteration count");
}

}  // namespace tensorflow::tf_ext
