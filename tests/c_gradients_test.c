/* TfExtAddGradients (tf_ext/graph/c_api/c_gradients.h) from C, on a graph holding a StatelessWhile
 * and a StatelessIf (tests/data/control_flow_graph.pb, made by make_control_flow_graph.py), which
 * TensorFlow's TF_AddGradients cannot differentiate: the gradient at points that take each
 * branch, against central differences of the same graph run through TF_SessionRun; a
 * Hessian-vector product (the backward graph's loops differentiated again) against central
 * differences of the gradient; then hostile calls. Exits non-zero on any mismatch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorflow/c/c_api.h"
#include "tests/c_test_util.h"
#include "tf_ext/graph/c_api/c_gradients.h"

static TF_Graph* Import(const char* path, TF_Status* s) {
  TF_Graph* g = TF_NewGraph();
  TF_Buffer* def = ReadFileBuffer(path);
  TF_ImportGraphDefOptions* opts = TF_NewImportGraphDefOptions();
  TF_GraphImportGraphDef(g, def, opts, s);
  CHECK_OK(s, "import");
  TF_DeleteImportGraphDefOptions(opts);
  TF_DeleteBuffer(def);
  return g;
}

/* Runs `fetch` (n outputs) with x = xv; returns the values in out (3 doubles each). */
static void Run(TF_Session* sess, TF_Operation* x, const double* xv, TF_Output* fetch, int n,
                double* out, TF_Status* s) {
  int64_t dims[1] = {3};
  double copy[3];
  memcpy(copy, xv, sizeof(copy));
  TF_Tensor* in = TF_NewTensor(TF_DOUBLE, dims, 1, copy, sizeof(copy), NoopDealloc, NULL);
  TF_Output inputs[1] = {{x, 0}};
  TF_Tensor* values[4] = {NULL, NULL, NULL, NULL};
  TF_SessionRun(sess, NULL, inputs, &in, 1, fetch, values, n, NULL, 0, NULL, s);
  CHECK_OK(s, "run");
  for (int i = 0; i < n; ++i) {
    const size_t bytes = TF_TensorByteSize(values[i]);
    memcpy(out + 3 * i, TF_TensorData(values[i]), bytes);
    TF_DeleteTensor(values[i]);
  }
  TF_DeleteTensor(in);
}

/* Compares grad (d sum(y) / d x at xv, 3 values) with central differences of y, run through
 * the session; a zero gradient fails too (nothing flowed). */
static void ExpectCentralDifferences(const char* what, TF_Session* sess, TF_Operation* x,
                                     const double* xv, TF_Output y, const double* grad,
                                     TF_Status* s) {
  const double eps = 1e-6;
  for (int i = 0; i < 3; ++i) {
    double up[3], down[3], yu[3], yd[3];
    memcpy(up, xv, sizeof(up));
    memcpy(down, xv, sizeof(down));
    up[i] += eps;
    down[i] -= eps;
    Run(sess, x, up, &y, 1, yu, s);
    Run(sess, x, down, &y, 1, yd, s);
    const double numeric = (yu[0] - yd[0]) / (2 * eps);
    if (fabs(grad[i] - numeric) > 1e-7 * fmax(1.0, fabs(numeric)) || grad[i] == 0) {
      fprintf(stderr, "FAIL %s: d y / d x[%d] = %.12g, central difference %.12g\n", what, i,
              grad[i], numeric);
      ++failures;
    }
  }
}

static int HasOp(TF_Graph* g, const char* type) {
  size_t pos = 0;
  TF_Operation* op;
  while ((op = TF_GraphNextOperation(g, &pos)) != NULL) {
    if (strcmp(TF_OperationOpType(op), type) == 0) return 1;
  }
  return 0;
}

static TF_Operation* ConstVec(TF_Graph* g, const char* name, const double* v, TF_Status* s) {
  const int64_t dims[1] = {3};
  return Const(g, name, TF_DOUBLE, v, 3 * sizeof(double), dims, 1, s);
}

static TF_Operation* ScalarInt(TF_Graph* g, const char* name, int32_t v, TF_Status* s) {
  return Const(g, name, TF_INT32, &v, sizeof(v), NULL, 0, s);
}

static TF_Operation* Binary(TF_Graph* g, const char* type, const char* name, TF_Output a,
                            TF_Output b, TF_Status* s) {
  TF_OperationDescription* d = TF_NewOperation(g, type, name);
  TF_AddInput(d, a);
  TF_AddInput(d, b);
  TF_Operation* op = TF_FinishOperation(d, s);
  CHECK_OK(s, name);
  return op;
}

/* Runs d y / d x (dy, added by TfExtAddGradients to g) at a fixed x in a new session, checks
 * it against central differences of y, then deletes the session and g. */
static void ExpectGradientAndDelete(const char* what, TF_Graph* g, TF_Operation* x, TF_Output y,
                                    TF_Output dy, TF_Status* s) {
  TF_SessionOptions* opts = TF_NewSessionOptions();
  TF_Session* sess = TF_NewSession(g, opts, s);
  CHECK_OK(s, "session");
  const double xv[3] = {0.3, -0.7, 1.1};
  double got[3];
  Run(sess, x, xv, &dy, 1, got, s);
  ExpectCentralDifferences(what, sess, x, xv, y, got, s);
  printf("ok %s differentiated\n", what);
  TF_CloseSession(sess, s);
  TF_DeleteSession(sess, s);
  TF_DeleteSessionOptions(opts);
  TF_DeleteGraph(g);
}

/* A loop built in this process with TF_NewWhile (v1 frames: Enter/Exit/Merge/Switch), which
 * TfExtAddGradients converts back to a While: h <- sin(h) * x + h over 3 steps, from h = x.
 * y = sum(h). Gradient at x against central differences. */
static void NewWhileCase(TF_Status* s) {
  TF_Graph* g = TF_NewGraph();
  TF_Operation* x = Placeholder(g, "x", TF_DOUBLE, s);
  TF_Operation* zero = ScalarInt(g, "zero", 0, s);
  TF_Output inputs[3] = {{zero, 0}, {x, 0}, {x, 0}};  /* i, h, x (invariant) */
  TF_WhileParams params = TF_NewWhile(g, inputs, 3, s);
  CHECK_OK(s, "TF_NewWhile");
  params.name = "loop";
  TF_Operation* three = ScalarInt(params.cond_graph, "three", 3, s);
  params.cond_output = (TF_Output){
      Binary(params.cond_graph, "Less", "less", params.cond_inputs[0], (TF_Output){three, 0}, s),
      0};
  TF_Operation* one = ScalarInt(params.body_graph, "one", 1, s);
  TF_Operation* next_i =
      Binary(params.body_graph, "AddV2", "next_i", params.body_inputs[0], (TF_Output){one, 0}, s);
  TF_OperationDescription* sd = TF_NewOperation(params.body_graph, "Sin", "sin");
  TF_AddInput(sd, params.body_inputs[1]);
  TF_Operation* sin_h = TF_FinishOperation(sd, s);
  CHECK_OK(s, "sin");
  TF_Operation* sx = Binary(params.body_graph, "Mul", "sx", (TF_Output){sin_h, 0},
                            params.body_inputs[2], s);
  TF_Operation* next_h =
      Binary(params.body_graph, "AddV2", "next_h", (TF_Output){sx, 0}, params.body_inputs[1], s);
  params.body_outputs[0] = (TF_Output){next_i, 0};
  params.body_outputs[1] = (TF_Output){next_h, 0};
  params.body_outputs[2] = params.body_inputs[2];
  TF_Output outputs[3];
  TF_FinishWhile(&params, s, outputs);
  CHECK_OK(s, "TF_FinishWhile");
  TF_Operation* axis = ScalarInt(g, "axis", 0, s);
  TF_Operation* y = Binary(g, "Sum", "y", outputs[1], (TF_Output){axis, 0}, s);
  if (!HasOp(g, "Enter") || !HasOp(g, "Exit")) {
    fprintf(stderr, "FAIL TF_NewWhile built no v1 frame\n");
    ++failures;
  }
  TF_Output ys[1] = {{y, 0}}, xs[1] = {{x, 0}}, dys[1];
  TfExtAddGradients(g, NULL, ys, 1, xs, 1, NULL, s, dys);
  CHECK_OK(s, "TfExtAddGradients on a TF_NewWhile loop");
  if (HasOp(g, "Enter") || !HasOp(g, "While")) {
    fprintf(stderr, "FAIL the v1 loop was not converted to a While\n");
    ++failures;
  }
  ExpectGradientAndDelete("a TF_NewWhile loop (v1 frames)", g, x, ys[0], dys[0], s);
}

/* A graph built node by node with no control flow: y = sum(x * sin(x)). The Placeholder is
 * added with no inputs, so nothing connects it to the graph's source node until
 * TfExtAddGradients does (a gradient of zeros with TF_OK before). Against central
 * differences, which also fail a zero gradient. */
static void PlainCase(TF_Status* s) {
  TF_Graph* g = TF_NewGraph();
  TF_Operation* x = Placeholder(g, "x", TF_DOUBLE, s);
  TF_OperationDescription* sd = TF_NewOperation(g, "Sin", "sin");
  TF_AddInput(sd, (TF_Output){x, 0});
  TF_Operation* sin_x = TF_FinishOperation(sd, s);
  CHECK_OK(s, "sin");
  TF_Operation* m = Binary(g, "Mul", "m", (TF_Output){x, 0}, (TF_Output){sin_x, 0}, s);
  TF_Operation* axis = ScalarInt(g, "axis", 0, s);
  TF_Operation* y = Binary(g, "Sum", "y", (TF_Output){m, 0}, (TF_Output){axis, 0}, s);
  TF_Output ys[1] = {{y, 0}}, xs[1] = {{x, 0}}, dys[1];
  TfExtAddGradients(g, NULL, ys, 1, xs, 1, NULL, s, dys);
  CHECK_OK(s, "TfExtAddGradients on a graph built node by node");
  ExpectGradientAndDelete("a graph built node by node", g, x, ys[0], dys[0], s);
}

int main(int argc, char** argv) {
  const char* path = argc > 1 ? argv[1] : "tests/data/control_flow_graph.pb";
  TF_Status* s = TF_NewStatus();
  /* The op library brings the TensorList gradients a second derivative through a loop needs
   * (the first derivative needs none of it). */
  if (argc > 2) {
    TF_Library* lib = TF_LoadLibrary(argv[2], s);
    CHECK_OK(s, "TF_LoadLibrary");
    (void)lib;
  }
  TF_Graph* g = Import(path, s);
  if (!HasOp(g, "StatelessWhile") || !HasOp(g, "StatelessIf")) {
    fprintf(stderr, "FAIL the graph lacks its StatelessWhile or StatelessIf\n");
    return 1;
  }
  TF_Operation* x = TF_GraphOperationByName(g, "x");
  TF_Operation* y = TF_GraphOperationByName(g, "y");
  TF_Output ys[1] = {{y, 0}}, xs[1] = {{x, 0}}, dys[1];

  /* Hostile calls first: nothing is added. */
  TfExtAddGradients(g, NULL, ys, 1, xs, 0, NULL, s, dys);
  ExpectCode("nx = 0", s, TF_INVALID_ARGUMENT, "nx >= 1");
  TF_Output bad[1] = {{y, 7}};
  TfExtAddGradients(g, NULL, bad, 1, xs, 1, NULL, s, dys);
  ExpectCode("output 7 of y", s, TF_INVALID_ARGUMENT, "output 7 of 'y'");
  TfExtAddGradients(g, "x", ys, 1, xs, 1, NULL, s, dys);
  ExpectCode("a prefix naming a node", s, TF_INVALID_ARGUMENT, "prefix 'x'");
  TfExtAddGradients(NULL, NULL, ys, 1, xs, 1, NULL, s, dys);
  ExpectCode("no graph", s, TF_INVALID_ARGUMENT, "graph is NULL");

  TfExtAddGradients(g, NULL, ys, 1, xs, 1, NULL, s, dys);
  CHECK_OK(s, "TfExtAddGradients");
  if (!HasOp(g, "While")) {  /* the gradient loop (the forward one is a StatelessWhile) */
    fprintf(stderr, "FAIL no gradient loop: the loop's gradient was not built\n");
    ++failures;
  }
  /* A Hessian-vector product through the loop and the conditional: the gradient of
   * sum(d y / d x * v), differentiating the backward graph (its loops) again. */
  const double v[3] = {0.7, -1.1, 0.4};
  TF_Operation* v_op = ConstVec(g, "v", v, s);
  TF_Operation* gv = Binary(g, "Mul", "gv", dys[0], (TF_Output){v_op, 0}, s);
  TF_Operation* axis = ScalarInt(g, "axis", 0, s);
  TF_Operation* z = Binary(g, "Sum", "z", (TF_Output){gv, 0}, (TF_Output){axis, 0}, s);
  TF_Output zs[1] = {{z, 0}}, hv[1];
  TfExtAddGradients(g, "hvp", zs, 1, xs, 1, NULL, s, hv);
  CHECK_OK(s, "TfExtAddGradients of the gradient");
  TF_SessionOptions* opts = TF_NewSessionOptions();
  TF_Session* sess = TF_NewSession(g, opts, s);
  CHECK_OK(s, "session");

  /* sum(h) > 0 takes the then-branch, < 0 the else-branch. */
  const double points[2][3] = {{0.3, -0.2, 0.5}, {-0.6, -0.4, 0.1}};
  for (int p = 0; p < 2; ++p) {
    TF_Output fetch[2] = {{y, 0}, dys[0]};
    double got[6];
    Run(sess, x, points[p], fetch, 2, got, s);
    ExpectCentralDifferences(p == 0 ? "then-branch point" : "else-branch point", sess, x,
                             points[p], fetch[0], got + 3, s);
    printf("ok gradient at point %d (y = %g)\n", p, got[0]);
    /* H v against central differences of the gradient along v. */
    TF_Output fetch2[2] = {dys[0], hv[0]};
    double gh[6], gu[6], gd[6], up[3], down[3];
    Run(sess, x, points[p], fetch2, 2, gh, s);
    const double eps = 1e-5;
    for (int i = 0; i < 3; ++i) {
      up[i] = points[p][i] + eps * v[i];
      down[i] = points[p][i] - eps * v[i];
    }
    Run(sess, x, up, fetch2, 1, gu, s);
    Run(sess, x, down, fetch2, 1, gd, s);
    for (int i = 0; i < 3; ++i) {
      const double numeric = (gu[i] - gd[i]) / (2 * eps);
      if (fabs(gh[3 + i] - numeric) > 1e-6 * fmax(1.0, fabs(numeric)) || gh[3 + i] == 0) {
        fprintf(stderr, "FAIL point %d, (H v)[%d] = %.12g, central difference %.12g\n", p, i,
                gh[3 + i], numeric);
        ++failures;
      }
    }
    printf("ok Hessian-vector product at point %d\n", p);
  }

  /* With a session on the graph, the pass may not replace nodes. */
  TfExtAddGradients(g, NULL, ys, 1, xs, 1, NULL, s, dys);
  ExpectCode("a session runs the graph", s, TF_FAILED_PRECONDITION, "session");

  TF_CloseSession(sess, s);
  TF_DeleteSession(sess, s);
  TF_DeleteSessionOptions(opts);
  TF_DeleteGraph(g);

  /* The loop and conditional inside a function the graph calls: TensorFlow's own
   * TF_AddGradients (a SymbolicGradient of the function) after the pass over the functions. */
  if (argc > 3) {
    {
      TF_Graph* cg = Import(argv[3], s);
      TfExtPrepareFunctionsForGradients(cg, s);
      CHECK_OK(s, "TfExtPrepareFunctionsForGradients");
      TF_Operation* cx = TF_GraphOperationByName(cg, "x");
      TF_Operation* cy = TF_GraphOperationByName(cg, "y");
      TF_Output cys[1] = {{cy, 0}}, cxs[1] = {{cx, 0}}, cdys[1];
      TF_AddGradients(cg, cys, 1, cxs, 1, NULL, s, cdys);
      CHECK_OK(s, "TF_AddGradients of the call");
      TF_SessionOptions* copts = TF_NewSessionOptions();
      TF_Session* csess = TF_NewSession(cg, copts, s);
      CHECK_OK(s, "session");
      int64_t dims[1] = {3};
      double xv[3] = {0.3, -0.2, 0.5};
      TF_Tensor* in = TF_NewTensor(TF_DOUBLE, dims, 1, xv, sizeof(xv), NoopDealloc, NULL);
      TF_Output inputs[1] = {{cx, 0}};
      TF_Tensor* value = NULL;
      TF_SessionRun(csess, NULL, inputs, &in, 1, cdys, &value, 1, NULL, 0, NULL, s);
      TF_DeleteTensor(in);
      {
        CHECK_OK(s, "run the call's gradient");
        double got[3];
        memcpy(got, TF_TensorData(value), sizeof(got));
        TF_DeleteTensor(value);
        ExpectCentralDifferences("call", csess, cx, xv, (TF_Output){cy, 0}, got, s);
        printf("ok TF_AddGradients of a function holding a loop and a conditional\n");
      }
      TF_CloseSession(csess, s);
      TF_DeleteSession(csess, s);
      TF_DeleteSessionOptions(copts);
      TF_DeleteGraph(cg);
    }
  }
  PlainCase(s);
  NewWhileCase(s);
  TF_DeleteStatus(s);
  if (failures > 0) {
    fprintf(stderr, "%d failures\n", failures);
    return 1;
  }
  printf("all ok\n");
  return 0;
}
