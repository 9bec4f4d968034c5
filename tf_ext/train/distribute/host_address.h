// Which address of this machine a task listens on, and where the kernel says it listens.
//
// A cluster names its tasks by host name or address. A name's answers (getaddrinfo) may hold
// addresses that are not this machine's (a stale DNS record) or loopback ones: Debian and Ubuntu
// map a machine's own name to 127.0.1.1 in /etc/hosts, where no peer can reach it. Of the
// answers, ChooseListenAddress keeps this machine's interface addresses (loopback ones only when
// the whole cluster is on loopback); of those, IPv4 on a dual-stack host; it listens there when
// exactly one is left, and otherwise fails naming the answers.
//
// ListeningAddresses reads the kernel's socket table: the addresses this process's sockets
// listen on at a port (/proc/self/fd's socket inodes matched in /proc/net/tcp and tcp6, which
// list every socket of the network namespace). Linux only.
#ifndef TF_EXT_TRAIN_DISTRIBUTE_HOST_ADDRESS_H_
#define TF_EXT_TRAIN_DISTRIBUTE_HOST_ADDRESS_H_

#include <sys/socket.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tensorflow::tf_ext::train {

// True for an address that names every interface: 0.0.0.0, :: or [::].
bool IsWildcardHost(const std::string& host);

// `text` (no brackets) as a numeric IPv4 or IPv6 socket address on `port`; nothing when it is
// neither.
std::optional<sockaddr_storage> NumericAddress(const std::string& text, int port = 0);

// `host` without the brackets of "[2001:db8::1]".
std::string Unbracketed(const std::string& host);

// True when `host` is a loopback address or a name all of whose answers are loopback ones
// (127.0.0.0/8, ::1); false for a name that does not resolve.
bool IsLoopbackHost(const std::string& host);

// The numeric address to listen on for `host`: itself when numeric ("[addr]" for IPv6), else
// the one answer of its name that is an address of this machine (see above). InvalidArgument
// naming the answers, and which of them are this machine's, when none or several are left.
absl::StatusOr<std::string> ChooseListenAddress(const std::string& host, bool cluster_on_loopback);

// The numeric addresses this process's sockets listen on at `port`, IPv4-mapped IPv6 ones
// written as IPv4 ("127.0.0.1", "::", "0.0.0.0"). Unavailable when /proc cannot be read.
absl::StatusOr<std::vector<std::string>> ListeningAddresses(int port);

// Whether two numeric addresses are the same (an IPv4 one equals its IPv4-mapped IPv6 form).
bool SameAddress(const std::string& a, const std::string& b);

}  // namespace tensorflow::tf_ext::train

#endif  // TF_EXT_TRAIN_DISTRIBUTE_HOST_ADDRESS_H_
