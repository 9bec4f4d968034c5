// Makes TensorFlow's gRPC server listen on one address instead of every interface.
//
// GrpcServer::Init adds its listening port as "0.0.0.0:<port>" itself: ServerDef has no bind
// address, and the builder hooks a subclass gets (MaybeMutateBuilder) come after that port is
// added. gRPC then creates the listening socket and calls the C library's bind() with the
// wildcard address ([::]:<port> for a dual-stack socket, else 0.0.0.0:<port>). While a
// ScopedListenAddress lives, the bind() that TensorFlow's own shared libraries import (their
// GOT slots for bind, found from their dynamic sections) binds the wildcard address on `port`
// to `address` instead: an IPv4 address as its IPv4-mapped form on a dual-stack socket. Every
// other bind() passes through unchanged, and the slots are restored when it ends. Only the
// libraries whose file name holds "tensorflow" are touched; this process's other code never is.
//
// Linux (ELF, x86-64 and AArch64) only. Tested by tests/python/test_fit_distributed.py (a worker
// answers on its cluster address and refuses another loopback address).
#ifndef TF_EXT_TRAIN_DISTRIBUTE_LISTEN_ADDRESS_H_
#define TF_EXT_TRAIN_DISTRIBUTE_LISTEN_ADDRESS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace tensorflow::tf_ext::train {

// True for an address that names every interface: 0.0.0.0, :: or [::].
bool IsWildcardHost(const std::string& host);

class ScopedListenAddress {
 public:
  // `host`: a numeric IPv4 or IPv6 address (brackets allowed) or a name, resolved with
  // getaddrinfo (its first answer). InvalidArgument naming `host` when it does not resolve;
  // Unimplemented when no TensorFlow library in this process imports bind() (nothing to
  // redirect: the server would listen on every interface).
  static absl::StatusOr<std::unique_ptr<ScopedListenAddress>> Create(const std::string& host,
                                                                     int port);
  ~ScopedListenAddress();
  ScopedListenAddress(const ScopedListenAddress&) = delete;
  ScopedListenAddress& operator=(const ScopedListenAddress&) = delete;

  // The address the wildcard binds go to, numeric ("127.0.0.1", "::1").
  const std::string& address() const { return address_; }
  // How many wildcard binds on the port were redirected and succeeded, and the errno of the
  // last one that failed (0: none did).
  int redirected() const;
  int last_errno() const;

 private:
  ScopedListenAddress() = default;
  std::string address_;
};

}  // namespace tensorflow::tf_ext::train

#endif  // TF_EXT_TRAIN_DISTRIBUTE_LISTEN_ADDRESS_H_
