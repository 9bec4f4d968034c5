/* The C entry points of the gradient, one graph at a time, for tests/python/test_entry_points.py:
 *
 *   c_entry_points MODE GRAPH X Y DTYPE DIMS INPUT OUT_Y OUT_DX
 *
 * MODE: tf_add_gradients (TensorFlow's own C API, TF_AddGradients), tf_ext_add_gradients
 * (TfExtAddGradients, c_gradients.h) or gradient_session (TfExtNewGradientSession,
 * c_gradient_session.h). GRAPH: a binary GraphDef; X: the placeholder differentiated against;
 * Y: the node whose sum is differentiated (its incoming gradient: ones); DTYPE: float32 or
 * float64; DIMS like 2x3x4; INPUT: X's raw little-endian values. Writes y and d(sum y)/dx, raw,
 * to OUT_Y and OUT_DX. The op library named by $TF_EXT_LIBRARY is loaded first (its overrides of
 * TensorFlow's gradients then serve TF_AddGradients too). On an error prints "error <code>:
 * <message>" and exits 3 (an unreadable file: 1, from tests/c_test_util.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorflow/c/c_api.h"
#include "tests/c_test_util.h"
#include "tf_ext/graph/c_api/c_gradient_session.h"
#include "tf_ext/graph/c_api/c_gradients.h"

static int Fail(TF_Status* s) {
  fprintf(stderr, "error %d: %s\n", (int)TF_GetCode(s), TF_Message(s));
  return 3;
}

static int Write(const char* path, TF_Tensor* t) {
  FILE* f = fopen(path, "wb");
  if (f == NULL) return 0;
  const size_t n = TF_TensorByteSize(t);
  const int ok = fwrite(TF_TensorData(t), 1, n, f) == n;
  fclose(f);
  return ok;
}

/* x's value from DTYPE, DIMS and INPUT; NULL if they do not fit. */
static TF_Tensor* ReadInput(const char* dtype, char* dims_text, const char* path) {
  const TF_DataType type = strcmp(dtype, "float64") == 0 ? TF_DOUBLE : TF_FLOAT;
  const size_t size = type == TF_DOUBLE ? 8 : 4;
  int64_t dims[8];
  int rank = 0;
  int64_t count = 1;
  for (char* d = strtok(dims_text, "x"); d != NULL && rank < 8; d = strtok(NULL, "x")) {
    dims[rank] = atoll(d);
    count *= dims[rank++];
  }
  size_t len = 0;
  void* data = ReadFileBytes(path, &len);
  if (len != (size_t)count * size) {
    free(data);
    return NULL;
  }
  TF_Tensor* t = TF_AllocateTensor(type, dims, rank, len);
  memcpy(TF_TensorData(t), data, len);
  free(data);
  return t;
}

/* TF_AddGradients or TfExtAddGradients on the imported graph, run by a TF_Session. */
static int AddGradientsAndRun(const char* mode, const void* graph_def, size_t len, const char* x,
                              const char* y, TF_Tensor* input, TF_Tensor** outs,
                              TF_Status* s) {
  TF_Graph* g = TF_NewGraph();
  TF_Buffer* buffer = TF_NewBufferFromString(graph_def, len);
  TF_ImportGraphDefOptions* opts = TF_NewImportGraphDefOptions();
  TF_GraphImportGraphDef(g, buffer, opts, s);
  TF_DeleteImportGraphDefOptions(opts);
  TF_DeleteBuffer(buffer);
  if (TF_GetCode(s) != TF_OK) return Fail(s);
  TF_Operation* x_op = TF_GraphOperationByName(g, x);
  TF_Operation* y_op = TF_GraphOperationByName(g, y);
  if (x_op == NULL || y_op == NULL) {
    fprintf(stderr, "error: no node %s\n", x_op == NULL ? x : y);
    return 3;
  }
  TF_Output xs[1] = {{x_op, 0}}, ys[1] = {{y_op, 0}}, dxs[1];
  if (strcmp(mode, "tf_add_gradients") == 0) {
    TF_AddGradients(g, ys, 1, xs, 1, NULL, s, dxs);
  } else {
    TfExtAddGradients(g, NULL, ys, 1, xs, 1, NULL, s, dxs);
  }
  if (TF_GetCode(s) != TF_OK) return Fail(s);
  TF_SessionOptions* options = TF_NewSessionOptions();
  TF_Session* session = TF_NewSession(g, options, s);
  TF_DeleteSessionOptions(options);
  if (TF_GetCode(s) != TF_OK) return Fail(s);
  TF_Output fetches[2] = {ys[0], dxs[0]};
  TF_SessionRun(session, NULL, xs, &input, 1, fetches, outs, 2, NULL, 0, NULL, s);
  if (TF_GetCode(s) != TF_OK) return Fail(s);
  TF_CloseSession(session, s);
  TF_DeleteSession(session, s);
  TF_DeleteGraph(g);
  return 0;
}

static int GradientSessionRun(const void* graph_def, size_t len, const char* x, const char* y,
                              TF_Tensor* input, TF_Tensor** outs, TF_Status* s) {
  const char* ys[1] = {y};
  const char* xs[1] = {x};
  TfExtGradientSession* session =
      TfExtNewGradientSession(graph_def, len, ys, 1, xs, 1, NULL, 0, s);
  if (session == NULL) return Fail(s);
  TfExtGradientSessionRun(session, xs, &input, 1, &outs[0], &outs[1], s);
  TfExtDeleteGradientSession(session);
  return TF_GetCode(s) == TF_OK ? 0 : Fail(s);
}

int main(int argc, char** argv) {
  if (argc != 10) {
    fprintf(stderr, "usage: %s MODE GRAPH X Y DTYPE DIMS INPUT OUT_Y OUT_DX\n", argv[0]);
    return 2;
  }
  const char* mode = argv[1];
  if (strcmp(mode, "tf_add_gradients") != 0 && strcmp(mode, "tf_ext_add_gradients") != 0 &&
      strcmp(mode, "gradient_session") != 0) {
    fprintf(stderr, "error: unknown MODE %s\n", mode);
    return 2;
  }
  TF_Status* s = TF_NewStatus();
  const char* library = getenv("TF_EXT_LIBRARY");
  if (library != NULL) {
    TF_LoadLibrary(library, s);
    if (TF_GetCode(s) != TF_OK) return Fail(s);
  }
  size_t len = 0;
  void* graph_def = ReadFileBytes(argv[2], &len);
  TF_Tensor* input = ReadInput(argv[5], argv[6], argv[7]);
  if (input == NULL) {
    fprintf(stderr, "error: %s does not hold %s values of shape %s\n", argv[7], argv[5], argv[6]);
    return 2;
  }
  TF_Tensor* outs[2] = {NULL, NULL};
  const int rc = strcmp(mode, "gradient_session") == 0
                     ? GradientSessionRun(graph_def, len, argv[3], argv[4], input, outs, s)
                     : AddGradientsAndRun(mode, graph_def, len, argv[3], argv[4], input, outs, s);
  if (rc != 0) return rc;
  if (!Write(argv[8], outs[0]) || !Write(argv[9], outs[1])) {
    fprintf(stderr, "error: cannot write %s or %s\n", argv[8], argv[9]);
    return 3;
  }
  TF_DeleteTensor(outs[0]);
  TF_DeleteTensor(outs[1]);
  TF_DeleteTensor(input);
  free(graph_def);
  TF_DeleteStatus(s);
  return 0;
}
