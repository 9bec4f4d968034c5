// tf_ext/train/distribute/listen_address.h and host_address.h: the redirection of the gRPC
// server's bind() changes the wildcard bind on its port alone, leaves every other bind (another
// port, a non-wildcard address) as it is, restores every slot and its page's protection; the
// kernel's socket table names what this process listens on; a task's own name gives the address
// of this machine to listen on, or an error naming its answers.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tf_ext/train/distribute/host_address.h"
#include "tf_ext/train/distribute/listen_address.h"

namespace tensorflow::tf_ext::train {
namespace {

using BindFunction = int (*)(int, const sockaddr*, socklen_t);

// A port nothing listens on now (the kernel's pick).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// Binds a new socket of `family` to the wildcard (or `address`) on `port` through `bind_fn`;
// where the kernel says it is bound, "address port", or "failed".
std::string BindThrough(BindFunction bind_fn, int family, const char* address, int port, int* fd) {
  *fd = socket(family, SOCK_STREAM, 0);
  sockaddr_storage s{};
  socklen_t len = 0;
  if (family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&s);
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    inet_pton(AF_INET, address, &in->sin_addr);
    len = sizeof(sockaddr_in);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&s);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    inet_pton(AF_INET6, address, &in6->sin6_addr);
    len = sizeof(sockaddr_in6);
  }
  if (bind_fn(*fd, reinterpret_cast<sockaddr*>(&s), len) != 0) return "failed";
  len = sizeof s;
  getsockname(*fd, reinterpret_cast<sockaddr*>(&s), &len);
  char text[INET6_ADDRSTRLEN] = {};
  int bound_port = 0;
  if (s.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<sockaddr_in*>(&s);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    bound_port = ntohs(in->sin_port);
  } else {
    const auto* in6 = reinterpret_cast<sockaddr_in6*>(&s);
    inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
    bound_port = ntohs(in6->sin6_port);
  }
  return std::string(text) + " " + std::to_string(bound_port);
}

// The permissions field of the /proc/self/maps line holding `address` ("r--p").
std::string MapPermissions(const void* address) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const auto a = reinterpret_cast<unsigned long>(address);
  while (std::getline(maps, line)) {
    unsigned long begin = 0, end = 0;
    char perms[8] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %7s", &begin, &end, perms) == 3 && a >= begin && a < end) {
      return perms;
    }
  }
  return "";
}

TEST(ListenAddressTest, RedirectsTheWildcardOnItsPortAloneAndRestoresEverySlot) {
  auto slots = GrpcServerBindSlots();
  ASSERT_TRUE(slots.ok()) << slots.status();
  ASSERT_FALSE(slots->empty());
  std::vector<void*> before;
  std::vector<std::string> protection;
  for (void** slot : *slots) {
    before.push_back(*slot);
    protection.push_back(MapPermissions(slot));
  }
  const int port = FreePort(), other = FreePort();
  auto scope = ScopedListenAddress::Create("127.0.0.1", port);
  ASSERT_TRUE(scope.ok()) << scope.status();
  for (size_t i = 0; i < slots->size(); ++i) {
    auto redirected = reinterpret_cast<BindFunction>(*(*slots)[i]);
    ASSERT_NE(reinterpret_cast<void*>(redirected), before[i]);
    EXPECT_EQ(MapPermissions((*slots)[i]), protection[i]);
    int a = -1, b = -1, c = -1, d = -1;
    EXPECT_EQ(BindThrough(redirected, AF_INET, "0.0.0.0", port, &a), "127.0.0.1 " + std::to_string(port));
    EXPECT_EQ(BindThrough(redirected, AF_INET, "0.0.0.0", other, &b), "0.0.0.0 " + std::to_string(other));
    close(b);
    const int third = FreePort();
    EXPECT_EQ(BindThrough(redirected, AF_INET, "127.0.0.1", third, &c), "127.0.0.1 " + std::to_string(third));
    close(a);
    // A dual-stack socket's wildcard goes to the IPv4 address's mapped form.
    const std::string v6 = BindThrough(redirected, AF_INET6, "::", port, &d);
    EXPECT_TRUE(v6 == "::ffff:127.0.0.1 " + std::to_string(port) || v6 == "failed") << v6;
    close(c);
    close(d);
  }
  // A second scope while one lives is refused.
  auto second = ScopedListenAddress::Create("127.0.0.1", other);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  scope->reset();
  for (size_t i = 0; i < slots->size(); ++i) {
    EXPECT_EQ(*(*slots)[i], before[i]) << "slot " << i << " was not restored";
    EXPECT_EQ(MapPermissions((*slots)[i]), protection[i]);
  }
  // Slots are found once each.
  auto again = GrpcServerBindSlots();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *slots);
}

TEST(ListenAddressTest, RefusesAnAddressThatIsNotNumeric) {
  auto scope = ScopedListenAddress::Create("localhost", FreePort());
  EXPECT_EQ(scope.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(scope.status().message()).find("'localhost' is not a numeric"), std::string::npos);
}

TEST(HostAddressTest, ListeningAddressesAreTheKernelsWord) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  const int port = FreePort();
  a.sin_port = htons(port);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  auto none = ListeningAddresses(port);  // bound, not listening
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
  ASSERT_EQ(listen(fd, 1), 0);
  auto found = ListeningAddresses(port);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*found, std::vector<std::string>{"127.0.0.1"});
  const int fd6 = socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 w{};
  w.sin6_family = AF_INET6;
  const int port6 = FreePort();
  w.sin6_port = htons(port6);
  ASSERT_EQ(bind(fd6, reinterpret_cast<sockaddr*>(&w), sizeof w), 0);
  ASSERT_EQ(listen(fd6, 1), 0);
  EXPECT_EQ(*ListeningAddresses(port6), std::vector<std::string>{"::"});
  EXPECT_TRUE(ListeningAddresses(FreePort())->empty());
  close(fd);
  close(fd6);
}

TEST(HostAddressTest, ChoosesANumericAddressAsWritten) {
  EXPECT_EQ(*ChooseListenAddress("127.0.0.1", false), "127.0.0.1");
  EXPECT_EQ(*ChooseListenAddress("[::1]", false), "::1");
  EXPECT_EQ(*ChooseListenAddress("198.18.0.9", false), "198.18.0.9");
  EXPECT_FALSE(ChooseListenAddress("[localhost]", true).ok());
  EXPECT_TRUE(SameAddress("::ffff:127.0.0.1", "127.0.0.1"));
  EXPECT_TRUE(SameAddress("[::1]", "::1"));
  EXPECT_FALSE(SameAddress("127.0.0.1", "127.0.0.2"));
  EXPECT_TRUE(IsWildcardHost("[::]"));
  EXPECT_TRUE(IsWildcardHost("0.0.0.0"));
  EXPECT_FALSE(IsWildcardHost("127.0.0.1"));
}

TEST(HostAddressTest, ANameOnLoopbackIsChosenOnlyForAClusterOnLoopback) {
  ASSERT_TRUE(IsLoopbackHost("localhost"));
  EXPECT_TRUE(IsLoopbackHost("127.0.0.1"));
  EXPECT_FALSE(IsLoopbackHost("198.18.0.9"));
  EXPECT_FALSE(IsLoopbackHost("no-such-host.invalid"));
  auto chosen = ChooseListenAddress("localhost", true);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  // IPv4 on a dual-stack answer (localhost may give ::1 first).
  EXPECT_EQ(*chosen, "127.0.0.1");
  auto refused = ChooseListenAddress("localhost", false);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message()).find("host 'localhost' resolves to "), std::string::npos)
      << refused.status();
  EXPECT_NE(std::string(refused.status().message()).find("other than loopback"), std::string::npos);
  EXPECT_NE(std::string(refused.status().message()).find("option 'listen_address'"), std::string::npos);
  auto unknown = ChooseListenAddress("no-such-host.invalid", false);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tensorflow::tf_ext::train
