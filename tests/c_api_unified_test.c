/* TensorFlow ops that had only a function (FDH) gradient, differentiated through the C API's
 * TF_AddGradients (which reads only the C++ client registry): loading the tf_ext op library
 * unifies the registries, so these now work, and each matches its closed form. Without the
 * unification TF_AddGradients fails with "No gradient defined for op". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorflow/c/c_api.h"
#include "tests/c_test_util.h"

#define N 4

/* The ops under test, each applied to x (and a constant where needed). */
enum Case { kConcat, kReverse, kMulNoNan, kXlogy, kXdivy, kXlog1py, kNumCases };
static const char* kNames[] = {"Concat", "Reverse", "MulNoNan", "Xlogy", "Xdivy", "Xlog1py"};

/* d sum(op(x)) / dx_i, in closed form. */
static double Expected(enum Case c, double x) {
  switch (c) {
    case kConcat: return 2;                        /* Concat(0, [x, x]) */
    case kReverse: return 1;                       /* Reverse(x, [true]) */
    case kMulNoNan: return 2 * x;                  /* MulNoNan(x, x) = x^2 */
    case kXlogy: return log(x) + 1;                /* Xlogy(x, x) = x log x */
    case kXdivy: return 1 / 3.0;                   /* Xdivy(x, 3) = x / 3 */
    case kXlog1py: return log1p(x) + x / (1 + x);  /* Xlog1py(x, x) = x log(1 + x) */
    default: return NAN;
  }
}

static void RunCase(enum Case c, TF_Status* s) {
  TF_Graph* g = TF_NewGraph();
  TF_Operation* x = Placeholder(g, "x", TF_DOUBLE, s);
  TF_Output xo = {x, 0};
  TF_OperationDescription* d = TF_NewOperation(g, kNames[c], "op");
  if (c == kConcat) {
    const int32_t axis = 0;
    TF_Operation* dim = Const(g, "axis", TF_INT32, &axis, sizeof(axis), NULL, 0, s);
    TF_Output values[2] = {xo, xo};
    TF_AddInput(d, (TF_Output){dim, 0});
    TF_AddInputList(d, values, 2);
  } else if (c == kReverse) {
    const int64_t dims1[1] = {1};
    const unsigned char flip = 1;
    TF_Operation* dims = Const(g, "dims", TF_BOOL, &flip, 1, dims1, 1, s);
    TF_AddInput(d, xo);
    TF_AddInput(d, (TF_Output){dims, 0});
  } else if (c == kXdivy) {
    const double three = 3;
    TF_Operation* y = Const(g, "three", TF_DOUBLE, &three, sizeof(three), NULL, 0, s);
    TF_AddInput(d, xo);
    TF_AddInput(d, (TF_Output){y, 0});
  } else {
    TF_AddInput(d, xo);
    TF_AddInput(d, xo);
  }
  TF_Operation* op = TF_FinishOperation(d, s);
  CHECK_OK(s, kNames[c]);

  TF_Output ys[1] = {{op, 0}}, xs[1] = {xo}, dxs[1];
  TF_AddGradients(g, ys, 1, xs, 1, NULL, s, dxs);
  CHECK_OK(s, "TF_AddGradients");

  TF_SessionOptions* opts = TF_NewSessionOptions();
  TF_Session* sess = TF_NewSession(g, opts, s);
  CHECK_OK(s, "TF_NewSession");
  double xv[N] = {0.5, 1.25, 2.0, 3.5};
  const int64_t dims[1] = {N};
  TF_Tensor* in = TF_NewTensor(TF_DOUBLE, dims, 1, xv, sizeof(xv), NoopDealloc, NULL);
  TF_Tensor* out = NULL;
  TF_SessionRun(sess, NULL, xs, &in, 1, dxs, &out, 1, NULL, 0, NULL, s);
  CHECK_OK(s, "TF_SessionRun");
  const double* got = (const double*)TF_TensorData(out);
  int ok = TF_TensorElementCount(out) == N;
  for (int i = 0; ok && i < N; ++i) {
    if (fabs(got[i] - Expected(c, xv[i])) > 1e-12) {
      fprintf(stderr, "FAIL %s: d/dx[%d] = %.17g, want %.17g\n", kNames[c], i, got[i],
              Expected(c, xv[i]));
      ok = 0;
    }
  }
  if (ok) printf("ok %s gradient through TF_AddGradients\n", kNames[c]);
  failures += !ok;
  TF_DeleteTensor(in);
  TF_DeleteTensor(out);
  TF_CloseSession(sess, s);
  TF_DeleteSession(sess, s);
  TF_DeleteSessionOptions(opts);
  TF_DeleteGraph(g);
}

int main(int argc, char** argv) {
  TF_Status* s = TF_NewStatus();
  const char* lib = argc > 1 ? argv[1] : "tf_ext/_tf_ext_ops.so";
  /* The handle is the caller's to delete (the library itself stays loaded). */
  TF_Library* handle = TF_LoadLibrary(lib, s);
  CHECK_OK(s, "TF_LoadLibrary");
  for (int c = 0; c < kNumCases; ++c) RunCase((enum Case)c, s);
  TF_DeleteLibraryHandle(handle);
  TF_DeleteStatus(s);
  printf("%d passed, %d failed\n", kNumCases - failures, failures);
  return failures == 0 ? 0 : 1;
}
