/* What the C tests in tests/ share: a fail-fast status check, an expected error code,
 * the op library loaded, KEY=VALUE arguments split, a file read whole, and Placeholder / Const nodes. Header-only, C11; each test program
 * includes it once. (tests/wheel_c_program.c keeps its own few lines: it is the documented
 * example a user copies, compiled outside Bazel.) */
#ifndef TESTS_C_TEST_UTIL_H_
#define TESTS_C_TEST_UTIL_H_

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorflow/c/c_api.h"

/* The test program's count of failed checks: main exits non-zero when it is not 0. */
static int failures = 0;

/* Stops the program when `s` is not OK: what follows would only report the same cause. */
#define CHECK_OK(s, what)                                    \
  do {                                                       \
    if (TF_GetCode(s) != TF_OK) {                            \
      fprintf(stderr, "FAIL %s: %s\n", what, TF_Message(s)); \
      exit(1);                                               \
    }                                                        \
  } while (0)

/* For TF_NewTensor over a caller's buffer that outlives the tensor. */
static inline void NoopDealloc(void* data, size_t len, void* arg) {
  (void)data;
  (void)len;
  (void)arg;
}

/* Counts a failure unless `s` holds `code` and its message contains `needle`. */
static inline void ExpectCode(const char* what, TF_Status* s, TF_Code code, const char* needle) {
  if (TF_GetCode(s) != code || strstr(TF_Message(s), needle) == NULL) {
    fprintf(stderr, "FAIL %s: code %d, message '%s' (want %d and '%s')\n", what,
            (int)TF_GetCode(s), TF_Message(s), (int)code, needle);
    ++failures;
  } else {
    printf("ok %s\n", what);
  }
}

/* Loads the op library TF_EXT_LIBRARY names, when it is set; exits when it cannot. */
static inline void LoadLibraryFromEnv(TF_Status* s) {
  const char* library = getenv("TF_EXT_LIBRARY");
  if (library == NULL) return;
  TF_LoadLibrary(library, s);
  CHECK_OK(s, "load TF_EXT_LIBRARY");
}

/* Splits argv[first..argc) "KEY=VALUE" arguments in place into keys[n..] and values[n..] (at
 * most `max` in all) and returns the new count; exits on one without '='. */
static inline int SplitOptions(char** argv, int first, int argc, const char** keys,
                               const char** values, int n, int max) {
  for (int i = first; i < argc && n < max; ++i, ++n) {
    char* eq = strchr(argv[i], '=');
    if (eq == NULL) {
      fprintf(stderr, "not KEY=VALUE: %s\n", argv[i]);
      exit(2);
    }
    *eq = '\0';
    keys[n] = argv[i];
    values[n] = eq + 1;
  }
  return n;
}

/* The whole file, malloc'ed (the caller frees it); exits when it cannot be read. */
static inline void* ReadFileBytes(const char* path, size_t* len) {
  FILE* f = fopen(path, "rb");
  if (f == NULL) {
    fprintf(stderr, "FAIL cannot open %s\n", path);
    exit(1);
  }
  fseek(f, 0, SEEK_END);
  const long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void* data = malloc(n > 0 ? (size_t)n : 1);
  if (n < 0 || fread(data, 1, (size_t)n, f) != (size_t)n) {
    fprintf(stderr, "FAIL cannot read %s\n", path);
    exit(1);
  }
  fclose(f);
  *len = (size_t)n;
  return data;
}

/* The whole file as a TF_Buffer (the caller deletes it). */
static inline TF_Buffer* ReadFileBuffer(const char* path) {
  size_t n = 0;
  void* data = ReadFileBytes(path, &n);
  TF_Buffer* b = TF_NewBufferFromString(data, n);
  free(data);
  return b;
}

static inline TF_Operation* Placeholder(TF_Graph* g, const char* name, TF_DataType type,
                                        TF_Status* s) {
  TF_OperationDescription* d = TF_NewOperation(g, "Placeholder", name);
  TF_SetAttrType(d, "dtype", type);
  TF_Operation* op = TF_FinishOperation(d, s);
  CHECK_OK(s, name);
  return op;
}

/* A Const of `bytes` bytes of `data`, with `rank` dims (dims may be NULL for a scalar). */
static inline TF_Operation* Const(TF_Graph* g, const char* name, TF_DataType type,
                                  const void* data, size_t bytes, const int64_t* dims, int rank,
                                  TF_Status* s) {
  TF_Tensor* t = TF_AllocateTensor(type, dims, rank, bytes);
  memcpy(TF_TensorData(t), data, bytes);
  TF_OperationDescription* d = TF_NewOperation(g, "Const", name);
  TF_SetAttrTensor(d, "value", t, s);
  TF_SetAttrType(d, "dtype", type);
  TF_Operation* op = TF_FinishOperation(d, s);
  CHECK_OK(s, name);
  TF_DeleteTensor(t);
  return op;
}

#endif /* TESTS_C_TEST_UTIL_H_ */
