// The checkpoint and stopping callbacks (CheckpointCallbacks, tf_ext/train/loop/callbacks.h) as
// train::Fit runs them, in a CallbackList (callback.h), without a model: a stand-in TrainingState writes
// real checkpoint bundles of one weight and an iteration count, so the files, the state file
// and the resumed values can be read back. Checked against hand-derived sequences: Keras's
// EarlyStopping (patience, min_delta and its sign, mode 'auto', restore_best_weights with and
// without stopping) and ModelCheckpoint(save_best_only=True); the CheckpointState text Python
// reads; keeping the last N; resuming; and the directory a run killed at each step of a write
// leaves (partial checkpoints, an interrupted NAME-best swap), which the next run cleans up.
// Flag errors name the flag and its value.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/env.h"
#include "tensorflow/core/platform/path.h"
#include "tensorflow/core/util/tensor_bundle/tensor_bundle.h"
#include "tf_ext/train/loop/callbacks.h"

#define EXPECT_STATUS_OK(expr)           \
  do {                                    \
    const absl::Status status_ = (expr);  \
    EXPECT_TRUE(status_.ok()) << status_; \
  } while (0)

namespace tensorflow::tf_ext::train {
namespace {

// A model of one weight with an optimizer of one iteration count.
class FakeState : public TrainingState {
 public:
  float weight = 0;
  int64_t iterations = 0;
  int restores = 0;

  absl::Status SaveCheckpoint(const std::string& prefix) override {
    BundleWriter writer(Env::Default(), prefix);
    TF_RETURN_IF_ERROR(writer.Add("w", Scalar(weight)));
    Tensor it(DT_INT64, TensorShape({}));
    it.scalar<int64_t>()() = iterations;
    TF_RETURN_IF_ERROR(writer.Add("iterations", it));
    return writer.Finish();
  }
  absl::Status RestoreCheckpoint(const std::string& prefix) override {
    BundleReader reader(Env::Default(), prefix);
    TF_RETURN_IF_ERROR(reader.status());
    Tensor w, it;
    TF_RETURN_IF_ERROR(reader.Lookup("w", &w));
    TF_RETURN_IF_ERROR(reader.Lookup("iterations", &it));
    weight = w.scalar<float>()();
    iterations = it.scalar<int64_t>()();
    ++restores;
    return absl::OkStatus();
  }
  absl::Status SaveWeights(const std::string& prefix) override {
    BundleWriter writer(Env::Default(), prefix);
    TF_RETURN_IF_ERROR(writer.Add("w", Scalar(weight)));
    return writer.Finish();
  }
  absl::Status RestoreWeights(const std::string& prefix) override {
    BundleReader reader(Env::Default(), prefix);
    TF_RETURN_IF_ERROR(reader.status());
    Tensor w;
    TF_RETURN_IF_ERROR(reader.Lookup("w", &w));
    weight = w.scalar<float>()();
    return absl::OkStatus();
  }

 private:
  static Tensor Scalar(float v) {
    Tensor t(DT_FLOAT, TensorShape({}));
    t.scalar<float>()() = v;
    return t;
  }
};

// The weight a checkpoint holds.
float WeightAt(const std::string& prefix) {
  BundleReader reader(Env::Default(), prefix);
  EXPECT_TRUE(reader.status().ok()) << prefix << ": " << reader.status();
  Tensor w;
  if (!reader.Lookup("w", &w).ok()) return std::nanf("");
  return w.scalar<float>()();
}

std::string NewDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = io::JoinPath(tmp ? tmp : "/tmp", absl::StrCat("fit_callbacks_", name));
  int64_t files = 0, dirs = 0;
  Env::Default()->DeleteRecursively(dir, &files, &dirs).IgnoreError();
  EXPECT_TRUE(Env::Default()->RecursivelyCreateDir(dir).ok());
  return dir;
}

std::vector<std::string> Children(const std::string& dir) {
  std::vector<std::string> c;
  EXPECT_TRUE(Env::Default()->GetChildren(dir, &c).ok());
  std::sort(c.begin(), c.end());
  return c;
}

const std::vector<std::string> kLogNames = {"loss", "mae", "val_loss", "val_mae"};

// The callbacks as Fit calls them: OnRestore then OnTrainBegin (the epoch training starts at),
// OnEpochEnd (whether to stop), OnTrainEnd.
class Callbacks {
 public:
  explicit Callbacks(std::vector<std::unique_ptr<Callback>> callbacks) {
    for (auto& c : callbacks) list_.Add(std::move(c));
  }
  absl::StatusOr<int64_t> OnTrainBegin() {
    int64_t initial_epoch = 0;
    TF_RETURN_IF_ERROR(list_.OnRestore(&initial_epoch));
    TF_RETURN_IF_ERROR(list_.OnTrainBegin(initial_epoch));
    return initial_epoch;
  }
  absl::StatusOr<bool> OnEpochEnd(int64_t epoch, const Logs& logs) {
    bool stop = false;
    TF_RETURN_IF_ERROR(list_.OnEpochEnd(epoch, logs, &stop));
    return stop;
  }
  absl::Status OnTrainEnd() { return list_.OnTrainEnd(); }

 private:
  CallbackList list_;
};

struct Run {
  FakeState* state = nullptr;
  std::unique_ptr<Callbacks> callbacks;
  std::vector<std::string> messages;
};

std::unique_ptr<Run> Start(const FitOptions& options,
                           const std::vector<std::string>& log_names = kLogNames) {
  auto run = std::make_unique<Run>();
  auto state = std::make_shared<FakeState>();
  run->state = state.get();
  Run* r = run.get();
  auto c = CheckpointCallbacks(options, std::move(state), log_names,
                               [r](const std::string& m) { r->messages.push_back(m); });
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return nullptr;
  run->callbacks = std::make_unique<Callbacks>(std::move(*c));
  return run;
}

Logs LogsOf(double loss, double val_loss = 0) {
  return {{"loss", loss}, {"mae", loss}, {"val_loss", val_loss}, {"val_mae", val_loss}};
}

// Runs epochs [from, from + losses.size()) with the weight set to 10 * (epoch + 1) and the
// iteration count to 3 * (epoch + 1) before each epoch's end; returns the epochs run until stop.
int64_t Train(Run* run, int64_t from, const std::vector<double>& losses) {
  int64_t epoch = from;
  for (double loss : losses) {
    run->state->weight = 10.0f * (epoch + 1);
    run->state->iterations = 3 * (epoch + 1);
    auto stop = run->callbacks->OnEpochEnd(epoch, LogsOf(loss, loss));
    EXPECT_TRUE(stop.ok()) << stop.status();
    ++epoch;
    if (!stop.ok() || *stop) break;
  }
  return epoch - from;
}

// --- Keras's MonitorCallback and EarlyStopping -------------------------------------------

TEST(MonitorTest, ModeAutoAsKeras) {
  for (const char* falls : {"loss", "val_loss", "mae", "val_mse", "binary_crossentropy", "hinge"}) {
    auto m = Monitor::Create(falls, 0, "--x");
    ASSERT_TRUE(m.ok()) << falls;
    EXPECT_FALSE(m->rises()) << falls;
  }
  for (const char* rises : {"accuracy", "val_accuracy", "acc", "auc", "val_auc", "precision", "recall",
                            "sparse_categorical_accuracy", "f1_score", "r2_score"}) {
    auto m = Monitor::Create(rises, 0, "--x");
    ASSERT_TRUE(m.ok()) << rises;
    EXPECT_TRUE(m->rises()) << rises;
  }
  // Keras cannot tell either (no _direction): refused, naming the flag
  auto m = Monitor::Create("val_true_positives", 0, "--early_stopping=val_true_positives:1");
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(absl::StrContains(m.status().message(), "--early_stopping=val_true_positives:1"));
  EXPECT_TRUE(absl::StrContains(m.status().message(), "fall or rise"));
}

TEST(MonitorTest, MinDeltaIsAbsoluteAndAgainstTheDirection) {
  auto falling = *Monitor::Create("loss", -0.1, "--x");  // Keras: abs(min_delta)
  EXPECT_TRUE(falling.IsImprovement(5, std::nullopt));
  EXPECT_TRUE(falling.IsImprovement(std::nan(""), std::nullopt));
  EXPECT_TRUE(falling.IsImprovement(0.85, 1.0));    // 0.85 + 0.1 < 1
  EXPECT_FALSE(falling.IsImprovement(0.9, 1.0));    // 1.0 < 1.0: no
  EXPECT_FALSE(falling.IsImprovement(0.95, 1.0));
  EXPECT_FALSE(falling.IsImprovement(std::nan(""), 1.0));
  auto rising = *Monitor::Create("val_accuracy", 0.1, "--x");
  EXPECT_TRUE(rising.IsImprovement(0.75, 0.6));     // 0.75 - 0.1 > 0.6
  EXPECT_FALSE(rising.IsImprovement(0.65, 0.6));
  auto strict = *Monitor::Create("loss", 0, "--x");
  EXPECT_FALSE(strict.IsImprovement(1.0, 1.0));     // equal is no improvement
  EXPECT_TRUE(strict.IsImprovement(0.999, 1.0));
}

// The epoch (from 0) EarlyStopping stops at, -1 when it never does, and its best epoch.
std::pair<int64_t, int64_t> StopEpoch(const std::string& monitor, int64_t patience, double min_delta,
                                      const std::vector<double>& values, int64_t first_epoch = 0) {
  EarlyStopping es(*Monitor::Create(monitor, min_delta, "--x"), patience);
  for (size_t i = 0; i < values.size(); ++i) {
    if (es.OnEpochEnd(first_epoch + i, values[i]).stop) return {first_epoch + i, es.best_epoch()};
  }
  return {-1, es.best_epoch()};
}

TEST(EarlyStoppingTest, PatienceAsKeras) {
  // wait: 0, 0, 1, 2 -> stops at epoch 3 (patience 2); best epoch 1
  EXPECT_EQ(StopEpoch("loss", 2, 0, {1.0, 0.9, 0.95, 0.91, 0.5}), std::make_pair(int64_t{3}, int64_t{1}));
  // an improvement resets the wait: 1.0, 0.99 (better), 1.0, 0.98 (better), 1, 1 -> epoch 5
  EXPECT_EQ(StopEpoch("loss", 2, 0, {1.0, 0.99, 1.0, 0.98, 1.0, 1.0}).first, 5);
  // patience 0: the first epoch without improvement stops
  EXPECT_EQ(StopEpoch("loss", 0, 0, {1.0, 0.5, 0.5}).first, 2);
  // never worse: never stops; best is the last
  EXPECT_EQ(StopEpoch("loss", 1, 0, {3, 2, 1}), std::make_pair(int64_t{-1}, int64_t{2}));
  // a rising metric
  EXPECT_EQ(StopEpoch("val_accuracy", 2, 0, {0.5, 0.6, 0.6, 0.55}).first, 3);
  // min_delta: 0.95 is not 0.1 better than 1.0, so patience 1 stops at epoch 1
  EXPECT_EQ(StopEpoch("loss", 1, 0.1, {1.0, 0.95, 0.5}).first, 1);
  EXPECT_EQ(StopEpoch("loss", 1, -0.1, {1.0, 0.95, 0.5}).first, 1);
  EXPECT_EQ(StopEpoch("loss", 1, 0.1, {1.0, 0.85, 0.7}).first, -1);
  // a resumed run (epochs numbered from 3) counts its patience from there
  EXPECT_EQ(StopEpoch("loss", 1, 0, {1.0, 1.0}, 3).first, 4);
  // NaN first: it is the best (no reference); nothing improves on NaN after
  EXPECT_EQ(StopEpoch("loss", 1, 0, {std::nan(""), 0.1}).first, 1);
}

// --- The state file ------------------------------------------------------------------------

TEST(CheckpointStateTest, TextAsCheckpointManagerWritesIt) {
  CheckpointState s;
  s.model_checkpoint_path = "ckpt-3";
  s.all_model_checkpoint_paths = {"ckpt-2", "ckpt-3"};
  s.all_model_checkpoint_timestamps = {1700000000.5, 1700000001.25};
  s.last_preserved_timestamp = 1699999999;
  EXPECT_EQ(CheckpointStateText(s),
            "model_checkpoint_path: \"ckpt-3\"\n"
            "all_model_checkpoint_paths: \"ckpt-2\"\n"
            "all_model_checkpoint_paths: \"ckpt-3\"\n"
            "all_model_checkpoint_timestamps: 1700000000.5\n"
            "all_model_checkpoint_timestamps: 1700000001.25\n"
            "last_preserved_timestamp: 1699999999\n");
  // what Python's text_format writes (tf.train.CheckpointManager, 2 kept)
  auto parsed = ParseCheckpointState(
      "model_checkpoint_path: \"a\\\"b-2\"\nall_model_checkpoint_paths: \"ckpt-1\"\n"
      "all_model_checkpoint_paths: \"a\\\"b-2\"\nall_model_checkpoint_timestamps: 1795747482.577171\n"
      "all_model_checkpoint_timestamps: 1795747483.1\nlast_preserved_timestamp: 1795747480.0\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->model_checkpoint_path, "a\"b-2");
  EXPECT_EQ(parsed->all_model_checkpoint_paths, (std::vector<std::string>{"ckpt-1", "a\"b-2"}));
  EXPECT_DOUBLE_EQ(parsed->all_model_checkpoint_timestamps[0], 1795747482.577171);
  auto again = ParseCheckpointState(CheckpointStateText(*parsed));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(CheckpointStateText(*again), CheckpointStateText(*parsed));
  EXPECT_FALSE(ParseCheckpointState("model_checkpoint_path \"x\"").ok());
  EXPECT_FALSE(ParseCheckpointState("no_such_field: 1").ok());
}

TEST(LatestCheckpointTest, OnlyWhatTheStateNamesAndExists) {
  const std::string dir = NewDir("latest");
  auto latest = LatestCheckpoint(dir);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, "");  // no state file
  FakeState fake;
  EXPECT_STATUS_OK(fake.SaveCheckpoint(io::JoinPath(dir, "ckpt-1")));
  EXPECT_EQ(*LatestCheckpoint(dir), "");  // written, not yet recorded
  CheckpointState s;
  s.model_checkpoint_path = "ckpt-1";
  s.all_model_checkpoint_paths = {"ckpt-1"};
  s.all_model_checkpoint_timestamps = {1};
  EXPECT_STATUS_OK(WriteCheckpointState(dir, s));
  EXPECT_EQ(*LatestCheckpoint(dir), io::JoinPath(dir, "ckpt-1"));
  // a partial epoch-2 checkpoint (data written, no index), as a run killed mid-write leaves
  EXPECT_STATUS_OK(WriteStringToFile(Env::Default(), io::JoinPath(dir, "ckpt-2.data-00000-of-00001"), "x"));
  EXPECT_STATUS_OK(WriteStringToFile(Env::Default(), io::JoinPath(dir, "ckpt-2.index.tempstate123"), "x"));
  EXPECT_EQ(*LatestCheckpoint(dir), io::JoinPath(dir, "ckpt-1"));
  // the state naming a checkpoint whose index is gone: none, as Python's latest_checkpoint
  s.model_checkpoint_path = "ckpt-2";
  EXPECT_STATUS_OK(WriteCheckpointState(dir, s));
  EXPECT_EQ(*LatestCheckpoint(dir), "");
  // an absolute path is taken as it is
  s.model_checkpoint_path = io::JoinPath(dir, "ckpt-1");
  EXPECT_STATUS_OK(WriteCheckpointState(dir, s));
  EXPECT_EQ(*LatestCheckpoint(dir), io::JoinPath(dir, "ckpt-1"));
  // no temporary file is left beside the state file
  for (const auto& c : Children(dir)) EXPECT_FALSE(absl::StartsWith(c, "checkpoint.tmp")) << c;
  EXPECT_STATUS_OK(WriteStringToFile(Env::Default(), io::JoinPath(dir, "checkpoint"), "garbage"));
  EXPECT_FALSE(LatestCheckpoint(dir).ok());
}

// --- Checkpoints each epoch, keep N, resume ----------------------------------------------------

TEST(CheckpointCallbacksTest, KeepsTheLastNAndRecordsThem) {
  const std::string dir = NewDir("keep");
  FitOptions o;
  o.checkpoint = io::JoinPath(dir, "model");
  o.keep_checkpoints = 2;
  auto run = Start(o);
  ASSERT_TRUE(run);
  EXPECT_EQ(*run->callbacks->OnTrainBegin(), 0);
  EXPECT_EQ(Train(run.get(), 0, {4, 3, 2, 1}), 4);
  EXPECT_STATUS_OK(run->callbacks->OnTrainEnd());
  EXPECT_EQ(Children(dir), (std::vector<std::string>{
                               "checkpoint", "model-3.data-00000-of-00001", "model-3.index",
                               "model-4.data-00000-of-00001", "model-4.index"}));
  auto state = ReadCheckpointState(dir);
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->model_checkpoint_path, "model-4");
  EXPECT_EQ(state->all_model_checkpoint_paths, (std::vector<std::string>{"model-3", "model-4"}));
  EXPECT_EQ(state->all_model_checkpoint_timestamps.size(), 2u);
  EXPECT_LE(state->all_model_checkpoint_timestamps[0], state->all_model_checkpoint_timestamps[1]);
  EXPECT_EQ(*LatestCheckpoint(dir), io::JoinPath(dir, "model-4"));
  EXPECT_EQ(WeightAt(io::JoinPath(dir, "model-3")), 30.0f);
  EXPECT_EQ(WeightAt(io::JoinPath(dir, "model-4")), 40.0f);
  // keep 1 (the default) keeps only the latest
  const std::string one = NewDir("keep_one");
  o.checkpoint = io::JoinPath(one, "m");
  o.keep_checkpoints = 1;
  run = Start(o);
  EXPECT_EQ(*run->callbacks->OnTrainBegin(), 0);
  Train(run.get(), 0, {3, 2, 1});
  EXPECT_EQ(Children(one), (std::vector<std::string>{"checkpoint", "m-3.data-00000-of-00001", "m-3.index"}));
}

TEST(CheckpointCallbacksTest, ResumeAutoContinuesAtTheLatestEpoch) {
  const std::string dir = NewDir("resume");
  FitOptions o;
  o.checkpoint = io::JoinPath(dir, "ck");
  o.resume = "auto";
  auto run = Start(o);
  EXPECT_EQ(*run->callbacks->OnTrainBegin(), 0);  // nothing yet: fresh
  EXPECT_EQ(run->state->restores, 0);
  EXPECT_TRUE(absl::StrContains(absl::StrJoin(run->messages, "\n"), "starting at epoch 1"));
  Train(run.get(), 0, {5, 4});
  run = Start(o);
  EXPECT_EQ(*run->callbacks->OnTrainBegin(), 2);
  EXPECT_EQ(run->state->restores, 1);
  EXPECT_EQ(run->state->weight, 20.0f);
  EXPECT_EQ(run->state->iterations, 6);
  EXPECT_TRUE(absl::StrContains(absl::StrJoin(run->messages, "\n"), "resumed from"));
  Train(run.get(), 2, {3});
  EXPECT_EQ(*LatestCheckpoint(dir), io::JoinPath(dir, "ck-3"));
  // --resume=PREFIX: that checkpoint, its epoch from its name
  o.resume = io::JoinPath(dir, "ck-3");
  run = Start(o);
  EXPECT_EQ(*run->callbacks->OnTrainBegin(), 3);
  EXPECT_EQ(run->state->iterations, 9);
  o.resume = io::JoinPath(dir, "ck-2");  // deleted (keep 1)
  run = Start(o);
  auto missing = run->callbacks->OnTrainBegin();
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "--resume=" + o.resume)) << missing.status();
}

TEST(CheckpointCallbacksTest, AnOlderRunsCheckpointOfTheSameEpochIsReplacedCleanly) {
  const std::string dir = NewDir("overwrite");
  FitOptions o;
  o.checkpoint = io::JoinPath(dir, "c");
  o.keep_checkpoints = 3;
  auto run = Start(o);
  ASSERT_TRUE(run->callbacks->OnTrainBegin().ok());
  Train(run.get(), 0, {3, 2, 1});
  run = Start(o);  // a fresh run (no --resume) over it
  ASSERT_TRUE(run->callbacks->OnTrainBegin().ok());
  run->state->weight = 99;
  ASSERT_TRUE(run->callbacks->OnEpochEnd(0, LogsOf(1)).ok());
  auto state = ReadCheckpointState(dir);
  EXPECT_EQ(state->all_model_checkpoint_paths, (std::vector<std::string>{"c-2", "c-3", "c-1"}));
  EXPECT_EQ(state->model_checkpoint_path, "c-1");
  EXPECT_EQ(WeightAt(io::JoinPath(dir, "c-1")), 99.0f);
}

TEST(CheckpointCallbacksTest, WhatAKilledRunLeftIsCleanedUp) {
  const std::string dir = NewDir("killed");
  FitOptions o;
  o.checkpoint = io::JoinPath(dir, "k");
  o.resume = "auto";
  auto run = Start(o);
  ASSERT_TRUE(run->callbacks->OnTrainBegin().ok());
  Train(run.get(), 0, {2});
  // killed while writing epoch 2: BundleWriter's temporary files, a data file without index, a
  // state file's temporary
  Env* env = Env::Default();
  EXPECT_STATUS_OK(WriteStringToFile(env, io::JoinPath(dir, "k-2.data-00000-of-00001.tempstate77"), "x"));
  EXPECT_STATUS_OK(WriteStringToFile(env, io::JoinPath(dir, "k-2.index.tempstate78"), "x"));
  EXPECT_STATUS_OK(WriteStringToFile(env, io::JoinPath(dir, "k-3.data-00000-of-00001"), "x"));
  EXPECT_STATUS_OK(WriteStringToFile(env, io::JoinPath(dir, "checkpoint.tmp123"), "x"));
  EXPECT_STATUS_OK(WriteStringToFile(env, io::JoinPath(dir, "other.data-00000-of-00001"), "x"));
  run = Start(o);
  EXPECT_EQ(*run->callbacks->OnTrainBegin(), 1);
  EXPECT_EQ(Children(dir), (std::vector<std::string>{"checkpoint", "k-1.data-00000-of-00001", "k-1.index",
                                                     "other.data-00000-of-00001"}));
  // killed after writing epoch 2's checkpoint, before recording it: resumes from 1, and epoch 2
  // is written again over it
  FakeState fake;
  fake.weight = -5;
  EXPECT_STATUS_OK(fake.SaveCheckpoint(io::JoinPath(dir, "k-2")));
  run = Start(o);
  EXPECT_EQ(*run->callbacks->OnTrainBegin(), 1);
  Train(run.get(), 1, {1});
  EXPECT_EQ(WeightAt(io::JoinPath(dir, "k-2")), 20.0f);
  EXPECT_EQ(*LatestCheckpoint(dir), io::JoinPath(dir, "k-2"));
}

// --- The best checkpoint -----------------------------------------------------------------------

TEST(CheckpointCallbacksTest, SaveBestAsModelCheckpointSaveBestOnly) {
  const std::string dir = NewDir("best");
  FitOptions o;
  o.checkpoint = io::JoinPath(dir, "b");
  o.save_best = "val_loss";
  auto run = Start(o);
  ASSERT_TRUE(run->callbacks->OnTrainBegin().ok());
  // improvements at epochs 1, 2, 4 (1-based); 2.0 after 2.0 is none
  Train(run.get(), 0, {3, 2, 2, 1.5, 1.6});
  const std::string best = io::JoinPath(dir, "b-best");
  EXPECT_EQ(WeightAt(best), 40.0f);
  EXPECT_TRUE(absl::StrContains(run->messages.back(), "epoch 5: val_loss did not improve from 1.5"))
      << run->messages.back();
  std::string text;
  EXPECT_STATUS_OK(ReadFileToString(Env::Default(), best + ".state", &text));
  EXPECT_EQ(text, "monitor: \"val_loss\"\nvalue: 1.5\nepoch: 4\n");
  EXPECT_EQ(Children(dir), (std::vector<std::string>{"b-5.data-00000-of-00001", "b-5.index",
                                                     "b-best.data-00000-of-00001", "b-best.index",
                                                     "b-best.state", "checkpoint"}));
  // the latest stays the last epoch's
  EXPECT_EQ(*LatestCheckpoint(dir), io::JoinPath(dir, "b-5"));
  // a resumed run compares with the best before it: 1.55 is no improvement on 1.5, 1.4 is
  o.resume = "auto";
  run = Start(o);
  EXPECT_EQ(*run->callbacks->OnTrainBegin(), 5);
  Train(run.get(), 5, {1.55});
  EXPECT_EQ(WeightAt(best), 40.0f);
  Train(run.get(), 6, {1.4});
  EXPECT_EQ(WeightAt(best), 70.0f);
  // --resume=DIR/NAME-best: its epoch is the recorded one
  o.resume = best;
  run = Start(o);
  EXPECT_EQ(*run->callbacks->OnTrainBegin(), 7);
  EXPECT_EQ(run->state->weight, 70.0f);
  // a rising metric
  const std::string acc = NewDir("best_acc");
  FitOptions a;
  a.checkpoint = io::JoinPath(acc, "a");
  a.save_best = "accuracy";
  run = Start(a, {"loss", "accuracy"});
  ASSERT_TRUE(run->callbacks->OnTrainBegin().ok());
  int64_t epoch = 0;
  for (double v : {0.5, 0.7, 0.6, 0.7}) {
    run->state->weight = 10.0f * (epoch + 1);
    ASSERT_TRUE(run->callbacks->OnEpochEnd(epoch++, {{"loss", 1}, {"accuracy", v}}).ok());
  }
  EXPECT_EQ(WeightAt(io::JoinPath(acc, "a-best")), 20.0f);
}

TEST(CheckpointCallbacksTest, AnInterruptedBestSwapIsFinishedOrAbandoned) {
  FitOptions o;
  o.save_best = "loss";
  FakeState fake;
  Env* env = Env::Default();
  // killed after NAME-best.index was deleted: the next run finishes the swap
  {
    const std::string dir = NewDir("swap_started");
    o.checkpoint = io::JoinPath(dir, "s");
    const std::string best = io::JoinPath(dir, "s-best"), tmp = io::JoinPath(dir, "s-best-tmp");
    fake.weight = 1;
    EXPECT_STATUS_OK(fake.SaveCheckpoint(best));
    EXPECT_STATUS_OK(WriteStringToFile(env, best + ".state", "monitor: \"loss\"\nvalue: 5\nepoch: 1\n"));
    fake.weight = 2;
    EXPECT_STATUS_OK(fake.SaveCheckpoint(tmp));
    EXPECT_STATUS_OK(WriteStringToFile(env, tmp + ".state", "monitor: \"loss\"\nvalue: 4\nepoch: 2\n"));
    EXPECT_STATUS_OK(env->DeleteFile(best + ".index"));
    // and after the data was renamed too
    EXPECT_STATUS_OK(env->RenameFile(tmp + ".data-00000-of-00001", best + ".data-00000-of-00001"));
    auto run = Start(o);
    ASSERT_TRUE(run->callbacks->OnTrainBegin().ok());
    EXPECT_EQ(WeightAt(best), 2.0f);
    EXPECT_EQ(Children(dir), (std::vector<std::string>{"s-best.data-00000-of-00001", "s-best.index",
                                                       "s-best.state"}));
    o.resume = best;
    run = Start(o);
    EXPECT_EQ(*run->callbacks->OnTrainBegin(), 2);
    EXPECT_TRUE(absl::StrContains(run->messages.back(), "; best loss so far 4"))
        << run->messages.back();
    o.resume.clear();
  }
  // killed before: NAME-best is the old one, the temporary is deleted
  {
    const std::string dir = NewDir("swap_unstarted");
    o.checkpoint = io::JoinPath(dir, "s");
    const std::string best = io::JoinPath(dir, "s-best"), tmp = io::JoinPath(dir, "s-best-tmp");
    fake.weight = 1;
    EXPECT_STATUS_OK(fake.SaveCheckpoint(best));
    fake.weight = 2;
    EXPECT_STATUS_OK(fake.SaveCheckpoint(tmp));
    EXPECT_STATUS_OK(WriteStringToFile(env, tmp + ".state", "x"));
    EXPECT_STATUS_OK(WriteStringToFile(env, tmp + ".data-00000-of-00001.tempstate5", "x"));
    auto run = Start(o);
    ASSERT_TRUE(run->callbacks->OnTrainBegin().ok());
    EXPECT_EQ(WeightAt(best), 1.0f);
    EXPECT_EQ(Children(dir), (std::vector<std::string>{"s-best.data-00000-of-00001", "s-best.index"}));
  }
}

// --- Early stopping and restore_best_weights ----------------------------------------------------

TEST(CheckpointCallbacksTest, EarlyStoppingRestoresTheBestWeightsAsKeras) {
  FitOptions o;
  o.early_stopping = "val_loss:2";
  o.restore_best_weights = true;
  auto run = Start(o);
  ASSERT_TRUE(run->callbacks->OnTrainBegin().ok());
  // best at epoch 2 (1-based); 3 and 4 do not improve: stops after epoch 4
  EXPECT_EQ(Train(run.get(), 0, {1.0, 0.5, 0.7, 0.8, 0.1}), 4);
  EXPECT_EQ(run->state->weight, 40.0f);
  EXPECT_STATUS_OK(run->callbacks->OnTrainEnd());
  EXPECT_EQ(run->state->weight, 20.0f);
  EXPECT_TRUE(absl::StrContains(absl::StrJoin(run->messages, "\n"), "epoch 4: early stopping")) <<
      absl::StrJoin(run->messages, "\n");
  // Keras restores the best weights when training ends without stopping too
  run = Start(o);
  ASSERT_TRUE(run->callbacks->OnTrainBegin().ok());
  EXPECT_EQ(Train(run.get(), 0, {1.0, 0.5, 0.7}), 3);
  EXPECT_STATUS_OK(run->callbacks->OnTrainEnd());
  EXPECT_EQ(run->state->weight, 20.0f);
  // without --restore_best_weights the last weights stay
  o.restore_best_weights = false;
  run = Start(o);
  ASSERT_TRUE(run->callbacks->OnTrainBegin().ok());
  EXPECT_EQ(Train(run.get(), 0, {1.0, 0.5, 0.7, 0.8}), 4);
  EXPECT_STATUS_OK(run->callbacks->OnTrainEnd());
  EXPECT_EQ(run->state->weight, 40.0f);
  // min_delta: patience 1, 0.95 is not 0.1 below 1.0
  o.early_stopping = "loss:1:0.1";
  run = Start(o);
  ASSERT_TRUE(run->callbacks->OnTrainBegin().ok());
  EXPECT_EQ(Train(run.get(), 0, {1.0, 0.95, 0.5}), 2);
}

// --- Flag errors ---------------------------------------------------------------------------------

std::string CreateError(const FitOptions& o, const std::vector<std::string>& log_names = kLogNames) {
  auto c = CheckpointCallbacks(o, std::make_shared<FakeState>(), log_names, nullptr);
  if (c.ok()) return "";
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
  return std::string(c.status().message());
}

TEST(CheckpointCallbacksTest, FlagErrorsNameTheFlagAndValue) {
  auto expect = [](FitOptions o, const std::string& part1, const std::string& part2,
                   const std::vector<std::string>& names = kLogNames) {
    const std::string e = CreateError(o, names);
    EXPECT_TRUE(absl::StrContains(e, part1) && absl::StrContains(e, part2)) << e;
  };
  FitOptions o;
  o.early_stopping = "val_loss";
  expect(o, "--early_stopping=val_loss", "MONITOR:PATIENCE");
  o.early_stopping = "val_loss:-1";
  expect(o, "--early_stopping=val_loss:-1", "PATIENCE '-1'");
  o.early_stopping = "val_loss:two";
  expect(o, "--early_stopping=val_loss:two", "PATIENCE 'two'");
  o.early_stopping = "val_loss:1:x";
  expect(o, "--early_stopping=val_loss:1:x", "MIN_DELTA 'x'");
  o.early_stopping = "val_loss:1:0:9";
  expect(o, "--early_stopping=val_loss:1:0:9", "MONITOR:PATIENCE");
  o.early_stopping = ":1";
  expect(o, "--early_stopping=:1", "MONITOR:PATIENCE");
  // a monitor not in the logs: refused before training, listing the keys
  o.early_stopping = "val_loss:1";
  expect(o, "--early_stopping=val_loss:1", "need --validation", {"loss", "mae"});
  expect(o, "no 'val_loss'", "they have: loss, mae", {"loss", "mae"});
  o.early_stopping = "val_accuracy:1";
  expect(o, "--early_stopping=val_accuracy:1", "they have: loss, mae, val_loss, val_mae");
  o.early_stopping.clear();
  o.restore_best_weights = true;
  expect(o, "--restore_best_weights", "--early_stopping");
  o.restore_best_weights = false;
  o.resume = "auto";
  expect(o, "--resume=auto", "--checkpoint");
  o.resume.clear();
  o.save_best = "val_loss";
  expect(o, "--save_best=val_loss", "--checkpoint");
  o.checkpoint = "/tmp/x/ck";
  o.save_best = "val_auc";
  expect(o, "--save_best=val_auc", "no 'val_auc'");
  o.save_best = "val_true_negatives";
  expect(o, "--save_best=val_true_negatives", "fall or rise");
  o.save_best.clear();
  o.keep_checkpoints = 0;
  expect(o, "--keep_checkpoints=0", "at least 1");
  o.keep_checkpoints = 1;
  o.checkpoint = "/tmp/x/";
  expect(o, "--checkpoint=/tmp/x/", "DIR/NAME");
  o.checkpoint = "/tmp/x/ck";
  EXPECT_EQ(CreateError(o), "");
}

}  // namespace
}  // namespace tensorflow::tf_ext::train
