"""TfExtTrainerFit (tf_ext/train/c_trainer.h): the C API runs model.fit's loop (train::Fit) with
the options given as keys to TfExtNewTrainer, the same loop tf_ext_train runs. A classifier with
metrics and validation data trained through both front ends writes the same epochs CSV, byte for
byte, and it equals Keras's model.fit history; the C program's last logs are that CSV's last row;
early stopping ends both at the same epoch; a bad key value fails at creation or at Fit with one
clear status, never a crash."""
import csv
import os
import re
import subprocess

import numpy as np

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.path.join(RUNFILES, "tf_ext") if RUNFILES else os.getcwd()
TOOL = os.path.join(WORKSPACE, "tf_ext", "tf_ext_train")
LIBRARY = os.path.join(WORKSPACE, "tf_ext", "_tf_ext_ops.so")
RUNNER = os.path.join(WORKSPACE, "tests", "train_fit_c_test")
N, N_VAL, BATCH, EPOCHS, CLASSES = 48, 20, 8, 3, 3


def classifier(seed):
    import keras
    keras.utils.set_random_seed(seed)
    x = keras.Input(shape=(6,), name="x")
    h = keras.layers.Dense(16, activation="tanh")(x)
    return keras.Model(x, keras.layers.Dense(CLASSES, activation="softmax")(h))


def data(tmp_path):
    rng = np.random.default_rng(5)
    arrays = {}
    for name, n in [("d", N), ("v", N_VAL)]:
        x = rng.normal(size=(n, 6)).astype(np.float32)
        y = rng.integers(0, CLASSES, size=(n,)).astype(np.int32)
        np.savez(tmp_path / f"{name}.npz", x=x, y=y)
        arrays[name] = (x, y)
    return arrays


def options(tmp_path, export, name):
    return {"data": str(tmp_path / "d.npz"), "validation": str(tmp_path / "v.npz"), "inputs": "x",
            "targets": "y", "loss": "sparse_categorical_crossentropy", "optimizer": "adam",
            "learning_rate": "0.01", "batch_size": str(BATCH), "epochs": str(EPOCHS),
            "metrics": "accuracy", "history": str(tmp_path / f"{name}.csv")}


def run_c(export, opts):
    return subprocess.run([RUNNER, export] + [f"{k}={v}" for k, v in opts.items()],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_EXT_LIBRARY=LIBRARY))


def run_cli(export, opts):
    return subprocess.run([TOOL, f"--library={LIBRARY}", f"--saved_model={export}"] +
                          [f"--{k}={v}" for k, v in opts.items()],
                          capture_output=True, text=True, timeout=300)


def test_c_fit_equals_the_tool_and_model_fit(tmp_path):
    import keras
    model = classifier(3)
    export = str(tmp_path / "model")
    model.export(export, verbose=False)
    arrays = data(tmp_path)
    r = run_c(export, options(tmp_path, export, "c"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"epochs {EPOCHS}\n" in r.stdout and "hostile calls ok" in r.stdout
    r_cli = run_cli(export, options(tmp_path, export, "cli"))
    assert r_cli.returncode == 0, r_cli.stderr
    with open(tmp_path / "c.epochs.csv") as f:
        c_text = f.read()
    with open(tmp_path / "cli.epochs.csv") as f:
        assert f.read() == c_text  # one loop, whichever front end
    rows = list(csv.DictReader(c_text.splitlines()))
    assert list(rows[0]) == ["epoch", "loss", "accuracy", "val_loss", "val_accuracy"]
    # the C program's last logs are the last epoch's row
    logs = dict(line.split("=") for line in r.stdout.splitlines() if "=" in line)
    assert list(logs) == ["loss", "accuracy", "val_loss", "val_accuracy"]
    for k, v in logs.items():
        assert float(v) == float(rows[-1][k]), k
    # without --history nothing reads the metrics between steps: the same epoch values
    no_history = {k: v for k, v in options(tmp_path, export, "c").items() if k != "history"}
    r_bare = run_c(export, no_history)
    assert r_bare.returncode == 0, r_bare.stdout + r_bare.stderr
    bare = dict(line.split("=") for line in r_bare.stdout.splitlines() if "=" in line)
    assert bare == logs
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"], jit_compile=False)
    fit = model.fit(*arrays["d"], batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0,
                    validation_data=arrays["v"])
    for k in ["loss", "accuracy", "val_loss", "val_accuracy"]:
        np.testing.assert_allclose([float(row[k]) for row in rows], fit.history[k], rtol=1e-5,
                                   err_msg=k)


def test_c_fit_stops_early_as_the_tool(tmp_path):
    model = classifier(4)
    export = str(tmp_path / "model")
    model.export(export, verbose=False)
    data(tmp_path)
    # a learning rate this large makes the validation loss rise: patience 1 stops early
    opts = dict(options(tmp_path, export, "c"), learning_rate="3", epochs="8",
                early_stopping="val_loss:1")
    r = run_c(export, opts)
    assert r.returncode == 0, r.stdout + r.stderr
    epochs = int(r.stdout.split("epochs ")[1].split()[0])
    r_cli = run_cli(export, dict(opts, history=str(tmp_path / "cli.csv")))
    assert r_cli.returncode == 0, r_cli.stderr
    assert 1 < epochs < 8
    assert len(re.findall(r"^epoch \d+/8: ", r_cli.stdout, re.M)) == epochs, r_cli.stdout


def test_c_fit_bad_values_get_one_clear_status(tmp_path):
    model = classifier(5)
    export = str(tmp_path / "model")
    model.export(export, verbose=False)
    data(tmp_path)
    for key, value, message in [
        ("epochs", "two", "trainer option 'epochs': 'two' is not an integer"),
        ("data", str(tmp_path / "nope.npz"), "nope.npz"),
        ("batch_size", "0", "batch_size=0 is not positive"),
        ("metrics", "accuracy,f1", "f1"),
        ("targets", "z", "has no array 'z'"),
    ]:
        r = run_c(export, dict(options(tmp_path, export, "c"), **{key: value}))
        assert r.returncode == 1 and "FAIL" in r.stderr and message in r.stderr, (key, r.stderr)
        assert "Check failed" not in r.stderr and "Segmentation" not in r.stderr
