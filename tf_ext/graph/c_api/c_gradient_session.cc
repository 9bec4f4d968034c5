#include "tf_ext/graph/c_api/c_gradient_session.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensorflow/c/tf_status_helper.h"
#include "tensorflow/c/tf_tensor_helper.h"
#include "tf_ext/graph/runtime/gradient_session.h"
#include "tf_ext/graph/runtime/saved_model.h"

struct TfExtGradientSession {
  std::unique_ptr<tensorflow::tf_ext::GradientSession> session;
};

namespace tensorflow::tf_ext {
namespace {

constexpr char kWhat[] = "GradientSession: ";

absl::StatusOr<std::vector<TensorRef>> Refs(const char* const* names, int n, const char* role) {
  if (n <= 0 || names == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(kWhat, "no ", role, " given"));
  }
  std::vector<TensorRef> refs;
  for (int i = 0; i < n; ++i) {
    if (names[i] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(kWhat, role, "[", i, "] is NULL"));
    }
    auto ref = TensorRef::Parse(names[i]);
    if (!ref.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(kWhat, role, "[", i, "] '", names[i],
                                                     "': ", ref.status().message()));
    }
    refs.push_back(*ref);
  }
  return refs;
}

std::vector<bool> Flags(const unsigned char* flags, int n) {
  if (flags == nullptr) return {};
  return std::vector<bool>(flags, flags + n);
}

// The keys TfExtNewGradientSessionWithOptions takes, each setting one GradientSessionOptions
// field from its text.
struct SessionOption {
  const char* key;
  const char* value;  // for the error message: what the value must be
  absl::Status (*set)(const std::string& text, GradientSessionOptions* options);
};

absl::StatusOr<bool> ParseBool(const std::string& text) {
  if (text == "true" || text == "1") return true;
  if (text == "false" || text == "0") return false;
  return absl::InvalidArgumentError("");
}

absl::StatusOr<int64_t> ParseInt(const std::string& text) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(text, &v) || v < 0) return absl::InvalidArgumentError("");
  return v;
}

// A bool field's setter (true/false, 1/0).
template <bool GradientSessionOptions::*kField>
absl::Status SetBool(const std::string& text, GradientSessionOptions* options) {
  TF_ASSIGN_OR_RETURN(options->*kField, ParseBool(text));
  return absl::OkStatus();
}

const std::vector<SessionOption>& SessionOptionTable() {
  static const auto* table = new std::vector<SessionOption>{
      {"max_tensor_bytes", "an integer >= 0",
       [](const std::string& t, GradientSessionOptions* o) {
         TF_ASSIGN_OR_RETURN(o->max_tensor_bytes, ParseInt(t));
         return absl::OkStatus();
       }},
      {"backward_memory_budget", "a fraction in (0, 1] or bytes with K/M/G",
       [](const std::string& t, GradientSessionOptions* o) {
         if (t.empty()) return absl::OkStatus();
         TF_ASSIGN_OR_RETURN(o->backward_memory_budget, ParseMemoryBudget(t));
         return absl::OkStatus();
       }},
      {"optimize_graph", "true or false", SetBool<&GradientSessionOptions::optimize_graph>},
      {"hoist_constants", "true or false", SetBool<&GradientSessionOptions::hoist_constants>},
      {"jit_compile", "true or false", SetBool<&GradientSessionOptions::jit_compile>},
      {"jit_compile_cache", "an integer >= 1",
       [](const std::string& t, GradientSessionOptions* o) {
         TF_ASSIGN_OR_RETURN(int64_t n, ParseInt(t));
         if (n < 1 || n > INT32_MAX) return absl::InvalidArgumentError("");
         o->jit_compile_cache = static_cast<int>(n);
         return absl::OkStatus();
       }},
  };
  return *table;
}

absl::Status SetSessionOption(const char* key, const char* value,
                              GradientSessionOptions* options) {
  if (key == nullptr || value == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(kWhat, "an option's key or value is NULL"));
  }
  std::vector<std::string> keys;
  for (const SessionOption& o : SessionOptionTable()) {
    keys.push_back(o.key);
    if (key != std::string(o.key)) continue;
    absl::Status s = o.set(value, options);
    if (s.ok()) return s;
    return absl::InvalidArgumentError(absl::StrCat(
        kWhat, "option '", key, "': '", value, "' is not ", o.value,
        s.message().empty() ? "" : absl::StrCat(" (", s.message(), ")")));
  }
  return absl::InvalidArgumentError(absl::StrCat(kWhat, "unknown option '", key, "'; the options are ",
                                                 absl::StrJoin(keys, ", ")));
}

TfExtGradientSession* NewFromGraphDef(const void* graph_def, size_t len, const char* const* ys,
                                      int ny, const char* const* xs, int nx,
                                      const unsigned char* incoming_gradients,
                                      const GradientSessionOptions& options, TF_Status* status);

TfExtGradientSession* Wrap(absl::StatusOr<std::unique_ptr<GradientSession>> s, TF_Status* status) {
  if (!s.ok()) {
    tensorflow::Set_TF_Status_from_Status(status, s.status());
    return nullptr;
  }
  tensorflow::Set_TF_Status_from_Status(status, absl::OkStatus());
  return new TfExtGradientSession{std::move(*s)};
}

}  // namespace
}  // namespace tensorflow::tf_ext

extern "C" {

TfExtGradientSession* TfExtNewGradientSession(const void* graph_def, size_t len,
                                              const char* const* ys, int ny,
                                              const char* const* xs, int nx,
                                              const unsigned char* incoming_gradients,
                                              int64_t max_tensor_bytes, TF_Status* status) {
  return TfExtNewGradientSessionWithMemoryBudget(graph_def, len, ys, ny, xs, nx,
                                                 incoming_gradients, max_tensor_bytes, nullptr,
                                                 status);
}

TfExtGradientSession* TfExtNewGradientSessionWithMemoryBudget(
    const void* graph_def, size_t len, const char* const* ys, int ny, const char* const* xs,
    int nx, const unsigned char* incoming_gradients, int64_t max_tensor_bytes,
    const char* backward_memory_budget, TF_Status* status) {
  namespace tfx = tensorflow::tf_ext;
  tfx::GradientSessionOptions options;
  options.max_tensor_bytes = max_tensor_bytes;
  if (backward_memory_budget != nullptr && backward_memory_budget[0] != '\0') {
    auto budget = tfx::ParseMemoryBudget(backward_memory_budget);
    if (!budget.ok()) {
      tensorflow::Set_TF_Status_from_Status(
          status, absl::InvalidArgumentError(
                      absl::StrCat("GradientSession: ", budget.status().message())));
      return nullptr;
    }
    options.backward_memory_budget = *budget;
  }
  return tfx::NewFromGraphDef(graph_def, len, ys, ny, xs, nx, incoming_gradients, options,
                              status);
}

TfExtGradientSession* TfExtNewGradientSessionWithOptions(
    const void* graph_def, size_t len, const char* const* ys, int ny, const char* const* xs,
    int nx, const unsigned char* incoming_gradients, const char* const* option_keys,
    const char* const* option_values, int num_options, TF_Status* status) {
  namespace tfx = tensorflow::tf_ext;
  tfx::GradientSessionOptions options;
  for (int i = 0; i < num_options; ++i) {
    absl::Status s = option_keys == nullptr || option_values == nullptr
                         ? absl::InvalidArgumentError("GradientSession: option keys or values are NULL")
                         : tfx::SetSessionOption(option_keys[i], option_values[i], &options);
    if (!s.ok()) {
      tensorflow::Set_TF_Status_from_Status(status, s);
      return nullptr;
    }
  }
  return tfx::NewFromGraphDef(graph_def, len, ys, ny, xs, nx, incoming_gradients, options,
                              status);
}

}  // extern "C"

namespace tensorflow::tf_ext {
namespace {

TfExtGradientSession* NewFromGraphDef(const void* graph_def, size_t len, const char* const* ys,
                                      int ny, const char* const* xs, int nx,
                                      const unsigned char* incoming_gradients,
                                      const GradientSessionOptions& options, TF_Status* status) {
  namespace tfx = tensorflow::tf_ext;
  tensorflow::GraphDef graph;
  if (graph_def == nullptr || !graph.ParseFromArray(graph_def, static_cast<int>(len)) ||
      len > static_cast<size_t>(INT32_MAX)) {
    tensorflow::Set_TF_Status_from_Status(status, absl::InvalidArgumentError(
                                          "GradientSession: graph_def is not a GraphDef"));
    return nullptr;
  }
  tfx::GradientSessionSpec spec;
  auto y_refs = tfx::Refs(ys, ny, "ys");
  auto x_refs = tfx::Refs(xs, nx, "xs");
  if (!y_refs.ok() || !x_refs.ok()) {
    tensorflow::Set_TF_Status_from_Status(status, !y_refs.ok() ? y_refs.status() : x_refs.status());
    return nullptr;
  }
  spec.ys = *y_refs;
  spec.xs = *x_refs;
  spec.incoming_gradients = tfx::Flags(incoming_gradients, ny);
  return tfx::Wrap(tfx::GradientSession::Create(std::move(graph), spec, options), status);
}

}  // namespace
}  // namespace tensorflow::tf_ext

extern "C" {

TfExtGradientSession* TfExtNewGradientSessionFromSavedModel(
    const char* export_dir, const char* signature_key, const char* const* ys, int ny,
    const char* const* xs, int nx, const unsigned char* incoming_gradients,
    int64_t max_tensor_bytes, TF_Status* status) {
  namespace tfx = tensorflow::tf_ext;
  if (export_dir == nullptr || (ys == nullptr && ny > 0) || (xs == nullptr && nx > 0) || ny <= 0 ||
      nx <= 0) {
    tensorflow::Set_TF_Status_from_Status(status, absl::InvalidArgumentError(
                                          "GradientSession: export_dir, ys and xs are required"));
    return nullptr;
  }
  std::vector<std::string> y_keys, x_keys;
  for (int i = 0; i < ny; ++i) {
    if (ys[i] == nullptr) {
      tensorflow::Set_TF_Status_from_Status(status, absl::InvalidArgumentError(absl::StrCat(
                                            "GradientSession: ys[", i, "] is NULL")));
      return nullptr;
    }
    y_keys.push_back(ys[i]);
  }
  for (int i = 0; i < nx; ++i) {
    if (xs[i] == nullptr) {
      tensorflow::Set_TF_Status_from_Status(status, absl::InvalidArgumentError(absl::StrCat(
                                            "GradientSession: xs[", i, "] is NULL")));
      return nullptr;
    }
    x_keys.push_back(xs[i]);
  }
  tfx::GradientSessionOptions options;
  options.max_tensor_bytes = max_tensor_bytes;
  return tfx::Wrap(
      tfx::GradientSessionFromSavedModel(export_dir,
                                         signature_key != nullptr ? signature_key : "serving_default",
                                         y_keys, x_keys, tfx::Flags(incoming_gradients, ny), options),
      status);
}

int TfExtGradientSessionNumInputs(const TfExtGradientSession* session) {
  return session == nullptr ? 0 : static_cast<int>(session->session->inputs().size());
}

const char* TfExtGradientSessionInputName(const TfExtGradientSession* session, int i) {
  if (session == nullptr || i < 0 || i >= TfExtGradientSessionNumInputs(session)) return nullptr;
  return session->session->inputs()[i].name.c_str();
}

TF_DataType TfExtGradientSessionInputType(const TfExtGradientSession* session, int i) {
  if (session == nullptr || i < 0 || i >= TfExtGradientSessionNumInputs(session)) {
    return static_cast<TF_DataType>(0);
  }
  return static_cast<TF_DataType>(session->session->inputs()[i].dtype);
}

void TfExtGradientSessionRun(const TfExtGradientSession* session, const char* const* feed_names,
                             TF_Tensor* const* feed_values, int nfeeds, TF_Tensor** ys,
                             TF_Tensor** dxs, TF_Status* status) {
  namespace tfx = tensorflow::tf_ext;
  if (session == nullptr || ys == nullptr || dxs == nullptr || nfeeds < 0 ||
      (nfeeds > 0 && (feed_names == nullptr || feed_values == nullptr))) {
    tensorflow::Set_TF_Status_from_Status(status, absl::InvalidArgumentError(
                                          "GradientSession: session, feeds, ys and dxs are required"));
    return;
  }
  std::vector<std::pair<std::string, tensorflow::Tensor>> feeds;
  for (int i = 0; i < nfeeds; ++i) {
    if (feed_names[i] == nullptr || feed_values[i] == nullptr) {
      tensorflow::Set_TF_Status_from_Status(status, absl::InvalidArgumentError(absl::StrCat(
                                            "GradientSession: feed ", i, " has no name or value")));
      return;
    }
    tensorflow::Tensor t;
    absl::Status s = tensorflow::TF_TensorToTensor(feed_values[i], &t);
    if (!s.ok()) {
      tensorflow::Set_TF_Status_from_Status(status, absl::InvalidArgumentError(absl::StrCat(
                                            "GradientSession: feed '", feed_names[i], "': ",
                                            s.message())));
      return;
    }
    feeds.push_back({feed_names[i], std::move(t)});
  }
  std::vector<tensorflow::Tensor> y_values, dx_values;
  absl::Status s = session->session->Run(feeds, &y_values, &dx_values);
  if (!s.ok()) {
    tensorflow::Set_TF_Status_from_Status(status, s);
    return;
  }
  std::vector<TF_Tensor*> out;
  for (const auto* values : {&y_values, &dx_values}) {
    for (const tensorflow::Tensor& t : *values) {
      TF_Tensor* c = tensorflow::TF_TensorFromTensor(t, &s);
      if (c == nullptr || !s.ok()) {
        for (TF_Tensor* done : out) TF_DeleteTensor(done);
        tensorflow::Set_TF_Status_from_Status(status, s.ok() ? absl::InternalError("GradientSession: no tensor") : s);
        return;
      }
      out.push_back(c);
    }
  }
  for (size_t i = 0; i < y_values.size(); ++i) ys[i] = out[i];
  for (size_t i = 0; i < dx_values.size(); ++i) dxs[i] = out[y_values.size() + i];
  tensorflow::Set_TF_Status_from_Status(status, absl::OkStatus());
}

void TfExtDeleteGradientSession(TfExtGradientSession* session) { delete session; }

}  // extern "C"
