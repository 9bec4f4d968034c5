#include "tf_ext/grads/registry_access.h"

namespace tensorflow {
namespace gradient {
// core/framework/function.cc: the function registry's storage (not in any header).
std::unordered_map<std::string, Creator>* GetOpGradFactory();
}  // namespace gradient

namespace tf_ext {
namespace {

using ClientMap = std::unordered_map<std::string, ops::GradFunc>;

// GradOpRegistry::registry_, through the one access an explicit instantiation grants.
ClientMap ops::GradOpRegistry::*ClientMapMember();
template <ClientMap ops::GradOpRegistry::*Member>
struct ClientMapAccess {
  friend ClientMap ops::GradOpRegistry::*ClientMapMember() { return Member; }
};
template struct ClientMapAccess<&ops::GradOpRegistry::registry_>;

}  // namespace

std::unordered_map<std::string, gradient::Creator>& FunctionGradientMap() {
  return *gradient::GetOpGradFactory();
}

std::unordered_map<std::string, ops::GradFunc>& ClientGradientMap() {
  return ops::GradOpRegistry::Global()->*ClientMapMember();
}

}  // namespace tf_ext
}  // namespace tensorflow
