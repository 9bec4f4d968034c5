#include "tf_ext/train/model/checkpoint.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "tensorflow/core/platform/env.h"
#include "tensorflow/core/protobuf/trackable_object_graph.pb.h"
#include "tensorflow/core/util/tensor_bundle/tensor_bundle.h"

namespace tensorflow::tf_ext::train {
namespace {

constexpr char kObjectGraphKey[] = "_CHECKPOINTABLE_OBJECT_GRAPH";
// The child of the checkpoint's root that holds the optimizer's state (a name no Keras or
// tf.Module root attribute is likely to take).
constexpr char kOptimizerChild[] = "tf_ext_optimizer";
constexpr char kValueSuffix[] = "/.ATTRIBUTES/VARIABLE_VALUE";

// A local name as TensorFlow escapes it in checkpoint keys ('.' -> "..", '/' -> ".S").
std::string Escape(const std::string& name) {
  return absl::StrReplaceAll(name, {{".", ".."}, {"/", ".S"}});
}
std::string Unescape(const std::string& name) {
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] == '.' && i + 1 < name.size()) {
      out += name[i + 1] == 'S' ? '/' : name[i + 1];
      ++i;
    } else {
      out += name[i];
    }
  }
  return out;
}

absl::Status ReadObjectGraph(BundleReader* reader, TrackableObjectGraph* graph) {
  Tensor t;
  TF_RETURN_IF_ERROR(reader->Lookup(kObjectGraphKey, &t));
  if (t.dtype() != DT_STRING || t.NumElements() != 1 ||
      !graph->ParseFromString(std::string(t.flat<tstring>()(0)))) {
    return absl::DataLossError("checkpoint: the object graph cannot be read");
  }
  return absl::OkStatus();
}

Tensor StringScalar(const std::string& s) {
  Tensor t(DT_STRING, TensorShape({}));
  t.scalar<tstring>()() = s;
  return t;
}

}  // namespace

absl::Status WriteTrainingCheckpoint(const std::string& model_prefix,
                                     const std::vector<std::pair<std::string, Tensor>>& optimizer_state,
                                     const std::string& prefix) {
  BundleReader reader(Env::Default(), model_prefix);
  TF_RETURN_IF_ERROR(reader.status());
  // The SavedModel's object graph is the checkpoint's (its root is what tf.train.Checkpoint(root=
  // loaded) makes the root), with tf.train.Checkpoint's children added: "root" (itself),
  // "save_counter", and the optimizer's state under kOptimizerChild.
  TrackableObjectGraph graph;
  TF_RETURN_IF_ERROR(ReadObjectGraph(&reader, &graph));
  if (graph.nodes_size() == 0) return absl::DataLossError("checkpoint: empty object graph");
  auto add_child = [&](const std::string& name, int id) {
    auto* c = graph.mutable_nodes(0)->add_children();
    c->set_node_id(id);
    c->set_local_name(name);
  };
  add_child("root", 0);
  BundleWriter writer(Env::Default(), prefix);
  auto add_variable = [&](const std::string& key, const std::string& full_name, const Tensor& value) {
    auto* node = graph.add_nodes();
    node->mutable_has_checkpoint_values()->set_value(true);
    auto* attr = node->add_attributes();
    attr->set_name("VARIABLE_VALUE");
    attr->set_full_name(full_name);
    attr->set_checkpoint_key(key);
    return writer.Add(key, value);
  };
  Tensor one(DT_INT64, TensorShape({}));
  one.scalar<int64_t>()() = 1;
  add_child("save_counter", graph.nodes_size());
  TF_RETURN_IF_ERROR(add_variable(absl::StrCat("save_counter", kValueSuffix), "save_counter", one));
  const int optimizer_id = graph.nodes_size();
  add_child(kOptimizerChild, optimizer_id);
  graph.add_nodes()->mutable_has_checkpoint_values()->set_value(!optimizer_state.empty());
  for (const auto& [name, value] : optimizer_state) {
    auto* child = graph.mutable_nodes(optimizer_id)->add_children();
    child->set_node_id(graph.nodes_size());
    child->set_local_name(name);
    TF_RETURN_IF_ERROR(
        add_variable(absl::StrCat(kOptimizerChild, "/", Escape(name), kValueSuffix), name, value));
  }
  graph.mutable_nodes(0)->mutable_has_checkpoint_values()->set_value(true);
  // The model's tensors, under the SavedModel's own keys.
  for (reader.Seek(""); reader.Valid(); reader.Next()) {
    const std::string key(reader.key());
    if (key.empty() || key == kObjectGraphKey) continue;
    Tensor t;
    TF_RETURN_IF_ERROR(reader.ReadCurrent(&t));
    TF_RETURN_IF_ERROR(writer.Add(key, t));
  }
  TF_RETURN_IF_ERROR(writer.Add(kObjectGraphKey, StringScalar(graph.SerializeAsString())));
  return writer.Finish();
}

absl::Status ReadTrainingCheckpoint(const std::string& prefix, const std::string& model_prefix,
                                    std::map<std::string, Tensor>* optimizer_state) {
  BundleReader reader(Env::Default(), prefix);
  TF_RETURN_IF_ERROR(reader.status());
  TrackableObjectGraph graph;
  TF_RETURN_IF_ERROR(ReadObjectGraph(&reader, &graph));
  bool ours = false;
  int first_added = graph.nodes_size();  // the nodes WriteTrainingCheckpoint appended
  if (graph.nodes_size() > 0) {
    for (const auto& c : graph.nodes(0).children()) {
      if (c.local_name() == kOptimizerChild) ours = true;
      if ((c.local_name() == kOptimizerChild || c.local_name() == "save_counter") && c.node_id() > 0) {
        first_added = std::min(first_added, c.node_id());
      }
    }
  }
  if (!ours) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint '", prefix, "' was not written by tf_ext's trainer (no optimizer state)"));
  }
  // The SavedModel's part: its nodes and keys as they were.
  TrackableObjectGraph model_graph;
  for (int i = 0; i < first_added; ++i) *model_graph.add_nodes() = graph.nodes(i);
  auto* children = model_graph.mutable_nodes(0)->mutable_children();
  for (int i = children->size() - 1; i >= 0; --i) {
    const auto& name = children->Get(i).local_name();
    if (name == "root" || name == "save_counter" || name == kOptimizerChild) children->DeleteSubrange(i, 1);
  }
  const std::string optimizer_keys = absl::StrCat(kOptimizerChild, "/");
  BundleWriter writer(Env::Default(), model_prefix);
  for (reader.Seek(""); reader.Valid(); reader.Next()) {
    const std::string key(reader.key());
    if (key.empty() || key == kObjectGraphKey || absl::StartsWith(key, "save_counter/")) continue;
    Tensor t;
    TF_RETURN_IF_ERROR(reader.ReadCurrent(&t));
    if (absl::StartsWith(key, optimizer_keys) && absl::EndsWith(key, kValueSuffix)) {
      const std::string escaped(absl::StripSuffix(absl::StripPrefix(key, optimizer_keys), kValueSuffix));
      (*optimizer_state)[Unescape(escaped)] = t;
    } else {
      TF_RETURN_IF_ERROR(writer.Add(key, t));
    }
  }
  TF_RETURN_IF_ERROR(writer.Add(kObjectGraphKey, StringScalar(model_graph.SerializeAsString())));
  return writer.Finish();
}

}  // namespace tensorflow::tf_ext::train
