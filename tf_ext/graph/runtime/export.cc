#include "tf_ext/graph/runtime/export.h"

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "tensorflow/cc/saved_model/constants.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/tensor.pb.h"
#include "tensorflow/core/framework/tensor_shape.pb.h"
#include "tensorflow/core/platform/env.h"
#include "tensorflow/core/platform/path.h"
#include "tensorflow/core/protobuf/meta_graph.pb.h"
#include "tensorflow/core/protobuf/saved_model.pb.h"
#include "tensorflow/core/protobuf/saver.pb.h"
#include "tensorflow/core/util/tensor_bundle/tensor_bundle.h"

namespace tensorflow::tf_ext {
namespace {

// Nodes that call a function (or a gradient resolved at run time): an export holding one would
// need the runtime to find and differentiate functions, and TensorFlow's graph optimizations
// treat it as a black box.
bool IsCallOp(const std::string& op, const FunctionDefLibrary& library) {
  if (op == "SymbolicGradient" || op == "PartitionedCall" || op == "StatefulPartitionedCall") {
    return true;
  }
  for (const FunctionDef& f : library.function()) {
    if (f.signature().name() == op) return true;  // a call by the function's name
  }
  return false;
}

// Checks the graph and every function it reaches; collects the tf_ext op types used.
absl::Status CheckPlainOps(const GraphDef& graph, std::set<std::string>* tf_ext_ops) {
  std::vector<std::string> calls;
  auto visit = [&](const NodeDef& n, const std::string& where) {
    if (IsCallOp(n.op(), graph.library())) calls.push_back(absl::StrCat(n.name(), " (", n.op(), where, ")"));
    if (absl::StartsWith(n.op(), "TfExt>")) tf_ext_ops->insert(n.op());
  };
  for (const NodeDef& n : graph.node()) visit(n, "");
  for (const FunctionDef& f : graph.library().function()) {
    for (const NodeDef& n : f.node_def()) visit(n, absl::StrCat(", in function ", f.signature().name()));
  }
  if (calls.empty()) return absl::OkStatus();
  if (calls.size() > 5) {
    const size_t more = calls.size() - 5;
    calls.resize(5);
    calls.push_back(absl::StrCat("and ", more, " more"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "cannot export: the gradient graph still has function-call nodes (", absl::StrJoin(calls, ", "),
      "); an export holds each op's gradient inlined as plain ops (not --symbolic_gradients)"));
}

// A signature key: every character other than [A-Za-z0-9_] becomes '_'.
std::string Key(std::string name) {
  for (char& c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  }
  return name;
}

AttrValue TypeAttr(DataType t) {
  AttrValue v;
  v.set_type(t);
  return v;
}

AttrValue TypeListAttr(const std::vector<DataType>& types) {
  AttrValue v;
  for (DataType t : types) v.mutable_list()->add_type(t);
  return v;
}

AttrValue StringAttr(const std::string& s) {
  AttrValue v;
  v.set_s(s);
  return v;
}

NodeDef* AddNode(GraphDef* graph, const std::string& name, const std::string& op,
                 std::vector<std::string> inputs = {}) {
  NodeDef* n = graph->add_node();
  n->set_name(name);
  n->set_op(op);
  for (std::string& in : inputs) n->add_input(std::move(in));
  return n;
}

NodeDef* AddStringsConst(GraphDef* graph, const std::string& name,
                         const std::vector<std::string>& values) {
  Tensor t(DT_STRING, TensorShape({static_cast<int64_t>(values.size())}));
  for (size_t i = 0; i < values.size(); ++i) t.vec<tstring>()(i) = values[i];
  NodeDef* n = AddNode(graph, name, "Const");
  (*n->mutable_attr())["dtype"] = TypeAttr(DT_STRING);
  t.AsProtoTensorContent((*n->mutable_attr())["value"].mutable_tensor());
  return n;
}

// A name no node has, starting with `base`.
std::string UnusedName(const std::set<std::string>& used, const std::string& base) {
  if (used.count(base) == 0) return base;
  for (int i = 2;; ++i) {
    std::string name = absl::StrCat(base, "_", i);
    if (used.count(name) == 0) return name;
  }
}

// The weights as variables: each chosen node becomes a ReadVariableOp of the same name (its
// consumers and control inputs unchanged) reading a VarHandleOp, and its value goes to the
// bundle at `bundle_prefix`, written only when there is a weight (a weightless model's
// variables/ stays empty, as in TensorFlow's own exports). Adds the SaverDef's restore (and
// save) nodes under an unused prefix.
absl::Status MoveWeightsToVariables(GraphDef* graph,
                                    const std::vector<std::pair<std::string, Tensor>>& fed_constants,
                                    const ExportOptions& options, const std::string& bundle_prefix,
                                    MetaGraphDef* meta, ExportStats* stats) {
  std::unique_ptr<BundleWriter> bundle;
  std::set<std::string> used;
  for (const NodeDef& n : graph->node()) used.insert(n.name());
  std::map<std::string, const Tensor*> fed;  // node name -> value fed instead of its Const
  for (const auto& [name, value] : fed_constants) {
    if (absl::EndsWith(name, ":0")) fed[std::string(absl::StripSuffix(name, ":0"))] = &value;
  }
  std::vector<std::string> keys, handles, reads;
  std::vector<DataType> dtypes;
  std::vector<NodeDef> handle_nodes;
  for (NodeDef& n : *graph->mutable_node()) {
    Tensor value;
    if (n.op() == "Const" && n.attr().contains("value")) {
      const TensorProto& proto = n.attr().at("value").tensor();
      if (!DataTypeIsFloating(proto.dtype())) continue;
      int64_t elements = 1;
      for (const auto& d : proto.tensor_shape().dim()) elements *= d.size();
      if (elements < options.min_variable_elements) continue;
      if (!value.FromProto(proto)) {
        return absl::InvalidArgumentError(absl::StrCat("constant '", n.name(), "' has a malformed value"));
      }
    } else if (n.op() == "Placeholder" && fed.count(n.name())) {
      value = *fed.at(n.name());
    } else {
      continue;
    }
    const std::string key = n.name();
    if (bundle == nullptr) {
      bundle = std::make_unique<BundleWriter>(Env::Default(), bundle_prefix);
      TF_RETURN_IF_ERROR(bundle->status());
    }
    if (absl::Status s = bundle->Add(key, value); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("cannot write variable '", key, "': ", s.message()));
    }
    ++stats->variables;
    stats->variable_bytes += value.TotalBytes();
    const std::string handle = UnusedName(used, n.name() + "/tf_ext_variable");
    used.insert(handle);
    NodeDef h;
    h.set_name(handle);
    h.set_op("VarHandleOp");
    h.set_device(n.device());
    auto& attr = *h.mutable_attr();
    attr["dtype"] = TypeAttr(value.dtype());
    value.shape().AsProto(attr["shape"].mutable_shape());
    attr["container"] = StringAttr("");
    attr["shared_name"] = StringAttr(key);
    attr["allowed_devices"].mutable_list();
    handle_nodes.push_back(std::move(h));
    n.set_op("ReadVariableOp");
    n.clear_attr();
    (*n.mutable_attr())["dtype"] = TypeAttr(value.dtype());
    n.add_input(handle);  // control inputs must come last
    std::stable_partition(n.mutable_input()->begin(), n.mutable_input()->end(),
                          [](const std::string& in) { return !absl::StartsWith(in, "^"); });
    keys.push_back(key);
    handles.push_back(handle);
    reads.push_back(n.name());
    dtypes.push_back(value.dtype());
  }
  for (NodeDef& h : handle_nodes) *graph->add_node() = std::move(h);
  if (keys.empty()) return absl::OkStatus();  // nothing to restore: no SaverDef
  TF_RETURN_IF_ERROR(bundle->Finish());

  // Restore: RestoreV2 reads every variable from the bundle whose prefix is fed, one
  // AssignVariableOp each; the NoOp is SaverDef.restore_op_name. Save mirrors it.
  std::string prefix = "tf_ext_export";
  for (int i = 2; std::any_of(used.begin(), used.end(), [&](const std::string& u) {
         return u == prefix || absl::StartsWith(u, prefix + "/");
       });
       ++i) {
    prefix = absl::StrCat("tf_ext_export_", i);
  }
  NodeDef* filename = AddNode(graph, prefix + "/filename", "Placeholder");
  (*filename->mutable_attr())["dtype"] = TypeAttr(DT_STRING);
  TensorShape().AsProto((*filename->mutable_attr())["shape"].mutable_shape());
  AddStringsConst(graph, prefix + "/tensor_names", keys);
  AddStringsConst(graph, prefix + "/shape_and_slices", std::vector<std::string>(keys.size()));
  NodeDef* restore = AddNode(graph, prefix + "/restore", "RestoreV2",
                             {filename->name(), prefix + "/tensor_names", prefix + "/shape_and_slices"});
  (*restore->mutable_attr())["dtypes"] = TypeListAttr(dtypes);
  NodeDef* restore_all = AddNode(graph, prefix + "/restore_all", "NoOp");
  for (size_t i = 0; i < keys.size(); ++i) {
    NodeDef* assign = AddNode(graph, absl::StrCat(prefix, "/assign_", i), "AssignVariableOp",
                              {handles[i], absl::StrCat(restore->name(), ":", i)});
    (*assign->mutable_attr())["dtype"] = TypeAttr(dtypes[i]);
    (*assign->mutable_attr())["validate_shape"].set_b(false);
    restore_all->add_input("^" + assign->name());
  }
  std::vector<std::string> save_inputs = {filename->name(), prefix + "/tensor_names",
                                          prefix + "/shape_and_slices"};
  save_inputs.insert(save_inputs.end(), reads.begin(), reads.end());
  NodeDef* save = AddNode(graph, prefix + "/save", "SaveV2", save_inputs);
  (*save->mutable_attr())["dtypes"] = TypeListAttr(dtypes);
  NodeDef* saved = AddNode(graph, prefix + "/saved", "Identity", {filename->name(), "^" + save->name()});
  (*saved->mutable_attr())["T"] = TypeAttr(DT_STRING);

  SaverDef* saver = meta->mutable_saver_def();
  saver->set_filename_tensor_name(filename->name() + ":0");
  saver->set_save_tensor_name(saved->name() + ":0");
  saver->set_restore_op_name(restore_all->name());
  saver->set_max_to_keep(5);
  saver->set_keep_checkpoint_every_n_hours(10000.0f);
  saver->set_version(SaverDef::V2);
  return absl::OkStatus();
}

TensorInfo Info(const std::string& tensor, DataType dtype, const TensorShapeProto& shape) {
  TensorInfo info;
  info.set_name(tensor);
  info.set_dtype(dtype);
  *info.mutable_tensor_shape() = shape;
  return info;
}

// The "gradients" signature: the request's feeds in, y and the gradients out.
absl::Status AddSignature(const GraphDef& graph, const GradientRequest& request,
                          const GradientResult& result, MetaGraphDef* meta, ExportStats* stats) {
  if (result.fetches.size() != 1 + request.xs.size() || result.grads.size() != request.xs.size()) {
    return absl::FailedPreconditionError(
        "cannot export: the result does not hold y and one gradient per x (run "
        "ComputeGraphGradients first)");
  }
  std::map<std::string, const NodeDef*> nodes;
  for (const NodeDef& n : graph.node()) nodes[n.name()] = &n;
  SignatureDef& sig = (*meta->mutable_signature_def())[kGradientsSignatureKey];
  sig.set_method_name("tensorflow/serving/predict");
  // Output shapes are the run's where every input's shape is fixed, else left unknown.
  bool static_inputs = true;
  for (const auto& [ref, value] : request.feeds) {
    TensorShapeProto shape;
    value.shape().AsProto(&shape);
    auto it = nodes.find(ref.node);
    if (it != nodes.end() && it->second->op() == "Placeholder" && ref.index == 0 &&
        it->second->attr().contains("shape")) {
      shape = it->second->attr().at("shape").shape();  // the declared shape (batch may be -1)
      if (!PartialTensorShape(shape).IsFullyDefined()) static_inputs = false;
    }
    const std::string key = Key(ref.index == 0 ? ref.node : absl::StrCat(ref.node, "_", ref.index));
    if (sig.inputs().contains(key)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot export: two feeds have the signature key '", key, "'"));
    }
    (*sig.mutable_inputs())[key] = Info(ref.ToString(), value.dtype(), shape);
    stats->input_keys.push_back(key);
  }
  auto add_output = [&](std::string key, const std::string& tensor, const Tensor& value) {
    key = Key(std::move(key));
    if (sig.outputs().contains(key)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot export: two outputs have the signature key '", key, "'"));
    }
    TensorShapeProto shape;
    if (static_inputs) {
      value.shape().AsProto(&shape);
    } else {
      shape.set_unknown_rank(true);
    }
    (*sig.mutable_outputs())[key] = Info(tensor, value.dtype(), shape);
    stats->output_keys.push_back(key);
    return absl::OkStatus();
  };
  TF_RETURN_IF_ERROR(add_output("y", result.fetches[0], result.y));
  for (size_t i = 0; i < request.xs.size(); ++i) {
    const TensorRef& x = request.xs[i];
    std::string key = "d_" + x.node;
    if (x.index != 0) absl::StrAppend(&key, "_", x.index);
    TF_RETURN_IF_ERROR(add_output(key, result.fetches[1 + i], result.grads[i]));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckExportTarget(const std::string& dir) {
  Env* env = Env::Default();
  if (!env->FileExists(dir).ok()) {
    // Its nearest existing ancestor must be a directory (the rest is created).
    for (std::string up(io::Dirname(dir)); !up.empty(); up = std::string(io::Dirname(up))) {
      if (!env->FileExists(up).ok()) {
        if (up == io::Dirname(up)) break;
        continue;
      }
      if (!env->IsDirectory(up).ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat("cannot export to '", dir, "': '", up, "' is not a directory"));
      }
      break;
    }
    return absl::OkStatus();
  }
  if (!env->IsDirectory(dir).ok()) {
    return absl::AlreadyExistsError(absl::StrCat("cannot export to '", dir, "': it exists and is not a directory"));
  }
  std::vector<std::string> children;
  if (absl::Status s = env->GetChildren(dir, &children); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("cannot export to '", dir, "': ", s.message()));
  }
  if (!children.empty()) {
    return absl::AlreadyExistsError(absl::StrCat(
        "cannot export to '", dir, "': the directory is not empty (", children.size(),
        " entries); an export never overwrites"));
  }
  return absl::OkStatus();
}

namespace {

// Writes the export into `tmp` (a fresh directory).
absl::Status WriteExport(Env* env, const std::string& tmp, const GradientRequest& request,
                         GradientResult* result, const ExportOptions& options, ExportStats* stats) {
  SavedModel saved_model;
  saved_model.set_saved_model_schema_version(1);
  MetaGraphDef* meta = saved_model.add_meta_graphs();
  meta->mutable_meta_info_def()->add_tags("serve");
  GraphDef* graph = meta->mutable_graph_def();
  graph->Swap(&result->backward_graph);  // the weights are held once, here

  // Only the functions the graph reaches (the backward builder's library holds more).
  {
    FunctionLibraryDefinition library(OpRegistry::Global(), graph->library());
    *graph->mutable_library() = library.ReachableDefinitions(*graph).ToProto();
  }
  std::set<std::string> tf_ext_ops;
  TF_RETURN_IF_ERROR(CheckPlainOps(*graph, &tf_ext_ops));
  stats->tf_ext_ops.assign(tf_ext_ops.begin(), tf_ext_ops.end());
  TF_RETURN_IF_ERROR(AddSignature(*graph, request, *result, meta, stats));

  const std::string variables_dir = io::JoinPath(tmp, kSavedModelVariablesDirectory);
  TF_RETURN_IF_ERROR(env->CreateDir(variables_dir));
  TF_RETURN_IF_ERROR(MoveWeightsToVariables(
      graph, result->constant_feeds, options,
      io::JoinPath(variables_dir, kSavedModelVariablesFilename), meta, stats));
  stats->graph_nodes = graph->node_size();
  stats->functions = graph->library().function_size();

  const size_t bytes = saved_model.ByteSizeLong();
  if (bytes > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot export: the graph without its weights is still ", bytes,
        " bytes, over protobuf's 2 GB limit (lower ExportOptions::min_variable_elements?)"));
  }
  stats->saved_model_bytes = static_cast<int64_t>(bytes);
  return WriteBinaryProto(env, io::JoinPath(tmp, kSavedModelFilenamePb), saved_model);
}

}  // namespace

absl::Status ExportGradientSavedModel(const std::string& dir_arg, const GradientRequest& request,
                                      GradientResult* result, const ExportOptions& options,
                                      ExportStats* stats_out) {
  Env* env = Env::Default();
  std::string dir(dir_arg);
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (dir.empty()) return absl::InvalidArgumentError("cannot export: no directory given");
  if (result->backward_graph.node_size() == 0) {
    return absl::FailedPreconditionError(
        "cannot export: the result holds no backward graph (run ComputeGraphGradients with "
        "GradientOptions::keep_backward_graph)");
  }
  TF_RETURN_IF_ERROR(CheckExportTarget(dir));
  const std::string parent(io::Dirname(dir));
  if (!parent.empty() && !env->FileExists(parent).ok()) {
    if (absl::Status s = env->RecursivelyCreateDir(parent); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("cannot export to '", dir, "': ", s.message()));
    }
  }
  // Written beside `dir`, then renamed: a failure or a crash never leaves a partial export
  // under the name a loader would read.
  const std::string tmp = absl::StrCat(dir, ".partial-", env->NowMicros());
  if (absl::Status s = env->CreateDir(tmp); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("cannot export to '", dir, "': ", s.message()));
  }
  ExportStats stats;
  absl::Status s = WriteExport(env, tmp, request, result, options, &stats);
  if (s.ok() && env->FileExists(dir).ok()) s = env->DeleteDir(dir);  // empty (CheckTarget)
  if (s.ok()) s = env->RenameFile(tmp, dir);
  if (!s.ok()) {
    int64_t undeleted_files = 0, undeleted_dirs = 0;
    env->DeleteRecursively(tmp, &undeleted_files, &undeleted_dirs).IgnoreError();
    if (absl::StartsWith(s.message(), "cannot export")) return s;
    return absl::Status(s.code(), absl::StrCat("cannot export to '", dir, "': ", s.message()));
  }
  if (stats_out != nullptr) *stats_out = std::move(stats);
  return absl::OkStatus();
}

}  // namespace tensorflow::tf_ext
