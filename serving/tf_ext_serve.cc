// tf_ext_serve: runs the signatures of a SavedModel that uses tf_ext ops, from C++ only.
//
//   tf_ext_serve --library=_tf_ext_ops.so --saved_model=DIR --shape=2,4 --values=1,2,...
//                [--signatures=forward,gradient] [--input=x]
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

namespace tensorflow::tf_ext {
namespace {

struct Flags {
  std::string library, saved_model, input = "x";
  std::vector<int64_t> shape;
  std::vector<float> values;
  std::vector<std::string> signatures = {"forward", "gradient"};
};

absl::Status ParseFlags(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    std::pair<std::string, std::string> kv = absl::StrSplit(argv[i], absl::MaxSplits('=', 1));
    const std::string& key = kv.first;
    const std::string& value = kv.second;
    if (key == "--library") {
      flags->library = value;
    } else if (key == "--saved_model") {
      flags->saved_model = value;
    } else if (key == "--input") {
      flags->input = value;
    } else if (key == "--signatures") {
      flags->signatures = absl::StrSplit(value, ',', absl::SkipEmpty());
    } else if (key == "--shape" || key == "--values") {
      for (absl::string_view part : absl::StrSplit(value, ',', absl::SkipEmpty())) {
        double v = 0;
        if (!absl::SimpleAtod(part, &v)) {
          return absl::InvalidArgumentError(absl::StrCat("tf_ext_serve: bad number '", part,
                                                         "' in ", key));
        }
        if (key == "--shape") {
          flags->shape.push_back(static_cast<int64_t>(v));
        } else {
          flags->values.push_back(static_cast<float>(v));
        }
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat("tf_ext_serve: unknown flag ", argv[i]));
    }
  }
  if (flags->library.empty() || flags->saved_model.empty()) {
    return absl::InvalidArgumentError("tf_ext_serve: --library and --saved_model are required");
  }
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
  tensorflow::tf_ext::Flags flags;
  absl::Status s = tensorflow::tf_ext::ParseFlags(argc, argv, &flags);
  if (s.ok()) s = tensorflow::tf_ext::Run(flags);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
