#include "tf_ext/train/distribute/host_address.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tensorflow::tf_ext::train {
namespace {

// An address's numeric text, IPv4-mapped IPv6 addresses written as IPv4.
std::string Text(const sockaddr* a) {
  char text[INET6_ADDRSTRLEN] = {};
  if (a->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a)->sin_addr, text, sizeof text);
  } else if (a->sa_family == AF_INET6) {
    const in6_addr& in6 = reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&in6)) {
      inet_ntop(AF_INET, &in6.s6_addr[12], text, sizeof text);
    } else {
      inet_ntop(AF_INET6, &in6, text, sizeof text);
    }
  }
  return text;
}

bool IsLoopback(const std::string& text) {
  auto s = NumericAddress(text);
  if (!s.has_value()) return false;
  if (s->ss_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(&*s)->sin_addr.s_addr) >> 24) == 127;
  }
  return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(&*s)->sin6_addr);
}

bool IsIPv4(const std::string& text) {
  auto s = NumericAddress(text);
  return s.has_value() && s->ss_family == AF_INET;
}

// The distinct numeric answers for a name, in getaddrinfo's order.
absl::StatusOr<std::vector<std::string>> Resolve(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int error = getaddrinfo(name.c_str(), nullptr, &hints, &found);
  if (error != 0 || found == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("host '", name, "' does not resolve: ", gai_strerror(error)));
  }
  std::vector<std::string> answers;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const std::string text = Text(a->ai_addr);
    if (!text.empty() && std::find(answers.begin(), answers.end(), text) == answers.end()) {
      answers.push_back(text);
    }
  }
  freeaddrinfo(found);
  return answers;
}

// The addresses of this machine's interfaces (of this network namespace).
std::set<std::string> InterfaceAddresses() {
  std::set<std::string> mine;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return mine;
  for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    if (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6) continue;
    mine.insert(Text(i->ifa_addr));
  }
  freeifaddrs(list);
  return mine;
}

// The inodes of this process's sockets.
std::set<uint64_t> SocketInodes() {
  std::set<uint64_t> inodes;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return inodes;
  while (const dirent* e = readdir(dir)) {
    char link[64] = {};
    const std::string path = absl::StrCat("/proc/self/fd/", e->d_name);
    const ssize_t n = readlink(path.c_str(), link, sizeof link - 1);
    unsigned long long inode = 0;
    if (n > 0 && std::sscanf(link, "socket:[%llu]", &inode) == 1) inodes.insert(inode);
  }
  closedir(dir);
  return inodes;
}

// A /proc/net/tcp{,6} address: 32-bit words as the kernel prints them, each in host order.
std::string KernelAddress(const std::string& hex, bool v6) {
  sockaddr_storage s{};
  const int words = v6 ? 4 : 1;
  if (hex.size() != static_cast<size_t>(8 * words)) return "";
  uint32_t raw[4] = {};
  for (int w = 0; w < words; ++w) {
    unsigned int value = 0;
    if (std::sscanf(hex.substr(8 * w, 8).c_str(), "%8X", &value) != 1) return "";
    raw[w] = value;
  }
  if (v6) {
    s.ss_family = AF_INET6;
    std::memcpy(&reinterpret_cast<sockaddr_in6*>(&s)->sin6_addr, raw, 16);
  } else {
    s.ss_family = AF_INET;
    std::memcpy(&reinterpret_cast<sockaddr_in*>(&s)->sin_addr, raw, 4);
  }
  return Text(reinterpret_cast<const sockaddr*>(&s));
}

}  // namespace

std::optional<sockaddr_storage> NumericAddress(const std::string& text, int port) {
  sockaddr_storage s{};
  auto* in = reinterpret_cast<sockaddr_in*>(&s);
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&s);
  if (inet_pton(AF_INET, text.c_str(), &in->sin_addr) == 1) {
    in->sin_family = AF_INET;
    in->sin_port = htons(static_cast<uint16_t>(port));
    return s;
  }
  if (inet_pton(AF_INET6, text.c_str(), &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(static_cast<uint16_t>(port));
    return s;
  }
  return std::nullopt;
}

std::string Unbracketed(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

bool IsWildcardHost(const std::string& host) {
  const std::string h = Unbracketed(host);
  return h == "0.0.0.0" || h == "::";
}

bool IsLoopbackHost(const std::string& host) {
  const std::string name = Unbracketed(host);
  if (NumericAddress(name).has_value()) return IsLoopback(name);
  auto answers = Resolve(name);
  if (!answers.ok() || answers->empty()) return false;
  for (const std::string& a : *answers) {
    if (!IsLoopback(a)) return false;
  }
  return true;
}

absl::StatusOr<std::string> ChooseListenAddress(const std::string& host,
                                                bool cluster_on_loopback) {
  const std::string name = Unbracketed(host);
  if (auto numeric = NumericAddress(name); numeric.has_value()) {
    return Text(reinterpret_cast<const sockaddr*>(&*numeric));
  }
  if (name != host) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", host, "' is not a numeric IPv6 address in brackets"));
  }
  auto answers = Resolve(name);
  if (!answers.ok()) return answers.status();
  const std::set<std::string> interfaces = InterfaceAddresses();
  std::vector<std::string> v4, v6, loopback;
  for (const std::string& a : *answers) {
    const bool keep = IsLoopback(a) ? cluster_on_loopback : interfaces.count(a) > 0;
    if (IsLoopback(a)) loopback.push_back(a);
    if (keep) (IsIPv4(a) ? v4 : v6).push_back(a);
  }
  const std::vector<std::string>& chosen = v4.empty() ? v6 : v4;
  if (chosen.size() == 1) return chosen[0];
  std::string why;
  if (chosen.empty()) {
    why = "none of them is an address of this machine";
    if (!loopback.empty()) {
      absl::StrAppend(&why, " other than loopback (", absl::StrJoin(loopback, ", "),
                      "), where the other tasks, not all on loopback, cannot reach it");
    }
  } else {
    why = absl::StrCat("several are this machine's (", absl::StrJoin(chosen, ", "), ")");
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "host '", name, "' resolves to ", absl::StrJoin(*answers, ", "), ": ", why,
      " (set option 'listen_address' to the address to listen on)"));
}

absl::StatusOr<std::vector<std::string>> ListeningAddresses(int port) {
  const std::set<uint64_t> mine = SocketInodes();
  std::vector<std::string> found;
  int tables = 0;
  for (const bool v6 : {false, true}) {
    std::ifstream table(v6 ? "/proc/net/tcp6" : "/proc/net/tcp");
    if (!table) continue;
    ++tables;
    std::string line;
    std::getline(table, line);  // the heading
    while (std::getline(table, line)) {
      const std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (f.size() < 10 || f[3] != "0A") continue;  // 0A: TCP_LISTEN
      const std::vector<std::string> local = absl::StrSplit(f[1], ':');
      unsigned int local_port = 0;
      uint64_t inode = 0;
      if (local.size() != 2 || std::sscanf(local[1].c_str(), "%X", &local_port) != 1 ||
          static_cast<int>(local_port) != port || !absl::SimpleAtoi(f[9], &inode) ||
          mine.count(inode) == 0) {
        continue;
      }
      found.push_back(KernelAddress(local[0], v6));
    }
  }
  if (tables == 0) {
    return absl::UnavailableError("cannot read the kernel's socket table (/proc/net/tcp, tcp6)");
  }
  return found;
}

bool SameAddress(const std::string& a, const std::string& b) {
  auto x = NumericAddress(Unbracketed(a)), y = NumericAddress(Unbracketed(b));
  if (!x.has_value() || !y.has_value()) return a == b;
  return Text(reinterpret_cast<const sockaddr*>(&*x)) == Text(reinterpret_cast<const sockaddr*>(&*y));
}

}  // namespace tensorflow::tf_ext::train
