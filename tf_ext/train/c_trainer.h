/* tf_ext::Trainer (trainer.h) for C and the language bindings on it: train a SavedModel with
 * no Python. Options are (key, value) strings, looked up in the trainer's one option table
 * (options.h; the keys are tf_ext_train's flag names without "--", listed by
 * `tf_ext_train --help` and docs/training.md), so new options keep this interface. Errors come through TF_Status. Link //tf_ext:trainer (or the wheel's
 * libtf_ext_c.so: docs/c_api.md) and load the op library (TF_LoadLibrary) first.
 * docs/training.md. */
#ifndef TF_EXT_TRAIN_C_TRAINER_H_
#define TF_EXT_TRAIN_C_TRAINER_H_

#include <stdint.h>

#include "tensorflow/c/c_api.h"
#include "tf_ext/version.h" /* TF_EXT_VERSION_STRING: the release of this C API */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct TfExtTrainer TfExtTrainer;

/* Loads the SavedModel at `export_dir` and builds its training step. NULL on error. */
TfExtTrainer* TfExtNewTrainer(const char* export_dir, const char* const* option_keys,
                              const char* const* option_values, int num_options, TF_Status* status);

/* The signature trained: the "signature" option, else "train" when the SavedModel has one,
 * else "serving_default". Owned by the trainer. */
const char* TfExtTrainerSignature(const TfExtTrainer* trainer);
/* 1 when its function runs in training mode (updates BatchNorm's statistics, draws dropout
 * masks), 0 otherwise. */
int TfExtTrainerTrainingMode(const TfExtTrainer* trainer);
/* What to know before training (BatchNorm run in inference mode), one per line; "" if none.
 * Owned by the trainer. */
const char* TfExtTrainerWarnings(const TfExtTrainer* trainer);

/* One step on a batch: the signature's inputs by name (with one input, any single name), the targets (NULL for the "output"
 * loss) and per-example weights (NULL unless the option sample_weights is true). Returns the
 * batch's loss before the update (NaN on error). */
double TfExtTrainerStep(TfExtTrainer* trainer, const char* const* input_names,
                        TF_Tensor* const* inputs, int num_inputs, TF_Tensor* targets,
                        TF_Tensor* weights, TF_Status* status);

/* Trains as model.fit does, exactly as tf_ext_train does (tf_ext/train/loop/fit.h), with the options
 * given to TfExtNewTrainer: data, inputs, targets, batch_size, epochs, metrics, validation,
 * history, tensorboard, checkpoint, resume, early_stopping, save_best, export, ... (the keys of
 * docs/training.md's table). Returns the epochs this call ran (fewer when stopped early; 0 when
 * resumed at or past the last), -1 on error. */
int64_t TfExtTrainerFit(TfExtTrainer* trainer, TF_Status* status);
/* After TfExtTrainerFit: its last epoch's logs, one "name=value" line each (loss, the metrics,
 * val_loss, val_<metric>), "" before. Owned by the trainer. */
const char* TfExtTrainerLastLogs(const TfExtTrainer* trainer);

/* Writes the trained SavedModel (Trainer::Export): `dir` must not exist or be empty. */
void TfExtTrainerExport(TfExtTrainer* trainer, const char* dir, TF_Status* status);

void TfExtDeleteTrainer(TfExtTrainer* trainer);

#ifdef __cplusplus
}
#endif

#endif /* TF_EXT_TRAIN_C_TRAINER_H_ */
