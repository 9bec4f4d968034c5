/* tf_ext::Trainer (trainer.h) for C and the language bindings on it: train a SavedModel with
 * no Python. Options are (key, value) strings, the keys tf_ext_train's flag names without
 * "--" (loss, optimizer, learning_rate, momentum, nesterov, beta_1, beta_2, epsilon,
 * weight_decay, rho, centered, lr_schedule, signature, output, sample_weights), so new options
 * keep this interface. Errors come through TF_Status. Link //tf_ext:trainer (or the wheel's
 * libtf_ext_c.so: docs/c_api.md) and load the op library (TF_LoadLibrary) first.
 * docs/training.md. */
#ifndef TF_EXT_TRAIN_C_TRAINER_H_
#define TF_EXT_TRAIN_C_TRAINER_H_

#include "tensorflow/c/c_api.h"
#include "tf_ext/version.h" /* TF_EXT_VERSION_STRING: the release of this C API */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct TfExtTrainer TfExtTrainer;

/* Loads the SavedModel at `export_dir` and builds its training step. NULL on error. */
TfExtTrainer* TfExtNewTrainer(const char* export_dir, const char* const* option_keys,
                              const char* const* option_values, int num_options, TF_Status* status);

/* One step on a batch: the signature's inputs by name, the targets (NULL for the "output"
 * loss) and per-example weights (NULL unless the option sample_weights is true). Returns the
 * batch's loss before the update (NaN on error). */
double TfExtTrainerStep(TfExtTrainer* trainer, const char* const* input_names,
                        TF_Tensor* const* inputs, int num_inputs, TF_Tensor* targets,
                        TF_Tensor* weights, TF_Status* status);

/* Writes the trained SavedModel (Trainer::Export): `dir` must not exist or be empty. */
void TfExtTrainerExport(TfExtTrainer* trainer, const char* dir, TF_Status* status);

void TfExtDeleteTrainer(TfExtTrainer* trainer);

#ifdef __cplusplus
}
#endif

#endif /* TF_EXT_TRAIN_C_TRAINER_H_ */
