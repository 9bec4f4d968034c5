// The op library lookup order of the C++ tools (tf_ext/tools/library_lookup.h), each step
// checked with files that exist or not in a scratch directory.
#include "tf_ext/tools/library_lookup.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace tensorflow::tf_ext::tools {
namespace {

namespace fs = std::filesystem;

class LibraryLookup : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    root_ = fs::path(tmp ? tmp : "/tmp") /
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(root_);
    fs::create_directories(root_);
    // A Bazel-like layout: bazel-bin/tf_ext/tf_ext_grad with its runfiles tree, and a binary
    // of another package (serving/) that has no library next to it.
    binary_ = Touch("bazel-bin/tf_ext/tf_ext_grad");
    other_binary_ = Touch("bazel-bin/serving/tf_ext_serve");
    context_.binary = binary_;
  }

  // Creates root/relative (and its directories); returns its path.
  std::string Touch(const std::string& relative) {
    const fs::path p = root_ / relative;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << "x";
    return p.string();
  }

  std::string Found() {
    auto found = FindOpLibrary(context_);
    EXPECT_TRUE(found.ok()) << found.status();
    return found.ok() ? *found : "";
  }

  fs::path root_;
  std::string binary_, other_binary_;
  LibraryLookupContext context_;
};

TEST_F(LibraryLookup, CandidateOrder) {
  context_.runfiles_dir = "/rf";
  const std::vector<LibraryCandidate> c = LibraryCandidates(context_);
  std::vector<std::string> got;
  for (const LibraryCandidate& x : c) got.push_back(x.source + ": " + x.path);
  const std::string dir = (root_ / "bazel-bin/tf_ext").string();
  EXPECT_EQ(got, (std::vector<std::string>{
                     "runfiles: /rf/tf_ext/tf_ext/_tf_ext_ops.so",
                     "runfiles: " + binary_ + ".runfiles/tf_ext/tf_ext/_tf_ext_ops.so",
                     "next to the binary: " + dir + "/_tf_ext_ops.so",
                     "next to the binary: " + dir + "/../tf_ext/_tf_ext_ops.so",
                 }));
}

TEST_F(LibraryLookup, FlagFirst) {
  const std::string flag = Touch("flag/lib.so");
  const std::string env = Touch("env/lib.so");
  Touch("bazel-bin/tf_ext/_tf_ext_ops.so");
  context_.flag = flag;
  context_.env = env;
  EXPECT_EQ(Found(), flag);
  // An explicit path that does not exist is an error, not a reason to try the others.
  context_.flag = (root_ / "missing.so").string();
  auto found = FindOpLibrary(context_);
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(found.status().message().find("op library '" + context_.flag +
                                          "' not found (from --library)"),
            std::string::npos)
      << found.status();
}

TEST_F(LibraryLookup, EnvironmentSecond) {
  const std::string env = Touch("env/lib.so");
  const std::string runfiles = Touch("rf/tf_ext/tf_ext/_tf_ext_ops.so");
  Touch("bazel-bin/tf_ext/_tf_ext_ops.so");
  context_.runfiles_dir = (root_ / "rf").string();
  context_.env = env;
  EXPECT_EQ(Found(), env);
  context_.env = (root_ / "env/missing.so").string();
  auto found = FindOpLibrary(context_);
  ASSERT_FALSE(found.ok());
  EXPECT_NE(found.status().message().find("(from $TF_EXT_LIBRARY)"), std::string::npos)
      << found.status();
  // Unset or empty: the lookup goes on to the runfiles.
  context_.env = "";
  EXPECT_EQ(Found(), runfiles);
  context_.env.reset();
  EXPECT_EQ(Found(), runfiles);
}

TEST_F(LibraryLookup, RunfilesThenNextToTheBinary) {
  const std::string beside = Touch("bazel-bin/tf_ext/_tf_ext_ops.so");
  EXPECT_EQ(Found(), beside);
  const std::string own_runfiles = Touch("bazel-bin/tf_ext/tf_ext_grad.runfiles/tf_ext/tf_ext/"
                                         "_tf_ext_ops.so");
  EXPECT_EQ(Found(), own_runfiles);
  const std::string runfiles_dir = Touch("rf/tf_ext/tf_ext/_tf_ext_ops.so");
  context_.runfiles_dir = (root_ / "rf").string();
  EXPECT_EQ(Found(), runfiles_dir);
}

// LocateOpLibrary says how the library was found (tf_ext_gradcheck prints it).
TEST_F(LibraryLookup, LocateSaysHowItWasFound) {
  const std::string beside = Touch("bazel-bin/tf_ext/_tf_ext_ops.so");
  auto found = LocateOpLibrary(context_);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->path, beside);
  EXPECT_EQ(found->source, "next to the binary");
  const std::string runfiles = Touch("rf/tf_ext/tf_ext/_tf_ext_ops.so");
  context_.runfiles_dir = (root_ / "rf").string();
  found = LocateOpLibrary(context_);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->path, runfiles);
  EXPECT_EQ(found->source, "runfiles");
  const std::string env = Touch("env/lib.so");
  context_.env = env;
  found = LocateOpLibrary(context_);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->path, env);
  EXPECT_EQ(found->source, "$TF_EXT_LIBRARY");
  context_.flag = beside;
  found = LocateOpLibrary(context_);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->path, beside);
  EXPECT_EQ(found->source, "--library");
}

TEST_F(LibraryLookup, BinaryOfAnotherPackageFindsBazelBin) {
  Touch("bazel-bin/tf_ext/_tf_ext_ops.so");
  context_.binary = other_binary_;
  EXPECT_EQ(fs::canonical(Found()), fs::canonical(root_ / "bazel-bin/tf_ext/_tf_ext_ops.so"));
}

TEST_F(LibraryLookup, NothingFoundListsWhatWasTried) {
  context_.runfiles_dir = (root_ / "rf").string();
  auto found = FindOpLibrary(context_);
  ASSERT_FALSE(found.ok());
  const std::string message(found.status().message());
  for (const LibraryCandidate& c : LibraryCandidates(context_)) {
    EXPECT_NE(message.find(c.path), std::string::npos) << c.path << "\n" << message;
  }
  EXPECT_NE(message.find("--library=PATH or $TF_EXT_LIBRARY"), std::string::npos) << message;
  // A directory of the library's name is not the library.
  fs::create_directories(root_ / "bazel-bin/tf_ext/_tf_ext_ops.so");
  EXPECT_FALSE(FindOpLibrary(context_).ok());
}

TEST(LibraryLookupContext, FromProcessReadsTheEnvironment) {
  setenv("TF_EXT_LIBRARY", "/from/env.so", 1);
  LibraryLookupContext c = LibraryLookupContext::FromProcess("");
  EXPECT_EQ(c.env.value_or(""), "/from/env.so");
  EXPECT_FALSE(c.binary.empty());
  EXPECT_EQ(LibraryCandidates(c)[0].path, "/from/env.so");
  EXPECT_EQ(LibraryCandidates(LibraryLookupContext::FromProcess("/flag.so"))[0].path,
            "/flag.so");
  unsetenv("TF_EXT_LIBRARY");
  c = LibraryLookupContext::FromProcess("");
  EXPECT_FALSE(c.env.has_value());
  EXPECT_EQ(LibraryCandidates(c).back().source, "next to the binary");
}

}  // namespace
}  // namespace tensorflow::tf_ext::tools
