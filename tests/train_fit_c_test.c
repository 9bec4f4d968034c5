/* A C program training a SavedModel through TfExtTrainerFit (tf_ext/train/c_trainer.h): model.fit's
 * loop with the options given as KEY=VALUE arguments (the keys of tf_ext_train's flags), as
 * tf_ext_train runs it. Prints the epochs run and the last epoch's logs; then hostile calls.
 * Run by //tests:fit_c_api_py_test, and by //tests:fit_distributed_py_test as each worker of a
 * data-parallel job (cluster=HOST:PORT,... and task_index=N among the keys).
 *
 *   train_fit_c_test SAVED_MODEL KEY=VALUE... */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorflow/c/c_api.h"
#include "tests/c_test_util.h"
#include "tf_ext/train/c_trainer.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s SAVED_MODEL [KEY=VALUE...]\n", argv[0]);
    return 2;
  }
  TF_Status* s = TF_NewStatus();
  LoadLibraryFromEnv(s);
  enum { kMaxOptions = 64 };
  const char* keys[kMaxOptions];
  const char* values[kMaxOptions];
  const int num_options = SplitOptions(argv, 2, argc, keys, values, 0, kMaxOptions);
  TfExtTrainer* trainer = TfExtNewTrainer(argv[1], keys, values, num_options, s);
  if (TF_GetCode(s) != TF_OK) {
    fprintf(stderr, "FAIL create: %s\n", TF_Message(s));
    return 1;
  }
  if (TfExtTrainerLastLogs(trainer)[0] != '\0') {
    fprintf(stderr, "FAIL logs before fit\n");
    return 1;
  }
  const int64_t epochs = TfExtTrainerFit(trainer, s);
  if (TF_GetCode(s) != TF_OK || epochs < 0) {
    fprintf(stderr, "FAIL fit: %s\n", TF_Message(s));
    return 1;
  }
  printf("epochs %lld\n%s", (long long)epochs, TfExtTrainerLastLogs(trainer));
  if (TfExtTrainerFit(NULL, s) != -1 || TF_GetCode(s) != TF_INVALID_ARGUMENT) ++failures;
  if (TfExtTrainerLastLogs(NULL)[0] != '\0') ++failures;
  TfExtDeleteTrainer(trainer);
  TF_DeleteStatus(s);
  if (failures) {
    fprintf(stderr, "FAIL %d hostile calls\n", failures);
    return 1;
  }
  printf("hostile calls ok\n");
  return 0;
}
