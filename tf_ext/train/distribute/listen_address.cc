#include "tf_ext/train/distribute/listen_address.h"

#include <arpa/inet.h>
#include <elf.h>
#include <link.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tensorflow::tf_ext::train {
namespace {

// The one redirection in effect: its target, port and the GOT slots it replaced.
struct Redirect {
  std::mutex mu;  // guards active and slots
  bool active = false;
  struct Slot {
    void** where;
    void* old;
    bool read_only;  // in the library's RELRO segment
  };
  std::vector<Slot> slots;
  // Read by RedirectedBind, on whichever thread gRPC binds from.
  std::atomic<bool> armed{false};
  std::atomic<int> port{0};
  sockaddr_storage target{};  // written before armed is set
  std::atomic<int> redirected{0};
  std::atomic<int> last_errno{0};
};

Redirect& State() {
  static Redirect* r = new Redirect;  // never destroyed: a library's thread may still bind
  return *r;
}

bool IsWildcardOn(const sockaddr* a, socklen_t len, int port) {
  if (a == nullptr) return false;
  if (a->sa_family == AF_INET && len >= sizeof(sockaddr_in)) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(a);
    return in->sin_addr.s_addr == htonl(INADDR_ANY) && ntohs(in->sin_port) == port;
  }
  if (a->sa_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a);
    return IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr) && ntohs(in6->sin6_port) == port;
  }
  return false;
}

// What TensorFlow's libraries call for bind() while a redirection is in effect.
int RedirectedBind(int fd, const sockaddr* addr, socklen_t len) {
  Redirect& r = State();
  const int port = r.port.load();
  if (!r.armed.load() || !IsWildcardOn(addr, len, port)) return ::bind(fd, addr, len);
  sockaddr_storage to{};
  socklen_t to_len = 0;
  if (addr->sa_family == AF_INET && r.target.ss_family == AF_INET) {
    std::memcpy(&to, &r.target, sizeof(sockaddr_in));
    to_len = sizeof(sockaddr_in);
  } else if (addr->sa_family == AF_INET6 && r.target.ss_family == AF_INET6) {
    std::memcpy(&to, &r.target, sizeof(sockaddr_in6));
    to_len = sizeof(sockaddr_in6);
  } else if (addr->sa_family == AF_INET6) {  // a dual-stack socket, an IPv4 address: mapped
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&r.target);
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&to);
    v6->sin6_family = AF_INET6;
    v6->sin6_port = v4->sin_port;
    v6->sin6_addr.s6_addr[10] = 0xff;
    v6->sin6_addr.s6_addr[11] = 0xff;
    std::memcpy(&v6->sin6_addr.s6_addr[12], &v4->sin_addr, 4);
    to_len = sizeof(sockaddr_in6);
  } else {  // an IPv4 socket cannot listen on an IPv6 address
    r.last_errno = EAFNOSUPPORT;
    errno = EAFNOSUPPORT;
    return -1;
  }
  const int result = ::bind(fd, reinterpret_cast<const sockaddr*>(&to), to_len);
  if (result == 0) {
    ++r.redirected;
  } else {
    r.last_errno = errno;
  }
  return result;
}

#if defined(__x86_64__)
constexpr uint32_t kJumpSlot = R_X86_64_JUMP_SLOT;
constexpr uint32_t kGlobDat = R_X86_64_GLOB_DAT;
#elif defined(__aarch64__)
constexpr uint32_t kJumpSlot = R_AARCH64_JUMP_SLOT;
constexpr uint32_t kGlobDat = R_AARCH64_GLOB_DAT;
#endif

// dl_iterate_phdr's callback: the GOT slots through which a TensorFlow library calls bind().
int FindBindSlots(dl_phdr_info* info, size_t, void* data) {
#if defined(__x86_64__) || defined(__aarch64__)
  const char* name = info->dlpi_name;
  if (name == nullptr) return 0;
  const char* slash = std::strrchr(name, '/');
  if (std::strstr(slash == nullptr ? name : slash + 1, "tensorflow") == nullptr) return 0;
  const ElfW(Addr) base = info->dlpi_addr;
  const ElfW(Dyn)* dynamic = nullptr;
  ElfW(Addr) relro_begin = 0, relro_end = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& p = info->dlpi_phdr[i];
    if (p.p_type == PT_DYNAMIC) dynamic = reinterpret_cast<const ElfW(Dyn)*>(base + p.p_vaddr);
    if (p.p_type == PT_GNU_RELRO) {
      relro_begin = base + p.p_vaddr;
      relro_end = relro_begin + p.p_memsz;
    }
  }
  if (dynamic == nullptr) return 0;
  ElfW(Addr) jmprel = 0, pltrelsz = 0, rela = 0, relasz = 0, symtab = 0, strtab = 0;
  ElfW(Sxword) pltrel = 0;
  for (const ElfW(Dyn)* d = dynamic; d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_JMPREL: jmprel = d->d_un.d_ptr; break;
      case DT_PLTRELSZ: pltrelsz = d->d_un.d_val; break;
      case DT_PLTREL: pltrel = d->d_un.d_val; break;
      case DT_RELA: rela = d->d_un.d_ptr; break;
      case DT_RELASZ: relasz = d->d_un.d_val; break;
      case DT_SYMTAB: symtab = d->d_un.d_ptr; break;
      case DT_STRTAB: strtab = d->d_un.d_ptr; break;
      default: break;
    }
  }
  // The loader may have relocated these pointers in place (glibc does on x86-64) or not.
  auto at = [base](ElfW(Addr) p) { return p < base ? base + p : p; };
  if (symtab == 0 || strtab == 0) return 0;
  const auto* symbols = reinterpret_cast<const ElfW(Sym)*>(at(symtab));
  const char* strings = reinterpret_cast<const char*>(at(strtab));
  auto* found = static_cast<std::vector<Redirect::Slot>*>(data);
  auto scan = [&](ElfW(Addr) table, ElfW(Addr) size) {
    if (table == 0) return;
    const auto* entries = reinterpret_cast<const ElfW(Rela)*>(at(table));
    for (size_t i = 0; i < size / sizeof(ElfW(Rela)); ++i) {
      const uint32_t type = ELF64_R_TYPE(entries[i].r_info);
      if (type != kJumpSlot && type != kGlobDat) continue;
      const ElfW(Sym)& symbol = symbols[ELF64_R_SYM(entries[i].r_info)];
      if (std::strcmp(strings + symbol.st_name, "bind") != 0) continue;
      const ElfW(Addr) where = base + entries[i].r_offset;
      found->push_back({reinterpret_cast<void**>(where), nullptr,
                              where >= relro_begin && where < relro_end});
    }
  };
  if (pltrel == DT_RELA) scan(jmprel, pltrelsz);
  scan(rela, relasz);
#endif
  return 0;
}

// Writes `value` into a GOT slot, lifting a RELRO page's protection for the write.
bool WriteSlot(const Redirect::Slot& slot, void* value) {
  const uintptr_t page_size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  void* page = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(slot.where) & ~(page_size - 1));
  if (slot.read_only && mprotect(page, page_size, PROT_READ | PROT_WRITE) != 0) return false;
  __atomic_store_n(slot.where, value, __ATOMIC_SEQ_CST);
  if (slot.read_only) mprotect(page, page_size, PROT_READ);
  return true;
}

std::string Unbracketed(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

}  // namespace

bool IsWildcardHost(const std::string& host) {
  const std::string h = Unbracketed(host);
  return h == "0.0.0.0" || h == "::";
}

absl::StatusOr<std::unique_ptr<ScopedListenAddress>> ScopedListenAddress::Create(
    const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* answers = nullptr;
  const std::string name = Unbracketed(host);
  const int error = getaddrinfo(name.c_str(), nullptr, &hints, &answers);
  if (error != 0 || answers == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("listen address '", host,
                                                   "' does not resolve: ", gai_strerror(error)));
  }
  sockaddr_storage target{};
  std::memcpy(&target, answers->ai_addr, answers->ai_addrlen);
  freeaddrinfo(answers);
  char text[INET6_ADDRSTRLEN] = {};
  if (target.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&target);
    in->sin_port = htons(static_cast<uint16_t>(port));
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&target);
    in6->sin6_port = htons(static_cast<uint16_t>(port));
    inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
  }

  Redirect& r = State();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.active) {
    return absl::FailedPreconditionError("another listen address is already in effect");
  }
  std::vector<Redirect::Slot> found;
  dl_iterate_phdr(FindBindSlots, &found);
  if (found.empty()) {
    return absl::UnimplementedError(
        "no TensorFlow library in this process imports bind(): cannot choose the address "
        "TensorFlow's gRPC server listens on");
  }
  r.target = target;
  r.port = port;
  r.redirected = 0;
  r.last_errno = 0;
  r.armed = true;
  r.slots.clear();
  for (Redirect::Slot& slot : found) {
    slot.old = __atomic_load_n(slot.where, __ATOMIC_SEQ_CST);
    if (!WriteSlot(slot, reinterpret_cast<void*>(&RedirectedBind))) {
      for (const Redirect::Slot& done : r.slots) WriteSlot(done, done.old);
      r.armed = false;
      return absl::InternalError(absl::StrCat("cannot redirect TensorFlow's bind(): mprotect: ",
                                              std::strerror(errno)));
    }
    r.slots.push_back(slot);
  }
  r.active = true;
  std::unique_ptr<ScopedListenAddress> scope(new ScopedListenAddress());
  scope->address_ = text;
  return scope;
}

ScopedListenAddress::~ScopedListenAddress() {
  Redirect& r = State();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const Redirect::Slot& slot : r.slots) WriteSlot(slot, slot.old);
  r.slots.clear();
  r.armed = false;
  r.active = false;
}

int ScopedListenAddress::redirected() const { return State().redirected.load(); }

int ScopedListenAddress::last_errno() const { return State().last_errno.load(); }

}  // namespace tensorflow::tf_ext::train
