/* TfExtGradientSession (tf_ext/graph/c_api/c_gradient_session.h) from C, on a graph holding a
 * StatelessWhile that reads a TensorList and a StatelessIf (tests/data/control_flow_graph.pb:
 * x [3] float64, outputs "y" and "h"). One session, ys y (incoming gradient ones) and h
 * (incoming gradient fed as "d_h"): its vector-Jacobian products at points taking each branch
 * against central differences of y + <d_h, h> computed from the session's own y and h
 * outputs; then 4 pthreads sending mixed valid and hostile requests, every valid answer
 * compared with the serial one; then jit_compile through TfExtNewGradientSessionWithOptions
 * (the loop graph refused, a loop-free one compiled), then hostile calls. Exits non-zero on any
 * mismatch. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorflow/c/c_api.h"
#include "tests/c_test_util.h"
#include "tf_ext/graph/c_api/c_gradient_session.h"

static TF_Tensor* Vec(TF_DataType type, const double* v, int n) {
  int64_t dims[1] = {n};
  const size_t size = type == TF_DOUBLE ? sizeof(double) : sizeof(float);
  TF_Tensor* t = TF_AllocateTensor(type, dims, 1, n * size);
  for (int i = 0; i < n; ++i) {
    if (type == TF_DOUBLE) {
      ((double*)TF_TensorData(t))[i] = v[i];
    } else {
      ((float*)TF_TensorData(t))[i] = (float)v[i];
    }
  }
  return t;
}

/* Runs with x and d_h; out: y (1), h (3), dx (3). Returns the status code. */
static TF_Code Run(const TfExtGradientSession* session, const double* x, const double* dh,
                   double* out, TF_Status* s) {
  const char* names[2] = {"x", "d_h"};
  TF_Tensor* feeds[2] = {Vec(TF_DOUBLE, x, 3), Vec(TF_DOUBLE, dh, 3)};
  TF_Tensor* ys[2] = {NULL, NULL};
  TF_Tensor* dxs[1] = {NULL};
  TfExtGradientSessionRun(session, names, feeds, 2, ys, dxs, s);
  TF_DeleteTensor(feeds[0]);
  TF_DeleteTensor(feeds[1]);
  const TF_Code code = TF_GetCode(s);
  if (code != TF_OK) return code;
  memcpy(out, TF_TensorData(ys[0]), sizeof(double));
  memcpy(out + 1, TF_TensorData(ys[1]), 3 * sizeof(double));
  memcpy(out + 4, TF_TensorData(dxs[0]), 3 * sizeof(double));
  TF_DeleteTensor(ys[0]);
  TF_DeleteTensor(ys[1]);
  TF_DeleteTensor(dxs[0]);
  return TF_OK;
}

/* The two points (one per branch of the If) and incoming gradients. */
static const double kPoints[2][3] = {{0.5, -0.3, 0.8}, {-1.2, -0.7, -2.0}};
static const double kDh[3] = {0.3, -1.1, 0.6};
static double expected[2][7];

struct Worker {
  const TfExtGradientSession* session;
  int id;
  int failed;
};

static void* Work(void* arg) {
  struct Worker* w = (struct Worker*)arg;
  TF_Status* s = TF_NewStatus();
  for (int i = 0; i < 30 && !w->failed; ++i) {
    const int kind = (w->id * 3 + i) % 5;
    double out[7];
    if (kind <= 1) {
      if (Run(w->session, kPoints[kind], kDh, out, s) != TF_OK) {
        fprintf(stderr, "FAIL thread %d: %s\n", w->id, TF_Message(s));
        w->failed = 1;
      }
      for (int k = 0; k < 7; ++k) {
        if (out[k] != expected[kind][k]) {
          fprintf(stderr, "FAIL thread %d: output %d = %.17g, serially %.17g\n", w->id, k, out[k],
                  expected[kind][k]);
          w->failed = 1;
        }
      }
    } else {
      /* float x, a d_h of 4 values, no d_h */
      const char* names[2] = {"x", "d_h"};
      TF_Tensor* feeds[2] = {Vec(kind == 2 ? TF_FLOAT : TF_DOUBLE, kPoints[0], 3),
                             Vec(TF_DOUBLE, kPoints[1], kind == 3 ? 2 : 3)};
      TF_Tensor* ys[2] = {NULL, NULL};
      TF_Tensor* dxs[1] = {NULL};
      TfExtGradientSessionRun(w->session, names, feeds, kind == 4 ? 1 : 2, ys, dxs, s);
      if (TF_GetCode(s) != TF_INVALID_ARGUMENT || strstr(TF_Message(s), "GradientSession: ") == NULL ||
          ys[0] != NULL || dxs[0] != NULL) {
        fprintf(stderr, "FAIL thread %d hostile %d: %s\n", w->id, kind, TF_Message(s));
        w->failed = 1;
      }
      TF_DeleteTensor(feeds[0]);
      TF_DeleteTensor(feeds[1]);
    }
  }
  TF_DeleteStatus(s);
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s control_flow_graph.pb _tf_ext_ops.so\n", argv[0]);
    return 2;
  }
  TF_Status* s = TF_NewStatus();
  /* The op library brings the gradient of TensorListGetItem (the loop reads a sequence). */
  TF_Library* lib = TF_LoadLibrary(argv[2], s);
  CHECK_OK(s, "TF_LoadLibrary");
  (void)lib;
  size_t len = 0;
  void* graph = ReadFileBytes(argv[1], &len);
  const char* ys[2] = {"y", "h"};
  const char* xs[1] = {"x"};
  const unsigned char incoming[2] = {0, 1};
  TfExtGradientSession* session =
      TfExtNewGradientSession(graph, len, ys, 2, xs, 1, incoming, 0, s);
  CHECK_OK(s, "create");
  if (TfExtGradientSessionNumInputs(session) != 2 ||
      strcmp(TfExtGradientSessionInputName(session, 0), "x") != 0 ||
      strcmp(TfExtGradientSessionInputName(session, 1), "d_h") != 0 ||
      TfExtGradientSessionInputType(session, 1) != TF_DOUBLE ||
      TfExtGradientSessionInputName(session, 2) != NULL) {
    fprintf(stderr, "FAIL inputs\n");
    ++failures;
  }

  /* d(y + <dh, h>)/dx against central differences of the session's own outputs. */
  for (int p = 0; p < 2; ++p) {
    if (Run(session, kPoints[p], kDh, expected[p], s) != TF_OK) CHECK_OK(s, "run");
    for (int i = 0; i < 3; ++i) {
      const double eps = 1e-6;
      double up[3], down[3], ou[7], od[7];
      memcpy(up, kPoints[p], sizeof(up));
      memcpy(down, kPoints[p], sizeof(down));
      up[i] += eps;
      down[i] -= eps;
      Run(session, up, kDh, ou, s);
      Run(session, down, kDh, od, s);
      double fu = ou[0], fd = od[0];
      for (int k = 0; k < 3; ++k) {
        fu += kDh[k] * ou[1 + k];
        fd += kDh[k] * od[1 + k];
      }
      const double numeric = (fu - fd) / (2 * eps);
      const double grad = expected[p][4 + i];
      if (fabs(grad - numeric) > 1e-6 * fmax(1.0, fabs(numeric)) || grad == 0) {
        fprintf(stderr, "FAIL point %d: dx[%d] = %.12g, central difference %.12g\n", p, i, grad,
                numeric);
        ++failures;
      }
    }
  }
  printf("ok vector-Jacobian products against central differences\n");

  /* 4 threads of mixed valid and hostile requests on the one session. */
  pthread_t threads[4];
  struct Worker workers[4];
  for (int t = 0; t < 4; ++t) {
    workers[t].session = session;
    workers[t].id = t;
    workers[t].failed = 0;
    pthread_create(&threads[t], NULL, Work, &workers[t]);
  }
  for (int t = 0; t < 4; ++t) {
    pthread_join(threads[t], NULL);
    failures += workers[t].failed;
  }
  printf("ok 4 threads\n");

  /* jit_compile through the options' API: the loop graph is refused (its conditional's
   * gradient keeps branch values as Optionals, which XLA cannot compile), naming the op; a loop-
   * free graph, y = sum(c * x * x), compiles and gives 2 c x; the options' errors. */
  {
    const char* keys[2] = {"jit_compile", "max_tensor_bytes"};
    const char* values[2] = {"true", "0"};
    TfExtGradientSession* jit = TfExtNewGradientSessionWithOptions(graph, len, ys, 2, xs, 1,
                                                                   incoming, keys, values, 2, s);
    ExpectCode("jit_compile refuses what XLA cannot compile", s, TF_INVALID_ARGUMENT,
               "' that node 'cond' calls: XLA cannot compile it");
    if (jit != NULL) ++failures;
    TF_Graph* g = TF_NewGraph();
    TF_Operation* x = Placeholder(g, "x", TF_DOUBLE, s);
    const double c[3] = {0.5, -2.0, 3.0};
    const int64_t dims[1] = {3};
    TF_Operation* cv = Const(g, "c", TF_DOUBLE, c, sizeof(c), dims, 1, s);
    const int32_t axis = 0;
    TF_Operation* ax = Const(g, "axis", TF_INT32, &axis, sizeof(axis), NULL, 0, s);
    TF_OperationDescription* d = TF_NewOperation(g, "Mul", "xx");
    TF_AddInput(d, (TF_Output){x, 0});
    TF_AddInput(d, (TF_Output){x, 0});
    TF_Operation* xx = TF_FinishOperation(d, s);
    d = TF_NewOperation(g, "Mul", "cxx");
    TF_AddInput(d, (TF_Output){cv, 0});
    TF_AddInput(d, (TF_Output){xx, 0});
    TF_Operation* cxx = TF_FinishOperation(d, s);
    d = TF_NewOperation(g, "Sum", "sum");
    TF_AddInput(d, (TF_Output){cxx, 0});
    TF_AddInput(d, (TF_Output){ax, 0});
    TF_FinishOperation(d, s);
    CHECK_OK(s, "build y = sum(c x x)");
    TF_Buffer* def = TF_NewBuffer();
    TF_GraphToGraphDef(g, def, s);
    CHECK_OK(s, "serialize");
    const char* sum_y[1] = {"sum"};
    jit = TfExtNewGradientSessionWithOptions(def->data, def->length, sum_y, 1, xs, 1, NULL, keys,
                                             values, 2, s);
    CHECK_OK(s, "create with jit_compile");
    const double at[3] = {1.5, -0.25, 2.0};
    const char* names[1] = {"x"};
    TF_Tensor* feeds[1] = {Vec(TF_DOUBLE, at, 3)};
    TF_Tensor* y[1] = {NULL};
    TF_Tensor* dx[1] = {NULL};
    TfExtGradientSessionRun(jit, names, feeds, 1, y, dx, s);
    CHECK_OK(s, "jit run");
    double want_y = 0;
    for (int i = 0; i < 3; ++i) {
      want_y += c[i] * at[i] * at[i];
      const double got = ((const double*)TF_TensorData(dx[0]))[i];
      if (got != 2 * c[i] * at[i]) {
        fprintf(stderr, "FAIL jit_compile dx[%d] = %.17g, want %.17g\n", i, got, 2 * c[i] * at[i]);
        ++failures;
      }
    }
    if (*(const double*)TF_TensorData(y[0]) != want_y) {
      fprintf(stderr, "FAIL jit_compile y = %.17g, want %.17g\n", *(const double*)TF_TensorData(y[0]),
              want_y);
      ++failures;
    }
    TF_DeleteTensor(feeds[0]);
    TF_DeleteTensor(y[0]);
    TF_DeleteTensor(dx[0]);
    const char* bad_key[1] = {"jit"};
    const char* bad_value[1] = {"yes"};
    TfExtGradientSession* none = TfExtNewGradientSessionWithOptions(
        def->data, def->length, sum_y, 1, xs, 1, NULL, bad_key, values, 1, s);
    ExpectCode("unknown option", s, TF_INVALID_ARGUMENT, "unknown option 'jit'; the options are");
    if (none != NULL) ++failures;
    none = TfExtNewGradientSessionWithOptions(def->data, def->length, sum_y, 1, xs, 1, NULL, keys,
                                              bad_value, 1, s);
    ExpectCode("bad option value", s, TF_INVALID_ARGUMENT,
               "option 'jit_compile': 'yes' is not true or false");
    if (none != NULL) ++failures;
    TfExtDeleteGradientSession(jit);
    TF_DeleteBuffer(def);
    TF_DeleteGraph(g);
  }
  printf("ok jit_compile through the options\n");

  /* Hostile calls. */
  TfExtGradientSession* bad = TfExtNewGradientSession("not a graph", 11, ys, 2, xs, 1, NULL, 0, s);
  ExpectCode("garbage graph", s, TF_INVALID_ARGUMENT, "not a GraphDef");
  if (bad != NULL) ++failures;
  bad = TfExtNewGradientSession(NULL, 0, ys, 2, xs, 1, NULL, 0, s);
  ExpectCode("NULL graph", s, TF_INVALID_ARGUMENT, "not a GraphDef");
  const char* missing[1] = {"nope"};
  bad = TfExtNewGradientSession(graph, len, missing, 1, xs, 1, NULL, 0, s);
  ExpectCode("unknown y", s, TF_NOT_FOUND, "y 'nope:0'");
  bad = TfExtNewGradientSession(graph, len, ys, 2, NULL, 0, NULL, 0, s);
  ExpectCode("no xs", s, TF_INVALID_ARGUMENT, "no xs");
  const char* null_name[1] = {NULL};
  bad = TfExtNewGradientSession(graph, len, null_name, 1, xs, 1, NULL, 0, s);
  ExpectCode("NULL y", s, TF_INVALID_ARGUMENT, "ys[0] is NULL");
  bad = TfExtNewGradientSessionFromSavedModel("/nonexistent", NULL, ys, 1, xs, 1, NULL, 0, s);
  if (TF_GetCode(s) == TF_OK || bad != NULL) {
    fprintf(stderr, "FAIL missing SavedModel accepted\n");
    ++failures;
  }
  TF_Tensor* out[2] = {NULL, NULL};
  TfExtGradientSessionRun(NULL, NULL, NULL, 0, out, out, s);
  ExpectCode("NULL session", s, TF_INVALID_ARGUMENT, "required");
  const char* names[1] = {"x"};
  TF_Tensor* none[1] = {NULL};
  TfExtGradientSessionRun(session, names, none, 1, out, out, s);
  ExpectCode("NULL feed", s, TF_INVALID_ARGUMENT, "feed 0 has no name or value");
  TfExtDeleteGradientSession(NULL);

  TfExtDeleteGradientSession(session);
  free(graph);
  TF_DeleteStatus(s);
  if (failures) {
    fprintf(stderr, "%d failures\n", failures);
    return 1;
  }
  printf("all passed\n");
  return 0;
}
