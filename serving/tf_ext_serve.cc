// tf_ext_serve: runs the signatures of a SavedModel that uses tf_ext ops, from C++ only.
//
//   tf_ext_serve --saved_model=DIR --shape=2,4 --values=1,2,... [--library=_tf_ext_ops.so]
//                [--signatures=forward,gradient] [--input=x]
//
// Without --library the op library is looked up as tf_ext/tools/library_lookup.h says.
//
// Loads the op library with Env::LoadDynamicLibrary (its ops, kernels and C++ gradients
// register themselves), the SavedModel with LoadSavedModel (tag "serve"), feeds one float32
// tensor to each signature and prints every output as
//   <signature>/<output> shape=[d0,d1] values=v0,v1,...
// with 9 significant digits (exact for float32), sorted by output name.
#include <cstdio>
#include <map>
#include <string>
#include <unordered_set>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tensorflow/cc/saved_model/loader.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/env.h"
#include "tensorflow/core/protobuf/meta_graph.pb.h"
#include "tensorflow/core/public/session.h"
#include "tensorflow/core/public/session_options.h"
#include "tf_ext/tools/flags.h"
#include "tf_ext/tools/library_lookup.h"
#include "tf_ext/tools/quiet_startup.h"

namespace tensorflow::tf_ext {
namespace {

struct Flags {
  std::string library, saved_model, input = "x";
  std::vector<int64_t> shape;
  std::vector<float> values;
  std::vector<std::string> signatures;
};

absl::Status ParseNumbers(absl::string_view flag, const std::string& text,
                          std::vector<double>* out) {
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    double v = 0;
    if (!absl::SimpleAtod(part, &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tf_ext_serve: bad number '", part, "' in --", flag));
    }
    out->push_back(v);
  }
  return absl::OkStatus();
}

// Parses the command line into *flags; *help set for --help (then nothing else happens).
absl::Status ParseFlags(int argc, char** argv, Flags* flags, bool* help) {
  std::string shape, values, signatures = "forward,gradient";
  tools::FlagParser parser(
      "tf_ext_serve",
      "Runs the signatures of a SavedModel that uses tf_ext ops, from C++ only: feeds one "
      "float32\ntensor to each signature and prints every output.");
  parser.String("library", &flags->library,
                "op library to load (default: $TF_EXT_LIBRARY, then runfiles, then next to\n"
                "this binary: docs/cpp.md, \"Where the op library is found\")")
      .ValueName("PATH");
  parser.String("saved_model", &flags->saved_model, "SavedModel directory (tag \"serve\")")
      .ValueName("DIR")
      .Required();
  parser.String("shape", &shape, "shape of the input tensor").ValueName("D0,D1,...");
  parser.String("values", &values, "its float32 values, row-major").ValueName("V0,V1,...");
  parser.String("signatures", &signatures, "signatures to run, in this order")
      .ValueName("A,B");
  parser.String("input", &flags->input, "name of the signatures' input").ValueName("NAME");
  absl::Status s = parser.Parse(argc, argv);
  *help = parser.help_requested();
  if (*help) {
    std::printf("%s", parser.Usage().c_str());
    return absl::OkStatus();
  }
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tf_ext_serve: ", parser.ErrorLine(s.message())));
  }
  std::vector<double> numbers;
  TF_RETURN_IF_ERROR(ParseNumbers("shape", shape, &numbers));
  for (double d : numbers) flags->shape.push_back(static_cast<int64_t>(d));
  numbers.clear();
  TF_RETURN_IF_ERROR(ParseNumbers("values", values, &numbers));
  for (double v : numbers) flags->values.push_back(static_cast<float>(v));
  flags->signatures = absl::StrSplit(signatures, ',', absl::SkipEmpty());
  auto library = tools::FindOpLibrary(tools::LibraryLookupContext::FromProcess(flags->library));
  if (!library.ok()) {
    return absl::NotFoundError(absl::StrCat("tf_ext_serve: ", library.status().message()));
  }
  flags->library = *library;
  return absl::OkStatus();
}

std::string Format(const Tensor& t) {
  std::vector<std::string> dims, values;
  for (int64_t d : t.shape().dim_sizes()) dims.push_back(absl::StrCat(d));
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.9g", t.dtype() == DT_FLOAT
                                                ? static_cast<double>(t.flat<float>()(i))
                                                : t.flat<double>()(i));
    values.push_back(buf);
  }
  return absl::StrCat("shape=[", absl::StrJoin(dims, ","), "] values=",
                      absl::StrJoin(values, ","));
}

absl::Status Run(const Flags& flags) {
  void* handle = nullptr;
  TF_RETURN_IF_ERROR(Env::Default()->LoadDynamicLibrary(flags.library.c_str(), &handle));

  SavedModelBundle bundle;
  TF_RETURN_IF_ERROR(LoadSavedModel(SessionOptions(), RunOptions(), flags.saved_model,
                                    {"serve"}, &bundle));

  TensorShape shape;
  TF_RETURN_IF_ERROR(TensorShape::BuildTensorShape(flags.shape, &shape));
  if (shape.num_elements() != static_cast<int64_t>(flags.values.size())) {
    return absl::InvalidArgumentError(absl::StrCat("tf_ext_serve: --shape has ",
                                                   shape.num_elements(), " elements, --values ",
                                                   flags.values.size()));
  }
  Tensor input(DT_FLOAT, shape);
  for (size_t i = 0; i < flags.values.size(); ++i) input.flat<float>()(i) = flags.values[i];

  for (const std::string& name : flags.signatures) {
    auto sig = bundle.GetSignatures().find(name);
    if (sig == bundle.GetSignatures().end()) {
      return absl::NotFoundError(absl::StrCat("tf_ext_serve: no signature '", name, "'"));
    }
    auto in = sig->second.inputs().find(flags.input);
    if (in == sig->second.inputs().end()) {
      return absl::NotFoundError(absl::StrCat("tf_ext_serve: signature '", name,
                                              "' has no input '", flags.input, "'"));
    }
    // Sorted output names, so the printout is stable.
    std::map<std::string, std::string> outputs;
    for (const auto& kv : sig->second.outputs()) outputs[kv.first] = kv.second.name();
    std::vector<std::string> fetch;
    for (const auto& kv : outputs) fetch.push_back(kv.second);
    std::vector<Tensor> results;
    TF_RETURN_IF_ERROR(
        bundle.GetSession()->Run({{in->second.name(), input}}, fetch, {}, &results));
    size_t i = 0;
    for (const auto& kv : outputs) {
      std::printf("%s/%s %s\n", name.c_str(), kv.first.c_str(), Format(results[i++]).c_str());
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace tensorflow::tf_ext

int main(int argc, char** argv) {
  tensorflow::tf_ext::tools::QuietTensorFlowStartup();
  tensorflow::tf_ext::Flags flags;
  bool help = false;
  absl::Status s = tensorflow::tf_ext::ParseFlags(argc, argv, &flags, &help);
  if (help) return 0;
  if (s.ok()) s = tensorflow::tf_ext::Run(flags);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
