// TensorBoardLogger (tf_ext/train/loop/summary.h): the event files read back record by record
// (io::RecordReader, Event protos): the directories, tags, steps and float32 values Keras's
// TensorBoard callback writes, each with the "scalars" plugin metadata tf.summary.scalar
// attaches; update_freq parsing and errors; the files flushed at each epoch's end; two loggers
// side by side. Also LearningRateAt (tf_ext/train/model/optimizers.h) against Keras's schedules.
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/summary.pb.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/lib/io/record_reader.h"
#include "tensorflow/core/platform/env.h"
#include "tensorflow/core/platform/path.h"
#include "tensorflow/core/util/event.pb.h"
#include "tf_ext/train/loop/summary.h"
#include "tf_ext/train/model/optimizers.h"

#define EXPECT_STATUS_OK(expr)            \
  do {                                     \
    const absl::Status status_ = (expr);   \
    EXPECT_TRUE(status_.ok()) << status_;  \
  } while (0)
#define ASSERT_STATUS_OK(expr)            \
  do {                                     \
    const absl::Status status_ = (expr);   \
    ASSERT_TRUE(status_.ok()) << status_;  \
  } while (0)

namespace tensorflow::tf_ext::train {
namespace {

// One scalar as the event file holds it.
struct Scalar {
  std::string tag;
  int64_t step = 0;
  float value = 0;
};

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = io::JoinPath(tmp != nullptr ? tmp : "/tmp", name);
  int64_t undeleted_files = 0, undeleted_dirs = 0;
  Env::Default()->DeleteRecursively(dir, &undeleted_files, &undeleted_dirs).IgnoreError();
  return dir;
}

// The event files in `dir` (none when it does not exist).
std::vector<std::string> EventFiles(const std::string& dir) {
  std::vector<std::string> children, files;
  if (!Env::Default()->GetChildren(dir, &children).ok()) return files;
  for (const std::string& c : children) {
    if (c.rfind("events.out.tfevents.", 0) == 0) files.push_back(io::JoinPath(dir, c));
  }
  return files;
}

// The scalars of the only event file in `dir`, in file order; checks the file's header, that
// each value is a float32 scalar tensor with tf.summary.scalar's metadata, and its name.
std::vector<Scalar> ReadScalars(const std::string& dir) {
  std::vector<Scalar> out;
  const std::vector<std::string> files = EventFiles(dir);
  EXPECT_EQ(files.size(), 1u) << dir;
  if (files.size() != 1) return out;
  EXPECT_TRUE(absl::EndsWith(files[0], ".v2")) << files[0];
  std::unique_ptr<RandomAccessFile> file;
  const absl::Status opened = Env::Default()->NewRandomAccessFile(files[0], &file);
  EXPECT_TRUE(opened.ok()) << opened;
  if (!opened.ok()) return out;
  io::RecordReader reader(file.get());
  uint64_t offset = 0;
  tstring record;
  bool first = true;
  while (reader.ReadRecord(&offset, &record).ok()) {
    Event event;
    EXPECT_TRUE(event.ParseFromString(std::string(record)));
    if (first) {
      EXPECT_EQ(event.file_version(), "brain.Event:2");
      first = false;
      continue;
    }
    EXPECT_GT(event.wall_time(), 0);
    for (const Summary::Value& v : event.summary().value()) {
      EXPECT_EQ(v.value_case(), Summary::Value::kTensor) << v.tag() << ": not a tensor summary";
      EXPECT_EQ(v.metadata().plugin_data().plugin_name(), "scalars") << v.tag();
      EXPECT_EQ(v.metadata().plugin_data().content(), "") << v.tag();
      EXPECT_EQ(v.metadata().display_name(), "") << v.tag();
      Tensor t;
      EXPECT_TRUE(t.FromProto(v.tensor())) << v.tag();
      EXPECT_EQ(t.dtype(), DT_FLOAT) << v.tag();
      EXPECT_EQ(t.dims(), 0) << v.tag();
      if (t.dtype() != DT_FLOAT || t.NumElements() != 1) continue;
      out.push_back({v.tag(), event.step(), t.scalar<float>()()});
    }
  }
  EXPECT_FALSE(first) << files[0] << " is empty";
  return out;
}

std::string Show(const std::vector<Scalar>& scalars) {
  std::string s;
  for (const Scalar& x : scalars) absl::StrAppend(&s, x.tag, "@", x.step, "=", x.value, " ");
  return s;
}

void ExpectScalars(const std::vector<Scalar>& got, const std::vector<Scalar>& want) {
  ASSERT_EQ(got.size(), want.size()) << "got " << Show(got) << "\nwant " << Show(want);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].tag, want[i].tag) << i;
    EXPECT_EQ(got[i].step, want[i].step) << got[i].tag;
    EXPECT_FLOAT_EQ(got[i].value, want[i].value) << got[i].tag;
  }
}

TEST(FitSummaryTest, UpdateFreq) {
  EXPECT_EQ(*ParseUpdateFreq("epoch"), 0);
  EXPECT_EQ(*ParseUpdateFreq("batch"), 1);
  EXPECT_EQ(*ParseUpdateFreq("1"), 1);
  EXPECT_EQ(*ParseUpdateFreq("25"), 25);
  for (const std::string bad : {"", "0", "-3", "2.5", "2x", "epochs", " 4", "99999999999999999999"}) {
    absl::StatusOr<int64_t> n = ParseUpdateFreq(bad);
    ASSERT_FALSE(n.ok()) << "'" << bad << "'";
    EXPECT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(n.status().message().find("'" + bad + "'"), std::string::npos) << n.status();
  }
  absl::StatusOr<std::unique_ptr<TensorBoardLogger>> logger =
      TensorBoardLogger::Create(TestDir("bad_freq"), "sometimes");
  ASSERT_FALSE(logger.ok());
  EXPECT_NE(logger.status().message().find("'sometimes'"), std::string::npos) << logger.status();
  EXPECT_FALSE(TensorBoardLogger::Create("", "epoch").ok());
}

// Two epochs of three steps with validation, update_freq=2 (3 is no multiple of 2: Keras would
// drop epoch 0's epoch summaries there; the logger writes them, see summary.h).
TEST(FitSummaryTest, EveryTagAndStepAsKeras) {
  const std::string dir = TestDir("every_tag");
  auto logger = TensorBoardLogger::Create(dir, "2");
  ASSERT_TRUE(logger.ok()) << logger.status();
  EXPECT_EQ((*logger)->update_freq(), 2);
  EXPECT_EQ((*logger)->train_dir(), io::JoinPath(dir, "train"));
  EXPECT_EQ((*logger)->validation_dir(), io::JoinPath(dir, "validation"));
  int64_t step = 0;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    for (int b = 0; b < 3; ++b, ++step) {
      EXPECT_STATUS_OK((*logger)->OnTrainBatchEnd(
          step, {{"loss", 1.0 / (step + 1)}, {"accuracy", 0.1 * step}}));
    }
    EXPECT_STATUS_OK((*logger)->OnEpochEnd(
        epoch, {{"loss", 0.5 - epoch}, {"accuracy", 0.25 + epoch}, {"val_loss", 0.75 + epoch},
                {"val_accuracy", 0.125 + epoch}},
        0.01 * (epoch + 1), step));
  }
  EXPECT_STATUS_OK((*logger)->Close());
  ExpectScalars(ReadScalars(io::JoinPath(dir, "train")),
                {{"batch_loss", 2, 0.5f},
                 {"batch_accuracy", 2, 0.1f},
                 {"epoch_loss", 0, 0.5f},
                 {"epoch_accuracy", 0, 0.25f},
                 {"epoch_learning_rate", 0, 0.01f},
                 {"batch_loss", 4, 0.25f},
                 {"batch_accuracy", 4, 0.3f},
                 {"batch_loss", 6, 1.0f / 6},
                 {"batch_accuracy", 6, 0.5f},
                 {"epoch_loss", 1, -0.5f},
                 {"epoch_accuracy", 1, 1.25f},
                 {"epoch_learning_rate", 1, 0.02f}});
  ExpectScalars(ReadScalars(io::JoinPath(dir, "validation")),
                {{"evaluation_loss_vs_iterations", 3, 0.75f},
                 {"evaluation_accuracy_vs_iterations", 3, 0.125f},
                 {"epoch_loss", 0, 0.75f},
                 {"epoch_accuracy", 0, 0.125f},
                 {"evaluation_loss_vs_iterations", 6, 1.75f},
                 {"evaluation_accuracy_vs_iterations", 6, 1.125f},
                 {"epoch_loss", 1, 1.75f},
                 {"epoch_accuracy", 1, 1.125f}});
}

// update_freq=epoch: no batch summaries; without val_ logs no validation directory, as Keras
// creates its validation writer only for validation.
TEST(FitSummaryTest, EpochOnlyWithoutValidation) {
  const std::string dir = TestDir("epoch_only");
  auto logger = TensorBoardLogger::Create(dir, "epoch");
  ASSERT_TRUE(logger.ok()) << logger.status();
  for (int64_t step = 0; step < 4; ++step) EXPECT_STATUS_OK((*logger)->OnTrainBatchEnd(step, {{"loss", 9.0}}));
  EXPECT_STATUS_OK((*logger)->OnEpochEnd(0, {{"loss", 2.5}}, 0.001, 4));
  logger->reset();  // the destructor closes
  ExpectScalars(ReadScalars(io::JoinPath(dir, "train")),
                {{"epoch_loss", 0, 2.5f}, {"epoch_learning_rate", 0, 0.001f}});
  EXPECT_FALSE(Env::Default()->FileExists(io::JoinPath(dir, "validation")).ok());
}

// update_freq=batch writes every step, counted from 1 and across epochs; a learning_rate log
// is replaced by the optimizer's, in place, as Keras sets its dict entry.
TEST(FitSummaryTest, EveryBatch) {
  const std::string dir = TestDir("every_batch");
  auto logger = TensorBoardLogger::Create(dir, "batch");
  ASSERT_TRUE(logger.ok()) << logger.status();
  EXPECT_STATUS_OK((*logger)->OnTrainBatchEnd(0, {{"loss", 3}}));
  EXPECT_STATUS_OK((*logger)->OnTrainBatchEnd(1, {{"loss", 2}}));
  EXPECT_STATUS_OK((*logger)->OnEpochEnd(0, {{"learning_rate", 7}, {"loss", 2.5}}, 0.5, 2));
  EXPECT_STATUS_OK((*logger)->OnTrainBatchEnd(2, {{"loss", 1}}));
  EXPECT_STATUS_OK((*logger)->Close());
  ExpectScalars(ReadScalars(io::JoinPath(dir, "train")),
                {{"batch_loss", 1, 3},
                 {"batch_loss", 2, 2},
                 {"epoch_learning_rate", 0, 0.5f},
                 {"epoch_loss", 0, 2.5f},
                 {"batch_loss", 3, 1}});
}

// Each epoch's values are on disk once OnEpochEnd returns, before Close: a killed run keeps
// its curves.
TEST(FitSummaryTest, FlushedAtEpochEnd) {
  const std::string dir = TestDir("flushed");
  auto logger = TensorBoardLogger::Create(dir, "epoch");
  ASSERT_TRUE(logger.ok()) << logger.status();
  EXPECT_STATUS_OK((*logger)->OnEpochEnd(0, {{"loss", 1.5}, {"val_loss", 2.5}}, 0.1, 10));
  ExpectScalars(ReadScalars(io::JoinPath(dir, "train")),
                {{"epoch_loss", 0, 1.5f}, {"epoch_learning_rate", 0, 0.1f}});
  ExpectScalars(ReadScalars(io::JoinPath(dir, "validation")),
                {{"evaluation_loss_vs_iterations", 10, 2.5f}, {"epoch_loss", 0, 2.5f}});
  EXPECT_STATUS_OK((*logger)->Close());
  EXPECT_STATUS_OK((*logger)->Close());
  absl::Status late = (*logger)->OnEpochEnd(1, {{"loss", 1}}, 0.1, 20);
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition) << late;
  EXPECT_NE(late.message().find(io::JoinPath(dir, "train")), std::string::npos) << late;
}

// Two loggers in one process (each its own session and writer resources) do not mix.
TEST(FitSummaryTest, TwoLoggersApart) {
  const std::string a = TestDir("logger_a"), b = TestDir("logger_b");
  auto la = TensorBoardLogger::Create(a, "epoch");
  auto lb = TensorBoardLogger::Create(b, "epoch");
  ASSERT_TRUE(la.ok() && lb.ok());
  EXPECT_STATUS_OK((*la)->OnEpochEnd(0, {{"loss", 1}}, 0.1, 1));
  EXPECT_STATUS_OK((*lb)->OnEpochEnd(0, {{"loss", 2}}, 0.2, 1));
  EXPECT_STATUS_OK((*la)->Close());
  EXPECT_STATUS_OK((*lb)->Close());
  ExpectScalars(ReadScalars(io::JoinPath(a, "train")),
                {{"epoch_loss", 0, 1}, {"epoch_learning_rate", 0, 0.1f}});
  ExpectScalars(ReadScalars(io::JoinPath(b, "train")),
                {{"epoch_loss", 0, 2}, {"epoch_learning_rate", 0, 0.2f}});
}

// A log directory that cannot be made: the error names it.
TEST(FitSummaryTest, UnwritableDirectory) {
  const std::string dir = TestDir("not_a_dir");
  ASSERT_STATUS_OK(WriteStringToFile(Env::Default(), dir, "a file"));
  auto logger = TensorBoardLogger::Create(dir, "epoch");
  ASSERT_FALSE(logger.ok());
  EXPECT_NE(logger.status().message().find(io::JoinPath(dir, "train")), std::string::npos)
      << logger.status();
}

// Keras 3's optimizer.learning_rate after `iterations` steps (its schedules' formulas).
TEST(FitSummaryTest, LearningRateAt) {
  OptimizerSpec sgd;
  EXPECT_DOUBLE_EQ(LearningRateAt(sgd, 100), 0.01);  // Keras's SGD default
  OptimizerSpec adam;
  adam.name = "adam";
  EXPECT_DOUBLE_EQ(LearningRateAt(adam, 0), 0.001);
  OptimizerSpec exponential;
  exponential.learning_rate = 0.1;
  exponential.schedule = "exponential";
  exponential.decay_rate = 0.5;
  exponential.decay_steps = 2;
  EXPECT_DOUBLE_EQ(LearningRateAt(exponential, 0), 0.1);
  EXPECT_NEAR(LearningRateAt(exponential, 3), 0.1 * std::pow(0.5, 1.5), 1e-15);  // not stepped
  OptimizerSpec cosine;
  cosine.learning_rate = 0.2;
  cosine.schedule = "cosine";
  cosine.decay_steps = 4;
  EXPECT_NEAR(LearningRateAt(cosine, 2), 0.1, 1e-15);
  EXPECT_NEAR(LearningRateAt(cosine, 4), 0, 1e-15);
  EXPECT_NEAR(LearningRateAt(cosine, 9), 0, 1e-15);  // held after decay_steps
}

}  // namespace
}  // namespace tensorflow::tf_ext::train
