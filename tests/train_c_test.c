/* TfExtTrainer (tf_ext/train/c_trainer.h) from C, for tests/python/test_train.py: trains the
 * SavedModel DIR on X (raw float32, N x IN) and T (raw float32, N x OUT) with Adam for EPOCHS
 * epochs of batches of B in file order (KEY=VALUE arguments after EXPORT: further trainer
 * options, which override those), prints the signature and mode trained ("signature S mode M")
 * and each step's loss ("step S loss L"), exports the trained SavedModel to EXPORT, then checks
 * hostile calls. Exit status 0 when all went well.
 *
 *   train_c_test DIR X T N IN OUT B EPOCHS EXPORT [KEY=VALUE...] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorflow/c/c_api.h"
#include "tests/c_test_util.h"
#include "tf_ext/train/c_trainer.h"

static float* ReadFloats(const char* path, size_t n) {
  FILE* f = fopen(path, "rb");
  float* data = malloc(n * sizeof(float));
  if (f == NULL || fread(data, sizeof(float), n, f) != n) {
    fprintf(stderr, "cannot read %s\n", path);
    exit(2);
  }
  fclose(f);
  return data;
}

static TF_Tensor* Rows(const float* data, int64_t first, int64_t rows, int64_t cols) {
  int64_t dims[2] = {rows, cols};
  TF_Tensor* t = TF_AllocateTensor(TF_FLOAT, dims, 2, rows * cols * sizeof(float));
  memcpy(TF_TensorData(t), data + first * cols, rows * cols * sizeof(float));
  return t;
}

int main(int argc, char** argv) {
  if (argc < 10) {
    fprintf(stderr, "usage: %s DIR X T N IN OUT B EPOCHS EXPORT [KEY=VALUE...]\n", argv[0]);
    return 2;
  }
  const int64_t n = atoll(argv[4]), in = atoll(argv[5]), out = atoll(argv[6]), b = atoll(argv[7]);
  const int epochs = atoi(argv[8]);
  TF_Status* s = TF_NewStatus();
  LoadLibraryFromEnv(s);
  float* x = ReadFloats(argv[2], n * in);
  float* t = ReadFloats(argv[3], n * out);
  enum { kMaxOptions = 16 };
  const char* keys[kMaxOptions] = {"loss", "optimizer", "learning_rate"};
  const char* values[kMaxOptions] = {"mse", "adam", "0.01"};
  const int num_options = SplitOptions(argv, 10, argc, keys, values, 3, kMaxOptions);
  TfExtTrainer* trainer = TfExtNewTrainer(argv[1], keys, values, num_options, s);
  if (TF_GetCode(s) != TF_OK) {
    fprintf(stderr, "FAIL create: %s\n", TF_Message(s));
    return 1;
  }
  printf("signature %s mode %s\n", TfExtTrainerSignature(trainer),
         TfExtTrainerTrainingMode(trainer) ? "training" : "inference");
  if (TfExtTrainerWarnings(trainer)[0] != '\0') printf("warning %s\n", TfExtTrainerWarnings(trainer));
  const char* names[1] = {"x"};
  int step = 0;
  for (int e = 0; e < epochs; ++e) {
    for (int64_t first = 0; first < n; first += b, ++step) {
      TF_Tensor* xs[1] = {Rows(x, first, b, in)};
      TF_Tensor* ts = Rows(t, first, b, out);
      const double loss = TfExtTrainerStep(trainer, names, xs, 1, ts, NULL, s);
      if (TF_GetCode(s) != TF_OK) {
        fprintf(stderr, "FAIL step %d: %s\n", step, TF_Message(s));
        return 1;
      }
      printf("step %d loss %.9g\n", step, loss);
      TF_DeleteTensor(xs[0]);
      TF_DeleteTensor(ts);
    }
  }
  TfExtTrainerExport(trainer, argv[9], s);
  if (TF_GetCode(s) != TF_OK) {
    fprintf(stderr, "FAIL export: %s\n", TF_Message(s));
    return 1;
  }
  /* Hostile calls: each must fail with a status, not crash. */
  TF_Tensor* xs[1] = {Rows(x, 0, b, in)};
  TF_Tensor* fewer = Rows(t, 0, b - 1, out);
  const double nan_loss = TfExtTrainerStep(trainer, names, xs, 1, fewer, NULL, s);
  if (TF_GetCode(s) != TF_INVALID_ARGUMENT || !isnan(nan_loss) ||
      strstr(TF_Message(s), "examples") == NULL) {
    fprintf(stderr, "FAIL mismatched targets: %s\n", TF_Message(s));
    ++failures;
  }
  /* One input takes any single name; a second name must be an input's. */
  const char* wrong[2] = {"x", "nope"};
  TF_Tensor* two[2] = {xs[0], xs[0]};
  char listed[64]; /* the error lists the inputs with dtypes and shapes */
  snprintf(listed, sizeof listed, "x: float32 [?,%lld]", (long long)in);
  TfExtTrainerStep(trainer, wrong, two, 2, fewer, NULL, s);
  if (TF_GetCode(s) != TF_INVALID_ARGUMENT || strstr(TF_Message(s), "'nope'") == NULL ||
      strstr(TF_Message(s), listed) == NULL) {
    fprintf(stderr, "FAIL unknown input: %s\n", TF_Message(s));
    ++failures;
  }
  TfExtTrainerStep(NULL, names, xs, 1, fewer, NULL, s);
  if (TF_GetCode(s) != TF_INVALID_ARGUMENT) ++failures;
  TfExtTrainerExport(trainer, argv[9], s); /* exists and is not empty */
  if (TF_GetCode(s) == TF_OK) ++failures;
  const char* bad_keys[1] = {"momentun"};
  const char* bad_values[1] = {"0.9"};
  if (TfExtNewTrainer(argv[1], bad_keys, bad_values, 1, s) != NULL ||
      strstr(TF_Message(s), "unknown trainer option 'momentun'") == NULL) {
    fprintf(stderr, "FAIL bad option: %s\n", TF_Message(s));
    ++failures;
  }
  const char* bad_opt[1] = {"optimizer"};
  const char* bad_opt_value[1] = {"lion"};
  if (TfExtNewTrainer(argv[1], bad_opt, bad_opt_value, 1, s) != NULL || TF_GetCode(s) == TF_OK) ++failures;
  if (TfExtNewTrainer("/nonexistent", NULL, NULL, 0, s) != NULL || TF_GetCode(s) == TF_OK) ++failures;
  TfExtDeleteTrainer(NULL);
  TF_DeleteTensor(xs[0]);
  TF_DeleteTensor(fewer);
  TfExtDeleteTrainer(trainer);
  TF_DeleteStatus(s);
  free(x);
  free(t);
  if (failures) {
    fprintf(stderr, "FAIL %d hostile calls\n", failures);
    return 1;
  }
  printf("hostile calls ok\n");
  return 0;
}
