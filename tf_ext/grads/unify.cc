#include "tf_ext/grads/unify.h"

#include <algorithm>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensorflow/cc/framework/grad_op_registry.h"
#include "tensorflow/core/framework/op.h"
#include "tf_ext/grads/client_gradient.h"
#include "tf_ext/grads/registry.h"

namespace tensorflow::tf_ext {
namespace {

bool HasFunctionEntry(const std::string& op) {
  gradient::Creator unused;
  return gradient::GetOpGradientCreator(op, &unused).ok();
}

bool HasClientEntry(const std::string& op, ops::GradFunc* fn = nullptr) {
  ops::GradFunc unused;
  return ops::GradOpRegistry::Global()->Lookup(op, fn != nullptr ? fn : &unused).ok();
}

std::vector<std::string> RegisteredOps() {
  std::vector<OpDef> defs;
  OpRegistry::Global()->GetRegisteredOps(&defs);
  std::vector<std::string> names;
  names.reserve(defs.size());
  for (const OpDef& d : defs) names.push_back(d.name());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

RegistryCounts CountGradientRegistries(std::vector<std::string>* lacking_function,
                                       std::vector<std::string>* lacking_client) {
  RegistryCounts c;
  if (lacking_function != nullptr) lacking_function->clear();
  if (lacking_client != nullptr) lacking_client->clear();
  for (const std::string& op : RegisteredOps()) {
    const bool f = HasFunctionEntry(op), cl = HasClientEntry(op);
    ++c.ops;
    if (f && cl) ++c.both;
    if (f && !cl) ++c.function_only;
    if (!f && cl) ++c.client_only;
    if (!f && !cl) ++c.neither;
    if (!f && lacking_function != nullptr) lacking_function->push_back(op);
    if (!cl && lacking_client != nullptr) lacking_client->push_back(op);
  }
  return c;
}

absl::Status UnifyGradientRegistries(RegistryReport* report) {
  static std::mutex* mu = new std::mutex;
  std::lock_guard<std::mutex> lock(*mu);
  RegistryReport local;
  RegistryReport& r = report != nullptr ? *report : local;
  r = RegistryReport();
  r.before = CountGradientRegistries();
  for (const std::string& op : RegisteredOps()) {
    ops::GradFunc client = nullptr;
    const bool has_client = HasClientEntry(op, &client);
    const bool has_function = HasFunctionEntry(op);
    if (has_client && !has_function) {
      if (client == nullptr) {
        gradient::RegisterOp(op, nullptr);  // client no-gradient: zeros in both
      } else {
        gradient::RegisterOp(op, [op, client](const AttrSlice& attrs, FunctionDef* fdef) {
          return ClientGradientAsFunction(op, client, attrs, fdef);
        });
      }
      r.added_function.push_back(op);
    } else if (has_function && !has_client) {
      gradient::Creator creator;
      TF_RETURN_IF_ERROR(gradient::GetOpGradientCreator(op, &creator));
      ops::GradOpRegistry::Global()->Register(op, creator ? &SymbolicGradientClientGrad : nullptr);
      r.added_client.push_back(op);
    }
  }
  r.after = CountGradientRegistries(&r.lacking_function, &r.lacking_client);
  return absl::OkStatus();
}

std::string RegistryReport::ToString(bool list_lacking) const {
  auto counts = [](const char* when, const RegistryCounts& c) {
    return absl::StrCat(when, ": ", c.ops, " ops; both registries ", c.both, ", function only ",
                        c.function_only, ", client only ", c.client_only, ", neither ", c.neither,
                        "\n");
  };
  std::string s = absl::StrCat(counts("before", before), counts("after ", after));
  absl::StrAppend(&s, "added to the function registry (", added_function.size(),
                  "): ", absl::StrJoin(added_function, " "), "\n");
  absl::StrAppend(&s, "added to the client registry (", added_client.size(),
                  "): ", absl::StrJoin(added_client, " "), "\n");
  if (list_lacking) {
    absl::StrAppend(&s, "still lacking in the function registry (", lacking_function.size(),
                    "): ", absl::StrJoin(lacking_function, " "), "\n");
    absl::StrAppend(&s, "still lacking in the client registry (", lacking_client.size(),
                    "): ", absl::StrJoin(lacking_client, " "), "\n");
  }
  return s;
}

}  // namespace tensorflow::tf_ext

extern "C" int TfExtUnifyGradientRegistries(char* report, size_t report_len) {
  tensorflow::tf_ext::RegistryReport r;
  const absl::Status s = tensorflow::tf_ext::UnifyGradientRegistries(&r);
  const std::string text = s.ok() ? r.ToString(false) : std::string(s.message());
  if (report != nullptr && report_len > 0) {
    std::strncpy(report, text.c_str(), report_len - 1);
    report[report_len - 1] = '\0';
  }
  return s.ok() ? 0 : 1;
}
