#include "tf_ext/train/loop/callbacks.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tensorflow/core/platform/env.h"
#include "tensorflow/core/platform/path.h"

namespace tensorflow::tf_ext::train {
namespace {

// Keras 3's metrics by the names compile(metrics=[...]) gives them, and whether each rises
// (MonitorCallback's mode "auto" reads the metric's _direction).
const std::set<std::string>& RisingMetrics() {
  static const auto* names = new std::set<std::string>{
      "AUC", "Accuracy", "BinaryAccuracy", "BinaryIoU", "CategoricalAccuracy",
      "ConcordanceCorrelation", "CosineSimilarity", "F1Score", "FBetaScore", "PearsonCorrelation",
      "Precision", "R2Score", "Recall", "SparseCategoricalAccuracy",
      "SparseTopKCategoricalAccuracy", "TopKCategoricalAccuracy", "acc", "accuracy", "auc",
      "binary_accuracy", "binary_io_u", "categorical_accuracy", "concordance_correlation",
      "cosine_similarity", "f1_score", "f_beta_score", "pearson_correlation", "precision",
      "r2_score", "recall", "sparse_categorical_accuracy", "sparse_top_k_categorical_accuracy",
      "top_k_categorical_accuracy"};
  return *names;
}
const std::set<std::string>& FallingMetrics() {
  static const auto* names = new std::set<std::string>{
      "BCE", "BinaryCrossentropy", "CategoricalCrossentropy", "CategoricalHinge", "Hinge",
      "KLDivergence", "LogCoshError", "MAE", "MAPE", "MSE", "MSLE", "MeanAbsoluteError",
      "MeanAbsolutePercentageError", "MeanSquaredError", "MeanSquaredLogarithmicError", "Poisson",
      "RootMeanSquaredError", "SparseCategoricalCrossentropy", "SquaredHinge", "bce",
      "binary_crossentropy", "categorical_crossentropy", "categorical_hinge", "hinge",
      "kl_divergence", "log_cosh_error", "mae", "mape", "mean_absolute_error",
      "mean_absolute_percentage_error", "mean_squared_error", "mean_squared_logarithmic_error",
      "mse", "msle", "poisson", "root_mean_squared_error", "sparse_categorical_crossentropy",
      "squared_hinge"};
  return *names;
}

constexpr char kStateFile[] = "checkpoint";
constexpr char kBest[] = "-best";
constexpr char kBestTmp[] = "-best-tmp";
constexpr char kBestState[] = ".state";

std::string Keys(const Logs& logs) {
  std::vector<std::string> keys;
  for (const auto& kv : logs) keys.push_back(kv.first);
  return absl::StrJoin(keys, ", ");
}

std::string Number(double v) { return absl::StrFormat("%.17g", v); }
std::string Short(double v) { return absl::StrFormat("%.6g", v); }

bool Exists(const std::string& path) { return Env::Default()->FileExists(path).ok(); }

std::string IndexFile(const std::string& prefix) { return absl::StrCat(prefix, ".index"); }

// The files of `prefix` whose names start with its basename + `tail` (".data-" for its data).
std::vector<std::string> FilesStarting(const std::string& prefix, const std::string& tail) {
  std::string dir(io::Dirname(prefix));
  if (dir.empty()) dir = ".";
  const std::string start = absl::StrCat(io::Basename(prefix), tail);
  std::vector<std::string> children, out;
  if (!Env::Default()->GetChildren(dir, &children).ok()) return out;
  for (const auto& c : children) {
    if (absl::StartsWith(c, start)) out.push_back(io::JoinPath(dir, c));
  }
  std::sort(out.begin(), out.end());
  return out;
}

absl::Status DeleteIfExists(const std::string& path) {
  if (!Exists(path)) return absl::OkStatus();
  return Env::Default()->DeleteFile(path);
}

// Deletes a checkpoint: its index first (from then on the prefix is no checkpoint), then its data.
absl::Status DeleteCheckpoint(const std::string& prefix) {
  TF_RETURN_IF_ERROR(DeleteIfExists(IndexFile(prefix)));
  for (const auto& f : FilesStarting(prefix, ".data-")) TF_RETURN_IF_ERROR(DeleteIfExists(f));
  return absl::OkStatus();
}

// Writes `contents` at `path` through a temporary file beside it, synced before the rename.
absl::Status AtomicWrite(const std::string& path, const std::string& contents) {
  Env* env = Env::Default();
  const std::string tmp = absl::StrCat(path, ".tmp", env->NowMicros());
  std::unique_ptr<WritableFile> file;
  TF_RETURN_IF_ERROR(env->NewWritableFile(tmp, &file));
  absl::Status s = file->Append(contents);
  if (s.ok()) s = file->Sync();
  if (absl::Status c = file->Close(); s.ok()) s = c;
  if (s.ok()) s = env->RenameFile(tmp, path);
  if (!s.ok()) env->DeleteFile(tmp).IgnoreError();
  return s;
}

std::string Quote(const std::string& s) { return absl::StrCat("\"", absl::CEscape(s), "\""); }

// "key: value" lines (text protos of scalar fields, one a line).
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> Fields(const std::string& text,
                                                                     const std::string& what) {
  std::vector<std::pair<std::string, std::string>> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) {
      return absl::DataLossError(absl::StrCat(what, ": cannot parse the line '", line, "'"));
    }
    std::string key(absl::StripAsciiWhitespace(line.substr(0, colon)));
    absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
    std::string parsed;
    if (value.size() >= 2 && (value[0] == '"' || value[0] == '\'') && value.back() == value[0]) {
      std::string error;
      if (!absl::CUnescape(value.substr(1, value.size() - 2), &parsed, &error)) {
        return absl::DataLossError(absl::StrCat(what, ": bad string in '", line, "': ", error));
      }
    } else {
      parsed = std::string(value);
    }
    out.push_back({std::move(key), std::move(parsed)});
  }
  return out;
}

absl::StatusOr<double> ParseDouble(const std::string& s, const std::string& what) {
  double v;
  if (!absl::SimpleAtod(s, &v)) return absl::DataLossError(absl::StrCat(what, ": '", s, "' is no number"));
  return v;
}

// NAME-best.state: the --save_best monitor, its best value and that epoch.
struct BestState {
  std::string monitor;
  double value = 0;
  int64_t epoch = 0;
};
std::string BestStateText(const BestState& b) {
  return absl::StrCat("monitor: ", Quote(b.monitor), "\nvalue: ", Number(b.value), "\nepoch: ", b.epoch,
                      "\n");
}
absl::StatusOr<BestState> ReadBestState(const std::string& path) {
  std::string text;
  TF_RETURN_IF_ERROR(ReadFileToString(Env::Default(), path, &text));
  TF_ASSIGN_OR_RETURN(auto fields, Fields(text, path));
  BestState b;
  bool has_value = false, has_epoch = false;
  for (const auto& [key, value] : fields) {
    if (key == "monitor") {
      b.monitor = value;
    } else if (key == "value") {
      TF_ASSIGN_OR_RETURN(b.value, ParseDouble(value, path));
      has_value = true;
    } else if (key == "epoch") {
      if (!absl::SimpleAtoi(value, &b.epoch)) return absl::DataLossError(absl::StrCat(path, ": bad epoch"));
      has_epoch = true;
    }
  }
  if (b.monitor.empty() || !has_value || !has_epoch) {
    return absl::DataLossError(absl::StrCat(path, ": monitor, value or epoch missing"));
  }
  return b;
}

// The epoch a checkpoint prefix ends with (NAME-<epoch>); nullopt when it ends otherwise.
std::optional<int64_t> EpochOf(const std::string& prefix) {
  const std::string base(io::Basename(prefix));
  const size_t dash = base.rfind('-');
  if (dash == std::string::npos || dash + 1 == base.size()) return std::nullopt;
  int64_t epoch;
  const std::string digits = base.substr(dash + 1);
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return absl::ascii_isdigit(c); }) ||
      !absl::SimpleAtoi(digits, &epoch)) {
    return std::nullopt;
  }
  return epoch;
}

std::string Resolve(const std::string& dir, const std::string& path) {
  return io::IsAbsolutePath(path) ? path : io::JoinPath(dir, path);
}

absl::Status Annotate(const absl::Status& s, const std::string& what) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}

class TrainerAdapter : public TrainingState {
 public:
  explicit TrainerAdapter(Trainer* trainer) : trainer_(trainer) {}
  absl::Status SaveCheckpoint(const std::string& prefix) override { return trainer_->SaveCheckpoint(prefix); }
  absl::Status RestoreCheckpoint(const std::string& prefix) override {
    return trainer_->RestoreCheckpoint(prefix);
  }
  absl::Status SaveWeights(const std::string& prefix) override { return trainer_->SaveModelVariables(prefix); }
  absl::Status RestoreWeights(const std::string& prefix) override {
    return trainer_->RestoreModelVariables(prefix);
  }

 private:
  Trainer* trainer_;
};

}  // namespace

absl::StatusOr<Monitor> Monitor::Create(const std::string& name, double min_delta,
                                        const std::string& flag) {
  Monitor m;
  m.name_ = name;
  m.min_delta_ = std::fabs(min_delta);
  const std::string metric(absl::StripPrefix(name, "val_"));
  if (metric == "loss" || FallingMetrics().count(metric)) {
    m.rises_ = false;
  } else if (RisingMetrics().count(metric)) {
    m.rises_ = true;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": cannot tell whether '", name,
        "' should fall or rise (Keras's mode 'auto' knows loss and its metrics by name: ",
        "accuracy, auc, precision, recall, ... rise; mae, mse, crossentropies, ... fall)"));
  }
  return m;
}

bool Monitor::IsImprovement(double current, std::optional<double> reference) const {
  if (!reference.has_value()) return true;
  return rises_ ? current - min_delta_ > *reference : current + min_delta_ < *reference;
}

EarlyStopping::Decision EarlyStopping::OnEpochEnd(int64_t epoch, double current) {
  Decision d;
  if (!has_snapshot_) {  // Keras: best_weights never set, so these weights are the best
    has_snapshot_ = true;
    d.snapshot = true;
    best_epoch_ = epoch;
  }
  ++wait_;
  if (monitor_.IsImprovement(current, best_)) {
    best_ = current;
    best_epoch_ = epoch;
    d.snapshot = true;
    wait_ = 0;
    return d;
  }
  if (wait_ >= patience_ && epoch > 0) d.stop = true;
  return d;
}

std::string CheckpointStateText(const CheckpointState& state) {
  std::string out = absl::StrCat("model_checkpoint_path: ", Quote(state.model_checkpoint_path), "\n");
  for (const auto& p : state.all_model_checkpoint_paths) {
    absl::StrAppend(&out, "all_model_checkpoint_paths: ", Quote(p), "\n");
  }
  for (double t : state.all_model_checkpoint_timestamps) {
    absl::StrAppend(&out, "all_model_checkpoint_timestamps: ", Number(t), "\n");
  }
  absl::StrAppend(&out, "last_preserved_timestamp: ", Number(state.last_preserved_timestamp), "\n");
  return out;
}

absl::StatusOr<CheckpointState> ParseCheckpointState(const std::string& text) {
  const std::string what = "checkpoint state";
  TF_ASSIGN_OR_RETURN(auto fields, Fields(text, what));
  CheckpointState state;
  for (const auto& [key, value] : fields) {
    if (key == "model_checkpoint_path") {
      state.model_checkpoint_path = value;
    } else if (key == "all_model_checkpoint_paths") {
      state.all_model_checkpoint_paths.push_back(value);
    } else if (key == "all_model_checkpoint_timestamps") {
      TF_ASSIGN_OR_RETURN(double t, ParseDouble(value, what));
      state.all_model_checkpoint_timestamps.push_back(t);
    } else if (key == "last_preserved_timestamp") {
      TF_ASSIGN_OR_RETURN(state.last_preserved_timestamp, ParseDouble(value, what));
    } else {
      return absl::DataLossError(absl::StrCat(what, ": unknown field '", key, "'"));
    }
  }
  return state;
}

absl::StatusOr<CheckpointState> ReadCheckpointState(const std::string& dir) {
  const std::string path = io::JoinPath(dir, kStateFile);
  std::string text;
  if (!Exists(path)) return absl::NotFoundError(absl::StrCat(path, " not found"));
  TF_RETURN_IF_ERROR(ReadFileToString(Env::Default(), path, &text));
  auto state = ParseCheckpointState(text);
  if (!state.ok()) return Annotate(state.status(), path);
  return state;
}

absl::Status WriteCheckpointState(const std::string& dir, const CheckpointState& state) {
  return AtomicWrite(io::JoinPath(dir, kStateFile), CheckpointStateText(state));
}

absl::StatusOr<std::string> LatestCheckpoint(const std::string& dir) {
  auto state = ReadCheckpointState(dir);
  if (absl::IsNotFound(state.status())) return std::string();
  TF_RETURN_IF_ERROR(state.status());
  if (state->model_checkpoint_path.empty()) return std::string();
  const std::string prefix = Resolve(dir, state->model_checkpoint_path);
  return Exists(IndexFile(prefix)) ? prefix : std::string();
}

std::shared_ptr<TrainingState> TrainerState(Trainer* trainer) {
  return std::make_shared<TrainerAdapter>(trainer);
}

namespace {

// What the checkpoint callbacks share: DIR/NAME, the model state they save and restore, the
// user's message lines, and --save_best's monitor with its best value so far.
struct CheckpointRun {
  std::shared_ptr<TrainingState> state;
  std::function<void(const std::string&)> message;
  std::string dir, name;  // --checkpoint=DIR/NAME; empty name: no checkpoints
  std::optional<Monitor> save_best;
  std::optional<double> best_value;  // NAME-best.state's when resumed, then the best so far

  void Say(const std::string& line) const {
    if (message) message(line);
  }
  std::string Prefix() const { return io::JoinPath(dir, name); }
  std::string Best() const { return io::JoinPath(dir, name + kBest); }
};

class ModelCheckpoint : public Callback {
 public:
  ModelCheckpoint(std::shared_ptr<CheckpointRun> run, int64_t keep)
      : run_(std::move(run)), keep_(keep) {}
  absl::Status OnRestore(int64_t* initial_epoch) override {
    return Annotate(RecoverDirectory(), absl::StrCat("--checkpoint=", run_->Prefix()));
  }
  absl::Status OnEpochEnd(int64_t epoch, const Logs& logs, bool* stop) override {
    return Annotate(WriteEpochCheckpoint(epoch + 1), absl::StrCat("--checkpoint=", run_->Prefix()));
  }

 private:
  absl::Status RecoverDirectory();
  absl::Status WriteEpochCheckpoint(int64_t epochs_done);

  std::shared_ptr<CheckpointRun> run_;
  int64_t keep_;
};

absl::Status ModelCheckpoint::RecoverDirectory() {
  Env* env = Env::Default();
  const std::string& dir = run_->dir;
  TF_RETURN_IF_ERROR(env->RecursivelyCreateDir(dir));
  const std::string best = run_->Best();
  const std::string tmp = io::JoinPath(dir, run_->name + kBestTmp);
  // NAME-best's swap: finished when it had begun (NAME-best.index gone), else abandoned.
  if (Exists(IndexFile(tmp)) && !Exists(IndexFile(best))) {
    for (const auto& f : FilesStarting(tmp, ".data-")) {
      if (absl::StrContains(f, ".tempstate")) continue;
      TF_RETURN_IF_ERROR(env->RenameFile(f, absl::StrCat(best, f.substr(tmp.size()))));
    }
    const std::string tmp_state = absl::StrCat(tmp, kBestState);
    if (Exists(tmp_state)) {
      TF_RETURN_IF_ERROR(env->RenameFile(tmp_state, absl::StrCat(best, kBestState)));
    }
    TF_RETURN_IF_ERROR(env->RenameFile(IndexFile(tmp), IndexFile(best)));
    run_->Say(absl::StrCat("finished replacing ", best, " (a run was killed while replacing it)"));
  }
  for (const auto& f : FilesStarting(tmp, "")) TF_RETURN_IF_ERROR(DeleteIfExists(f));
  // Leftovers of writes and deletions cut short: BundleWriter's temporary files, the state file's
  // temporary files, data files without their index.
  std::vector<std::string> children;
  TF_RETURN_IF_ERROR(env->GetChildren(dir, &children));
  for (const auto& c : children) {
    const std::string path = io::JoinPath(dir, c);
    if (absl::StartsWith(c, absl::StrCat(kStateFile, ".tmp"))) {
      TF_RETURN_IF_ERROR(DeleteIfExists(path));
      continue;
    }
    if (!absl::StartsWith(c, run_->name + "-")) continue;
    if (absl::StrContains(c, ".tempstate")) {
      TF_RETURN_IF_ERROR(DeleteIfExists(path));
      continue;
    }
    const size_t data = c.find(".data-");
    if (data != std::string::npos && !Exists(IndexFile(io::JoinPath(dir, c.substr(0, data))))) {
      TF_RETURN_IF_ERROR(DeleteIfExists(path));
    }
  }
  return absl::OkStatus();
}

absl::Status ModelCheckpoint::WriteEpochCheckpoint(int64_t epochs_done) {
  const std::string& dir = run_->dir;
  const std::string relative = absl::StrCat(run_->name, "-", epochs_done);
  const std::string prefix = io::JoinPath(dir, relative);
  CheckpointState state;
  auto read = ReadCheckpointState(dir);
  if (read.ok()) {
    state = *read;
  } else if (!absl::IsNotFound(read.status())) {
    return read.status();
  }
  const double now = Env::Default()->NowMicros() / 1e6;
  if (state.last_preserved_timestamp == 0) state.last_preserved_timestamp = now;
  // The kept checkpoints as (relative or absolute path, timestamp); those gone are forgotten.
  std::vector<std::pair<std::string, double>> kept;
  bool names_this = false;
  for (size_t i = 0; i < state.all_model_checkpoint_paths.size(); ++i) {
    const std::string& p = state.all_model_checkpoint_paths[i];
    if (Resolve(dir, p) == prefix) {
      names_this = true;
      continue;
    }
    if (!Exists(IndexFile(Resolve(dir, p)))) continue;
    kept.push_back({p, i < state.all_model_checkpoint_timestamps.size()
                           ? state.all_model_checkpoint_timestamps[i]
                           : state.last_preserved_timestamp});
  }
  auto record = [&]() {
    state.all_model_checkpoint_paths.clear();
    state.all_model_checkpoint_timestamps.clear();
    for (const auto& [p, t] : kept) {
      state.all_model_checkpoint_paths.push_back(p);
      state.all_model_checkpoint_timestamps.push_back(t);
    }
    state.model_checkpoint_path = kept.empty() ? "" : kept.back().first;
    return WriteCheckpointState(dir, state);
  };
  // A checkpoint of this name (an earlier run's, or one a killed run wrote before recording it)
  // is forgotten and its index deleted before it is overwritten.
  if (names_this || Resolve(dir, state.model_checkpoint_path) == prefix) {
    TF_RETURN_IF_ERROR(record());
  }
  TF_RETURN_IF_ERROR(DeleteCheckpoint(prefix));
  TF_RETURN_IF_ERROR(run_->state->SaveCheckpoint(prefix));
  // As CheckpointManager: recorded with the new one first, then the oldest beyond keep deleted,
  // then recorded without them.
  kept.push_back({relative, now});
  TF_RETURN_IF_ERROR(record());
  if (static_cast<int64_t>(kept.size()) > keep_) {
    const size_t drop = kept.size() - keep_;
    for (size_t i = 0; i < drop; ++i) {
      TF_RETURN_IF_ERROR(DeleteCheckpoint(Resolve(dir, kept[i].first)));
    }
    kept.erase(kept.begin(), kept.begin() + drop);
    TF_RETURN_IF_ERROR(record());
  }
  run_->Say(absl::StrCat("checkpoint ", prefix, " written"));
  return absl::OkStatus();
}

class Resume : public Callback {
 public:
  Resume(std::shared_ptr<CheckpointRun> run, std::string resume)
      : run_(std::move(run)), resume_(std::move(resume)) {}
  absl::Status OnRestore(int64_t* initial_epoch) override;

 private:
  std::shared_ptr<CheckpointRun> run_;
  std::string resume_;  // a checkpoint prefix, or auto
};

absl::Status Resume::OnRestore(int64_t* initial_epoch) {
  CheckpointRun& run = *run_;
  std::string prefix;
  if (resume_ == "auto") {
    auto latest = LatestCheckpoint(run.dir);
    if (!latest.ok()) return Annotate(latest.status(), "--resume=auto");
    if (latest->empty()) {
      run.Say(absl::StrCat("--resume=auto: no checkpoint in ", run.dir, " yet; starting at epoch 1"));
      return absl::OkStatus();
    }
    prefix = *latest;
  } else {
    prefix = resume_;
    if (!Exists(IndexFile(prefix))) {
      return absl::InvalidArgumentError(absl::StrCat("--resume=", resume_, ": no checkpoint there (",
                                                     IndexFile(prefix), " not found)"));
    }
  }
  TF_RETURN_IF_ERROR(
      Annotate(run.state->RestoreCheckpoint(prefix), absl::StrCat("--resume=", resume_)));
  // The epoch it ends: NAME-<epoch>, or NAME-best's recorded epoch.
  int64_t epoch = EpochOf(prefix).value_or(0);
  const std::string best = run.name.empty() ? "" : run.Best();
  auto best_state = run.name.empty() ? absl::StatusOr<BestState>(absl::NotFoundError(""))
                                     : ReadBestState(absl::StrCat(best, kBestState));
  if (!best.empty() && io::CleanPath(prefix) == io::CleanPath(best) && best_state.ok()) {
    epoch = best_state->epoch;
  }
  if (run.save_best && best_state.ok() && best_state->monitor == run.save_best->name()) {
    run.best_value = best_state->value;
  }
  run.Say(absl::StrCat(
      "resumed from ", prefix, ": ", epoch, " epoch", epoch == 1 ? "" : "s",
      " done, the optimizer's state restored",
      run.best_value
          ? absl::StrCat("; best ", run.save_best->name(), " so far ", Short(*run.best_value))
          : ""));
  *initial_epoch = epoch;
  return absl::OkStatus();
}

// The value of `monitor` in an epoch's logs; `flag` names the option in the error.
absl::StatusOr<double> MonitorValue(const Monitor& monitor, const char* flag, int64_t epoch,
                                    const Logs& logs) {
  const double* v = FindLog(logs, monitor.name());
  if (v == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": epoch ", epoch + 1,
                                                   "'s logs have no '", monitor.name(),
                                                   "'; they have: ", Keys(logs)));
  }
  return *v;
}

class SaveBest : public Callback {
 public:
  explicit SaveBest(std::shared_ptr<CheckpointRun> run) : run_(std::move(run)) {}
  absl::Status OnEpochEnd(int64_t epoch, const Logs& logs, bool* stop) override;

 private:
  absl::Status WriteBest(int64_t epochs_done, double value);
  std::shared_ptr<CheckpointRun> run_;
};

absl::Status SaveBest::WriteBest(int64_t epochs_done, double value) {
  Env* env = Env::Default();
  const std::string best = run_->Best();
  const std::string tmp = io::JoinPath(run_->dir, run_->name + kBestTmp);
  const std::string tmp_state = absl::StrCat(tmp, kBestState);
  // NAME-best-tmp, complete: its .state, then the checkpoint (whose index comes last).
  TF_RETURN_IF_ERROR(DeleteCheckpoint(tmp));
  TF_RETURN_IF_ERROR(
      AtomicWrite(tmp_state, BestStateText({run_->save_best->name(), value, epochs_done})));
  TF_RETURN_IF_ERROR(run_->state->SaveCheckpoint(tmp));
  // The swap: no NAME-best from the index's deletion to the last rename.
  TF_RETURN_IF_ERROR(DeleteCheckpoint(best));
  for (const auto& f : FilesStarting(tmp, ".data-")) {
    TF_RETURN_IF_ERROR(env->RenameFile(f, absl::StrCat(best, f.substr(tmp.size()))));
  }
  TF_RETURN_IF_ERROR(env->RenameFile(tmp_state, absl::StrCat(best, kBestState)));
  TF_RETURN_IF_ERROR(env->RenameFile(IndexFile(tmp), IndexFile(best)));
  return absl::OkStatus();
}

absl::Status SaveBest::OnEpochEnd(int64_t epoch, const Logs& logs, bool* stop) {
  CheckpointRun& run = *run_;
  const Monitor& monitor = *run.save_best;
  TF_ASSIGN_OR_RETURN(double current, MonitorValue(monitor, "save_best", epoch, logs));
  if (!monitor.IsImprovement(current, run.best_value)) {
    run.Say(absl::StrCat("epoch ", epoch + 1, ": ", monitor.name(), " did not improve from ",
                         Short(*run.best_value)));
    return absl::OkStatus();
  }
  TF_RETURN_IF_ERROR(
      Annotate(WriteBest(epoch + 1, current), absl::StrCat("--save_best=", monitor.name())));
  run.Say(absl::StrCat("epoch ", epoch + 1, ": ", monitor.name(),
                       run.best_value ? absl::StrCat(" improved from ", Short(*run.best_value), " to ")
                                      : std::string(" "),
                       Short(current), ", ", run.Best(), " written"));
  run.best_value = current;
  return absl::OkStatus();
}

class EarlyStoppingCallback : public Callback {
 public:
  EarlyStoppingCallback(std::shared_ptr<CheckpointRun> run, EarlyStopping decisions,
                        bool restore_best_weights)
      : run_(std::move(run)),
        decisions_(std::move(decisions)),
        restore_best_weights_(restore_best_weights) {}
  ~EarlyStoppingCallback() override {
    if (!snapshot_dir_.empty()) {
      int64_t files = 0, dirs = 0;
      Env::Default()->DeleteRecursively(snapshot_dir_, &files, &dirs).IgnoreError();
    }
  }
  absl::Status OnEpochEnd(int64_t epoch, const Logs& logs, bool* stop) override;
  // With restore_best_weights, the best epoch's weights are set, as Keras's
  // EarlyStopping.on_train_end does.
  absl::Status OnTrainEnd() override;

 private:
  absl::StatusOr<std::string> SnapshotPrefix();

  std::shared_ptr<CheckpointRun> run_;
  EarlyStopping decisions_;
  bool restore_best_weights_;
  std::string snapshot_dir_;  // restore_best_weights' copy of the best weights
};

absl::StatusOr<std::string> EarlyStoppingCallback::SnapshotPrefix() {
  if (snapshot_dir_.empty()) {
    std::string dir;
    if (!Env::Default()->LocalTempFilename(&dir)) {
      return absl::InternalError(
          "--restore_best_weights: no temporary directory for the best weights");
    }
    TF_RETURN_IF_ERROR(Env::Default()->RecursivelyCreateDir(dir));
    snapshot_dir_ = dir;
  }
  return io::JoinPath(snapshot_dir_, "best");
}

absl::Status EarlyStoppingCallback::OnEpochEnd(int64_t epoch, const Logs& logs, bool* stop) {
  TF_ASSIGN_OR_RETURN(double current,
                      MonitorValue(decisions_.monitor(), "early_stopping", epoch, logs));
  const EarlyStopping::Decision d = decisions_.OnEpochEnd(epoch, current);
  if (d.snapshot && restore_best_weights_) {
    TF_ASSIGN_OR_RETURN(std::string prefix, SnapshotPrefix());
    TF_RETURN_IF_ERROR(Annotate(run_->state->SaveWeights(prefix), "--restore_best_weights"));
  }
  if (d.stop) {
    const EarlyStopping& es = decisions_;
    run_->Say(absl::StrCat("epoch ", epoch + 1, ": early stopping: ", es.monitor().name(),
                           " has not improved on ", Short(*es.best()), " (epoch ",
                           es.best_epoch() + 1, ") for ", es.wait(), " epoch",
                           es.wait() == 1 ? "" : "s"));
    *stop = true;
  }
  return absl::OkStatus();
}

absl::Status EarlyStoppingCallback::OnTrainEnd() {
  if (!restore_best_weights_ || !decisions_.has_snapshot()) return absl::OkStatus();
  TF_ASSIGN_OR_RETURN(std::string prefix, SnapshotPrefix());
  TF_RETURN_IF_ERROR(Annotate(run_->state->RestoreWeights(prefix), "--restore_best_weights"));
  run_->Say(absl::StrCat("restored the weights of the best epoch, ", decisions_.best_epoch() + 1,
                         " (", decisions_.monitor().name(), " ", Short(*decisions_.best()), ")"));
  return absl::OkStatus();
}

std::string FlagText(const char* name, const std::string& value) {
  return absl::StrCat("--", name, "=", value);
}

// A monitor must be a key of every epoch's logs.
absl::Status CheckLogged(const std::vector<std::string>& log_names, const std::string& monitor,
                         const std::string& flag) {
  if (std::find(log_names.begin(), log_names.end(), monitor) != log_names.end()) {
    return absl::OkStatus();
  }
  const bool has_validation =
      std::any_of(log_names.begin(), log_names.end(),
                  [](const std::string& n) { return absl::StartsWith(n, "val_"); });
  return absl::InvalidArgumentError(absl::StrCat(
      flag, ": the logs have no '", monitor, "'",
      absl::StartsWith(monitor, "val_") && !has_validation ? " (val_ values need --validation)"
                                                           : "",
      "; they have: ", absl::StrJoin(log_names, ", ")));
}

// --checkpoint=DIR/NAME into run->dir and run->name.
absl::Status ParseCheckpointFlag(const std::string& checkpoint, CheckpointRun* run) {
  const std::string f = FlagText("checkpoint", checkpoint);
  run->name = std::string(io::Basename(checkpoint));
  run->dir = std::string(io::Dirname(checkpoint));
  if (run->dir.empty()) run->dir = ".";
  if (run->name.empty() || run->name == "." || run->name == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat(f, ": expected DIR/NAME (checkpoints are written as DIR/NAME-<epoch>)"));
  }
  if (run->name == kStateFile) {
    return absl::InvalidArgumentError(
        absl::StrCat(f, ": NAME 'checkpoint' is the state file's name in DIR; choose another"));
  }
  return absl::OkStatus();
}

// --early_stopping=MONITOR:PATIENCE[:MIN_DELTA].
absl::StatusOr<EarlyStopping> ParseEarlyStopping(const std::string& text,
                                                 const std::vector<std::string>& log_names) {
  const std::string f = FlagText("early_stopping", text);
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  int64_t patience = -1;
  double min_delta = 0;
  if (parts.size() < 2 || parts.size() > 3 || parts[0].empty()) {
    return absl::InvalidArgumentError(absl::StrCat(f, ": expected MONITOR:PATIENCE[:MIN_DELTA]"));
  }
  if (!absl::SimpleAtoi(parts[1], &patience) || patience < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(f, ": PATIENCE '", parts[1], "' is not a whole number >= 0"));
  }
  if (parts.size() == 3 && (!absl::SimpleAtod(parts[2], &min_delta) || !std::isfinite(min_delta))) {
    return absl::InvalidArgumentError(absl::StrCat(f, ": MIN_DELTA '", parts[2], "' is not a number"));
  }
  TF_ASSIGN_OR_RETURN(Monitor m, Monitor::Create(parts[0], min_delta, f));
  TF_RETURN_IF_ERROR(CheckLogged(log_names, parts[0], f));
  return EarlyStopping(std::move(m), patience);
}

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<Callback>>> CheckpointCallbacks(
    const FitOptions& o, std::shared_ptr<TrainingState> state,
    const std::vector<std::string>& log_names, std::function<void(const std::string&)> message) {
  auto run = std::make_shared<CheckpointRun>();
  run->state = std::move(state);
  run->message = std::move(message);
  if (!o.checkpoint.empty()) TF_RETURN_IF_ERROR(ParseCheckpointFlag(o.checkpoint, run.get()));
  if (o.keep_checkpoints < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        FlagText("keep_checkpoints", absl::StrCat(o.keep_checkpoints)), ": must be at least 1"));
  }
  if (o.resume == "auto" && run->name.empty()) {
    return absl::InvalidArgumentError(
        "--resume=auto: needs --checkpoint=DIR/NAME (it resumes from the latest checkpoint in DIR)");
  }
  std::optional<EarlyStopping> early_stopping;
  if (!o.early_stopping.empty()) {
    TF_ASSIGN_OR_RETURN(early_stopping, ParseEarlyStopping(o.early_stopping, log_names));
  }
  if (o.restore_best_weights && !early_stopping) {
    return absl::InvalidArgumentError(
        "--restore_best_weights: needs --early_stopping=MONITOR:PATIENCE (the best epoch is the "
        "monitor's)");
  }
  if (!o.save_best.empty()) {
    const std::string f = FlagText("save_best", o.save_best);
    if (run->name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(f, ": needs --checkpoint=DIR/NAME (it writes DIR/NAME-best)"));
    }
    if (absl::StrContains(o.save_best, ':')) {
      return absl::InvalidArgumentError(
          absl::StrCat(f, ": expected a monitor name (loss, val_loss, a metric)"));
    }
    TF_ASSIGN_OR_RETURN(Monitor m, Monitor::Create(o.save_best, 0, f));
    TF_RETURN_IF_ERROR(CheckLogged(log_names, o.save_best, f));
    run->save_best = std::move(m);
  }
  std::vector<std::unique_ptr<Callback>> callbacks;
  if (!run->name.empty()) {
    callbacks.push_back(std::make_unique<ModelCheckpoint>(run, o.keep_checkpoints));
  }
  if (!o.resume.empty()) callbacks.push_back(std::make_unique<Resume>(run, o.resume));
  if (run->save_best) callbacks.push_back(std::make_unique<SaveBest>(run));
  if (early_stopping) {
    callbacks.push_back(std::make_unique<EarlyStoppingCallback>(run, std::move(*early_stopping),
                                                                o.restore_best_weights));
  }
  return callbacks;
}

}  // namespace tensorflow::tf_ext::train
