// FlagParser: the one command-line parser of tf_ext_grad, tf_ext_gradcheck and tf_ext_serve.
#include "tf_ext/tools/flags.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tensorflow::tf_ext::tools {
namespace {

// A parser with one flag of each kind, bound to the fields below.
struct Fixture {
  std::string library, registries;
  int64_t count = 8;
  uint64_t seed = 0;
  int projections = -1;
  double delta = 1e-3;
  bool check = false;
  std::vector<std::string> feeds;
  FlagParser parser{"tool", "Does things."};

  Fixture() {
    parser.String("library", &library, "op library to load").ValueName("PATH");
    parser.Int("count", &count, "how many");
    parser.Int("seed", &seed, "random seed");
    parser.Int("projections", &projections, "directions per x", 0).DefaultText("");
    parser.Double("delta", &delta, "step").ValueName("H");
    parser.Bool("check", &check, "also check");
    parser.Repeated("feed", &feeds, "a value\nsecond line of help").ValueName("NAME=VALUE");
    parser.String("registries", &registries, "report")
        .ValueName("full")
        .ImplicitValue("summary")
        .Choices({"summary", "full"});
  }

  absl::Status Parse(const std::vector<std::string>& args) { return parser.Parse(args); }
};

// The error of a failing parse; "" (and a test failure) when it succeeds.
std::string ErrorOf(const std::vector<std::string>& args) {
  Fixture f;
  absl::Status s = f.Parse(args);
  EXPECT_FALSE(s.ok()) << "parsed: " << ::testing::PrintToString(args);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  return std::string(s.message());
}

TEST(FlagParser, DefaultsWhenNothingIsGiven) {
  Fixture f;
  ASSERT_TRUE(f.Parse({}).ok());
  EXPECT_EQ(f.library, "");
  EXPECT_EQ(f.count, 8);
  EXPECT_EQ(f.delta, 1e-3);
  EXPECT_FALSE(f.check);
  EXPECT_TRUE(f.feeds.empty());
  EXPECT_EQ(f.registries, "");
  EXPECT_FALSE(f.parser.IsSet("count"));
}

TEST(FlagParser, EveryKindAndForm) {
  Fixture f;
  absl::Status s = f.Parse({"--library=/a/b=c.so", "--count=-3", "--seed=18446744073709551615",
                            "--projections=0", "--delta=2.5e-4", "--check", "--feed=x=1,2",
                            "--feed=y=@f.npy", "--registries"});
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(f.library, "/a/b=c.so");  // split at the first '=' only
  EXPECT_EQ(f.count, -3);
  EXPECT_EQ(f.seed, 18446744073709551615u);
  EXPECT_EQ(f.projections, 0);
  EXPECT_EQ(f.delta, 2.5e-4);
  EXPECT_TRUE(f.check);
  EXPECT_EQ(f.feeds, (std::vector<std::string>{"x=1,2", "y=@f.npy"}));
  EXPECT_EQ(f.registries, "summary");
  EXPECT_TRUE(f.parser.IsSet("count"));
  EXPECT_FALSE(f.parser.IsSet("nope"));

  Fixture g;
  ASSERT_TRUE(g.Parse({"--check=false", "--registries=full", "--library="}).ok());
  EXPECT_FALSE(g.check);
  EXPECT_EQ(g.registries, "full");
  EXPECT_EQ(g.library, "");
}

TEST(FlagParser, UnknownFlag) {
  const std::string e = ErrorOf({"--check", "--bogus=3"});
  EXPECT_NE(e.find("unknown argument '--bogus=3'"), std::string::npos) << e;
  EXPECT_NE(e.find("--bogus"), std::string::npos) << e;
  // A prefix of a real flag is not that flag.
  EXPECT_NE(ErrorOf({"--lib=x"}).find("unknown argument '--lib=x'"), std::string::npos);
  // Single-dash and positional arguments are not flags.
  EXPECT_NE(ErrorOf({"-check"}).find("unexpected argument '-check'"), std::string::npos);
  EXPECT_NE(ErrorOf({"graph.pb"}).find("unexpected argument 'graph.pb'"), std::string::npos);
}

TEST(FlagParser, BadInt) {
  std::string e = ErrorOf({"--count=12abc"});
  EXPECT_NE(e.find("bad --count: '12abc' is not an integer"), std::string::npos) << e;
  e = ErrorOf({"--count=1.5"});
  EXPECT_NE(e.find("bad --count"), std::string::npos) << e;
  e = ErrorOf({"--count="});
  EXPECT_NE(e.find("bad --count"), std::string::npos) << e;
  e = ErrorOf({"--seed=-1"});
  EXPECT_NE(e.find("bad --seed: '-1' is not a non-negative integer"), std::string::npos) << e;
  e = ErrorOf({"--count=99999999999999999999"});  // out of int64's range
  EXPECT_NE(e.find("bad --count"), std::string::npos) << e;
  e = ErrorOf({"--projections=-1"});
  EXPECT_NE(e.find("bad --projections: -1 is below the minimum 0"), std::string::npos) << e;
  e = ErrorOf({"--delta=small"});
  EXPECT_NE(e.find("bad --delta: 'small' is not a number"), std::string::npos) << e;
  e = ErrorOf({"--check=maybe"});
  EXPECT_NE(e.find("bad --check: 'maybe'"), std::string::npos) << e;
}

TEST(FlagParser, NonRepeatedFlagGivenTwice) {
  std::string e = ErrorOf({"--count=1", "--count=1"});
  EXPECT_NE(e.find("--count given more than once"), std::string::npos) << e;
  e = ErrorOf({"--check", "--check"});
  EXPECT_NE(e.find("--check given more than once"), std::string::npos) << e;
  e = ErrorOf({"--registries", "--registries=full"});
  EXPECT_NE(e.find("--registries given more than once"), std::string::npos) << e;
}

TEST(FlagParser, RepeatedFlagReplacesItsDefault) {
  std::vector<std::string> values = {"default"};
  FlagParser p("tool", "");
  p.Repeated("v", &values, "values");
  ASSERT_TRUE(p.Parse(std::vector<std::string>{}).ok());
  EXPECT_EQ(values, std::vector<std::string>{"default"});
  ASSERT_TRUE(p.Parse(std::vector<std::string>{"--v=a", "--v=b"}).ok());
  EXPECT_EQ(values, (std::vector<std::string>{"a", "b"}));
}

TEST(FlagParser, MissingValue) {
  std::string e = ErrorOf({"--library"});
  EXPECT_NE(e.find("--library needs a value: --library=PATH"), std::string::npos) << e;
  e = ErrorOf({"--count"});
  EXPECT_NE(e.find("--count needs a value"), std::string::npos) << e;
}

TEST(FlagParser, Choices) {
  const std::string e = ErrorOf({"--registries=bogus"});
  EXPECT_NE(e.find("bad --registries: 'bogus' is not one of summary, full"), std::string::npos)
      << e;
}

TEST(FlagParser, RequiredFlag) {
  std::string dir;
  FlagParser p("tool", "");
  p.String("saved_model", &dir, "SavedModel").ValueName("DIR").Required();
  absl::Status s = p.Parse(std::vector<std::string>{});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("missing required flag --saved_model=DIR"), std::string::npos) << s;
  ASSERT_TRUE(p.Parse(std::vector<std::string>{"--saved_model=m"}).ok());
  EXPECT_EQ(dir, "m");
}

TEST(FlagParser, HelpAnywhereWinsOverErrors) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--help"}, {"-h"}, {"--bogus", "--help"}, {"--count=x", "-h"}}) {
    Fixture f;
    EXPECT_TRUE(f.Parse(args).ok()) << ::testing::PrintToString(args);
    EXPECT_TRUE(f.parser.help_requested()) << ::testing::PrintToString(args);
  }
  Fixture f;
  ASSERT_TRUE(f.Parse({"--check"}).ok());
  EXPECT_FALSE(f.parser.help_requested());
}

TEST(FlagParser, ArgvSkipsTheProgramName) {
  Fixture f;
  const char* argv[] = {"tool", "--count=5"};
  ASSERT_TRUE(f.parser.Parse(2, argv).ok());
  EXPECT_EQ(f.count, 5);
}

TEST(FlagParser, UsageListsEveryFlag) {
  Fixture f;
  const std::string usage = f.parser.Usage();
  EXPECT_EQ(usage.rfind("usage: tool [flags]\nDoes things.\n", 0), 0u) << usage;
  for (const char* entry :
       {"  --library=PATH ", "  --count=N ", "  --seed=N ", "  --projections=N ", "  --delta=H ",
        "  --check ", "  --feed=NAME=VALUE", "  --registries[=full] ", "  --help "}) {
    EXPECT_NE(usage.find(entry), std::string::npos) << entry << "\n" << usage;
  }
  // Help texts, defaults (current values; hidden where empty or replaced), kinds.
  EXPECT_NE(usage.find("how many (default: 8)"), std::string::npos) << usage;
  EXPECT_NE(usage.find("step (default: 0.001)"), std::string::npos) << usage;
  EXPECT_NE(usage.find("directions per x\n"), std::string::npos) << usage;
  EXPECT_NE(usage.find("op library to load\n"), std::string::npos) << usage;
  EXPECT_NE(usage.find("(one of: summary, full)"), std::string::npos) << usage;
  // A multi-line help text is indented under its first line.
  const size_t second = usage.find("second line of help (repeatable)");
  ASSERT_NE(second, std::string::npos) << usage;
  const size_t line_start = usage.rfind('\n', second) + 1;
  EXPECT_EQ(usage.substr(line_start, second - line_start),
            std::string(usage.find("a value") - usage.rfind('\n', usage.find("a value")) - 1,
                        ' '))
      << usage;
}

TEST(FlagParser, DeclaringAFlagTwiceIsABug) {
  std::string a, b;
  FlagParser p("tool", "");
  p.String("x", &a, "");
  EXPECT_DEATH(p.String("x", &b, ""), "flag 'x' declared twice");
}

}  // namespace
}  // namespace tensorflow::tf_ext::tools
