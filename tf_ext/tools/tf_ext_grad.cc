// tf_ext_grad: gradients of a forward GraphDef computed entirely in C++ (no Python).
//
//   tf_ext_grad [--graph=PATH] [--y=node:idx] [--x=node:idx,...] [--feed=name=VALUE]...
//               [--seed=N] [--library=PATH] [--check] [--projections=N] [--delta=H]
//               [--tolerance=TOL] [--save=PATH.npz] [--max_values=N] [--dump_backward=PATH]
//               [--optimize=false] [--hoist_constants] [--symbolic_gradients] [--benchmark=N] [--export=DIR]
//               [--memory_budget=B] [--jit_compile]
//               (--help: every flag, from DeclareFlags)
//
// Without --graph it differentiates a built-in example graph through the tf_ext ops.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "tensorflow/core/platform/env.h"
#include "tensorflow/core/platform/env_time.h"
#include "tf_ext/tools/flags.h"
#include "tf_ext/graph/passes/xla_cluster.h"
#include "tf_ext/graph/runtime/export.h"
#include "tf_ext/graph/runtime/gradient_session.h"
#include "tf_ext/graph/runtime/graph_gradients.h"
#include "tf_ext/tools/default_example.h"
#include "tf_ext/tools/library_lookup.h"
#include "tf_ext/tools/quiet_startup.h"

namespace tensorflow::tf_ext::tools {
namespace {

struct Flags {
  std::string graph, y, x, library, save, dump_backward, export_dir, memory_budget;
  std::vector<std::string> feeds;
  bool check = false, optimize = true, hoist_constants = false, symbolic_gradients = false;
  bool jit_compile = false;
  double delta = 0, tolerance = -1;
  int max_values = 8;
  int projections = -1;
  int benchmark = 0;
  uint64_t seed = 0;
};

// This process's resident memory in MB, now (VmRSS) or at its peak (VmHWM: getrusage's
// ru_maxrss would include the peak of whatever process exec'ed this one), or -1.
int64_t ResidentMb(absl::string_view field) {
  std::ifstream status("/proc/self/status");  // size 0 in stat: read it as a stream
  std::string line;
  while (std::getline(status, line)) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, field) || !absl::ConsumePrefix(&rest, ":")) continue;
    int64_t kb = 0;
    if (absl::SimpleAtoi(absl::StripSuffix(absl::StripAsciiWhitespace(rest), " kB"), &kb)) {
      return kb / 1024;
    }
  }
  return -1;
}

void DeclareFlags(FlagParser* p, Flags* f) {
  p->String("graph", &f->graph, "forward GraphDef (text or binary); default: the built-in example")
      .ValueName("PATH");
  p->String("y", &f->y, "tensor to differentiate (its sum, i.e. incoming gradient = ones)")
      .ValueName("NODE[:IDX]");
  p->String("x", &f->x, "tensors to differentiate with respect to").ValueName("NODE[:IDX],...");
  p->Repeated("feed", &f->feeds,
              "a value for a placeholder. VALUE is one of\n"
              "  [SHAPE:]V1,V2,...  SHAPE like 2x3 (omitted: 1-D; \"scalar\")\n"
              "  @FILE.npy | @FILE.npz[:KEY] | [SHAPE:]@FILE (raw, placeholder dtype)\n"
              "  random[:SEED]      standard normal, the placeholder's shape\n"
              "Placeholders of fully known shape that get no --feed are fed random\n"
              "values (seed --seed, printed).")
      .ValueName("NAME=VALUE");
  p->Int("seed", &f->seed, "seed of the default random feeds and of --check's projections");
  p->String("library", &f->library,
            "op library to load (default: $TF_EXT_LIBRARY, then runfiles, then next to\n"
            "this binary: docs/cpp.md, \"Where the op library is found\")")
      .ValueName("PATH");
  p->Bool("check", &f->check, "also compare with central differences and print PASS/FAIL");
  p->Bool("optimize", &f->optimize,
          "run TensorFlow's graph optimizations (Grappler: oneDNN and remapper fusions,\n"
          "arithmetic simplification) on the backward graph, as a Python tf.function does;\n"
          "--optimize=false runs the graph as built, with less memory on large models");
  p->Bool("hoist_constants", &f->hoist_constants,
          "with --optimize: feed the frozen weights to the Session instead of holding them in\n"
          "Const nodes, so no optimization copies them: less memory, more time (TensorFlow's\n"
          "optimizer folds only constants, e.g. a batch norm's multiply into its convolution);\n"
          "on whenever --memory_budget is given");
  p->Bool("symbolic_gradients", &f->symbolic_gradients,
          "keep one SymbolicGradient node per op (resolved at run time, computing the\n"
          "gradients of all its inputs) instead of inlining each op's gradient as plain ops");
  p->Bool("jit_compile", &f->jit_compile,
          "run the forward and backward graph as one XLA cluster, compiled whole at the\n"
          "first run, as tf.function(jit_compile=True) does (docs/xla.md); a graph with an\n"
          "op XLA cannot compile is refused before running, naming it");
  p->Int("benchmark", &f->benchmark,
         "build the gradient as a server does (a GradientSession), run it once, then time N\n"
         "more runs and print \"steady state over N runs: min X ms, median Y ms\"",
         0)
      .ValueName("N");
  p->Int("projections", &f->projections,
         "--check along N random +-1 directions per x (default: elementwise for\n"
         "xs of <= 256 elements, else 16); 0: always elementwise",
         0)
      .DefaultText("");
  p->Double("delta", &f->delta, "finite-difference step (default 1e-3 float, 1e-6 double)")
      .ValueName("H")
      .DefaultText("");
  p->Double("tolerance", &f->tolerance,
            "max relative error for PASS (default 1e-2 float graphs, 1e-6 double)")
      .ValueName("TOL")
      .DefaultText("");
  p->String("save", &f->save,
            "y and every gradient at full precision: PATH.npz (np.savez: y,\n"
            "d_<x>), else text (name dtype [shape] values, 17 digits)")
      .ValueName("PATH");
  p->String("dump_backward", &f->dump_backward,
            "write the forward+backward GraphDef (text) that was run")
      .ValueName("PATH");
  p->String("export", &f->export_dir,
            "write the gradient as a SavedModel in DIR (new or empty): signature \"gradients\"\n"
            "(the feeds in; y and d_<x> out), plain TensorFlow ops, the weights in\n"
            "variables/; it loads without tf_ext (tf.saved_model.load, LoadSavedModel)")
      .ValueName("DIR");
  p->String("memory_budget", &f->memory_budget,
            "a budget for the memory the run allocates above the loaded graph and feeds:\n"
            "a fraction in (0, 1] of the estimated peak without one (0.5), or bytes with an\n"
            "optional K/M/G suffix (512M); the builder recomputes forward tensors in the\n"
            "backward pass rather than keep them, and refuses a budget it cannot meet,\n"
            "naming the smallest it can (docs/memory.md)")
      .ValueName("B");
  p->Int("max_values", &f->max_values, "values printed per tensor");
}

int Fail(const std::string& msg) {
  std::cerr << "tf_ext_grad: error: " << msg << "\n";
  return 1;
}

// --benchmark=N: the gradient as a server runs it, a GradientSession (gradient_session.h) built
// from the graph (consumed), a first request (its answers fill `result`), then N timed requests.
absl::Status BenchmarkGradientSession(const Flags& flags, GradientRequest* request,
                                      GradientResult* result, std::vector<double>* ms) {
  GradientSessionSpec spec;
  spec.ys = {request->y};
  spec.xs = request->xs;
  GradientSessionOptions options;
  options.optimize_graph = flags.optimize;
  options.hoist_constants = flags.hoist_constants;
  options.backward_memory_budget = request->backward_memory_budget;
  options.jit_compile = flags.jit_compile;
  std::vector<std::pair<std::string, Tensor>> feeds;
  for (const auto& [ref, value] : request->feeds) {
    if (ref.index != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--benchmark feeds placeholders, as a server's requests do: '", ref.ToString(),
          "' is not a placeholder's output"));
    }
    feeds.push_back({ref.node, value});
    options.feed_shapes[ref.node] = value.shape();
  }
  const uint64_t start = EnvTime::NowMicros();
  auto session = GradientSession::Create(std::move(request->graph), spec, options);
  if (!session.ok()) return session.status();
  const GradientResult& built = (*session)->build_info();
  result->inlined_calls = built.inlined_calls;
  result->gradient_nodes = built.gradient_nodes;
  result->inlined_gradients = built.inlined_gradients;
  result->converted_v1_control_flow = built.converted_v1_control_flow;
  result->loops = built.loops;
  result->conditionals = built.conditionals;
  result->accumulators = built.accumulators;
  result->workarounds = built.workarounds;
  result->simplifications = built.simplifications;
  result->memory = built.memory;
  result->backward_nodes = built.backward_nodes;
  result->xla_cluster_nodes = built.xla_cluster_nodes;
  result->build_seconds = (EnvTime::NowMicros() - start) * 1e-6;
  const uint64_t run_start = EnvTime::NowMicros();
  const XlaCompileStats compiled = XlaCompilations();
  std::vector<Tensor> ys, dxs;
  TF_RETURN_IF_ERROR((*session)->Run(feeds, &ys, &dxs));
  result->run_seconds = (EnvTime::NowMicros() - run_start) * 1e-6;
  result->xla_compile_seconds = (XlaCompilations().micros - compiled.micros) * 1e-6;
  result->y = ys[0];
  result->grads = dxs;
  for (int i = 0; i < flags.benchmark; ++i) {
    const uint64_t t = EnvTime::NowMicros();
    if (absl::Status s = (*session)->Run(feeds, &ys, &dxs); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("benchmark run ", i + 1, " failed: ", s.message()));
    }
    ms->push_back((EnvTime::NowMicros() - t) / 1000.0);
  }
  std::sort(ms->begin(), ms->end());
  return absl::OkStatus();
}

// Flag combinations refused before any work (the export's target, --benchmark's limits).
absl::Status CheckFlagCombinations(const Flags& flags) {
  if (!flags.export_dir.empty()) {
    // Refused before the work of building the gradient, not after it.
    if (flags.symbolic_gradients) {
      return absl::InvalidArgumentError(
          "--export writes each op's gradient as plain ops: drop --symbolic_gradients");
    }
    TF_RETURN_IF_ERROR(CheckExportTarget(flags.export_dir));
  }
  if (flags.benchmark > 0) {
    for (const auto& [given, name] : std::vector<std::pair<bool, std::string>>{
             {flags.check, "--check"}, {!flags.dump_backward.empty(), "--dump_backward"},
             {!flags.export_dir.empty(), "--export"}, {flags.symbolic_gradients, "--symbolic_gradients"}}) {
      if (given) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--benchmark times the GradientSession a server runs; run ", name, " without it"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status LoadOpLibrary(const Flags& flags) {
  auto found = FindOpLibrary(LibraryLookupContext::FromProcess(flags.library));
  if (!found.ok()) return found.status();
  const std::string library = *found;
  void* handle = nullptr;
  if (absl::Status s = Env::Default()->LoadDynamicLibrary(library.c_str(), &handle); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot load op library '", library, "': ", s.message()));
  }
  return absl::OkStatus();
}

// The graph, y, xs and feeds the flags name (the built-in example without --graph), with random
// values for every placeholder left unfed.
absl::Status BuildRequest(const Flags& flags, GradientRequest* request) {
  if (flags.graph.empty()) {
    *request = DefaultExample();
    std::cout << "tf_ext_grad: no --graph given, differentiating the built-in example graph\n";
  } else {
    if (flags.y.empty() || flags.x.empty()) {
      return absl::InvalidArgumentError("--graph needs --y and --x");
    }
    TF_RETURN_IF_ERROR(LoadGraph(flags.graph, &request->graph));
  }
  if (!flags.y.empty()) {
    auto y = TensorRef::Parse(flags.y);
    if (!y.ok()) return y.status();
    request->y = *y;
  }
  if (!flags.x.empty()) {
    request->xs.clear();
    for (const std::string& part :
         std::vector<std::string>(absl::StrSplit(flags.x, ',', absl::SkipEmpty()))) {
      auto x = TensorRef::Parse(part);
      if (!x.ok()) return x.status();
      request->xs.push_back(*x);
    }
  }
  for (const std::string& spec : flags.feeds) {
    auto feed = ParseFeed(spec, request->graph);
    if (!feed.ok()) return feed.status();
    request->feeds.push_back(*feed);
  }
  auto random_feeds = AddRandomFeeds(request->graph, &request->feeds, flags.seed);
  if (!random_feeds.ok()) return random_feeds.status();
  for (const std::string& name : *random_feeds) {
    std::cout << "tf_ext_grad: feeding '" << name << "' random values (--seed=" << flags.seed
              << "; reproduce with --feed=" << name << "=random:" << flags.seed << ")\n";
  }
  return absl::OkStatus();
}

GradientOptions OptionsOf(const Flags& flags) {
  GradientOptions options;
  options.keep_backward_graph = !flags.dump_backward.empty() || !flags.export_dir.empty();
  options.release_forward_graph = !flags.check;  // the numeric check reruns the forward graph
  options.optimize_graph = flags.optimize;
  options.hoist_constants = flags.hoist_constants;
  options.inline_gradients = !flags.symbolic_gradients;
  options.jit_compile = flags.jit_compile;
  return options;
}

// How the backward graph was built and run: its size, what the pipeline rewrote, times.
void PrintBuild(const Flags& flags, const GradientResult& result,
                const std::vector<double>& benchmark_ms) {
  std::cout << "built the backward graph in " << absl::StrFormat("%.2f", result.build_seconds)
            << " s (" << result.backward_nodes << " nodes, gradients of "
            << result.gradient_nodes << " ops"
            << (result.inlined_gradients > 0 ? " inlined" : " as SymbolicGradient nodes");
  if (result.inlined_calls > 0) std::cout << ", " << result.inlined_calls << " function calls inlined";
  if (result.converted_v1_control_flow) {
    std::cout << ", lowered (v1) control flow converted back to While/If";
  }
  if (result.loops + result.conditionals > 0) {
    std::cout << ", " << result.loops << " loop" << (result.loops == 1 ? "" : "s") << " and "
              << result.conditionals << " conditional" << (result.conditionals == 1 ? "" : "s")
              << " saving " << result.accumulators << " tensors for their gradients";
  }
  if (result.workarounds.grouped_convs > 0) {
    std::cout << ", " << result.workarounds.grouped_convs
              << " grouped Conv2D as DepthwiseConv2dNative";
  }
  std::cout << "), ran it in " << absl::StrFormat("%.2f", result.run_seconds) << " s\n";
  if (flags.jit_compile) {
    std::cout << "XLA: " << result.xla_cluster_nodes << " nodes compiled as one cluster in "
              << absl::StrFormat("%.2f", result.xla_compile_seconds) << " s (at the first run)\n";
  }
  if (flags.benchmark > 0) {
    std::cout << "steady state over " << flags.benchmark << " runs: min "
              << absl::StrFormat("%.1f", benchmark_ms.front()) << " ms, median "
              << absl::StrFormat("%.1f", benchmark_ms[benchmark_ms.size() / 2]) << " ms\n";
  }
}

// Memory (measured and estimated), then y and every gradient.
void PrintValues(const Flags& flags, const GradientRequest& request, const GradientResult& result,
                 int64_t loaded_mb) {
  // A frozen model's weights are copied by every graph representation that holds them
  // (GradientOptions): the peak says how many copies a run needed.
  std::cout << "peak resident memory: " << ResidentMb("VmHWM") << " MB (" << loaded_mb
            << " MB once the graph and feeds were loaded)\n";
  // The builder's estimate of the same rise above the loaded graph (passes/rematerialize.h).
  const MemoryPlan& memory = result.memory;
  std::cout << "estimated peak: " << absl::StrFormat("%.1f", memory.estimated_peak_bytes / 1048576.0)
            << " MB above the loaded graph and feeds";
  if (memory.unknown_tensors > 0) {
    std::cout << " (" << memory.unknown_tensors << " tensors of unknown shape counted as 0)";
  }
  std::cout << "\n";
  if (memory.budget_bytes > 0) std::cout << DescribeBudget(memory) << "\n";
  std::cout << "y = sum(" << request.y.ToString() << "): " << FormatTensor(result.y, flags.max_values)
            << "\n";
  for (size_t i = 0; i < request.xs.size(); ++i) {
    std::cout << "d sum(y) / d " << request.xs[i].ToString() << ": "
              << FormatTensor(result.grads[i], flags.max_values) << "\n";
  }
}

absl::Status Export(const Flags& flags, const GradientRequest& request, GradientResult* result) {
  ExportStats stats;
  const uint64_t start = EnvTime::NowMicros();
  TF_RETURN_IF_ERROR(ExportGradientSavedModel(flags.export_dir, request, result, {}, &stats));
  std::cout << "exported the gradient to " << flags.export_dir << " in "
            << absl::StrFormat("%.2f", (EnvTime::NowMicros() - start) * 1e-6)
            << " s: SavedModel (tag serve), signature \"" << kGradientsSignatureKey
            << "\" (inputs " << absl::StrJoin(stats.input_keys, ", ") << "; outputs "
            << absl::StrJoin(stats.output_keys, ", ") << "), " << stats.variables
            << (stats.variables == 1 ? " weight" : " weights") << " in variables/ (" << absl::StrFormat("%.1f", stats.variable_bytes / 1e6)
            << " MB), saved_model.pb " << absl::StrFormat("%.1f", stats.saved_model_bytes / 1e3)
            << " kB (" << stats.graph_nodes << " nodes, " << stats.functions << " functions)\n";
  if (stats.tf_ext_ops.empty()) {
    std::cout << "  only TensorFlow's own ops: it loads without tf_ext\n";
  } else {
    std::cout << "  it uses tf_ext's ops " << absl::StrJoin(stats.tf_ext_ops, ", ")
              << ": load the op library before loading it\n";
  }
  return absl::OkStatus();
}

// --save, --dump_backward and --export.
absl::Status WriteOutputs(const Flags& flags, const GradientRequest& request,
                          GradientResult* result) {
  if (!flags.save.empty()) {
    if (absl::Status s = SaveGradients(flags.save, request.xs, result->y, result->grads); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot write '", flags.save, "': ", s.message()));
    }
  }
  if (!flags.dump_backward.empty()) {
    TF_RETURN_IF_ERROR(WriteTextProto(Env::Default(), flags.dump_backward, result->backward_graph));
  }
  if (!flags.export_dir.empty()) TF_RETURN_IF_ERROR(Export(flags, request, result));
  return absl::OkStatus();
}

// --check: central differences against the gradient; sets *pass.
absl::Status Check(const Flags& flags, const GradientRequest& request,
                   const GradientResult& result, bool* pass) {
  NumericCheckResult check;
  NumericCheckOptions check_options;
  check_options.delta = flags.delta;
  check_options.projections = flags.projections;
  check_options.seed = flags.seed;
  check_options.optimize_graph = flags.optimize;
  if (absl::Status s = NumericCheck(request, result, check_options, &check); !s.ok()) {
    return absl::InternalError(absl::StrCat("numeric check failed to run: ", s.message()));
  }
  bool all_double = true;
  for (const Tensor& x : result.xs) all_double &= x.dtype() == DT_DOUBLE;
  const double tol = flags.tolerance >= 0 ? flags.tolerance : (all_double ? 1e-6 : 1e-2);
  *pass = check.max_rel_error <= tol;
  std::cout << "numeric check (central differences, "
            << (check.projections > 0
                    ? absl::StrCat(check.elements, " directions: ", check.projections,
                                   " random projections per x over 256 elements, each element "
                                   "of smaller xs")
                    : absl::StrCat(check.elements, " elements"))
            << ", " << absl::StrFormat("%.2f", check.seconds) << " s): max abs error " << check.max_abs_error << ", max rel error "
            << check.max_rel_error;
  if (check.worst_x >= 0) {
    std::cout << " at " << request.xs[check.worst_x].ToString()
              << (check.projections > 0 ? " direction " : "[") << check.worst_element
              << (check.projections > 0 ? "" : "]") << " (symbolic " << check.worst_symbolic << ", numeric " << check.worst_numeric
              << ")";
  }
  std::cout << ", tolerance " << tol << ": " << (*pass ? "PASS" : "FAIL") << "\n";
  for (const std::string& op : check.surrogates) {
    std::cout << "  (differenced the surrogate forward of " << op
              << ": its gradient is by design not the derivative of its forward)\n";
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  Flags flags;
  FlagParser parser("tf_ext_grad",
                    "Gradients of a forward GraphDef computed entirely in C++ (no Python).\n"
                    "Without --graph it differentiates a built-in example graph through the "
                    "tf_ext ops.");
  DeclareFlags(&parser, &flags);
  const absl::Status parsed = parser.Parse(argc, argv);
  if (parser.help_requested()) {
    std::cout << parser.Usage();
    return 0;
  }
  if (!parsed.ok()) return Fail(parser.ErrorLine(parsed.message()));
  MemoryBudget memory_budget;
  if (!flags.memory_budget.empty()) {
    auto budget = ParseMemoryBudget(flags.memory_budget);
    if (!budget.ok()) return Fail(absl::StrCat("--", budget.status().message()));
    memory_budget = *budget;
  }
  GradientRequest request;
  absl::Status s = CheckFlagCombinations(flags);
  if (s.ok()) s = LoadOpLibrary(flags);
  if (s.ok()) s = BuildRequest(flags, &request);
  if (!s.ok()) return Fail(std::string(s.message()));
  request.backward_memory_budget = memory_budget;
  const int64_t loaded_mb = ResidentMb("VmRSS");

  GradientResult result;
  std::vector<double> benchmark_ms;
  s = flags.benchmark > 0 ? BenchmarkGradientSession(flags, &request, &result, &benchmark_ms)
                          : ComputeGraphGradients(&request, &result, OptionsOf(flags));
  if (!s.ok()) return Fail(std::string(s.message()));
  PrintBuild(flags, result, benchmark_ms);
  PrintValues(flags, request, result, loaded_mb);
  bool pass = true;
  s = WriteOutputs(flags, request, &result);
  if (s.ok() && flags.check) s = Check(flags, request, result, &pass);
  if (!s.ok()) return Fail(std::string(s.message()));
  return pass ? 0 : 2;
}

}  // namespace
}  // namespace tensorflow::tf_ext::tools

int main(int argc, char** argv) {
  tensorflow::tf_ext::tools::QuietTensorFlowStartup();
  return tensorflow::tf_ext::tools::Main(argc, argv);
}
