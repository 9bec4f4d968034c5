/* TfExt>ZeroOut differentiated through TensorFlow's C API only: TF_LoadLibrary,
 * TF_AddGradients (the C++ client gradient registry tf_ext fills with its FDH gradients),
 * TF_SessionRun. Also the library's own C entry points (TfExtGradientFunctionDef,
 * TfExtGradientKind) on hostile input, and the refusal of a second copy of the library.
 * Exits non-zero on any mismatch. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorflow/c/c_api.h"
#include "tests/c_test_util.h"

static void Expect(const char* what, const double* got, const double* want, int n) {
  for (int i = 0; i < n; ++i) {
    if (fabs(got[i] - want[i]) > 1e-12) {
      fprintf(stderr, "FAIL %s: element %d is %g, want %g\n", what, i, got[i], want[i]);
      ++failures;
      return;
    }
  }
  printf("ok %s\n", what);
}

static TF_Tensor* Vec(double* v, int64_t n) {
  int64_t dims[1] = {n};
  return TF_NewTensor(TF_DOUBLE, dims, 1, v, n * sizeof(double), NoopDealloc, NULL);
}

/* Runs the gradient of ZeroOut(x, preserve_index=2) at x, with incoming gradient dy (or ones
 * when dy_values is NULL), and compares with `want`. */
static void GradientCase(const char* what, const double* dy_values, const double* want,
                         TF_Status* s) {
  TF_Graph* g = TF_NewGraph();
  TF_Operation* x = Placeholder(g, "x", TF_DOUBLE, s);
  TF_OperationDescription* d = TF_NewOperation(g, "TfExt>ZeroOut", "z");
  TF_AddInput(d, (TF_Output){x, 0});
  TF_SetAttrType(d, "T", TF_DOUBLE);
  TF_SetAttrInt(d, "preserve_index", 2);
  TF_Operation* z = TF_FinishOperation(d, s);
  CHECK_OK(s, "ZeroOut");

  TF_Output ys[1] = {{z, 0}}, xs[1] = {{x, 0}}, dxs[1];
  TF_Operation* dy = NULL;
  TF_Output dys[1];
  if (dy_values != NULL) {
    dy = Placeholder(g, "dy", TF_DOUBLE, s);
    dys[0] = (TF_Output){dy, 0};
  }
  TF_AddGradients(g, ys, 1, xs, 1, dy_values != NULL ? dys : NULL, s, dxs);
  CHECK_OK(s, "TF_AddGradients");

  TF_SessionOptions* opts = TF_NewSessionOptions();
  TF_Session* sess = TF_NewSession(g, opts, s);
  CHECK_OK(s, "TF_NewSession");
  double xv[4] = {1, 2, 3, 4};
  double dyv[4];
  if (dy_values != NULL) memcpy(dyv, dy_values, sizeof(dyv));
  TF_Output inputs[2] = {{x, 0}, {dy, 0}};
  TF_Tensor* in_values[2] = {Vec(xv, 4), dy_values != NULL ? Vec(dyv, 4) : NULL};
  TF_Tensor* out = NULL;
  TF_SessionRun(sess, NULL, inputs, in_values, dy_values != NULL ? 2 : 1, dxs, &out, 1, NULL, 0,
                NULL, s);
  CHECK_OK(s, "TF_SessionRun");
  Expect(what, (const double*)TF_TensorData(out), want, 4);

  TF_DeleteTensor(out);
  TF_DeleteTensor(in_values[0]);
  if (in_values[1] != NULL) TF_DeleteTensor(in_values[1]);
  TF_CloseSession(sess, s);
  TF_DeleteSession(sess, s);
  TF_DeleteSessionOptions(opts);
  TF_DeleteGraph(g);
}

static void ExpectTrue(const char* what, int ok, const char* detail) {
  if (!ok) {
    fprintf(stderr, "FAIL %s: %s\n", what, detail != NULL ? detail : "");
    ++failures;
    return;
  }
  printf("ok %s\n", what);
}

typedef int (*GradientFunctionDefFn)(const void*, size_t, void**, size_t*, char*, size_t);
typedef void (*FreeFn)(void*);
typedef int (*GradientKindFn)(const char*, char*, size_t);

/* The C entry points, found in the library TF_LoadLibrary loaded. */
static void CEntryPoints(const char* path) {
  void* h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  ExpectTrue("library already loaded", h != NULL, dlerror());
  if (h == NULL) return;
  GradientFunctionDefFn gfd = (GradientFunctionDefFn)dlsym(h, "TfExtGradientFunctionDef");
  FreeFn tf_ext_free = (FreeFn)dlsym(h, "TfExtFree");
  GradientKindFn kind = (GradientKindFn)dlsym(h, "TfExtGradientKind");
  ExpectTrue("entry points exported", gfd != NULL && tf_ext_free != NULL && kind != NULL, NULL);
  if (gfd == NULL || tf_ext_free == NULL || kind == NULL) return;
  char error[256] = "";
  void* out = NULL;
  size_t out_len = 0;

  const unsigned char garbage[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x01};
  int rc = gfd(garbage, sizeof(garbage), &out, &out_len, error, sizeof(error));
  ExpectTrue("garbage NodeDef is a clean error", rc == 1 && strstr(error, "parse") != NULL, error);

  /* NodeDef{op: "TfExt>ZeroOut", attr {key: "T" value {type: DT_DOUBLE}}}, hand-encoded. */
  const unsigned char zero_out[] = {0x12, 13, 'T', 'f', 'E', 'x', 't', '>', 'Z', 'e', 'r', 'o',
                                    'O', 'u', 't', 0x2a, 7, 0x0a, 1, 'T', 0x12, 2, 0x30, 2};
  rc = gfd(zero_out, sizeof(zero_out), &out, &out_len, error, sizeof(error));
  ExpectTrue("ZeroOut NodeDef gives a FunctionDef", rc == 0 && out != NULL && out_len > 0, error);
  if (rc == 0) tf_ext_free(out);

  /* NodeDef{op: "_ListToArray"}: no N, no T; TensorFlow's creator would abort on it. */
  const unsigned char list_to_array[] = {0x12, 12, '_', 'L', 'i', 's', 't', 'T', 'o', 'A', 'r',
                                         'r', 'a', 'y'};
  rc = gfd(list_to_array, sizeof(list_to_array), &out, &out_len, error, sizeof(error));
  ExpectTrue("_ListToArray without N is a clean error",
             rc == 1 && strncmp(error, "_ListToArray: ", 14) == 0, error);

  rc = gfd(NULL, 4, &out, &out_len, error, sizeof(error));
  ExpectTrue("NULL node_def is a clean error", rc == 1 && strstr(error, "NULL") != NULL, error);
  ExpectTrue("TfExtGradientKind(NULL) is -1", kind(NULL, error, sizeof(error)) == -1, error);
  ExpectTrue("TfExtGradientKind of ZeroOut is 0 (function)", kind("TfExt>ZeroOut", NULL, 0) == 0,
             NULL);
  dlclose(h);
}

/* A copy of the library under another path: its load fails naming both paths, and the first
 * copy keeps working. */
static void SecondCopy(const char* path, TF_Status* s) {
  const char* dir = getenv("TEST_TMPDIR");
  char copy[4096];
  snprintf(copy, sizeof(copy), "%s/second_copy_of_tf_ext_ops.so", dir != NULL ? dir : "/tmp");
  FILE* in = fopen(path, "rb");
  FILE* out = fopen(copy, "wb");
  if (in == NULL || out == NULL) {
    fprintf(stderr, "FAIL second copy: cannot copy %s to %s\n", path, copy);
    ++failures;
    return;
  }
  char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), in)) > 0) fwrite(buf, 1, n, out);
  fclose(in);
  fclose(out);
  TF_Library* second = TF_LoadLibrary(copy, s);
  const char* msg = TF_Message(s);
  ExpectTrue("second copy is refused", second == NULL && TF_GetCode(s) != TF_OK, msg);
  ExpectTrue("the refusal names both paths", strstr(msg, copy) != NULL && strstr(msg, path) != NULL,
             msg);
  if (second != NULL) TF_DeleteLibraryHandle(second);
  TF_SetStatus(s, TF_OK, "");
}

int main(int argc, char** argv) {
  const char* path = argc > 1 ? argv[1] : "tf_ext/_tf_ext_ops.so";
  TF_Status* s = TF_NewStatus();
  TF_Library* lib = TF_LoadLibrary(path, s);
  CHECK_OK(s, "TF_LoadLibrary");
  /* Loading the same path again is harmless: TensorFlow returns the cached library. */
  TF_Library* again = TF_LoadLibrary(path, s);
  CHECK_OK(s, "TF_LoadLibrary (second time, same path)");
  printf("ok load twice\n");

  const double ones_want[4] = {0, 0, 1, 0};
  GradientCase("gradient with implicit ones", NULL, ones_want, s);
  const double dy[4] = {10, 20, 30, 40};
  const double dy_want[4] = {0, 0, 30, 0};
  GradientCase("gradient with explicit dy", dy, dy_want, s);

  CEntryPoints(path);
  SecondCopy(path, s);
  GradientCase("gradient after a second copy was refused", dy, dy_want, s);

  TF_DeleteLibraryHandle(again);
  TF_DeleteLibraryHandle(lib);
  TF_DeleteStatus(s);
  if (failures == 0) printf("c_api_test: all passed\n");
  return failures == 0 ? 0 : 1;
}
