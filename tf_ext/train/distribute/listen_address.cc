#include "tf_ext/train/distribute/listen_address.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tf_ext/train/distribute/host_address.h"

namespace tensorflow::tf_ext::train {
namespace {

using BindFunction = int (*)(int, const sockaddr*, socklen_t);

// The C library's bind(), looked up once: never through this object's own PLT, whose slot
// could be one of those redirected when tf_ext is linked into the object that holds the server.
BindFunction RealBind() {
  static const BindFunction real = [] {
    void* f = dlsym(RTLD_NEXT, "bind");
    if (f == nullptr) {
      if (void* libc = dlopen("libc.so.6", RTLD_NOLOAD | RTLD_LAZY)) f = dlsym(libc, "bind");
    }
    return reinterpret_cast<BindFunction>(f);
  }();
  return real;
}

// The one redirection in effect: its target, port and the GOT slots it replaced.
struct Redirect {
  std::mutex mu;  // guards active and slots
  bool active = false;
  struct Slot {
    void** where;
    void* old;
  };
  std::vector<Slot> slots;
  // Read by RedirectedBind, on whichever thread gRPC binds from.
  std::atomic<bool> armed{false};
  std::atomic<int> port{0};
  sockaddr_storage target{};  // written before armed is set
  std::atomic<int> errno_v4{0}, errno_v6{0};  // the first failure on each socket family
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

void NoteFailure(bool ipv6, int error) {
  int none = 0;
  (ipv6 ? State().errno_v6 : State().errno_v4).compare_exchange_strong(none, error);
}

// What the server's object calls for bind() while a redirection is in effect.
int RedirectedBind(int fd, const sockaddr* addr, socklen_t len) {
  Redirect& r = State();
  const int port = r.port.load();
  if (!r.armed.load() || !IsWildcardOn(addr, len, port)) return RealBind()(fd, addr, len);
  sockaddr_storage to{};
  socklen_t to_len = 0;
  const bool ipv6 = addr->sa_family == AF_INET6;
  if (!ipv6 && r.target.ss_family == AF_INET) {
    std::memcpy(&to, &r.target, sizeof(sockaddr_in));
    to_len = sizeof(sockaddr_in);
  } else if (ipv6 && r.target.ss_family == AF_INET6) {
    std::memcpy(&to, &r.target, sizeof(sockaddr_in6));
    to_len = sizeof(sockaddr_in6);
  } else if (ipv6) {  // a dual-stack socket, an IPv4 address: mapped
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&r.target);
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&to);
    v6->sin6_family = AF_INET6;
    v6->sin6_port = v4->sin_port;
    v6->sin6_addr.s6_addr[10] = 0xff;
    v6->sin6_addr.s6_addr[11] = 0xff;
    std::memcpy(&v6->sin6_addr.s6_addr[12], &v4->sin_addr, 4);
    to_len = sizeof(sockaddr_in6);
  } else {  // an IPv4 socket cannot listen on an IPv6 address
    NoteFailure(false, EAFNOSUPPORT);
    errno = EAFNOSUPPORT;
    return -1;
  }
  const int result = RealBind()(fd, reinterpret_cast<const sockaddr*>(&to), to_len);
  if (result != 0) NoteFailure(ipv6, errno);
  return result;
}

#if defined(__x86_64__)
constexpr uint32_t kJumpSlot = R_X86_64_JUMP_SLOT;
constexpr uint32_t kGlobDat = R_X86_64_GLOB_DAT;
#elif defined(__aarch64__)
constexpr uint32_t kJumpSlot = R_AARCH64_JUMP_SLOT;
constexpr uint32_t kGlobDat = R_AARCH64_GLOB_DAT;
#endif

// GrpcServer::Start(), which the object holding TensorFlow's gRPC server defines.
constexpr char kServerSymbol[] = "_ZN10tensorflow10GrpcServer5StartEv";

struct Search {
  const void* server = nullptr;  // the address of kServerSymbol
  std::set<void**> slots;
  bool found_object = false;
};

bool Holds(const dl_phdr_info* info, const void* address) {
  const auto a = reinterpret_cast<ElfW(Addr)>(address);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& p = info->dlpi_phdr[i];
    const ElfW(Addr) begin = info->dlpi_addr + p.p_vaddr;
    if (p.p_type == PT_LOAD && a >= begin && a < begin + p.p_memsz) return true;
  }
  return false;
}

// dl_iterate_phdr's callback: the GOT slots through which the server's object calls bind().
int FindBindSlots(dl_phdr_info* info, size_t, void* data) {
  auto* search = static_cast<Search*>(data);
#if defined(__x86_64__) || defined(__aarch64__)
  if (!Holds(info, search->server)) return 0;
  search->found_object = true;
  const ElfW(Addr) base = info->dlpi_addr;
  const ElfW(Dyn)* dynamic = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& p = info->dlpi_phdr[i];
    if (p.p_type == PT_DYNAMIC) dynamic = reinterpret_cast<const ElfW(Dyn)*>(base + p.p_vaddr);
  }
  if (dynamic == nullptr) return 1;
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
  if (symtab == 0 || strtab == 0) return 1;
  const auto* symbols = reinterpret_cast<const ElfW(Sym)*>(at(symtab));
  const char* strings = reinterpret_cast<const char*>(at(strtab));
  // DT_RELASZ may cover .rela.plt as well (GNU ld): a slot found twice is kept once.
  auto scan = [&](ElfW(Addr) table, ElfW(Addr) size) {
    if (table == 0) return;
    const auto* entries = reinterpret_cast<const ElfW(Rela)*>(at(table));
    for (size_t i = 0; i < size / sizeof(ElfW(Rela)); ++i) {
      const uint32_t type = ELF64_R_TYPE(entries[i].r_info);
      if (type != kJumpSlot && type != kGlobDat) continue;
      const ElfW(Sym)& symbol = symbols[ELF64_R_SYM(entries[i].r_info)];
      if (std::strcmp(strings + symbol.st_name, "bind") != 0) continue;
      search->slots.insert(reinterpret_cast<void**>(base + entries[i].r_offset));
    }
  };
  if (pltrel == DT_RELA) scan(jmprel, pltrelsz);
  scan(rela, relasz);
  return 1;
#else
  return 0;
#endif
}

// The protection of the mapping holding `address`, from /proc/self/maps; -1 when not found.
int Protection(uintptr_t address) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long begin = 0, end = 0;
    char perms[8] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %7s", &begin, &end, perms) != 3) continue;
    if (address < begin || address >= end) continue;
    return (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0) |
           (perms[2] == 'x' ? PROT_EXEC : 0);
  }
  return -1;
}

// Replaces `from` by `to` in a GOT slot if it holds `from`, making its page writable for the
// write when it is not and putting the page's protection back after.
bool SwapSlot(void** where, void* from, void* to) {
  const uintptr_t page_size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t address = reinterpret_cast<uintptr_t>(where);
  void* page = reinterpret_cast<void*>(address & ~(page_size - 1));
  const int protection = Protection(address);
  if (protection < 0) return false;
  const bool lift = (protection & PROT_WRITE) == 0;
  if (lift && mprotect(page, page_size, protection | PROT_WRITE) != 0) return false;
  __atomic_compare_exchange_n(where, &from, to, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  if (lift) mprotect(page, page_size, protection);
  return true;
}

}  // namespace

// Looks kServerSymbol up in each loaded object's own scope: the global one misses an object
// loaded with RTLD_LOCAL (as Python loads extension modules and what they need).
int FindServer(dl_phdr_info* info, size_t, void* data) {
  auto* search = static_cast<Search*>(data);
  const char* name = info->dlpi_name;
  void* handle = dlopen(name != nullptr && *name != '\0' ? name : nullptr, RTLD_NOLOAD | RTLD_LAZY);
  if (handle == nullptr) return 0;
  search->server = dlsym(handle, kServerSymbol);
  dlclose(handle);
  return search->server != nullptr ? 1 : 0;
}

absl::StatusOr<std::vector<void**>> GrpcServerBindSlots() {
  Search search;
  search.server = dlsym(RTLD_DEFAULT, kServerSymbol);
  if (search.server == nullptr) dl_iterate_phdr(FindServer, &search);
  if (search.server == nullptr) {
    return absl::NotFoundError(
        "no loaded object defines TensorFlow's GrpcServer (is libtensorflow_cc loaded?)");
  }
  dl_iterate_phdr(FindBindSlots, &search);
  if (!search.found_object) {
    return absl::NotFoundError("no loaded object holds TensorFlow's GrpcServer::Start");
  }
  return std::vector<void**>(search.slots.begin(), search.slots.end());
}

absl::StatusOr<std::unique_ptr<ScopedListenAddress>> ScopedListenAddress::Create(
    const std::string& address, int port) {
  const std::optional<sockaddr_storage> target = NumericAddress(address, port);
  if (!target.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen address '", address, "' is not a numeric IPv4 or IPv6 address"));
  }
  if (RealBind() == nullptr) return absl::InternalError("cannot find the C library's bind()");
  auto slots = GrpcServerBindSlots();
  if (!slots.ok()) return slots.status();
  if (slots->empty()) {
    return absl::UnimplementedError(
        "TensorFlow's gRPC server does not import bind(): cannot choose the address it listens on");
  }
  Redirect& r = State();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.active) {
    return absl::FailedPreconditionError("another listen address is already in effect");
  }
  r.target = *target;
  r.port = port;
  r.errno_v4 = 0;
  r.errno_v6 = 0;
  r.armed = true;
  r.slots.clear();
  void* redirect = reinterpret_cast<void*>(&RedirectedBind);
  for (void** where : *slots) {
    void* old = __atomic_load_n(where, __ATOMIC_SEQ_CST);
    if (!SwapSlot(where, old, redirect)) {
      for (const Redirect::Slot& done : r.slots) SwapSlot(done.where, redirect, done.old);
      r.slots.clear();
      r.armed = false;
      return absl::InternalError(absl::StrCat("cannot redirect TensorFlow's bind(): mprotect: ",
                                              std::strerror(errno)));
    }
    r.slots.push_back({where, old});
  }
  r.active = true;
  std::unique_ptr<ScopedListenAddress> scope(new ScopedListenAddress());
  scope->address_ = address;
  return scope;
}

ScopedListenAddress::~ScopedListenAddress() {
  Redirect& r = State();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const Redirect::Slot& slot : r.slots) {
    SwapSlot(slot.where, reinterpret_cast<void*>(&RedirectedBind), slot.old);
  }
  r.slots.clear();
  r.armed = false;
  r.active = false;
}

int ScopedListenAddress::bind_errno(bool ipv6) const {
  return (ipv6 ? State().errno_v6 : State().errno_v4).load();
}

std::string ScopedListenAddress::BindErrors() const {
  std::vector<std::string> parts;
  for (const bool ipv6 : {true, false}) {
    if (const int e = bind_errno(ipv6); e != 0) {
      parts.push_back(absl::StrCat(ipv6 ? "IPv6" : "IPv4", " socket: ", std::strerror(e)));
    }
  }
  return absl::StrJoin(parts, "; ");
}

}  // namespace tensorflow::tf_ext::train
