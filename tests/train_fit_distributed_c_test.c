/* One worker of a data-parallel job driven through the C API alone (tf_ext/train/c_trainer.h):
 * TfExtNewTrainer with the cluster in its keys (cluster=HOST:PORT,..., task_index=N, or
 * TF_CONFIG in the environment), then TfExtTrainerFit. Prints the epochs run and the last
 * epoch's logs. Run by //tests:fit_distributed_py_test, which starts one process per worker and
 * compares their epochs CSV with tf_ext_train's on the same cluster shape.
 *
 *   train_fit_distributed_c_test SAVED_MODEL KEY=VALUE... */
#include <stdint.h>
#include <stdio.h>

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
  const int64_t epochs = TfExtTrainerFit(trainer, s);
  if (TF_GetCode(s) != TF_OK || epochs < 0) {
    fprintf(stderr, "FAIL fit: %s\n", TF_Message(s));
    return 1;
  }
  printf("epochs %lld\n%s", (long long)epochs, TfExtTrainerLastLogs(trainer));
  TfExtDeleteTrainer(trainer);
  TF_DeleteStatus(s);
  return failures;
}
