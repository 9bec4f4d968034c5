/* TfExt>ZeroOut differentiated through TensorFlow's C API only: TF_LoadLibrary,
 * TF_AddGradients (the C++ client gradient registry tf_ext fills with its FDH gradients),
 * TF_SessionRun. Exits non-zero on any mismatch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorflow/c/c_api.h"

static int failures = 0;

#define CHECK_OK(s, what)                                              \
  do {                                                                 \
    if (TF_GetCode(s) != TF_OK) {                                      \
      fprintf(stderr, "FAIL %s: %s\n", what, TF_Message(s));           \
      exit(1);                                                         \
    }                                                                  \
  } while (0)

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

static void NoopDealloc(void* data, size_t len, void* arg) {}

static TF_Tensor* Vec(double* v, int64_t n) {
  int64_t dims[1] = {n};
  return TF_NewTensor(TF_DOUBLE, dims, 1, v, n * sizeof(double), NoopDealloc, NULL);
}

static TF_Operation* Placeholder(TF_Graph* g, const char* name, TF_Status* s) {
  TF_OperationDescription* d = TF_NewOperation(g, "Placeholder", name);
  TF_SetAttrType(d, "dtype", TF_DOUBLE);
  TF_Operation* op = TF_FinishOperation(d, s);
  CHECK_OK(s, "Placeholder");
  return op;
}

/* Runs the gradient of ZeroOut(x, preserve_index=2) at x, with incoming gradient dy (or ones
 * when dy_values is NULL), and compares with `want`. */
static void GradientCase(const char* what, const double* dy_values, const double* want,
                         TF_Status* s) {
  TF_Graph* g = TF_NewGraph();
  TF_Operation* x = Placeholder(g, "x", s);
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
    dy = Placeholder(g, "dy", s);
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

  TF_DeleteLibraryHandle(again);
  TF_DeleteLibraryHandle(lib);
  TF_DeleteStatus(s);
  if (failures == 0) printf("c_api_test: 3 passed, 0 failed\n");
  return failures == 0 ? 0 : 1;
}
