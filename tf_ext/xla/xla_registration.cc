#include "tf_ext/xla/xla_registration.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "tensorflow/core/framework/kernel_def.pb.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_def.pb.h"
#include "tf_ext/grads/manifest.h"
#include "tf_ext/grads/single_copy.h"
#include "tf_ext/ops/op_checks.h"

namespace tensorflow::tf_ext {

namespace {

std::map<std::string, XlaKernelFactory>& Table() {
  static auto* table = new std::map<std::string, XlaKernelFactory>;
  return *table;
}

absl::Status CheckAgainstManifest() {
  std::vector<std::string> problems;
  std::set<std::string> declared;
  for (const OpFacts& f : GradientManifest()) {
    const bool built = Table().count(f.op) > 0;
    if (f.xla) declared.insert(f.op);
    if (f.xla && !built) {
      problems.push_back(absl::StrCat(f.op, " is declared .Xla() but has no XLA kernel"));
    } else if (!f.xla && built) {
      problems.push_back(absl::StrCat(f.op, " has an XLA kernel but is declared .NoXla(\"",
                                      f.xla_note, "\")"));
    } else if (!f.xla && f.xla_note.empty()) {
      problems.push_back(absl::StrCat(f.op, " declares neither .Xla() nor .NoXla(why)"));
    }
  }
  for (const auto& [op, factory] : Table()) {
    if (FindOpFacts(op) == nullptr) {
      problems.push_back(absl::StrCat(op, " has an XLA kernel but no declaration"));
    }
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("tf_ext: the XLA kernels disagree with the op manifest: ",
                   absl::StrJoin(problems, "; ")));
}

// The types XLA's registry gives a type attr on `backend`: those of the OpDef it allows and the
// backend takes. The backend's own list is private to the registry; the JIT kernel of Identity
// (any type) on that backend carries it.
std::vector<DataType> BackendTypes(const std::string& backend, const OpDef::AttrDef& attr) {
  std::set<DataType> backend_types;
  const KernelList identity = GetRegisteredKernelsForOp("Identity");
  for (const KernelDef& k : identity.kernel()) {
    if (k.device_type() != backend) continue;
    for (const auto& c : k.constraint()) {
      for (int t : c.allowed_values().list().type()) backend_types.insert(static_cast<DataType>(t));
    }
  }
  std::vector<DataType> out;
  for (int t : attr.allowed_values().list().type()) {
    if (backend_types.empty() || backend_types.count(static_cast<DataType>(t))) {
      out.push_back(static_cast<DataType>(t));
    }
  }
  return out;
}

bool HasCompilationKernels(const std::string& op) {
  const std::vector<std::string> backends = XlaOpRegistry::BackendNames();
  const KernelList kernels = GetRegisteredKernelsForOp(op);
  for (const KernelDef& k : kernels.kernel()) {
    if (std::find(backends.begin(), backends.end(), k.device_type()) != backends.end()) {
      return true;
    }
  }
  return false;
}

// What RegisterCompilationKernels would have created for `op`, had it been in the registry.
absl::Status CreateCompilationKernels(const std::string& op, XlaKernelFactory factory) {
  const OpDef* op_def = nullptr;
  TF_RETURN_IF_ERROR(OpRegistry::Global()->LookUpOpDef(op, &op_def));
  for (const std::string& backend : XlaOpRegistry::BackendNames()) {
    auto kdef = std::make_unique<KernelDef>();
    kdef->set_op(op);
    kdef->set_device_type(backend);
    bool satisfiable = true;
    for (const OpDef::AttrDef& attr : op_def->attr()) {
      if (attr.type() != "type") continue;
      const std::vector<DataType> types = BackendTypes(backend, attr);
      satisfiable = satisfiable && !types.empty();
      auto* constraint = kdef->add_constraint();
      constraint->set_name(attr.name());
      for (DataType t : types) constraint->mutable_allowed_values()->mutable_list()->add_type(t);
    }
    if (!satisfiable) continue;
    // Lives as long as the process, like the registry's own registrars.
    new kernel_factory::OpKernelRegistrar(kdef.release(), "XlaJitOp", factory);
  }
  return absl::OkStatus();
}

absl::Status Register() {
  TF_RETURN_IF_ERROR(CheckSingleCopy());
  TF_RETURN_IF_ERROR(CheckAgainstManifest());
  const std::vector<std::string> known = XlaOpRegistry::GetAllRegisteredOps();
  for (const auto& [op, factory] : Table()) {
    if (std::find(known.begin(), known.end(), op) != known.end()) continue;
    new XlaOpRegistrar(XlaOpRegistrationBuilder::Name(op).Build(factory));
  }
  // Creates every backend's kernels of every registered op, ours included - unless it ran
  // before (it runs once per process); then nobody will create ours but us.
  XlaOpRegistry::RegisterCompilationKernels();
  for (const auto& [op, factory] : Table()) {
    if (!HasCompilationKernels(op)) TF_RETURN_IF_ERROR(CreateCompilationKernels(op, factory));
  }
  return absl::OkStatus();
}

// The first shape function of a tf_ext op registers the kernels (op_checks.h).
const bool first_shape_fn_hook [[maybe_unused]] = [] {
  SetFirstShapeFnHook([] { RegisterXlaKernels().IgnoreError(); });
  return true;
}();

}  // namespace

bool AddXlaKernel(const char* op, XlaKernelFactory factory) {
  Table()[op] = factory;
  return true;
}

std::vector<std::string> XlaKernelOps() {
  std::vector<std::string> ops;
  for (const auto& [op, factory] : Table()) ops.push_back(op);
  return ops;
}

absl::Status RegisterXlaKernels() {
  static std::mutex mu;
  static bool done = false;
  static absl::Status* result = new absl::Status;
  std::lock_guard<std::mutex> lock(mu);
  if (!done) {
    *result = Register();
    done = true;
  }
  return *result;
}

}  // namespace tensorflow::tf_ext

extern "C" int TfExtRegisterXlaKernels(char* message, size_t len) {
  const absl::Status s = tensorflow::tf_ext::RegisterXlaKernels();
  if (message != nullptr && len > 0) {
    const std::string text(s.message());
    const size_t n = std::min(len - 1, text.size());
    std::memcpy(message, text.data(), n);
    message[n] = '\0';
  }
  return s.ok() ? 0 : 1;
}
