#include "tf_ext/train/loop/summary.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/attr_value_util.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/summary.pb.h"
#include "tensorflow/core/graph/graph.h"
#include "tensorflow/core/platform/path.h"
#include "tf_ext/train/model/graph_ops.h"
#include "tf_ext/train/model/optimizers.h"

namespace tensorflow::tf_ext::train {
namespace {

// tf.summary.create_file_writer's defaults (summary_ops_v2.py).
constexpr int kMaxQueue = 10;
constexpr int kFlushMillis = 2 * 60 * 1000;
constexpr char kFilenameSuffix[] = ".v2";

AttrValue TypeAttr(DataType t) {
  AttrValue a;
  SetAttrValue(t, &a);
  return a;
}

Tensor StringScalar(const std::string& s) {
  Tensor t(DT_STRING, TensorShape({}));
  t.scalar<tstring>()() = s;
  return t;
}

// What tf.summary.scalar attaches to each value (tensorboard/plugins/scalar/metadata.py): the
// "scalars" plugin, no content (ScalarPluginData version 0 serializes to nothing).
std::string ScalarsMetadata() {
  SummaryMetadata metadata;
  metadata.mutable_plugin_data()->set_plugin_name("scalars");
  return metadata.SerializeAsString();
}

}  // namespace

absl::StatusOr<int64_t> ParseUpdateFreq(const std::string& update_freq) {
  if (update_freq == "epoch") return 0;
  if (update_freq == "batch") return 1;
  int64_t n = 0;
  const bool digits = !update_freq.empty() &&
                      std::all_of(update_freq.begin(), update_freq.end(),
                                  [](char c) { return absl::ascii_isdigit(c); });
  if (!digits || !absl::SimpleAtoi(update_freq, &n) || n <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensorboard: update_freq '", update_freq,
                     "' is not 'epoch', 'batch' or a positive number of steps"));
  }
  return n;
}

absl::StatusOr<std::unique_ptr<TensorBoardLogger>> TensorBoardLogger::Create(
    const std::string& dir, const std::string& update_freq) {
  absl::StatusOr<int64_t> freq = ParseUpdateFreq(update_freq);
  if (!freq.ok()) return freq.status();
  if (dir.empty()) return absl::InvalidArgumentError("tensorboard: no log directory");
  std::unique_ptr<TensorBoardLogger> logger(new TensorBoardLogger());
  logger->update_freq_ = *freq;

  // One graph: three placeholders every write feeds, and per file writer the ops tf.summary
  // runs on its resource.
  Graph g(OpRegistry::Global());
  GraphOps ops(&g, "tensorboard");
  const GraphTensor step = ops.Op("Placeholder", {}, "step", {{"dtype", TypeAttr(DT_INT64)}});
  const GraphTensor value = ops.Op("Placeholder", {}, "value", {{"dtype", TypeAttr(DT_FLOAT)}});
  const GraphTensor tag = ops.Op("Placeholder", {}, "tag", {{"dtype", TypeAttr(DT_STRING)}});
  const GraphTensor metadata = ops.Const(StringScalar(ScalarsMetadata()), "scalars_metadata");
  auto add_writer = [&](const std::string& name, Writer* w) {
    w->dir = io::JoinPath(dir, name);
    AttrValue shared_name;
    SetAttrValue(name, &shared_name);
    const GraphTensor handle = ops.Op("SummaryWriter", {}, name, {{"shared_name", shared_name}});
    const GraphTensor create = ops.Op(
        "CreateSummaryFileWriter",
        {handle, ops.Const(StringScalar(w->dir), "logdir"), ops.Scalar(DT_INT32, kMaxQueue),
         ops.Scalar(DT_INT32, kFlushMillis), ops.Const(StringScalar(kFilenameSuffix), "suffix")},
        name + "_create");
    const GraphTensor write = ops.Op("WriteSummary", {handle, step, value, tag, metadata},
                                     name + "_write", {{"T", TypeAttr(DT_FLOAT)}});
    const GraphTensor flush = ops.Op("FlushSummaryWriter", {handle}, name + "_flush");
    const GraphTensor close = ops.Op("CloseSummaryWriter", {handle}, name + "_close");
    if (!ops.status().ok()) return;
    w->create = create.node->name();
    w->write = write.node->name();
    w->flush = flush.node->name();
    w->close = close.node->name();
  };
  add_writer("train", &logger->train_);
  add_writer("validation", &logger->validation_);
  if (!ops.status().ok()) {
    return absl::InternalError(absl::StrCat("tensorboard: building the writer graph: ",
                                            ops.status().message()));
  }
  logger->step_ = step.node->name();
  logger->value_ = value.node->name();
  logger->tag_ = tag.node->name();

  // The logger's own small session, with threads of its own: a first session without
  // use_per_session_threads would size the process's global inter-op pool for every later one.
  SessionOptions options;
  options.config.set_intra_op_parallelism_threads(1);
  options.config.set_inter_op_parallelism_threads(1);
  options.config.set_use_per_session_threads(true);
  (*options.config.mutable_device_count())["GPU"] = 0;
  Session* session = nullptr;
  absl::Status s = NewSession(options, &session);
  if (!s.ok()) return absl::InternalError(absl::StrCat("tensorboard: a session: ", s.message()));
  logger->session_.reset(session);
  GraphDef graph_def;
  g.ToGraphDef(&graph_def);
  s = logger->session_->Create(graph_def);
  if (!s.ok()) {
    return absl::InternalError(absl::StrCat("tensorboard: the writer graph: ", s.message()));
  }
  // As Keras, DIR/train exists from the start; DIR/validation once there is validation.
  s = logger->Open(&logger->train_);
  if (!s.ok()) return s;
  return logger;
}

TensorBoardLogger::~TensorBoardLogger() {
  if (!closed_) Close().IgnoreError();
}

absl::Status TensorBoardLogger::Run(const std::string& target,
                                    const std::vector<std::pair<std::string, Tensor>>& feeds) {
  std::vector<Tensor> outputs;
  return session_->Run(feeds, {}, {target}, &outputs);
}

absl::Status TensorBoardLogger::Open(Writer* w) {
  if (w->open) return absl::OkStatus();
  absl::Status s = Run(w->create, {});
  if (!s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("tensorboard: cannot write events to ", w->dir, ": ", s.message()));
  }
  w->open = true;
  return absl::OkStatus();
}

absl::Status TensorBoardLogger::Scalar(Writer* w, const std::string& tag, double value,
                                       int64_t step) {
  if (closed_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "tensorboard: writing '", tag, "' to ", w->dir, " after the logger was closed"));
  }
  absl::Status s = Open(w);
  if (!s.ok()) return s;
  Tensor step_t(DT_INT64, TensorShape({}));
  step_t.scalar<int64_t>()() = step;
  Tensor value_t(DT_FLOAT, TensorShape({}));
  value_t.scalar<float>()() = static_cast<float>(value);  // tf.summary.scalar's float32
  s = Run(w->write, {{step_, step_t}, {value_, value_t}, {tag_, StringScalar(tag)}});
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("tensorboard: writing '", tag, "' to ", w->dir,
                                               ": ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status TensorBoardLogger::OnTrainBatchEnd(int64_t step, const Logs& logs) {
  // Keras counts batches from 1 and records those that are multiples of update_freq.
  const int64_t batch = step + 1;
  if (update_freq_ == 0 || batch % update_freq_ != 0) return absl::OkStatus();
  for (const auto& [name, value] : logs) {
    absl::Status s = Scalar(&train_, absl::StrCat("batch_", name), value, batch);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status TensorBoardLogger::OnEpochEnd(int64_t epoch, const Logs& logs, double learning_rate,
                                           int64_t iterations) {
  // Keras's _log_epoch_metrics: val_ logs to the validation writer without their prefix, the
  // rest plus learning_rate (set as a dict entry: in place if the logs hold one) to train.
  Logs train, validation;
  for (const auto& [name, value] : logs) {
    if (absl::StartsWith(name, "val_")) {
      validation.emplace_back(name.substr(4), value);
    } else {
      train.emplace_back(name, value);
    }
  }
  auto lr = std::find_if(train.begin(), train.end(),
                         [](const auto& entry) { return entry.first == "learning_rate"; });
  if (lr != train.end()) {
    lr->second = learning_rate;
  } else {
    train.emplace_back("learning_rate", learning_rate);
  }
  for (const auto& [name, value] : train) {
    absl::Status s = Scalar(&train_, absl::StrCat("epoch_", name), value, epoch);
    if (!s.ok()) return s;
  }
  // Keras's on_test_end (after validation, before on_epoch_end), then the epoch's values.
  for (const auto& [name, value] : validation) {
    absl::Status s = Scalar(&validation_, absl::StrCat("evaluation_", name, "_vs_iterations"),
                            value, iterations);
    if (!s.ok()) return s;
  }
  for (const auto& [name, value] : validation) {
    absl::Status s = Scalar(&validation_, absl::StrCat("epoch_", name), value, epoch);
    if (!s.ok()) return s;
  }
  for (Writer* w : {&train_, &validation_}) {
    if (!w->open) continue;
    absl::Status s = Run(w->flush, {});
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("tensorboard: flushing ", w->dir, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status TensorBoardLogger::Close() {
  if (closed_) return absl::OkStatus();
  closed_ = true;
  absl::Status first;
  for (Writer* w : {&train_, &validation_}) {
    if (!w->open) continue;
    w->open = false;
    for (const std::string* op : {&w->flush, &w->close}) {
      absl::Status s = Run(*op, {});
      if (!s.ok() && first.ok()) {
        first = absl::Status(s.code(), absl::StrCat("tensorboard: closing ", w->dir, ": ", s.message()));
      }
    }
  }
  return first;
}

absl::Status TensorBoard::OnTrainBatchEnd(const BatchEnd& batch) {
  return logger_->OnTrainBatchEnd(batch.step, *batch.logs);
}

absl::Status TensorBoard::OnEpochEnd(int64_t epoch, const Logs& logs, bool* stop) {
  auto done = trainer_->Iterations();
  if (!done.ok()) return done.status();
  return logger_->OnEpochEnd(epoch, logs, LearningRateAt(optimizer_, *done), *done);
}

}  // namespace tensorflow::tf_ext::train
