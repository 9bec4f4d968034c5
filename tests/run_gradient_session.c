/* A C program that runs a gradient of a SavedModel signature through TfExtGradientSession
 * (c_gradient_session.h) and writes the results, for tests/python/test_gradient_session.py:
 *
 *   run_gradient_session DIR SIGNATURE Y_KEY X_KEY INCOMING OUT_PREFIX FEED...
 *
 * FEED is KEY:DTYPE:DIMS:FILE (DTYPE float32 or int32, DIMS like 2x8 or "scalar", FILE raw
 * little-endian values); the incoming gradient of Y_KEY (INCOMING 1) is fed as "d_<Y_KEY>".
 * Writes OUT_PREFIX"y" and OUT_PREFIX"dx" (raw float32). On an error prints "error <code>:
 * <message>" and exits 3. The op library named by $TF_EXT_LIBRARY is loaded first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorflow/c/c_api.h"
#include "tf_ext/graph/c_api/c_gradient_session.h"

static TF_Tensor* ReadFeed(char* spec, char** name) {
  char* key = strtok(spec, ":");
  char* dtype = strtok(NULL, ":");
  char* dims_text = strtok(NULL, ":");
  char* path = strtok(NULL, "");
  if (key == NULL || dtype == NULL || dims_text == NULL || path == NULL) return NULL;
  *name = key;
  int64_t dims[8];
  int rank = 0;
  int64_t count = 1;
  if (strcmp(dims_text, "scalar") != 0) {
    for (char* d = strtok(dims_text, "x"); d != NULL && rank < 8; d = strtok(NULL, "x")) {
      dims[rank] = atoll(d);
      count *= dims[rank++];
    }
  }
  const TF_DataType type = strcmp(dtype, "int32") == 0 ? TF_INT32 : TF_FLOAT;
  TF_Tensor* t = TF_AllocateTensor(type, dims, rank, count * 4);
  FILE* f = fopen(path, "rb");
  if (f == NULL || fread(TF_TensorData(t), 4, count, f) != (size_t)count) return NULL;
  fclose(f);
  return t;
}

static void Write(const char* prefix, const char* what, TF_Tensor* t) {
  char path[4096];
  snprintf(path, sizeof(path), "%s%s", prefix, what);
  FILE* f = fopen(path, "wb");
  fwrite(TF_TensorData(t), 1, TF_TensorByteSize(t), f);
  fclose(f);
}

int main(int argc, char** argv) {
  if (argc < 7) {
    fprintf(stderr, "usage: %s DIR SIGNATURE Y_KEY X_KEY INCOMING OUT_PREFIX FEED...\n", argv[0]);
    return 2;
  }
  TF_Status* s = TF_NewStatus();
  /* tf_ext's gradients of TensorFlow's ops that have one only in Python (IdentityN, which
   * inlined calls leave) live in the op library. */
  const char* library = getenv("TF_EXT_LIBRARY");
  if (library != NULL) {
    TF_LoadLibrary(library, s);
    if (TF_GetCode(s) != TF_OK) {
      printf("error %d: %s\n", (int)TF_GetCode(s), TF_Message(s));
      return 3;
    }
  }
  const char* ys[1] = {argv[3]};
  const char* xs[1] = {argv[4]};
  const unsigned char incoming[1] = {(unsigned char)atoi(argv[5])};
  TfExtGradientSession* session =
      TfExtNewGradientSessionFromSavedModel(argv[1], argv[2], ys, 1, xs, 1, incoming, 0, s);
  if (TF_GetCode(s) != TF_OK) {
    printf("error %d: %s\n", (int)TF_GetCode(s), TF_Message(s));
    return 3;
  }
  const int n = argc - 7;
  const char** names = malloc(sizeof(char*) * (n + 1));
  TF_Tensor** values = malloc(sizeof(TF_Tensor*) * (n + 1));
  for (int i = 0; i < n; ++i) {
    char* name = NULL;
    values[i] = ReadFeed(argv[7 + i], &name);
    names[i] = name;
    if (values[i] == NULL) {
      fprintf(stderr, "bad feed %s\n", argv[7 + i]);
      return 2;
    }
  }
  TF_Tensor* y[1] = {NULL};
  TF_Tensor* dx[1] = {NULL};
  TfExtGradientSessionRun(session, names, values, n, y, dx, s);
  if (TF_GetCode(s) != TF_OK) {
    printf("error %d: %s\n", (int)TF_GetCode(s), TF_Message(s));
    return 3;
  }
  Write(argv[6], "y", y[0]);
  Write(argv[6], "dx", dx[0]);
  printf("inputs:");
  for (int i = 0; i < TfExtGradientSessionNumInputs(session); ++i) {
    printf(" %s", TfExtGradientSessionInputName(session, i));
  }
  printf("\n");
  TF_DeleteTensor(y[0]);
  TF_DeleteTensor(dx[0]);
  for (int i = 0; i < n; ++i) TF_DeleteTensor(values[i]);
  free(names);
  free(values);
  TfExtDeleteGradientSession(session);
  TF_DeleteStatus(s);
  return 0;
}
