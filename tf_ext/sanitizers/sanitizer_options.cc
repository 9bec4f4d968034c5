// Runtime defaults of ASan / UBSan / LSan for every program tf_ext builds with --config=asan
// (each gtest, the C API tests, tf_ext_grad, tf_ext_gradcheck): linked into them by
// build_defs.bzl, so `bazel test`, `make sanitize`'s direct run and a hand-run binary behave
// the same. ASAN_OPTIONS / UBSAN_OPTIONS / LSAN_OPTIONS in the environment still override.
//
// TensorFlow's libraries (libtensorflow_framework.so.2, libtensorflow_cc.so.2) come from the
// pip wheel and are NOT instrumented; only tf_ext's own code is. Each check turned off here
// is one that misfires on that mix, not on tf_ext's code:
//
//   detect_container_overflow=0
//     protobuf's RepeatedField (and absl's containers) annotate their unused capacity when
//     compiled with ASan. Their inline member functions exist twice: instrumented copies in
//     tf_ext's objects and uninstrumented ones inside TensorFlow, and the dynamic linker binds
//     TensorFlow's calls to whichever copy it finds first. A container grown by one copy and
//     read by the other trips a false "container-overflow" (observed: every test aborted in a
//     static initialiser of libtensorflow_cc, KernelDefBuilder::TypeConstraint ->
//     RepeatedField<int>::Grow). See github.com/google/sanitizers/wiki/
//     AddressSanitizerContainerOverflow ("false positives ... if part of the program is not
//     instrumented"). libstdc++'s std::vector is not annotated unless _GLIBCXX_SANITIZE_VECTOR
//     is defined, so tf_ext's own vectors lose nothing. Heap overflow past an allocation's end
//     is still caught (redzones).
//
// Every other ASan check keeps its default, LSan included (see the suppressions below), and
// UBSan stops at the first report (the code is also compiled with -fno-sanitize-recover=all).

#define TF_EXT_SANITIZER_HOOK \
  extern "C" __attribute__((visibility("default"), used, no_sanitize_address))

TF_EXT_SANITIZER_HOOK const char* __asan_default_options() {
  return "detect_container_overflow=0:abort_on_error=1";
}

TF_EXT_SANITIZER_HOOK const char* __ubsan_default_options() {
  return "print_stacktrace=1:halt_on_error=1";
}
