// tf_ext_grad: gradients of a forward GraphDef computed entirely in C++ (no Python).
//
//   tf_ext_grad [--graph=PATH] [--y=node:idx] [--x=node:idx,...] [--feed=name=VALUE]...
//               [--seed=N] [--library=PATH] [--check] [--projections=N] [--delta=H]
//               [--tolerance=TOL] [--save=PATH.npz] [--max_values=N] [--dump_backward=PATH]
//
// Without --graph it differentiates a built-in example graph through the tf_ext ops.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <unistd.h>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tensorflow/core/platform/env.h"
#include "tf_ext/tools/flags.h"
#include "tf_ext/tools/graph_gradients.h"

namespace tensorflow::tf_ext::tools {
namespace {

constexpr char kUsage[] = R"(usage: tf_ext_grad [flags]
  --graph=PATH          forward GraphDef (text or binary); default: the built-in example
  --y=NODE[:IDX]        tensor to differentiate (its sum, i.e. incoming gradient = ones)
  --x=NODE[:IDX],...    tensors to differentiate with respect to
  --feed=NAME=VALUE     a value for a placeholder (repeatable). VALUE is one of
                          [SHAPE:]V1,V2,...  SHAPE like 2x3 (omitted: 1-D; "scalar")
                          @FILE.npy | @FILE.npz[:KEY] | [SHAPE:]@FILE (raw, placeholder dtype)
                          random[:SEED]      standard normal, the placeholder's shape
                        Placeholders of fully known shape that get no --feed are fed random
                        values (seed --seed, printed).
  --seed=N              seed of the default random feeds and of --check's projections (0)
  --library=PATH        op library to load (default: $TF_EXT_LIBRARY, then next to this binary)
  --check               also compare with central differences and print PASS/FAIL
  --projections=N       --check along N random +-1 directions per x (default: elementwise for
                        xs of <= 256 elements, else 16); 0: always elementwise
  --delta=H             finite-difference step (default 1e-3 float, 1e-6 double)
  --tolerance=TOL       max relative error for PASS (default 1e-2 float graphs, 1e-6 double)
  --save=PATH           y and every gradient at full precision: PATH.npz (np.savez: y,
                        d_<x>), else text (name dtype [shape] values, 17 digits)
  --dump_backward=PATH  write the forward+backward GraphDef (text) that was run
  --max_values=N        values printed per tensor (default 8)
)";

struct Flags {
  std::string graph, y, x, library, save, dump_backward;
  std::vector<std::string> feeds;
  bool check = false;
  double delta = 0, tolerance = -1;
  int max_values = 8;
  int projections = -1;
  uint64_t seed = 0;
};

int Fail(const std::string& msg) {
  std::cerr << "tf_ext_grad: error: " << msg << "\n";
  return 1;
}

bool ParseFlags(int argc, char** argv, Flags* f, std::string* error) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name, std::string* out) { return FlagValue(a, name, out); };
    std::string v;
    if (a == "--check") {
      f->check = true;
    } else if (value("graph", &f->graph) || value("y", &f->y) || value("x", &f->x) ||
               value("library", &f->library) || value("save", &f->save) ||
               value("dump_backward", &f->dump_backward)) {
    } else if (value("feed", &v)) {
      f->feeds.push_back(v);
    } else if (value("delta", &v)) {
      if (!absl::SimpleAtod(v, &f->delta)) return *error = "bad --delta " + v, false;
    } else if (value("tolerance", &v)) {
      if (!absl::SimpleAtod(v, &f->tolerance)) return *error = "bad --tolerance " + v, false;
    } else if (value("projections", &v)) {
      if (!absl::SimpleAtoi(v, &f->projections) || f->projections < 0) {
        return *error = "bad --projections " + v, false;
      }
    } else if (value("seed", &v)) {
      if (!absl::SimpleAtoi(v, &f->seed)) return *error = "bad --seed " + v, false;
    } else if (value("max_values", &v)) {
      if (!absl::SimpleAtoi(v, &f->max_values)) return *error = "bad --max_values " + v, false;
    } else {
      *error = "unknown argument '" + a + "'";
      return false;
    }
  }
  return true;
}

std::string DefaultLibrary() {
  if (const char* env = std::getenv("TF_EXT_LIBRARY")) return env;
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return "_tf_ext_ops.so";
  exe[n] = '\0';
  const std::string self(exe);
  const std::string dir = self.substr(0, self.rfind('/'));
  for (const std::string& c : {dir + "/../_tf_ext_ops.so", dir + "/_tf_ext_ops.so",
                               self + ".runfiles/tf_ext/tf_ext/_tf_ext_ops.so"}) {
    if (Env::Default()->FileExists(c).ok()) return c;
  }
  return dir + "/../_tf_ext_ops.so";
}

int Main(int argc, char** argv) {
  Flags flags;
  std::string error;
  if (argc > 1 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::cout << kUsage;
    return 0;
  }
  if (!ParseFlags(argc, argv, &flags, &error)) return Fail(error + "\n" + kUsage);

  const std::string library = flags.library.empty() ? DefaultLibrary() : flags.library;
  if (!Env::Default()->FileExists(library).ok()) {
    return Fail(absl::StrCat("op library '", library, "' not found (use --library=PATH)"));
  }
  void* handle = nullptr;
  if (absl::Status s = Env::Default()->LoadDynamicLibrary(library.c_str(), &handle); !s.ok()) {
    return Fail(absl::StrCat("cannot load op library '", library, "': ", s.message()));
  }

  GradientRequest request;
  if (flags.graph.empty()) {
    request = DefaultExample();
    std::cout << "tf_ext_grad: no --graph given, differentiating the built-in example graph\n";
  } else {
    if (flags.y.empty() || flags.x.empty()) return Fail("--graph needs --y and --x");
    if (absl::Status s = LoadGraph(flags.graph, &request.graph); !s.ok()) {
      return Fail(std::string(s.message()));
    }
  }
  if (!flags.y.empty()) {
    auto y = TensorRef::Parse(flags.y);
    if (!y.ok()) return Fail(std::string(y.status().message()));
    request.y = *y;
  }
  if (!flags.x.empty()) {
    request.xs.clear();
    for (const std::string& part :
         std::vector<std::string>(absl::StrSplit(flags.x, ',', absl::SkipEmpty()))) {
      auto x = TensorRef::Parse(part);
      if (!x.ok()) return Fail(std::string(x.status().message()));
      request.xs.push_back(*x);
    }
  }
  for (const std::string& spec : flags.feeds) {
    auto feed = ParseFeed(spec, request.graph);
    if (!feed.ok()) return Fail(std::string(feed.status().message()));
    request.feeds.push_back(*feed);
  }

  for (const std::string& name : AddRandomFeeds(&request, flags.seed)) {
    std::cout << "tf_ext_grad: feeding '" << name << "' random values (--seed=" << flags.seed
              << "; reproduce with --feed=" << name << "=random:" << flags.seed << ")\n";
  }

  GradientResult result;
  if (absl::Status s = ComputeGraphGradients(request, &result); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  std::cout << "built the backward graph in " << absl::StrFormat("%.2f", result.build_seconds)
            << " s (" << result.backward_graph.node_size() << " nodes";
  if (result.inlined_calls > 0) std::cout << ", " << result.inlined_calls << " function calls inlined";
  if (result.workarounds.negative_axes > 0) {
    std::cout << ", " << result.workarounds.negative_axes
              << " negative reduction axes made non-negative";
  }
  if (result.workarounds.grouped_convs > 0) {
    std::cout << ", " << result.workarounds.grouped_convs
              << " grouped Conv2D as DepthwiseConv2dNative";
  }
  std::cout << "), ran it in " << absl::StrFormat("%.2f", result.run_seconds) << " s\n";
  std::cout << "y = sum(" << request.y.ToString() << "): " << FormatTensor(result.y, flags.max_values)
            << "\n";
  for (size_t i = 0; i < request.xs.size(); ++i) {
    std::cout << "d sum(y) / d " << request.xs[i].ToString() << ": "
              << FormatTensor(result.grads[i], flags.max_values) << "\n";
  }
  if (!flags.save.empty()) {
    if (absl::Status s = SaveGradients(flags.save, request, result); !s.ok()) {
      return Fail(absl::StrCat("cannot write '", flags.save, "': ", s.message()));
    }
  }
  if (!flags.dump_backward.empty()) {
    if (absl::Status s = WriteTextProto(Env::Default(), flags.dump_backward, result.backward_graph);
        !s.ok()) {
      return Fail(std::string(s.message()));
    }
  }
  if (flags.check) {
    NumericCheckResult check;
    NumericCheckOptions options;
    options.delta = flags.delta;
    options.projections = flags.projections;
    options.seed = flags.seed;
    if (absl::Status s = NumericCheck(request, result, options, &check); !s.ok()) {
      return Fail(absl::StrCat("numeric check failed to run: ", s.message()));
    }
    bool all_double = true;
    for (const Tensor& x : result.xs) all_double &= x.dtype() == DT_DOUBLE;
    const double tol = flags.tolerance >= 0 ? flags.tolerance : (all_double ? 1e-6 : 1e-2);
    const bool pass = check.max_rel_error <= tol;
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
    std::cout << ", tolerance " << tol << ": " << (pass ? "PASS" : "FAIL") << "\n";
    for (const std::string& op : check.surrogates) {
      std::cout << "  (differenced the surrogate forward of " << op
                << ": its gradient is by design not the derivative of its forward)\n";
    }
    if (!pass) return 2;
  }
  return 0;
}

}  // namespace
}  // namespace tensorflow::tf_ext::tools

int main(int argc, char** argv) { return tensorflow::tf_ext::tools::Main(argc, argv); }
