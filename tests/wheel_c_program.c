/* A C program built against an installed wheel only (tests/python/test_wheel.py compiles it
 * with cc, the headers under tf_ext.get_include() and the shipped tf_ext/libtf_ext_c.so plus
 * TensorFlow's libraries, as docs/c_api.md says): no Bazel, no Python in the process. It
 * prints the C API's version and the numbers of each header's entry points, which the test
 * compares with numpy:
 *
 *   wheel_c_program OPS_LIBRARY SAVED_MODEL DATA X0 X1 X2
 *
 *   version V N                 TF_EXT_VERSION_STRING, TF_EXT_VERSION_NUMBER (version.h)
 *   square_grad g0 g1 g2        TfExtAddGradients of y = x * x at x (before loading the op
 *                               library: TensorFlow's ops need none)
 *   zero_out_grad g0 g1 g2      TfExtAddGradients of y = ZeroOut(x * x, preserve_index=1),
 *                               after TF_LoadLibrary(OPS_LIBRARY)
 *   session_grad g0 g1 g2       the same through TfExtGradientSession, from the GraphDef
 *   train_loss L                TfExtTrainerStep on the SavedModel (mse, SGD 0.1), per batch
 *                               of 4 rows of DATA (raw float32: 8 x 3 inputs, then 8 x 1 targets)
 * Exits non-zero on any error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorflow/c/c_api.h"
#include "tf_ext/graph/c_api/c_gradient_session.h"
#include "tf_ext/graph/c_api/c_gradients.h"
#include "tf_ext/train/c_trainer.h"

#define CHECK_OK(s, what)                                    \
  do {                                                       \
    if (TF_GetCode(s) != TF_OK) {                            \
      fprintf(stderr, "FAIL %s: %s\n", what, TF_Message(s)); \
      exit(1);                                               \
    }                                                        \
  } while (0)

static TF_Tensor* Vector(const double* v) {
  int64_t dims[1] = {3};
  TF_Tensor* t = TF_AllocateTensor(TF_DOUBLE, dims, 1, 3 * sizeof(double));
  memcpy(TF_TensorData(t), v, 3 * sizeof(double));
  return t;
}

static void Print(const char* what, TF_Tensor* t) {
  const double* v = (const double*)TF_TensorData(t);
  printf("%s %.17g %.17g %.17g\n", what, v[0], v[1], v[2]);
}

/* x: Placeholder double[3]; y = x * x, or ZeroOut(x * x, preserve_index=1), built node by
 * node. */
static TF_Graph* BuildGraph(int zero_out, TF_Status* s) {
  TF_Graph* g = TF_NewGraph();
  TF_OperationDescription* d = TF_NewOperation(g, "Placeholder", "x");
  TF_SetAttrType(d, "dtype", TF_DOUBLE);
  TF_Operation* x = TF_FinishOperation(d, s);
  CHECK_OK(s, "x");
  d = TF_NewOperation(g, "Mul", zero_out ? "square" : "y");
  TF_AddInput(d, (TF_Output){x, 0});
  TF_AddInput(d, (TF_Output){x, 0});
  TF_Operation* square = TF_FinishOperation(d, s);
  CHECK_OK(s, "Mul");
  if (zero_out) {
    d = TF_NewOperation(g, "TfExt>ZeroOut", "y");
    TF_AddInput(d, (TF_Output){square, 0});
    TF_SetAttrType(d, "T", TF_DOUBLE);
    TF_SetAttrInt(d, "preserve_index", 1);
    TF_FinishOperation(d, s);
    CHECK_OK(s, "TfExt>ZeroOut");
  }
  return g;
}

/* d sum(y) / dx at x by TfExtAddGradients, run with TF_SessionRun. */
static void AddGradientsAndRun(const char* what, int zero_out, const double* xv, TF_Status* s) {
  TF_Graph* g = BuildGraph(zero_out, s);
  TF_Output x = {TF_GraphOperationByName(g, "x"), 0};
  TF_Output y = {TF_GraphOperationByName(g, "y"), 0};
  TF_Output dy;
  TfExtAddGradients(g, NULL, &y, 1, &x, 1, NULL, s, &dy);
  CHECK_OK(s, "TfExtAddGradients");
  TF_SessionOptions* opts = TF_NewSessionOptions();
  TF_Session* sess = TF_NewSession(g, opts, s);
  CHECK_OK(s, "TF_NewSession");
  TF_Tensor* in = Vector(xv);
  TF_Tensor* out = NULL;
  TF_SessionRun(sess, NULL, &x, &in, 1, &dy, &out, 1, NULL, 0, NULL, s);
  CHECK_OK(s, "TF_SessionRun");
  Print(what, out);
  TF_DeleteTensor(out);
  TF_DeleteTensor(in);
  TF_CloseSession(sess, s);
  TF_DeleteSession(sess, s);
  TF_DeleteSessionOptions(opts);
  TF_DeleteGraph(g);
}

/* The same gradient through TfExtGradientSession, built from the graph's GraphDef. */
static void GradientSession(const double* xv, TF_Status* s) {
  TF_Graph* g = BuildGraph(1, s);
  TF_Buffer* def = TF_NewBuffer();
  TF_GraphToGraphDef(g, def, s);
  CHECK_OK(s, "TF_GraphToGraphDef");
  const char* ys[1] = {"y"};
  const char* xs[1] = {"x"};
  TfExtGradientSession* session =
      TfExtNewGradientSession(def->data, def->length, ys, 1, xs, 1, NULL, 0, s);
  CHECK_OK(s, "TfExtNewGradientSession");
  if (TfExtGradientSessionNumInputs(session) != 1 ||
      strcmp(TfExtGradientSessionInputName(session, 0), "x") != 0 ||
      TfExtGradientSessionInputType(session, 0) != TF_DOUBLE) {
    fprintf(stderr, "FAIL the session's feeds are not x (double)\n");
    exit(1);
  }
  TF_Tensor* in = Vector(xv);
  TF_Tensor* y = NULL;
  TF_Tensor* dx = NULL;
  TfExtGradientSessionRun(session, xs, &in, 1, &y, &dx, s);
  CHECK_OK(s, "TfExtGradientSessionRun");
  Print("session_grad", dx);
  TF_DeleteTensor(y);
  TF_DeleteTensor(dx);
  TF_DeleteTensor(in);
  TfExtDeleteGradientSession(session);
  TF_DeleteBuffer(def);
  TF_DeleteGraph(g);
}

static TF_Tensor* Rows(const float* data, int64_t first, int64_t rows, int64_t cols) {
  int64_t dims[2] = {rows, cols};
  TF_Tensor* t = TF_AllocateTensor(TF_FLOAT, dims, 2, rows * cols * sizeof(float));
  memcpy(TF_TensorData(t), data + first * cols, rows * cols * sizeof(float));
  return t;
}

static void Train(const char* saved_model, const char* data_path, TF_Status* s) {
  float data[8 * 3 + 8 * 1];
  FILE* f = fopen(data_path, "rb");
  if (f == NULL || fread(data, sizeof(float), 32, f) != 32) {
    fprintf(stderr, "FAIL cannot read %s\n", data_path);
    exit(1);
  }
  fclose(f);
  const char* keys[3] = {"loss", "optimizer", "learning_rate"};
  const char* values[3] = {"mse", "sgd", "0.1"};
  TfExtTrainer* trainer = TfExtNewTrainer(saved_model, keys, values, 3, s);
  CHECK_OK(s, "TfExtNewTrainer");
  const char* names[1] = {"x"};
  for (int first = 0; first < 8; first += 4) {
    TF_Tensor* x = Rows(data, first, 4, 3);
    TF_Tensor* t = Rows(data + 8 * 3, first, 4, 1);
    const double loss = TfExtTrainerStep(trainer, names, &x, 1, t, NULL, s);
    CHECK_OK(s, "TfExtTrainerStep");
    printf("train_loss %.17g\n", loss);
    TF_DeleteTensor(x);
    TF_DeleteTensor(t);
  }
  TfExtDeleteTrainer(trainer);
}

int main(int argc, char** argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: %s OPS_LIBRARY SAVED_MODEL DATA X0 X1 X2\n", argv[0]);
    return 2;
  }
  printf("version %s %d\n", TF_EXT_VERSION_STRING, TF_EXT_VERSION_NUMBER);
  const double xv[3] = {atof(argv[4]), atof(argv[5]), atof(argv[6])};
  TF_Status* s = TF_NewStatus();
  AddGradientsAndRun("square_grad", 0, xv, s);
  TF_Library* ops = TF_LoadLibrary(argv[1], s);
  CHECK_OK(s, "TF_LoadLibrary");
  AddGradientsAndRun("zero_out_grad", 1, xv, s);
  GradientSession(xv, s);
  Train(argv[2], argv[3], s);
  TF_DeleteLibraryHandle(ops);
  TF_DeleteStatus(s);
  return 0;
}
