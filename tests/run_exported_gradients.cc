// run_exported_gradients: runs the "gradients" signature of a SavedModel written by
// `tf_ext_grad --export`, with TensorFlow's C++ loader only. It links TensorFlow and nothing
// of tf_ext (not the op library, not the graph-gradient library), and says so:
//
//   run_exported_gradients DIR OUT_DIR [KEY=FILE]... [--runs=N]
//
// FILE holds the raw values (numpy's tofile) of input KEY, whose dtype and shape the signature
// gives. Each output is written to OUT_DIR/<key>.bin (raw) and listed on stdout as
//   output <key> <dtype> [d0,d1,...]
// followed by the load time, the first run's time and the median of N more runs. Exit 3 when
// a tf_ext op is registered or a tf_ext library is mapped into this process (the point of the
// program is that neither is needed), 1 on any other error.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensorflow/cc/saved_model/loader.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/platform/env.h"
#include "tensorflow/core/platform/env_time.h"
#include "tensorflow/core/protobuf/meta_graph.pb.h"
#include "tensorflow/core/public/session.h"
#include "tensorflow/core/public/session_options.h"

namespace tensorflow::tf_ext_test {
namespace {

int Fail(const std::string& msg) {
  std::cerr << "run_exported_gradients: " << msg << "\n";
  return 1;
}

double Seconds() { return EnvTime::NowMicros() * 1e-6; }

// tf_ext op types in TensorFlow's op registry, and mapped files whose path names tf_ext.
std::pair<int, int> TfExtPresence() {
  std::vector<OpDef> ops;
  OpRegistry::Global()->GetRegisteredOps(&ops);
  int registered = 0;
  for (const OpDef& op : ops) registered += absl::StartsWith(op.name(), "TfExt>");
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int mapped = 0;
  while (std::getline(maps, line)) mapped += absl::StrContains(line, "_tf_ext_ops");
  return {registered, mapped};
}

int Main(int argc, char** argv) {
  if (argc < 3) return Fail("usage: run_exported_gradients DIR OUT_DIR [KEY=FILE]... [--runs=N]");
  const std::string dir = argv[1], out_dir = argv[2];
  int runs = 5;
  std::vector<std::pair<std::string, std::string>> input_files;
  for (int i = 3; i < argc; ++i) {
    std::string arg = argv[i];
    if (absl::StartsWith(arg, "--runs=")) {
      if (!absl::SimpleAtoi(arg.substr(7), &runs) || runs < 1) return Fail("bad " + arg);
      continue;
    }
    const size_t eq = arg.find('=');
    if (eq == std::string::npos) return Fail("expected KEY=FILE, got '" + arg + "'");
    input_files.push_back({arg.substr(0, eq), arg.substr(eq + 1)});
  }

  const double load_start = Seconds();
  SavedModelBundle bundle;
  absl::Status s = LoadSavedModel(SessionOptions(), RunOptions(), dir, {"serve"}, &bundle);
  if (!s.ok()) return Fail(absl::StrCat("LoadSavedModel('", dir, "'): ", s.ToString()));
  const double load_seconds = Seconds() - load_start;
  const auto& sigs = bundle.meta_graph_def.signature_def();
  auto sig_it = sigs.find("gradients");
  if (sig_it == sigs.end()) return Fail("no signature \"gradients\"");
  const SignatureDef& sig = sig_it->second;

  std::vector<std::pair<std::string, Tensor>> feeds;
  for (const auto& [key, path] : input_files) {
    auto in = sig.inputs().find(key);
    if (in == sig.inputs().end()) return Fail("the signature has no input '" + key + "'");
    const PartialTensorShape declared(in->second.tensor_shape());
    TensorShape shape;
    if (!declared.AsTensorShape(&shape)) return Fail("input '" + key + "' has no fixed shape");
    Tensor t(in->second.dtype(), shape);
    std::string bytes;
    s = ReadFileToString(Env::Default(), path, &bytes);
    if (!s.ok()) return Fail(s.ToString());
    auto data = t.tensor_data();
    if (bytes.size() != data.size()) {
      return Fail(absl::StrCat(path, ": ", bytes.size(), " bytes, input '", key, "' takes ",
                               data.size()));
    }
    std::copy(bytes.begin(), bytes.end(), const_cast<char*>(data.data()));
    feeds.push_back({in->second.name(), std::move(t)});
  }
  if (feeds.size() != static_cast<size_t>(sig.inputs_size())) {
    return Fail(absl::StrCat("the signature has ", sig.inputs_size(), " inputs, ", feeds.size(),
                             " given"));
  }
  std::vector<std::string> keys, fetches;
  for (const auto& [key, info] : sig.outputs()) {
    keys.push_back(key);
    fetches.push_back(info.name());
  }
  std::vector<Tensor> outs;
  const double run_start = Seconds();
  s = bundle.GetSession()->Run(feeds, fetches, {}, &outs);
  if (!s.ok()) return Fail(absl::StrCat("Session::Run: ", s.ToString()));
  const double first_run = Seconds() - run_start;
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    std::vector<Tensor> again;
    const double start = Seconds();
    s = bundle.GetSession()->Run(feeds, fetches, {}, &again);
    if (!s.ok()) return Fail(absl::StrCat("Session::Run: ", s.ToString()));
    ms.push_back((Seconds() - start) * 1e3);
  }
  std::sort(ms.begin(), ms.end());

  for (size_t i = 0; i < keys.size(); ++i) {
    const Tensor& t = outs[i];
    std::vector<std::string> dims;
    for (int d = 0; d < t.dims(); ++d) dims.push_back(absl::StrCat(t.dim_size(d)));
    s = WriteStringToFile(Env::Default(), absl::StrCat(out_dir, "/", keys[i], ".bin"),
                          t.tensor_data());
    if (!s.ok()) return Fail(s.ToString());
    std::cout << "output " << keys[i] << " " << DataTypeString(t.dtype()) << " ["
              << absl::StrJoin(dims, ",") << "]\n";
  }
  std::cout << "load seconds " << load_seconds << "\nfirst run seconds " << first_run
            << "\nsteady run ms median " << ms[ms.size() / 2] << " over " << runs << "\n";
  const auto [registered, mapped] = TfExtPresence();
  std::cout << "tf_ext ops registered: " << registered << "\ntf_ext libraries mapped: " << mapped
            << "\n";
  return registered + mapped == 0 ? 0 : 3;
}

}  // namespace
}  // namespace tensorflow::tf_ext_test

int main(int argc, char** argv) { return tensorflow::tf_ext_test::Main(argc, argv); }
