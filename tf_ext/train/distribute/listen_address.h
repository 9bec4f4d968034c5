// Makes TensorFlow's gRPC server listen on one address instead of every interface.
//
// GrpcServer::Init adds its listening port as "0.0.0.0:<port>" itself: ServerDef has no bind
// address, and the builder hooks a subclass gets (MaybeMutateBuilder) come after that port is
// added. gRPC then creates the listening socket and calls the C library's bind() with the
// wildcard address ([::]:<port> for a dual-stack socket, else 0.0.0.0:<port>). While a
// ScopedListenAddress lives, the bind() that the shared object holding TensorFlow's gRPC server
// imports (its GOT slots for bind, found from its dynamic section) binds the wildcard address on
// `port` to `address` instead: an IPv4 address as its IPv4-mapped form on a dual-stack socket.
// Every other bind() passes through unchanged to the C library's, resolved once; no other
// object is touched. A slot on a read-only page (RELRO) is written with the page made writable
// for the write and its protection, read from /proc/self/maps, put back after; each slot is
// restored once when the scope ends, by compare-and-swap, so a slot someone else has since
// changed is left as it is.
//
// That the server then listens where it should is not inferred from these binds: distributed.cc
// asks the kernel (host_address.h's ListeningAddresses). Linux (ELF, x86-64 and AArch64) only.
// Tested by tests/cc/listen_address_test.cc and tests/python/test_cluster_bed.py.
#ifndef TF_EXT_TRAIN_DISTRIBUTE_LISTEN_ADDRESS_H_
#define TF_EXT_TRAIN_DISTRIBUTE_LISTEN_ADDRESS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tensorflow::tf_ext::train {

// The GOT slots (each once) through which the shared object that defines TensorFlow's
// GrpcServer calls bind(). NotFound when no loaded object defines it.
absl::StatusOr<std::vector<void**>> GrpcServerBindSlots();

class ScopedListenAddress {
 public:
  // `address`: a numeric IPv4 or IPv6 address (host_address.h's ChooseListenAddress gives one).
  // InvalidArgument when it is not numeric; NotFound / Unimplemented when no loaded object holds
  // TensorFlow's gRPC server or it imports no bind() (nothing to redirect); FailedPrecondition
  // while another scope lives.
  static absl::StatusOr<std::unique_ptr<ScopedListenAddress>> Create(const std::string& address,
                                                                     int port);
  ~ScopedListenAddress();
  ScopedListenAddress(const ScopedListenAddress&) = delete;
  ScopedListenAddress& operator=(const ScopedListenAddress&) = delete;

  // The address the wildcard binds go to, numeric ("127.0.0.1", "::1").
  const std::string& address() const { return address_; }
  // The errno of the first redirected bind that failed on an IPv4 socket (ipv6=false) or on an
  // IPv6 one; 0 when none did.
  int bind_errno(bool ipv6) const;
  // "IPv6 socket: <strerror>; IPv4 socket: <strerror>" for the families whose bind failed.
  std::string BindErrors() const;

 private:
  ScopedListenAddress() = default;
  std::string address_;
};

}  // namespace tensorflow::tf_ext::train

#endif  // TF_EXT_TRAIN_DISTRIBUTE_LISTEN_ADDRESS_H_
