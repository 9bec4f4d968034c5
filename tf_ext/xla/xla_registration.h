// tf_ext's XLA kernels and their registration with TensorFlow's XLA registry.
//
// Each kernel file adds its kernels to a table with TF_EXT_XLA_KERNEL when the library loads;
// that touches no TensorFlow registry, so it is safe while TensorFlow defers a library's
// registrations (tf.load_op_library, TF_LoadLibrary). RegisterXlaKernels() then, once per
// process and after the load:
//   1. checks the table against the op manifest: an op declared .Xla() must have a kernel, one
//      declared .NoXla(why) must not;
//   2. registers every kernel with XlaOpRegistry (XlaOpRegistrar), for every backend;
//   3. has XlaOpRegistry create the compilation kernels of every backend
//      (RegisterCompilationKernels, which runs once per process); if that had already run
//      before step 2 - TensorFlow runs it at the first function instantiation of a process,
//      and tf_ext loads on first use - the kernels of each backend are created here, as it
//      would have (XLA_<backend>_JIT, the types of the op's OpDef that the backend takes).
// It runs from the Python package right after the library loads (tf_ext._loader), from the
// C++ entry points that compile (tf_ext_grad --jit_compile, GradientSession, the trainer), and,
// for any other front end, from the first shape function of a tf_ext op (graphs are built,
// and shape-inferred, before XLA compiles them). A second copy of the library (see
// single_copy.h) registers nothing.
// Tests: tests/python/test_xla.py (load order: a library loaded after the registry has run;
// two threads; the kernels listed per backend), tests/manifest_test.cc.
#ifndef TF_EXT_XLA_XLA_REGISTRATION_H_
#define TF_EXT_XLA_XLA_REGISTRATION_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace tensorflow::tf_ext {

using XlaKernelFactory = OpKernel* (*)(OpKernelConstruction*);

// Adds op's XLA kernel to the table (returns true; called at load time by TF_EXT_XLA_KERNEL).
bool AddXlaKernel(const char* op, XlaKernelFactory factory);

// The table's op types, sorted.
std::vector<std::string> XlaKernelOps();

// Steps 1-3 above. Idempotent and thread-safe: every call returns the first call's status.
absl::Status RegisterXlaKernels();

}  // namespace tensorflow::tf_ext

// C entry point (ctypes, dlsym): RegisterXlaKernels(). Returns 0 on success, else 1 with the
// message copied into `message` (NUL-terminated, at most len bytes).
extern "C" int TfExtRegisterXlaKernels(char* message, size_t len);

#define TF_EXT_XLA_KERNEL(op, ...) TF_EXT_XLA_KERNEL_UNIQ_HELPER(__COUNTER__, op, __VA_ARGS__)
#define TF_EXT_XLA_KERNEL_UNIQ_HELPER(ctr, op, ...) TF_EXT_XLA_KERNEL_UNIQ(ctr, op, __VA_ARGS__)
#define TF_EXT_XLA_KERNEL_UNIQ(ctr, op, ...)                                       \
  static const bool tf_ext_xla_kernel_##ctr [[maybe_unused]] =                     \
      ::tensorflow::tf_ext::AddXlaKernel(                                          \
          op, [](::tensorflow::OpKernelConstruction* c) -> ::tensorflow::OpKernel* { \
            return new __VA_ARGS__(c);                                             \
          })

#endif  // TF_EXT_XLA_XLA_REGISTRATION_H_
