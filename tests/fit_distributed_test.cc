// The cluster (tf_ext/train/distribute/distributed.h) from TF_CONFIG's JSON and from --cluster/--task_index,
// without starting a server: ranks (the chief first, else worker 0), device names, and the
// errors naming each bad value; shard_by=files' choice of each worker's TFRecord files. Training
// over processes is tests/python/test_fit_distributed.py.
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/platform/env.h"
#include "tensorflow/core/platform/path.h"
#include "tf_ext/train/distribute/distributed.h"
#include "tf_ext/train/loop/fit.h"

namespace tensorflow::tf_ext::train {
namespace {

Cluster Resolve(const DistributedOptions& options, const char* tf_config) {
  auto c = ResolveCluster(options, tf_config);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok() || !c->has_value()) return Cluster();
  return **c;
}

std::string Error(const DistributedOptions& options, const char* tf_config) {
  auto c = ResolveCluster(options, tf_config);
  EXPECT_FALSE(c.ok());
  return c.ok() ? "" : std::string(c.status().message());
}

TEST(ClusterTest, NoneWithoutClusterOrTfConfig) {
  auto c = ResolveCluster(DistributedOptions(), nullptr);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->has_value());
  c = ResolveCluster(DistributedOptions(), "");
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->has_value());
}

TEST(ClusterTest, WorkersFromTheFlag) {
  DistributedOptions o;
  o.cluster = "10.0.0.1:2222,10.0.0.2:2222,[::1]:2223";
  o.task_index = 2;
  const Cluster c = Resolve(o, "{\"cluster\": {\"worker\": [\"ignored:1\"]}}");
  ASSERT_EQ(c.size(), 3);
  EXPECT_EQ(c.rank, 2);
  EXPECT_FALSE(c.is_chief());
  EXPECT_EQ(c.Device(0), "/job:worker/replica:0/task:0");
  EXPECT_EQ(c.TaskName(2), "worker 2 ([::1]:2223)");
}

TEST(ClusterTest, WorkerZeroIsTheChiefWithoutAChiefJob) {
  const Cluster c = Resolve(DistributedOptions(),
                            R"({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 0}})");
  ASSERT_EQ(c.size(), 2);
  EXPECT_EQ(c.rank, 0);
  EXPECT_TRUE(c.is_chief());
}

TEST(ClusterTest, TheChiefJobComesFirst) {
  const char* config = R"({"task": {"index": 1, "type": "worker"},
      "cluster": {"worker": ["w0:1", "w1:2"], "chief": ["c:3"]}, "environment": "cloud",
      "rpc_layer": "grpc", "extra": [1.5, true, null, {"x": "\"quoted\""}]})";
  const Cluster c = Resolve(DistributedOptions(), config);
  ASSERT_EQ(c.size(), 3);
  EXPECT_EQ(c.Device(0), "/job:chief/replica:0/task:0");
  EXPECT_EQ(c.Device(2), "/job:worker/replica:0/task:1");
  EXPECT_EQ(c.rank, 2);
  EXPECT_EQ(c.tasks[2].address, "w1:2");
}

// TF_CONFIG is JSON as a JSON library reads it: \u escapes, exponents, a non-object root.
TEST(ClusterTest, TfConfigIsReadAsAnyJson) {
  const Cluster c = Resolve(DistributedOptions(),
                            R"({"cluster": {"worker": ["w\u0030:1", "w1:2"]},
                                "task": {"type": "work\u0065r", "index": 1e0}})");
  ASSERT_EQ(c.size(), 2);
  EXPECT_EQ(c.tasks[0].address, "w0:1");
  EXPECT_EQ(c.rank, 1);
  const DistributedOptions none;
  EXPECT_TRUE(absl::StrContains(Error(none, "[1, 2]"), "TF_CONFIG has no \"cluster\" object"));
  EXPECT_TRUE(absl::StrContains(Error(none, R"({"cluster": {"worker": ["a:1"]}} x)"),
                                "TF_CONFIG is not valid JSON"));
}

TEST(ClusterTest, BadValuesAreNamed) {
  DistributedOptions o;
  o.cluster = "a:1,b";
  o.task_index = 0;
  EXPECT_TRUE(absl::StrContains(Error(o, nullptr), "option 'cluster': 'b' is not host:port"));
  o.cluster = "a:1,b:70000";
  EXPECT_TRUE(absl::StrContains(Error(o, nullptr), "'b:70000' is not host:port"));
  o.cluster = "a:1,b:2";
  o.task_index = -1;
  EXPECT_TRUE(absl::StrContains(Error(o, nullptr), "option 'task_index': -1 is not a task of the cluster"));
  DistributedOptions only_index;
  only_index.task_index = 1;
  EXPECT_TRUE(absl::StrContains(Error(only_index, nullptr), "option 'task_index' needs option 'cluster'"));
  DistributedOptions timeout;
  timeout.collective_timeout = 0;
  EXPECT_TRUE(absl::StrContains(Error(timeout, nullptr), "option 'collective_timeout': 0 is not a positive"));
  const DistributedOptions none;
  EXPECT_TRUE(absl::StrContains(Error(none, "{\"cluster\": [}"), "TF_CONFIG is not valid JSON"));
  EXPECT_TRUE(absl::StrContains(Error(none, "{}"), "TF_CONFIG has no \"cluster\" object"));
  EXPECT_TRUE(absl::StrContains(
      Error(none, R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "evaluator", "index": 0}})"),
      "TF_CONFIG's task.type 'evaluator' is not worker or chief"));
  EXPECT_TRUE(absl::StrContains(
      Error(none, R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1.5}})"),
      "TF_CONFIG's task.index 1.5 is not a task of job 'worker'"));
  EXPECT_TRUE(absl::StrContains(
      Error(none, R"({"cluster": {"worker": ["a:1"], "chief": ["b:1", "c:1"]}, "task": {"type": "worker", "index": 0}})"),
      "TF_CONFIG's cluster.chief has 2 tasks; at most one"));
  EXPECT_TRUE(absl::StrContains(Error(none, R"({"cluster": {"worker": ["a:1"]}})"),
                                "TF_CONFIG has no task.type (a string) and task.index (a number)"));
}

TEST(ClusterTest, ShardBy) {
  DistributedOptions o;
  o.cluster = "a:1,b:2";
  o.task_index = 0;
  o.shard_by = "files";
  EXPECT_TRUE(ResolveCluster(o, nullptr).ok());
  o.shard_by = "rows";
  EXPECT_TRUE(absl::StrContains(Error(o, nullptr), "option 'shard_by': 'rows' is not one of batch, files"));
}

TEST(ClusterTest, WorkerFilesAreEveryNthOfTheSortedFiles) {
  const std::string dir = io::JoinPath(::testing::TempDir(), "worker_files");
  ASSERT_TRUE(Env::Default()->RecursivelyCreateDir(dir).ok());
  for (const char* name : {"p-3", "p-0", "p-4", "p-1", "p-2"}) {
    ASSERT_TRUE(WriteStringToFile(Env::Default(), io::JoinPath(dir, absl::StrCat(name, ".tfrecord")), "").ok());
  }
  DistributedOptions o;
  o.cluster = "a:1,b:2";
  o.task_index = 1;
  const std::string glob = io::JoinPath(dir, "p-*.tfrecord");
  auto files = WorkerFiles(glob, Resolve(o, nullptr));
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(*files, absl::StrCat(io::JoinPath(dir, "p-1.tfrecord"), ",", io::JoinPath(dir, "p-3.tfrecord")));
  o.task_index = 0;
  files = WorkerFiles(glob, Resolve(o, nullptr));
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(*files, absl::StrCat(io::JoinPath(dir, "p-0.tfrecord"), ",", io::JoinPath(dir, "p-2.tfrecord"), ",",
                                 io::JoinPath(dir, "p-4.tfrecord")));
  auto few = WorkerFiles(io::JoinPath(dir, "p-0.tfrecord"), Resolve(o, nullptr));
  EXPECT_TRUE(absl::StrContains(few.status().message(), "has 1 for 2 workers")) << few.status();
  auto npz = WorkerFiles(io::JoinPath(dir, "d.npz"), Resolve(o, nullptr));
  EXPECT_TRUE(absl::StrContains(npz.status().message(), "is not TFRecord data")) << npz.status();
}

}  // namespace
}  // namespace tensorflow::tf_ext::train
