/* TfExtNewGradientSessionWithMemoryBudget (tf_ext/graph/c_api/c_gradient_session.h) from C:
 * on a straight-line graph built here (x [512, 64] -> 8 x (MatMul, Tanh) -> Sum), with oneDNN
 * off (see main), a budget of
 * 0.7 of the estimated peak gives the same y and dx, bitwise, as no budget (NULL and ""), and the
 * old TfExtNewGradientSession keeps its meaning; a graph with a loop and a conditional
 * (tests/data/control_flow_graph.pb) takes a budget; a malformed budget and one on a placeholder
 * of unknown shape are refused with their codes. Exits non-zero on any mismatch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tensorflow/c/c_api.h"
#include "tests/c_test_util.h"
#include "tf_ext/graph/c_api/c_gradient_session.h"

enum { kRows = 512, kWidth = 64, kLayers = 8 };

/* The graph's GraphDef; `shaped`: whether x's placeholder has its full shape. */
static TF_Buffer* StraightLine(int shaped, TF_Status* s) {
  TF_Graph* g = TF_NewGraph();
  TF_OperationDescription* d = TF_NewOperation(g, "Placeholder", "x");
  TF_SetAttrType(d, "dtype", TF_FLOAT);
  const int64_t dims[2] = {kRows, kWidth};
  if (shaped) TF_SetAttrShape(d, "shape", dims, 2);
  TF_Output h = {TF_FinishOperation(d, s), 0};
  CHECK_OK(s, "x");
  static float w[kWidth * kWidth];
  const int64_t wdims[2] = {kWidth, kWidth};
  for (int layer = 0; layer < kLayers; ++layer) {
    for (int i = 0; i < kWidth * kWidth; ++i) {
      w[i] = (float)(((i * 37 + layer * 11) % 17) - 8) / (8.0f * kWidth);
    }
    char name[32];
    snprintf(name, sizeof name, "w%d", layer);
    TF_Output wo = {Const(g, name, TF_FLOAT, w, sizeof w, wdims, 2, s), 0};
    snprintf(name, sizeof name, "matmul%d", layer);
    d = TF_NewOperation(g, "MatMul", name);
    TF_AddInput(d, h);
    TF_AddInput(d, wo);
    TF_Output m = {TF_FinishOperation(d, s), 0};
    CHECK_OK(s, name);
    snprintf(name, sizeof name, "tanh%d", layer);
    d = TF_NewOperation(g, "Tanh", name);
    TF_AddInput(d, m);
    h = (TF_Output){TF_FinishOperation(d, s), 0};
    CHECK_OK(s, name);
  }
  const int32_t axes[2] = {0, 1};
  const int64_t adims[1] = {2};
  TF_Output a = {Const(g, "axes", TF_INT32, axes, sizeof axes, adims, 1, s), 0};
  d = TF_NewOperation(g, "Sum", "y");
  TF_AddInput(d, h);
  TF_AddInput(d, a);
  TF_FinishOperation(d, s);
  CHECK_OK(s, "y");
  TF_Buffer* b = TF_NewBuffer();
  TF_GraphToGraphDef(g, b, s);
  CHECK_OK(s, "TF_GraphToGraphDef");
  TF_DeleteGraph(g);
  return b;
}

/* y and dx of one run of a session made with `budget` (NULL: TfExtNewGradientSession). */
static void Gradient(const TF_Buffer* graph, const char* budget, float* y, float* dx,
                     TF_Status* s) {
  const char* ys[1] = {"y"};
  const char* xs[1] = {"x"};
  TfExtGradientSession* session =
      budget == NULL
          ? TfExtNewGradientSession(graph->data, graph->length, ys, 1, xs, 1, NULL, 0, s)
          : TfExtNewGradientSessionWithMemoryBudget(graph->data, graph->length, ys, 1, xs, 1,
                                                    NULL, 0, budget, s);
  CHECK_OK(s, budget == NULL ? "create" : budget);
  const int64_t dims[2] = {kRows, kWidth};
  TF_Tensor* x = TF_AllocateTensor(TF_FLOAT, dims, 2, sizeof(float) * kRows * kWidth);
  for (int i = 0; i < kRows * kWidth; ++i) {
    ((float*)TF_TensorData(x))[i] = (float)((i * 7919) % 201 - 100) / 50.0f;
  }
  const char* names[1] = {"x"};
  TF_Tensor* outs[1] = {NULL};
  TF_Tensor* dxs[1] = {NULL};
  TfExtGradientSessionRun(session, names, &x, 1, outs, dxs, s);
  CHECK_OK(s, "run");
  memcpy(y, TF_TensorData(outs[0]), sizeof(float));
  memcpy(dx, TF_TensorData(dxs[0]), sizeof(float) * kRows * kWidth);
  TF_DeleteTensor(x);
  TF_DeleteTensor(outs[0]);
  TF_DeleteTensor(dxs[0]);
  TfExtDeleteGradientSession(session);
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s control_flow_graph.pb _tf_ext_ops.so\n", argv[0]);
    return 2;
  }
  /* Bitwise needs the same kernels on both sides. A budget turns off the pretransposed weights
   * (simplify_backward.h: a second copy of each weight), so the unbudgeted dx MatMuls read W
   * where the budgeted ones read W^T; oneDNN's AVX2 matmul sums those two layouts in different
   * orders (112 of 32768 elements differ, by 2.5e-14, on an AMD EPYC). Eigen's does not.
   * TensorFlow reads the setting as its library loads, so the test runs itself again with it. */
  const char* onednn = getenv("TF_ENABLE_ONEDNN_OPTS");
  if (onednn == NULL || strcmp(onednn, "0") != 0) {
    setenv("TF_ENABLE_ONEDNN_OPTS", "0", 1);
    execv("/proc/self/exe", argv);
    perror("execv /proc/self/exe");
    return 2;
  }
  TF_Status* s = TF_NewStatus();
  TF_LoadLibrary(argv[2], s);
  CHECK_OK(s, "TF_LoadLibrary");
  TF_Buffer* graph = StraightLine(1, s);
  static float y[3], dx[3][kRows * kWidth];
  Gradient(graph, NULL, &y[0], dx[0], s);
  Gradient(graph, "", &y[1], dx[1], s);
  Gradient(graph, "0.7", &y[2], dx[2], s);
  for (int k = 1; k < 3; ++k) {
    if (memcmp(&y[0], &y[k], sizeof(float)) != 0 || memcmp(dx[0], dx[k], sizeof dx[0]) != 0) {
      fprintf(stderr, "FAIL gradient %d differs from the unbudgeted one\n", k);
      ++failures;
    }
  }
  const char* ys[1] = {"y"};
  const char* xs[1] = {"x"};
  TfExtGradientSession* bad = TfExtNewGradientSessionWithMemoryBudget(
      graph->data, graph->length, ys, 1, xs, 1, NULL, 0, "half", s);
  ExpectCode("malformed budget", s, TF_INVALID_ARGUMENT, "memory budget 'half'");
  if (bad != NULL) ++failures;
  TF_Buffer* unshaped = StraightLine(0, s);
  bad = TfExtNewGradientSessionWithMemoryBudget(unshaped->data, unshaped->length, ys, 1, xs, 1,
                                                NULL, 0, "0.5", s);
  ExpectCode("unknown shapes", s, TF_INVALID_ARGUMENT, "forward tensors unknown");
  if (bad != NULL) ++failures;
  size_t len = 0;
  void* loops = ReadFileBytes(argv[1], &len);
  const char* loop_ys[1] = {"y"};
  // A loop and a conditional take a budget: the loop saves only its carried state.
  TfExtGradientSession* looped =
      TfExtNewGradientSessionWithMemoryBudget(loops, len, loop_ys, 1, xs, 1, NULL, 0, "64M", s);
  if (looped == NULL || TF_GetCode(s) != TF_OK) {
    fprintf(stderr, "FAIL loops with a budget: %s\n", TF_Message(s));
    ++failures;
  }
  if (looped != NULL) TfExtDeleteGradientSession(looped);
  free(loops);
  TF_DeleteBuffer(unshaped);
  TF_DeleteBuffer(graph);
  TF_DeleteStatus(s);
  if (failures == 0) printf("PASS\n");
  return failures == 0 ? 0 : 1;
}
