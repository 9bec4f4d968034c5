// TFRecord files of tf.train.Example as training data (data.h), read by TensorFlow's own tf.data
// kernels: a GraphDef of dataset ops run in a Session of its own.
//
//   files (sorted per glob) -> TFRecordDataset, or with several files ParallelInterleaveDatasetV4
//   over one TFRecordDataset per file (deterministic, block_length unbounded: each file is read
//   whole before the next is output, the following files opened and buffered by their own
//   threads meanwhile) -> ShuffleDataset (only with shuffle_buffer; its seeds fed per epoch)
//   -> BatchDatasetV2 of serialized records -> ParseExampleDatasetV2 (parallel, deterministic)
//   -> PrefetchDataset -> OptionsDataset (tf.data's autotuning off) -> two IteratorV2s that
//   take turns: one serves the epoch, the other is made (MakeIterator) for the next epoch in
//   the background during this epoch's last kLookahead batches (counted in the epoch before),
//   so an epoch starts on a filled prefetch buffer; Next runs IteratorGetNext and the Casts to
//   the dtypes the trainer's placeholders take.
//
// Autotuning is off because its model thread makes each epoch's MakeIterator wait 0.2-1.3 s
// while the last epoch's iterator is torn down (7 ms without it: ResNet-18 of bench-train,
// 20 steps an epoch, lost 35 ms a step to it). The parallelism it would tune is set instead:
// one parse call per core, the prefetch buffer grown by the prefetch's own (legacy) autotuner.
// tf.data's static graph rewrites are off too (each MakeIterator ran Grappler over the dataset
// graph), and the per-file read function is instantiated as a single-device function (a
// multi-device one runs Grappler at every instantiation): about 7 ms an epoch together.
// The pipeline's threads run at a lower priority than the trainer's (nice +10 on Linux): they
// fill the gaps between the step's kernels instead of preempting them (the CNN of bench-train
// lost 1 ms of its 11 ms step to that).
//
// Without a shuffle buffer the records therefore arrive exactly as tf.data.TFRecordDataset(files)
// yields them, whatever the parallelism: the interleave is deterministic and never switches
// files inside one, and the parse is deterministic. With one, epoch e shuffles with the seeds
// (seed, e + 1): the same order for the same seed and epoch, whichever epochs ran before.
//
// Before that each file's records are read by tfrecord_check.h (their headers; every record with
// skip_corrupt_records): TFRecordDataset ends a file cut inside a record's header silently, as if
// it ended there. A bad file is an error naming it, the byte offset and the records before it;
// with skip_corrupt_records a warning, and the pipeline reads that file's good records only
// (TakeDataset in the per-file read function, always through the interleave).
//
// Memory is bounded by the buffers (shuffle_buffer records; buffered_records() records per file
// read ahead; parallel_calls + prefetch batches; in the last kLookahead batches of an epoch
// also the next epoch's, while this one's shuffle buffer holds at most those batches), not by
// the data. Tested by
// //tests:fit_data_test and //tests:fit_data_py_test.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tensorflow/core/example/example.pb.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/attr_value_util.h"
#include "tensorflow/core/framework/dataset_options.pb.h"
#include "tensorflow/core/framework/full_type.pb.h"
#include "tensorflow/core/framework/function.h"
#include "tensorflow/core/framework/function.pb.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/lib/io/record_reader.h"
#include "tensorflow/core/platform/env.h"
#include "tensorflow/core/platform/cpu_info.h"
#include "tensorflow/core/platform/logging.h"
#include "tensorflow/core/protobuf/config.pb.h"
#include "tensorflow/core/public/session.h"
#include "tf_ext/train/data/data.h"
#include "tf_ext/train/data/tfrecord_check.h"

namespace tensorflow::tf_ext::train {
namespace {

constexpr char kReadFile[] = "tf_ext_read_tfrecord_file";
constexpr int64_t kAutotune = -1;
// The next epoch's iterator is made this many batches before the epoch ends.
constexpr int64_t kLookahead = 8;
constexpr int64_t kReadBufferBytes = 1 << 20;  // TFRecordDataset's read buffer, per open file
constexpr char kSkipHint[] =
    " (option 'skip_corrupt_records' trains on the records before it and skips the rest of the file)";

struct DtypeName {
  const char* name;
  DataType dtype;
};
// Python's names of the dtypes a feature may be declared as.
constexpr DtypeName kDtypes[] = {
    {"float16", DT_HALF},   {"bfloat16", DT_BFLOAT16}, {"float32", DT_FLOAT},
    {"float64", DT_DOUBLE}, {"int8", DT_INT8},         {"int16", DT_INT16},
    {"int32", DT_INT32},    {"int64", DT_INT64},       {"uint8", DT_UINT8},
    {"bool", DT_BOOL},      {"string", DT_STRING},
};

std::string DtypeNames() {
  std::vector<std::string> names;
  for (const DtypeName& d : kDtypes) names.push_back(d.name);
  return absl::StrJoin(names, ", ");
}

std::string PythonName(DataType dtype) {
  for (const DtypeName& d : kDtypes) {
    if (d.dtype == dtype) return d.name;
  }
  return DataTypeString(dtype);
}

// The dtype tf.train.Example stores a feature of `dtype` as (its float_list, int64_list or
// bytes_list): what ParseExample reads before the cast.
DataType StoredDtype(DataType dtype) {
  switch (dtype) {
    case DT_STRING:
      return DT_STRING;
    case DT_HALF:
    case DT_BFLOAT16:
    case DT_FLOAT:
    case DT_DOUBLE:
      return DT_FLOAT;
    default:
      return DT_INT64;
  }
}

std::string ShapeText(const PartialTensorShape& shape) {
  if (shape.unknown_rank()) return "unknown";
  std::vector<std::string> dims;
  for (int i = 0; i < shape.dims(); ++i) {
    dims.push_back(shape.dim_size(i) < 0 ? "?" : absl::StrCat(shape.dim_size(i)));
  }
  return absl::StrJoin(dims, "x");
}

bool EndsWithTFRecord(absl::string_view item) {
  return absl::EndsWith(item, ".tfrecord") || absl::EndsWith(item, ".tfrecords");
}

std::vector<std::string> Items(const std::string& path) {
  std::vector<std::string> items;
  for (absl::string_view item : absl::StrSplit(path, ',')) {
    item = absl::StripAsciiWhitespace(item);
    if (!item.empty()) items.emplace_back(item);
  }
  return items;
}

// A GraphDef under construction: nodes by name, attrs by value.
class GraphDefBuilder {
 public:
  explicit GraphDefBuilder(GraphDef* graph) : graph_(graph) {}

  // Adds node `name` of `op`; returns its first output's name.
  std::string Add(const std::string& name, const std::string& op, const std::vector<std::string>& inputs,
                  const std::vector<std::pair<std::string, AttrValue>>& attrs = {}) {
    return AddTo(graph_->add_node(), name, op, inputs, attrs);
  }

  static std::string AddTo(NodeDef* node, const std::string& name, const std::string& op,
                           const std::vector<std::string>& inputs,
                           const std::vector<std::pair<std::string, AttrValue>>& attrs) {
    node->set_name(name);
    node->set_op(op);
    for (const std::string& input : inputs) node->add_input(input);
    for (const auto& [key, value] : attrs) (*node->mutable_attr())[key] = value;
    return name;
  }

  std::string Const(const std::string& name, const Tensor& value) {
    return Add(name, "Const", {}, {{"dtype", Attr(value.dtype())}, {"value", Attr(value)}});
  }
  std::string Int64(const std::string& name, int64_t value) { return Const(name, Tensor(value)); }

  template <typename T>
  static AttrValue Attr(const T& value) {
    AttrValue attr;
    SetAttrValue(value, &attr);
    return attr;
  }
  static AttrValue Attr(const Tensor& value) {
    AttrValue attr;
    value.AsProtoTensorContent(attr.mutable_tensor());
    return attr;
  }

 private:
  GraphDef* graph_;
};

// Gives each dataset node the full type Python's tf.data gives it (a dataset of its elements'
// tensors), as TensorFlow's type inference expects of a dataset op's input.
void SetDatasetTypes(google::protobuf::RepeatedPtrField<NodeDef>* nodes) {
  for (NodeDef& node : *nodes) {
    if (!absl::StrContains(node.op(), "Dataset")) continue;
    std::vector<int> types = {DT_STRING};  // TFRecordDataset: records
    for (const char* attr : {"output_types", "Toutput_types"}) {
      auto it = node.attr().find(attr);
      if (it != node.attr().end()) types.assign(it->second.list().type().begin(), it->second.list().type().end());
    }
    FullTypeDef* type = node.mutable_experimental_type();
    type->Clear();
    type->set_type_id(TFT_PRODUCT);
    FullTypeDef* dataset = type->add_args();
    dataset->set_type_id(TFT_DATASET);
    FullTypeDef* element = dataset->add_args();
    element->set_type_id(TFT_PRODUCT);
    for (int t : types) {
      FullTypeDef* tensor = element->add_args();
      tensor->set_type_id(TFT_TENSOR);
      FullTypeDef* dtype = tensor->add_args();
      switch (t) {
        case DT_FLOAT:
          dtype->set_type_id(TFT_FLOAT);
          break;
        case DT_INT64:
          dtype->set_type_id(TFT_INT64);
          break;
        default:
          dtype->set_type_id(TFT_STRING);
      }
    }
  }
}

// One parsed feature: the key, the dtype it is stored and parsed as, its declared dtype and
// per-example shape.
struct Parsed {
  std::string key;
  DataType stored = DT_INVALID;
  DataType declared = DT_INVALID;
  TensorShape shape;
};

// What a batch part is read from: a parsed feature's key, and the dtype it is fed as.
struct Feed {
  std::string key;
  DataType dtype = DT_INVALID;
};

// Env::Default() whose threads run at a lower priority (the pipeline Session's and tf.data's).
class LowPriorityEnv : public EnvWrapper {
 public:
  LowPriorityEnv() : EnvWrapper(Env::Default()) {}
  Thread* StartThread(const ThreadOptions& thread_options, const std::string& name,
                      absl::AnyInvocable<void()> fn) override {
    return EnvWrapper::StartThread(thread_options, name, [fn = std::move(fn)]() mutable {
#if defined(__linux__)
      // Linux gives each thread its own nice value.
      setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), kPipelineNice);
#endif
      fn();
    });
  }

 private:
  static constexpr int kPipelineNice = 10;
};

Env* PipelineEnv() {
  static Env* env = new LowPriorityEnv();
  return env;
}

class TFRecordSource : public BatchSource {
 public:
  TFRecordSource(std::vector<std::string> files, const DataSpec& spec)
      : files_(std::move(files)), spec_(spec) {}

  absl::Status Build() {
    TF_RETURN_IF_ERROR(CheckKeys());
    TF_RETURN_IF_ERROR(CheckFeatureNames(spec_));  // after CheckKeys: a misspelt key comes first
    TF_RETURN_IF_ERROR(ResolveFeatures());
    TF_RETURN_IF_ERROR(CheckFiles());
    GraphDef graph;
    TF_RETURN_IF_ERROR(BuildGraph(&graph));
    SessionOptions options;
    ConfigProto& config = options.config;
    // Its own thread pools (not the process's first Session's), one thread per core (at most
    // 8), as tf.data's in Python: the parse calls and the readers run on them beside the
    // trainer's Session.
    const int threads = std::clamp(port::MaxParallelism(), 1, 8);
    options.env = PipelineEnv();
    config.set_use_per_session_threads(true);
    config.set_inter_op_parallelism_threads(threads);
    config.set_intra_op_parallelism_threads(1);
    Session* session = nullptr;
    TF_RETURN_IF_ERROR(NewSession(options, &session));
    session_.reset(session);
    absl::Status created = session_->Create(graph);
    if (!created.ok()) {
      return absl::InternalError(absl::StrCat("TFRecord pipeline of ", description(), ": ",
                                              created.message()));
    }
    // Each slot's batch as a callable, made once: a Run by names re-resolves its feeds and
    // fetches every batch.
    for (int slot = 0; slot < 2; ++slot) {
      for (bool in_caller_thread : {false, true}) {
        CallableOptions callable;
        for (const std::string& fetch : fetches_[slot]) callable.add_fetch(fetch);
        if (in_caller_thread) callable.mutable_run_options()->set_inter_op_thread_pool(-1);
        TF_RETURN_IF_ERROR(session_->MakeCallable(callable, &fetch_callables_[slot][in_caller_thread]));
      }
    }
    return absl::OkStatus();
  }

  absl::Status StartEpoch(int64_t epoch) override {
    pending_.reset();
    if (preparing_ != nullptr) {
      preparing_.reset();  // joins
      if (prepared_order_ == Order(epoch) && prepared_first_.has_value()) {
        current_ = 1 - current_;
        pending_ = std::move(prepared_first_);
      }
      prepared_first_.reset();
    }
    if (!pending_.has_value()) {
      absl::Status s = MakeIterator(current_, epoch);
      if (!s.ok()) return Decorate(s);
      // The first GetNext starts the pipeline's threads: from the Session's pool.
      pending_.emplace();
      pending_->status = Fetch(current_, /*in_caller_thread=*/false, &pending_->out);
    }
    epoch_ = epoch;
    batches_ = 0;
    return absl::OkStatus();
  }

  absl::StatusOr<bool> Next(Batch* batch) override {
    std::vector<Tensor> out;
    absl::Status s;
    if (pending_.has_value()) {
      s = pending_->status;
      out = std::move(pending_->out);
      pending_.reset();
    } else {
      s = Fetch(current_, /*in_caller_thread=*/true, &out);
    }
    if (absl::IsOutOfRange(s)) {
      last_epoch_batches_ = batches_;
      return false;
    }
    if (!s.ok()) return Decorate(s);
    ++batches_;
    if (preparing_ == nullptr && last_epoch_batches_ > 0 && batches_ + kLookahead >= last_epoch_batches_) {
      PrepareNextEpoch();
    }
    batch->inputs.clear();
    size_t next = 0;
    for (size_t i = 0; i < spec_.input_keys.size(); ++i) {
      const std::string& name = i < spec_.input_names.size() ? spec_.input_names[i] : spec_.input_keys[i];
      batch->inputs.emplace_back(name, out[next++]);
    }
    batch->targets = spec_.targets_key.empty() ? Tensor() : out[next++];
    batch->weights = spec_.weights_key.empty() ? Tensor() : out[next++];
    batch->size = out.empty() ? 0 : out[0].dim_size(0);
    return true;
  }

  ~TFRecordSource() override {
    // The iterator, its dataset and the shuffle's seed resource released while the Session's
    // resource containers still exist.
    preparing_.reset();
    if (session_ != nullptr) {
      session_->Run({}, {}, {"delete_iterator_0", "delete_iterator_1"}, nullptr).IgnoreError();
    }
  }

  int64_t examples() const override { return -1; }

  std::string description() const override {
    if (files_.size() == 1) return files_[0];
    return absl::StrCat(files_.size(), " TFRecord files");
  }

 private:
  // The feature of `key`: as --features declares it, else as the signature input `input`
  // (index into input_specs, -1 for none) takes it.
  absl::StatusOr<int> FeatureOf(const std::string& key, int input, const std::string& role) {
    for (size_t i = 0; i < parsed_.size(); ++i) {
      if (parsed_[i].key == key) return static_cast<int>(i);
    }
    Parsed p;
    p.key = key;
    const FeatureSpec* declared = nullptr;
    for (const FeatureSpec& f : spec_.features) {
      if (f.name == key) declared = &f;
    }
    const std::pair<DataType, PartialTensorShape>* signature =
        input >= 0 && input < static_cast<int>(spec_.input_specs.size()) ? &spec_.input_specs[input]
                                                                         : nullptr;
    PartialTensorShape example_shape;  // the signature input's, less the batch axis
    if (signature != nullptr && !signature->second.unknown_rank() && signature->second.dims() >= 1) {
      std::vector<int64_t> dims;
      for (int d = 1; d < signature->second.dims(); ++d) dims.push_back(signature->second.dim_size(d));
      example_shape = PartialTensorShape(dims);
    }
    if (declared != nullptr) {
      p.declared = declared->dtype;
      p.shape = declared->shape;
      if (signature != nullptr && !example_shape.unknown_rank() &&
          !example_shape.IsCompatibleWith(p.shape)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--features declares '", key, "' as ", ShapeText(p.shape), " per example, but the input it feeds takes ",
            ShapeText(example_shape), " per example"));
      }
    } else if (signature != nullptr) {
      if (example_shape.unknown_rank() || !example_shape.IsFullyDefined()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the input fed by feature '", key, "' has shape ", ShapeText(signature->second),
            ": declare the feature's shape with --features=", key, ":", PythonName(signature->first), ":SHAPE"));
      }
      p.declared = signature->first;
      example_shape.AsTensorShape(&p.shape);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "the ", role, " feature '", key, "' is not declared: give its dtype and shape with --features=", key,
          ":DTYPE:SHAPE (e.g. ", key, ":int64: for a class id, ", key, ":float32:3 for 3 values)"));
    }
    p.stored = StoredDtype(p.declared);
    parsed_.push_back(p);
    return static_cast<int>(parsed_.size()) - 1;
  }

  absl::Status ResolveFeatures() {
    for (size_t i = 0; i < spec_.input_keys.size(); ++i) {
      TF_ASSIGN_OR_RETURN(int f, FeatureOf(spec_.input_keys[i], static_cast<int>(i), "input"));
      DataType dtype = i < spec_.input_specs.size() ? spec_.input_specs[i].first : parsed_[f].declared;
      feeds_.push_back({parsed_[f].key, dtype});
    }
    if (!spec_.targets_key.empty()) {
      TF_ASSIGN_OR_RETURN(int f, FeatureOf(spec_.targets_key, -1, "targets"));
      feeds_.push_back({parsed_[f].key, spec_.targets_dtype == DT_INVALID ? parsed_[f].declared : spec_.targets_dtype});
    }
    if (!spec_.weights_key.empty()) {
      TF_ASSIGN_OR_RETURN(int f, FeatureOf(spec_.weights_key, -1, "sample weights"));
      feeds_.push_back({parsed_[f].key, spec_.weights_dtype == DT_INVALID ? parsed_[f].declared : spec_.weights_dtype});
    }
    for (const Feed& feed : feeds_) {
      const Parsed& p = *std::find_if(parsed_.begin(), parsed_.end(),
                                      [&](const Parsed& q) { return q.key == feed.key; });
      if ((p.stored == DT_STRING) != (feed.dtype == DT_STRING)) {
        return absl::InvalidArgumentError(absl::StrCat("feature '", p.key, "' is ", PythonName(p.declared),
                                                       " but is fed as ", PythonName(feed.dtype)));
      }
    }
    return absl::OkStatus();
  }

  // The features of the first record of the first file that has one: each key the options name
  // is one of them, or an error lists them (before a batch is parsed). Records without the
  // first one's features are ParseExample's to refuse.
  absl::Status CheckKeys() const {
    for (const std::string& file : files_) {
      std::unique_ptr<RandomAccessFile> f;
      if (!Env::Default()->NewRandomAccessFile(file, &f).ok()) continue;  // CheckFiles names it
      io::SequentialRecordReader reader(f.get(), io::RecordReaderOptions::CreateRecordReaderOptions(spec_.compression));
      tstring record;
      if (!reader.ReadRecord(&record).ok()) continue;  // empty, or bad: CheckFiles says how
      Example example;
      if (!example.ParseFromArray(record.data(), static_cast<int>(record.size()))) return absl::OkStatus();
      std::vector<std::string> names;
      for (const auto& [name, feature] : example.features().feature()) names.push_back(name);
      std::sort(names.begin(), names.end());
      std::vector<std::pair<const char*, std::string>> keys;
      for (const std::string& key : spec_.input_keys) keys.emplace_back("inputs", key);
      if (!spec_.targets_key.empty()) keys.emplace_back("targets", spec_.targets_key);
      if (!spec_.weights_key.empty()) keys.emplace_back("sample_weights", spec_.weights_key);
      for (const auto& [option, key] : keys) {
        if (!std::binary_search(names.begin(), names.end(), key)) {
          return absl::InvalidArgumentError(absl::StrCat("option '", option, "': the records of ", file, " have no feature '",
                                                         key, "' (the first has: ", absl::StrJoin(names, ", "), ")"));
        }
      }
      return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  // Each file's records read before tf.data reads them (tfrecord_check.h): TFRecordDataset ends
  // a file cut inside a record's header silently. Without skip_corrupt_records only the headers
  // (a data CRC that fails is TFRecordDataset's to find and Decorate's to name); with it every
  // record, so that each bad file's good records are known and the pipeline takes only those.
  absl::Status CheckFiles() {
    takes_.assign(files_.size(), -1);
    for (size_t i = 0; i < files_.size(); ++i) {
      auto check = CheckRecordFile(files_[i], spec_.compression, /*data_crcs=*/spec_.skip_corrupt_records);
      if (!check.ok()) {
        return absl::Status(check.status().code(), absl::StrCat("TFRecord file '", files_[i], "': ", check.status().message()));
      }
      if (check->ok()) continue;
      const std::string problem = DescribeRecordProblem(files_[i], spec_.compression, *check);
      if (!spec_.skip_corrupt_records) return absl::DataLossError(absl::StrCat(problem, kSkipHint));
      LOG(WARNING) << problem << "; option 'skip_corrupt_records': reading the " << check->records
                   << (check->records == 1 ? " record" : " records") << " before it, skipping the rest of the file";
      takes_[i] = check->records;
    }
    return absl::OkStatus();
  }

  bool SkipsRecords() const {
    return std::any_of(takes_.begin(), takes_.end(), [](int64_t take) { return take >= 0; });
  }

  // The function reading one file: filename -> TFRecordDataset; with SkipsRecords, (filename,
  // count) -> TakeDataset(TFRecordDataset, count), count -1 for every record.
  void AddReadFunction(GraphDef* graph) {
    FunctionDef* f = graph->mutable_library()->add_function();
    OpDef* sig = f->mutable_signature();
    sig->set_name(kReadFile);
    OpDef::ArgDef* in = sig->add_input_arg();
    in->set_name("filename");
    in->set_type(DT_STRING);
    if (SkipsRecords()) {
      OpDef::ArgDef* count = sig->add_input_arg();
      count->set_name("count");
      count->set_type(DT_INT64);
    }
    OpDef::ArgDef* out = sig->add_output_arg();
    out->set_name("dataset");
    out->set_type(DT_VARIANT);
    using B = GraphDefBuilder;
    B::AddTo(f->add_node_def(), "compression", "Const", {},
             {{"dtype", B::Attr(DT_STRING)}, {"value", B::Attr(Tensor(tstring(spec_.compression)))}});
    B::AddTo(f->add_node_def(), "buffer_size", "Const", {},
             {{"dtype", B::Attr(DT_INT64)}, {"value", B::Attr(Tensor(kReadBufferBytes))}});
    B::AddTo(f->add_node_def(), "read", "TFRecordDataset",
             {"filename", "compression:output:0", "buffer_size:output:0"}, {{"metadata", B::Attr("")}});
    (*f->mutable_ret())["dataset"] = "read:handle:0";
    if (SkipsRecords()) {
      B::AddTo(f->add_node_def(), "take", "TakeDataset", {"read:handle:0", "count"},
               {{"output_types", B::Attr(std::vector<DataType>{DT_STRING})},
                {"output_shapes", B::Attr(std::vector<PartialTensorShape>{PartialTensorShape({})})},
                {"metadata", B::Attr("")}});
      (*f->mutable_ret())["dataset"] = "take:handle:0";
    }
    // A single-device function: without this attr tf.data instantiates it as a multi-device
    // function, running Grappler over it for every iterator (4.5 ms an epoch).
    (*f->mutable_attr())[FunctionLibraryDefinition::kIntsOnDeviceAttr].set_b(true);
  }

  absl::Status BuildGraph(GraphDef* graph) {
    using B = GraphDefBuilder;
    B g(graph);
    Tensor names(DT_STRING, TensorShape({static_cast<int64_t>(files_.size())}));
    for (size_t i = 0; i < files_.size(); ++i) names.flat<tstring>()(i) = files_[i];
    const std::string files = g.Const("files", names);
    const std::vector<PartialTensorShape> record_shape = {PartialTensorShape({})};
    const std::vector<DataType> record_type = {DT_STRING};
    auto structure = [](const std::vector<DataType>& types, const std::vector<PartialTensorShape>& shapes) {
      return std::vector<std::pair<std::string, AttrValue>>{{"output_types", B::Attr(types)},
                                                            {"output_shapes", B::Attr(shapes)}};
    };
    auto with = [](std::vector<std::pair<std::string, AttrValue>> attrs,
                   const std::vector<std::pair<std::string, AttrValue>>& more) {
      attrs.insert(attrs.end(), more.begin(), more.end());
      return attrs;
    };
    std::string records;
    if (readers() <= 1 && !SkipsRecords()) {
      records = g.Add("records", "TFRecordDataset",
                      {files, g.Const("compression", Tensor(tstring(spec_.compression))),
                       g.Int64("buffer_size", kReadBufferBytes)},
                      {{"metadata", B::Attr("")}});
    } else {
      AddReadFunction(graph);
      NameAttrList f;
      f.set_name(kReadFile);
      // With SkipsRecords each file's name and the records taken from it.
      std::vector<std::string> components = {files};
      std::vector<DataType> component_types = record_type;
      std::vector<PartialTensorShape> component_shapes = record_shape;
      if (SkipsRecords()) {
        Tensor counts(DT_INT64, TensorShape({static_cast<int64_t>(files_.size())}));
        for (size_t i = 0; i < files_.size(); ++i) counts.flat<int64_t>()(i) = takes_[i];
        components.push_back(g.Const("counts", counts));
        component_types.push_back(DT_INT64);
        component_shapes.push_back(PartialTensorShape({}));
      }
      const std::string file_names =
          g.Add("file_names", "TensorSliceDataset", components,
                {{"Toutput_types", B::Attr(component_types)},
                 {"output_shapes", B::Attr(component_shapes)},
                 {"is_files", B::Attr(true)},
                 {"metadata", B::Attr("")},
                 {"replicate_on_split", B::Attr(false)}});
      records = g.Add(
          "records", "ParallelInterleaveDatasetV4",
          {file_names, g.Int64("cycle_length", readers()),
           g.Int64("block_length", std::numeric_limits<int64_t>::max()),
           g.Int64("buffer_output_elements", buffered_records()), g.Int64("prefetch_input_elements", 0),
           g.Int64("read_parallelism", readers())},
          with(structure(record_type, record_shape),
               {{"f", B::Attr(f)},
                {"deterministic", B::Attr("true")},
                {"Targuments", B::Attr(std::vector<DataType>{})},
                {"metadata", B::Attr("")}}));
    }
    if (spec_.shuffle_buffer > 0) {
      const std::string seed = g.Add("seed", "Placeholder", {},
                                     {{"dtype", B::Attr(DT_INT64)}, {"shape", B::Attr(PartialTensorShape({}))}});
      const std::string seed2 = g.Add("seed2", "Placeholder", {},
                                      {{"dtype", B::Attr(DT_INT64)}, {"shape", B::Attr(PartialTensorShape({}))}});
      records = g.Add("shuffled", "ShuffleDataset", {records, g.Int64("shuffle_buffer", spec_.shuffle_buffer), seed, seed2},
                      with(structure(record_type, record_shape),
                           {{"reshuffle_each_iteration", B::Attr(false)}, {"metadata", B::Attr("")}}));
    }
    Tensor drop(DT_BOOL, TensorShape({}));
    drop.scalar<bool>()() = spec_.drop_remainder;
    const std::vector<PartialTensorShape> batch_shape = {
        PartialTensorShape({spec_.drop_remainder ? spec_.batch_size : -1})};
    const std::string batches =
        g.Add("batches", "BatchDatasetV2", {records, g.Int64("batch_size", spec_.batch_size), g.Const("drop_remainder", drop)},
              with(structure(record_type, batch_shape), {{"parallel_copy", B::Attr(false)}, {"metadata", B::Attr("")}}));

    std::vector<std::string> keys;
    std::vector<DataType> types;
    std::vector<PartialTensorShape> shapes, batched;
    std::vector<std::string> parse_inputs = {batches, g.Int64("parse_parallelism", parse_calls())};
    // ParseExampleDatasetV2 outputs its features as a flattened dict: sorted by key.
    std::sort(parsed_.begin(), parsed_.end(), [](const Parsed& a, const Parsed& b) { return a.key < b.key; });
    for (size_t i = 0; i < parsed_.size(); ++i) {
      keys.push_back(parsed_[i].key);
      types.push_back(parsed_[i].stored);
      shapes.push_back(PartialTensorShape(parsed_[i].shape.dim_sizes()));
      PartialTensorShape b({spec_.drop_remainder ? spec_.batch_size : -1});
      batched.push_back(b.Concatenate(shapes.back()));
      // An empty default: the feature is required.
      parse_inputs.push_back(g.Const(absl::StrCat("no_default_", i), Tensor(parsed_[i].stored, TensorShape({0}))));
    }
    const std::string parsed = g.Add(
        "parsed", "ParseExampleDatasetV2", parse_inputs,
        with(structure(types, batched),
             {{"sparse_keys", B::Attr(std::vector<std::string>{})},
              {"dense_keys", B::Attr(keys)},
              {"sparse_types", B::Attr(std::vector<DataType>{})},
              {"Tdense", B::Attr(types)},
              {"dense_shapes", B::Attr(shapes)},
              {"deterministic", B::Attr("true")},
              {"ragged_keys", B::Attr(std::vector<std::string>{})},
              {"ragged_value_types", B::Attr(std::vector<DataType>{})},
              {"ragged_split_types", B::Attr(std::vector<DataType>{})}}));
    const std::string prefetched =
        g.Add("prefetched", "PrefetchDataset", {parsed, g.Int64("prefetch", spec_.prefetch > 0 ? spec_.prefetch : kAutotune)},
              with(structure(types, batched),
                   {{"slack_period", B::Attr(0)}, {"legacy_autotune", B::Attr(true)},
                    {"buffer_size_min", B::Attr(0)}, {"metadata", B::Attr("")}}));
    data::Options options;
    options.mutable_autotune_options()->set_enabled(false);
    options.mutable_optimization_options()->set_apply_default_optimizations(false);
    const std::string tuned =
        g.Add("options", "OptionsDataset", {prefetched},
              with(structure(types, batched),
                   {{"serialized_options", B::Attr(options.SerializeAsString())}, {"metadata", B::Attr("")}}));
    for (int slot = 0; slot < 2; ++slot) {
      const std::string iterator = g.Add(absl::StrCat("iterator_", slot), "IteratorV2", {},
                                         with(structure(types, batched),
                                              {{"shared_name", B::Attr(absl::StrCat("tf_ext_tfrecord_iterator_", slot))},
                                               {"container", B::Attr("")}}));
      g.Add(absl::StrCat("make_iterator_", slot), "MakeIterator", {tuned, iterator});
      g.Add(absl::StrCat("delete_iterator_", slot), "DestroyResourceOp", {iterator},
            {{"ignore_lookup_error", B::Attr(true)}});
      const std::string next = g.Add(absl::StrCat("next_", slot), "IteratorGetNext", {iterator}, structure(types, batched));
      for (size_t i = 0; i < feeds_.size(); ++i) {
        const Feed& feed = feeds_[i];
        int output = 0;
        while (parsed_[output].key != feed.key) ++output;
        std::string value = absl::StrCat(next, ":", output);
        const Parsed& p = parsed_[output];
        // Through the declared dtype (int64 declared int32 wraps as tf.cast does) to the fed one.
        DataType dtype = p.stored;
        for (DataType to : {p.declared, feed.dtype}) {
          if (to == dtype) continue;
          value = g.Add(absl::StrCat("cast_", slot, "_", i, "_", DataTypeString(to)), "Cast", {value},
                        {{"SrcT", B::Attr(dtype)}, {"DstT", B::Attr(to)}, {"Truncate", B::Attr(false)}});
          dtype = to;
        }
        fetches_[slot].push_back(value);
      }
    }
    SetDatasetTypes(graph->mutable_node());
    for (FunctionDef& f : *graph->mutable_library()->mutable_function()) SetDatasetTypes(f.mutable_node_def());
    return absl::OkStatus();
  }

  // Epochs with the same order of records: each its own with a shuffle buffer, else all one.
  int64_t Order(int64_t epoch) const { return spec_.shuffle_buffer > 0 ? epoch : 0; }

  // Makes slot `slot`'s iterator for epoch `epoch` (with a shuffle buffer, seeds (seed, epoch+1)).
  absl::Status MakeIterator(int slot, int64_t epoch) {
    std::vector<std::pair<std::string, Tensor>> feeds;
    if (spec_.shuffle_buffer > 0) {
      feeds.emplace_back("seed", Tensor(static_cast<int64_t>(spec_.seed)));
      feeds.emplace_back("seed2", Tensor(static_cast<int64_t>(epoch + 1)));
    }
    return session_->Run(feeds, {}, {absl::StrCat("make_iterator_", slot)}, nullptr);
  }

  // One batch from slot `slot`'s iterator. In the caller's thread once the iterator's threads
  // run (they keep the runner of the GetNext that started them): one thread hand-off less
  // a batch (0.35 -> 0.18 ms on this machine).
  absl::Status Fetch(int slot, bool in_caller_thread, std::vector<Tensor>* out) {
    return session_->RunCallable(fetch_callables_[slot][in_caller_thread], {}, out, nullptr);
  }

  // Makes the other slot's iterator for the next epoch in the background and takes its first
  // batch (which starts its threads: the prefetch fills); StartEpoch takes both when the order
  // matches, else makes its own. A failed MakeIterator here is reported by StartEpoch's own; a
  // failed first batch by Next, as it would be without the lookahead.
  void PrepareNextEpoch() {
    const int slot = 1 - current_;
    const int64_t epoch = epoch_ + 1;
    prepared_order_ = Order(epoch);
    prepared_first_.reset();
    preparing_.reset(PipelineEnv()->StartThread(ThreadOptions(), "tf_ext_tfrecord_next_epoch", [this, slot, epoch] {
      if (!MakeIterator(slot, epoch).ok()) return;
      Fetched first;
      first.status = Fetch(slot, /*in_caller_thread=*/false, &first.out);
      prepared_first_ = std::move(first);
    }));
  }

  int64_t readers() const {
    const int64_t n = static_cast<int64_t>(files_.size());
    return std::min(n, spec_.parallel_reads > 0 ? spec_.parallel_reads : int64_t{4});
  }
  // Parallel parse calls: one per core (as the pipeline Session's threads) unless set.
  int64_t parse_calls() const {
    return spec_.parallel_calls > 0 ? spec_.parallel_calls : std::clamp(port::MaxParallelism(), 1, 8);
  }
  // Records each open file's reader buffers ahead of the output.
  int64_t buffered_records() const { return std::max<int64_t>(spec_.batch_size, 16); }

  // The pipeline's error without the node TensorFlow appends; a corrupt record's as CheckFiles
  // words it, naming the file, the offset and the records before it (TFRecordDataset's gives
  // the offset alone).
  absl::Status Decorate(const absl::Status& s) const {
    std::string message(s.message());
    message = message.substr(0, message.find("\n\t [["));
    if (absl::IsDataLoss(s)) {
      const std::string problem = FirstBadRecord();
      if (!problem.empty()) return absl::DataLossError(problem);
    }
    return absl::Status(s.code(), message);
  }

  // The first bad record of the files, every record's data CRC checked (only to name it in an
  // error); empty if there is none.
  std::string FirstBadRecord() const {
    for (const std::string& file : files_) {
      auto check = CheckRecordFile(file, spec_.compression, /*data_crcs=*/true);
      if (!check.ok()) return absl::StrCat("TFRecord file '", file, "': ", check.status().message());
      if (!check->ok()) {
        return absl::StrCat(DescribeRecordProblem(file, spec_.compression, *check),
                            spec_.skip_corrupt_records ? "" : kSkipHint);
      }
    }
    return "";
  }

  std::vector<std::string> files_;
  std::vector<int64_t> takes_;  // the records read of each file (-1: all), by CheckFiles
  DataSpec spec_;
  std::vector<Parsed> parsed_;
  std::vector<Feed> feeds_;  // inputs in order, then targets, then weights
  std::vector<std::string> fetches_[2];  // per iterator slot
  Session::CallableHandle fetch_callables_[2][2] = {};  // [slot][in the caller's thread]
  std::unique_ptr<Session> session_;
  int current_ = 0;  // the slot serving the epoch
  int64_t epoch_ = 0, batches_ = 0;
  int64_t last_epoch_batches_ = 0;  // batches in the last complete epoch (0: none yet)
  struct Fetched {
    absl::Status status;
    std::vector<Tensor> out;
  };
  std::optional<Fetched> pending_;  // the epoch's first batch, fetched before Next asked
  // The other slot's iterator, being made for order prepared_order_ by preparing_ (joined
  // before any use), and its first batch once made.
  std::unique_ptr<Thread> preparing_;
  int64_t prepared_order_ = -1;
  std::optional<Fetched> prepared_first_;
};

}  // namespace

absl::StatusOr<std::vector<FeatureSpec>> ParseFeatures(const std::string& text) {
  std::vector<FeatureSpec> features;
  for (absl::string_view raw : absl::StrSplit(text, ',')) {
    absl::string_view item = absl::StripAsciiWhitespace(raw);
    if (item.empty()) continue;
    auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(
          absl::StrCat("--features item '", item, "': ", why, " (expected NAME:DTYPE:SHAPE, e.g. x:float32:8x8x3 or y:int64:)"));
    };
    std::vector<std::string> parts = absl::StrSplit(item, ':');
    if (parts.size() != 3) return bad("not three fields separated by ':'");
    FeatureSpec f;
    f.name = parts[0];
    if (f.name.empty()) return bad("no name");
    for (const DtypeName& d : kDtypes) {
      if (parts[1] == d.name) f.dtype = d.dtype;
    }
    if (f.dtype == DT_INVALID) return bad(absl::StrCat("unknown dtype '", parts[1], "' (one of ", DtypeNames(), ")"));
    if (!parts[2].empty()) {
      for (absl::string_view dim : absl::StrSplit(parts[2], 'x')) {
        int64_t size = 0;
        if (!absl::SimpleAtoi(dim, &size) || size < 1) {
          return bad(absl::StrCat("shape '", parts[2], "' is not positive sizes separated by 'x'"));
        }
        f.shape.AddDim(size);
      }
    }
    for (const FeatureSpec& other : features) {
      if (other.name == f.name) return bad(absl::StrCat("'", f.name, "' is declared twice"));
    }
    features.push_back(std::move(f));
  }
  return features;
}

absl::Status CheckFeatureNames(const DataSpec& spec) {
  std::vector<std::string> keys = spec.input_keys;
  if (!spec.targets_key.empty()) keys.push_back(spec.targets_key);
  if (!spec.weights_key.empty()) keys.push_back(spec.weights_key);
  for (const FeatureSpec& f : spec.features) {
    if (std::find(keys.begin(), keys.end(), f.name) == keys.end()) {
      return absl::InvalidArgumentError(absl::StrCat("option 'features': '", f.name,
                                                     "' is none of the inputs, targets or sample weights (those are: ",
                                                     absl::StrJoin(keys, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

bool IsTFRecordPath(const std::string& path) {
  std::vector<std::string> items = Items(path);
  return !items.empty() && std::all_of(items.begin(), items.end(), [](const std::string& item) {
    return EndsWithTFRecord(item);
  });
}

absl::StatusOr<std::vector<std::string>> ExpandTFRecordFiles(const std::string& path) {
  std::vector<std::string> files;
  const std::vector<std::string> items = Items(path);
  if (items.empty()) return absl::InvalidArgumentError("no TFRecord file given");
  for (const std::string& item : items) {
    if (!EndsWithTFRecord(item)) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", item, "' in '", path, "' does not end in .tfrecord or .tfrecords"));
    }
    std::vector<std::string> matches;
    absl::Status s = Env::Default()->GetMatchingPaths(item, &matches);
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("'", item, "': ", s.message()));
    if (matches.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("'", item, "' matches no file"));
    }
    files.insert(files.end(), matches.begin(), matches.end());
  }
  // Every file once, by name: the order records arrive in without a shuffle buffer.
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  return files;
}

absl::StatusOr<std::unique_ptr<BatchSource>> OpenTFRecordData(const std::string& path,
                                                              const DataSpec& spec) {
  if (spec.batch_size < 1) return absl::InvalidArgumentError(absl::StrCat("batch size ", spec.batch_size, " < 1"));
  if (spec.shuffle_buffer < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--shuffle_buffer=", spec.shuffle_buffer, " is negative"));
  }
  if (spec.compression != "" && spec.compression != "GZIP" && spec.compression != "ZLIB") {
    return absl::InvalidArgumentError(
        absl::StrCat("--compression='", spec.compression, "' is not GZIP, ZLIB or empty"));
  }
  TF_ASSIGN_OR_RETURN(std::vector<std::string> files, ExpandTFRecordFiles(path));
  auto source = std::make_unique<TFRecordSource>(std::move(files), spec);
  TF_RETURN_IF_ERROR(source->Build());
  return std::unique_ptr<BatchSource>(std::move(source));
}

}  // namespace tensorflow::tf_ext::train
