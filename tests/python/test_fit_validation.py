"""tf_ext_train --validation on a model exported with tf_ext.export_for_training, which trains
its "train" signature (BatchNormalization on batch statistics, dropout drawing masks):
validation runs the "serving_default" signature, in inference mode, as model.fit's validation
and model.evaluate run the model with training=False. A model with BatchNormalization and
Dropout trained 3 epochs with --validation and --metrics=accuracy: its last val_loss and
val_accuracy equal Keras's model.evaluate with the trained weights (within 1e-5 relative), not
the training-mode loss. Validation changes no variable: one epoch with and
without it leaves the same weights and moving statistics, bitwise."""
import csv
import os
import subprocess

import numpy as np

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.path.join(RUNFILES, "tf_ext") if RUNFILES else os.getcwd()
TOOL = os.path.join(WORKSPACE, "tf_ext", "tf_ext_train")
LIBRARY = os.path.join(WORKSPACE, "tf_ext", "_tf_ext_ops.so")
N, N_VAL, BATCH, EPOCHS = 40, 24, 16, 3  # 40 = 16 + 16 + 8: a smaller last batch
RTOL = 1e-5


def batchnorm_dropout_model():
    import keras
    keras.utils.set_random_seed(41)
    x = keras.Input(shape=(5,), name="x")
    h = keras.layers.Dense(8, use_bias=False)(x)
    h = keras.layers.BatchNormalization(momentum=0.9)(h)
    h = keras.layers.Dropout(0.3)(keras.layers.ReLU()(h))
    return keras.Model(x, keras.layers.Dense(3, activation="softmax")(h))


def data(tmp_path):
    rng = np.random.default_rng(42)
    x = rng.normal(size=(N, 5)).astype(np.float32)
    xv = (2.0 + 3.0 * rng.normal(size=(N_VAL, 5))).astype(np.float32)  # not the batches' statistics
    t = rng.integers(0, 3, size=(N,)).astype(np.int64)
    tv = rng.integers(0, 3, size=(N_VAL,)).astype(np.int64)
    np.savez(tmp_path / "data.npz", x=x, t=t)
    np.savez(tmp_path / "val.npz", x=xv, t=tv)
    return xv, tv


def train(tmp_path, export, name, epochs, validation=True):
    flags = [f"--saved_model={export}", f"--data={tmp_path / 'data.npz'}", "--inputs=x",
             "--targets=t", "--loss=sparse_categorical_crossentropy", "--optimizer=sgd",
             "--learning_rate=0.1", f"--batch_size={BATCH}", f"--epochs={epochs}",
             "--metrics=accuracy", f"--history={tmp_path / name}.csv",
             f"--save_weights={tmp_path / name}.npz"]
    if validation:
        flags.append(f"--validation={tmp_path / 'val.npz'}")
    r = subprocess.run([TOOL, f"--library={LIBRARY}"] + flags, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout, dict(np.load(f"{tmp_path / name}.npz"))


def test_validation_runs_the_inference_signature_as_model_evaluate(tmp_path):
    import keras
    import tf_ext
    model = batchnorm_dropout_model()
    export = str(tmp_path / "model")
    tf_ext.export_for_training(model, export)
    xv, tv = data(tmp_path)
    stdout, trained = train(tmp_path, export, "fit", EPOCHS)
    assert ("training signature 'train' in training mode; validation with 'serving_default' in "
            "inference mode\n") in stdout, stdout
    with open(tmp_path / "fit.epochs.csv") as f:
        epochs = list(csv.DictReader(f))
    assert len(epochs) == EPOCHS
    # Keras's model with the trained weights, evaluated as model.fit validates
    moving = [v for v in model.variables if "moving" in v.path]
    assert len(moving) == 2
    for v in model.trainable_variables + moving:
        v.assign(trained[v.path])
    assert np.abs(moving[0].numpy()).max() > 1e-3  # the moving mean moved from its zeros
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"], jit_compile=False)
    expected = model.evaluate(xv, tv, batch_size=BATCH, verbose=0, return_dict=True)
    for key in ("loss", "accuracy"):
        np.testing.assert_allclose(float(epochs[-1][f"val_{key}"]), expected[key], rtol=RTOL,
                                   err_msg=f"val_{key}")
    # in training mode (batch statistics) the loss would differ
    train_mode = keras.losses.sparse_categorical_crossentropy(tv, model(xv, training=True))
    assert abs(float(np.mean(train_mode)) - expected["loss"]) > 1e-3


def test_validation_changes_no_variable(tmp_path):
    import tf_ext
    export = str(tmp_path / "model")
    tf_ext.export_for_training(batchnorm_dropout_model(), export)
    data(tmp_path)
    _, with_validation = train(tmp_path, export, "with", 1)
    stdout, without = train(tmp_path, export, "without", 1, validation=False)
    assert "training signature 'train' in training mode\n" in stdout, stdout
    assert sorted(with_validation) == sorted(without)
    assert any("moving_mean" in k for k in without) and any("moving_variance" in k for k in without)
    for k in without:
        np.testing.assert_array_equal(with_validation[k], without[k], err_msg=k)
