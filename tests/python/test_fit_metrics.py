"""tf_ext_train --metrics (tf_ext/train/model/metrics.h: Keras's compiled metrics in the step graph)
against Keras 3's model.fit on the same model (exported before training, so both start from the
same weights), data, batches (file order, a smaller last batch) and optimizer: every metric's
per-epoch value (training and val_) in --history's .epochs.csv equals model.fit's history, and
its per-step running value in --history equals Keras's batch logs (on_train_batch_end), within
1e-6 relative. A binary model (accuracy, binary_accuracy, auc, precision, recall; from
probabilities and from logits, targets [N, 1] and [N]), multi-class models (accuracy resolved to
sparse or categorical accuracy as Keras resolves it, top-k), a regression (mae, mse); sample
weights ignored by the listed metrics and applied to weighted_NAME (Keras's weighted_metrics).
Then: unknown names and the 'output' loss refused by name, the metrics' state in no export,
checkpoint or saved weights, and no metric node in a step without metrics."""
import csv
import glob
import os
import subprocess

import numpy as np
import pytest

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.path.join(RUNFILES, "tf_ext") if RUNFILES else os.getcwd()
TOOL = os.path.join(WORKSPACE, "tf_ext", "tf_ext_train")
LIBRARY = os.path.join(WORKSPACE, "tf_ext", "_tf_ext_ops.so")
N, N_VAL, BATCH, EPOCHS = 40, 24, 16, 3  # 40 = 16 + 16 + 8: a smaller last batch
RTOL = 1e-6


def mlp(outputs, activation=None, seed=0, squeeze=False):
    """A Dense-tanh-Dense model; `squeeze`: its [N, 1] output as [N]."""
    import keras
    keras.utils.set_random_seed(seed)
    x = keras.Input(shape=(5,), name="x")
    h = keras.layers.Dense(8, activation="tanh")(x)
    y = keras.layers.Dense(outputs, activation=activation)(h)
    if squeeze:
        y = keras.layers.Lambda(lambda z: keras.ops.squeeze(z, -1))(y)
    return keras.Model(x, y)


def run_tool(*flags):
    return subprocess.run([TOOL, f"--library={LIBRARY}"] + list(flags), capture_output=True,
                          text=True, timeout=300)


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


class BatchLogs:
    """Keras's logs after each training batch (the running loss and metrics)."""

    def __new__(cls):
        import keras

        class Callback(keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self.batches = []

            def on_train_batch_end(self, batch, logs=None):
                self.batches.append({k: float(v) for k, v in (logs or {}).items()})

        return Callback()


def keras_names(flag_names):
    """--metrics' names as Keras's compile arguments: (metrics, weighted_metrics)."""
    plain = [m for m in flag_names if not m.startswith("weighted_")]
    weighted = [m[len("weighted_"):] for m in flag_names if m.startswith("weighted_")]
    return plain, weighted


def fit_both(tmp_path, model, loss, keras_loss, targets, val_targets, metrics, weights=None,
             val_weights=None):
    """Trains `model` with tf_ext_train and with model.fit (SGD, lr 0.1); returns (our per-step
    rows, our per-epoch rows, Keras's history, Keras's batch logs)."""
    import keras
    export = str(tmp_path / "model")
    model.export(export, verbose=False)
    rng = np.random.default_rng(11)
    x = rng.normal(size=(N, 5)).astype(np.float32)
    xv = rng.normal(size=(N_VAL, 5)).astype(np.float32)
    data, val = {"x": x, "t": targets}, {"x": xv, "t": val_targets}
    if weights is not None:
        data["w"], val["w"] = weights, val_weights
    np.savez(tmp_path / "data.npz", **data)
    np.savez(tmp_path / "val.npz", **val)
    history = tmp_path / "h.csv"
    flags = [f"--saved_model={export}", f"--data={tmp_path / 'data.npz'}",
             f"--validation={tmp_path / 'val.npz'}", "--inputs=x", "--targets=t",
             f"--loss={loss}", "--optimizer=sgd", "--learning_rate=0.1",
             f"--batch_size={BATCH}", f"--epochs={EPOCHS}", f"--metrics={','.join(metrics)}",
             f"--history={history}"]
    if weights is not None:
        flags.append("--sample_weights=w")
    r = run_tool(*flags)
    assert r.returncode == 0, r.stdout + r.stderr
    plain, weighted = keras_names(metrics)
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1), loss=keras_loss,
                  metrics=plain, weighted_metrics=weighted or None, jit_compile=False)
    logs = BatchLogs()
    validation = (xv, val_targets) if weights is None else (xv, val_targets, val_weights)
    fit = model.fit(x, targets, sample_weight=weights, batch_size=BATCH, epochs=EPOCHS,
                    shuffle=False, verbose=0, validation_data=validation, callbacks=[logs])
    return read_csv(history), read_csv(str(history)[:-len(".csv")] + ".epochs.csv"), \
        fit.history, logs.batches, metrics


def keras_keys(flag_names):
    """The history keys of compile(metrics=plain, weighted_metrics=weighted), in the order Keras
    computes them: the metrics, then the weighted ones, a weighted one whose name is taken
    keyed weighted_NAME."""
    plain, weighted = keras_names(flag_names)
    return plain + [m if m not in plain else f"weighted_{m}" for m in weighted]


def assert_matches(steps, epochs, history, batches, flag_names):
    """Every metric column equals Keras's: per epoch (training and val_) and per step."""
    keys = [k for k in history if k not in ("loss", "val_loss")]
    assert keys, history
    assert len(epochs) == EPOCHS and len(steps) == len(batches)
    for key in keys:
        ours = [float(row[key]) for row in epochs]
        np.testing.assert_allclose(ours, history[key], rtol=RTOL, atol=1e-7, err_msg=key)
    for key in (k for k in keys if not k.startswith("val_")):
        ours = [float(row[key]) for row in steps]
        np.testing.assert_allclose(ours, [b[key] for b in batches], rtol=RTOL, atol=1e-7,
                                   err_msg=f"{key} per step")
    # our columns are Keras's keys, in Keras's order
    expected = keras_keys(flag_names)
    assert sorted(expected + [f"val_{k}" for k in expected]) == sorted(keys)
    assert list(epochs[0]) == ["epoch", "loss"] + expected + ["val_loss"] + \
        [f"val_{k}" for k in expected]
    assert list(steps[0]) == ["step", "epoch", "loss"] + expected


BINARY = ["accuracy", "binary_accuracy", "auc", "precision", "recall"]


@pytest.mark.parametrize("from_logits,rank", [(False, 2), (False, 1), (True, 2), (False, "targets-1")],
                         ids=["probabilities", "rank-1", "logits", "targets-rank-1"])
def test_binary_metrics_match_model_fit(from_logits, rank, tmp_path):
    """Output and targets [N, 1], or both [N], or targets [N] against the output [N, 1] (brought
    to the output's rank, as Keras's losses and metrics do); with logits, binary_accuracy,
    precision and recall threshold the logits at 0.5 and AUC clips them to [0, 1], as Keras's
    do."""
    import keras
    rng = np.random.default_rng(12)
    shape = (N, 1) if rank == 2 else (N,)
    t = (rng.random(size=shape) > 0.5).astype(np.float32)
    tv = (rng.random(size=(N_VAL,) + shape[1:]) > 0.5).astype(np.float32)
    model = mlp(1, None if from_logits else "sigmoid", squeeze=rank == 1)
    loss = "binary_crossentropy:from_logits" if from_logits else "binary_crossentropy"
    keras_loss = keras.losses.BinaryCrossentropy(from_logits=True) if from_logits \
        else "binary_crossentropy"
    assert_matches(*fit_both(tmp_path, model, loss, keras_loss, t, tv, BINARY))


def test_weighted_binary_metrics_match_model_fit(tmp_path):
    """The listed metrics ignore the sample weights (Keras passes them only to
    weighted_metrics); weighted_NAME applies them, keyed weighted_NAME beside NAME."""
    rng = np.random.default_rng(13)
    t = (rng.random(size=(N, 1)) > 0.5).astype(np.float32)
    tv = (rng.random(size=(N_VAL, 1)) > 0.5).astype(np.float32)
    w = rng.uniform(0.1, 2.0, size=(N,)).astype(np.float32)
    wv = rng.uniform(0.1, 2.0, size=(N_VAL,)).astype(np.float32)
    metrics = BINARY + ["weighted_auc", "weighted_precision", "weighted_recall",
                        "weighted_binary_accuracy"]
    steps, epochs, history, batches, names = fit_both(
        tmp_path, mlp(1, "sigmoid"), "binary_crossentropy", "binary_crossentropy", t, tv,
        metrics, w, wv)
    assert "weighted_auc" in history and "val_weighted_precision" in history
    assert_matches(steps, epochs, history, batches, names)
    assert history["auc"] != history["weighted_auc"]


@pytest.mark.parametrize("targets", ["sparse", "sparse-n1", "one-hot", "one-hot-logits"])
def test_multiclass_metrics_match_model_fit(targets, tmp_path):
    """accuracy is sparse categorical accuracy for class ids ([N], or [N, 1] with the mse loss,
    whose float ids the metrics compare as Keras's do) and categorical accuracy for one-hot
    targets, as Keras resolves it; top-k with k = 5 of 8 classes."""
    import keras
    rng = np.random.default_rng(14)
    labels, val_labels = rng.integers(0, 8, size=(N,)), rng.integers(0, 8, size=(N_VAL,))
    if targets.startswith("sparse"):
        t, tv = labels.astype(np.int32), val_labels.astype(np.int32)
        metrics = ["accuracy", "sparse_categorical_accuracy", "sparse_top_k_categorical_accuracy"]
        loss = keras_loss = "sparse_categorical_crossentropy"
        if targets == "sparse-n1":
            t, tv = t[:, None].astype(np.float32), tv[:, None].astype(np.float32)
            loss = keras_loss = "mse"
        model = mlp(8, "softmax")
    else:
        t, tv = np.eye(8, dtype=np.float32)[labels], np.eye(8, dtype=np.float32)[val_labels]
        metrics = ["acc", "categorical_accuracy", "top_k_categorical_accuracy", "accuracy"]
        if targets == "one-hot-logits":
            loss = "categorical_crossentropy:from_logits"
            keras_loss = keras.losses.CategoricalCrossentropy(from_logits=True)
            model = mlp(8)
        else:
            loss = keras_loss = "categorical_crossentropy"
            model = mlp(8, "softmax")
    assert_matches(*fit_both(tmp_path, model, loss, keras_loss, t, tv, metrics))


def test_weighted_multiclass_metrics_match_model_fit(tmp_path):
    rng = np.random.default_rng(15)
    t = rng.integers(0, 8, size=(N,)).astype(np.int32)
    tv = rng.integers(0, 8, size=(N_VAL,)).astype(np.int32)
    w = rng.uniform(0.1, 2.0, size=(N,)).astype(np.float32)
    wv = rng.uniform(0.1, 2.0, size=(N_VAL,)).astype(np.float32)
    metrics = ["accuracy", "weighted_accuracy", "weighted_sparse_top_k_categorical_accuracy"]
    assert_matches(*fit_both(tmp_path, mlp(8, "softmax"), "sparse_categorical_crossentropy",
                             "sparse_categorical_crossentropy", t, tv, metrics, w, wv))


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_regression_metrics_match_model_fit(weighted, tmp_path):
    rng = np.random.default_rng(16)
    t = rng.normal(size=(N, 2)).astype(np.float32)
    tv = rng.normal(size=(N_VAL, 2)).astype(np.float32)
    w = wv = None
    metrics = ["mae", "mse"]
    if weighted:
        w = rng.uniform(0.1, 2.0, size=(N,)).astype(np.float32)
        wv = rng.uniform(0.1, 2.0, size=(N_VAL,)).astype(np.float32)
        metrics += ["weighted_mae", "weighted_mse"]
    assert_matches(*fit_both(tmp_path, mlp(2), "mse", "mse", t, tv, metrics, w, wv))


def test_metric_errors_name_the_problem(tmp_path):
    export = str(tmp_path / "model")
    mlp(2).export(export, verbose=False)
    np.savez(tmp_path / "d.npz", x=np.ones((8, 5), np.float32), t=np.ones((8, 2), np.float32))
    base = [f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}", "--inputs=x"]
    r = run_tool(*base, "--targets=t", "--metrics=accuracy,f1")
    assert r.returncode == 1
    assert "unknown metric 'f1'" in r.stderr and "sparse_categorical_accuracy" in r.stderr, r.stderr
    r = run_tool(*base, "--loss=output", "--metrics=mae")
    assert r.returncode == 1
    assert "metric 'mae'" in r.stderr and "'output' loss" in r.stderr, r.stderr


def test_metric_state_is_not_saved(tmp_path):
    """The metrics' variables are the trainer's: not in the export, the checkpoint or the saved
    weights, whose contents are those of a run without metrics."""
    import tensorflow as tf
    export = str(tmp_path / "model")
    mlp(1, "sigmoid").export(export, verbose=False)
    rng = np.random.default_rng(17)
    np.savez(tmp_path / "d.npz", x=rng.normal(size=(N, 5)).astype(np.float32),
             t=(rng.random(size=(N, 1)) > 0.5).astype(np.float32))
    contents = []
    for metrics in ([], ["--metrics=auc,accuracy,mae"]):
        out = tmp_path / ("with" if metrics else "without")
        out.mkdir()
        r = run_tool(f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}", "--inputs=x",
                     "--targets=t", "--loss=binary_crossentropy", f"--batch_size={BATCH}",
                     "--epochs=2", f"--checkpoint={out / 'ckpt' / 'model'}",
                     f"--export={out / 'export'}", f"--save_weights={out / 'w.npz'}",
                     f"--history={out / 'h.csv'}", *metrics)
        assert r.returncode == 0, r.stdout + r.stderr
        checkpoints = sorted(glob.glob(str(out / "ckpt" / "*.index")))
        assert checkpoints, os.listdir(out / "ckpt")
        contents.append((
            sorted(np.load(out / "w.npz")),
            sorted(n for n, _ in tf.train.list_variables(checkpoints[-1][:-len(".index")])),
            sorted(n for n, _ in tf.train.list_variables(str(out / "export" / "variables" /
                                                           "variables"))),
            [row["loss"] for row in read_csv(out / "h.csv")]))
    assert contents[0] == contents[1]  # same names, and the same losses
    assert not any("metric" in n or "tf_ext_train" in n for part in contents[1][:3] for n in part)


def test_no_metric_nodes_without_metrics(tmp_path):
    """Without --metrics the traced step runs no metric node; with them, their update runs in
    the same step."""
    from tensorflow.core.protobuf import config_pb2
    export = str(tmp_path / "model")
    mlp(1, "sigmoid").export(export, verbose=False)
    np.savez(tmp_path / "d.npz", x=np.ones((BATCH, 5), np.float32),
             t=np.ones((BATCH, 1), np.float32))
    names = []
    for metrics in ([], ["--metrics=auc"]):
        trace = tmp_path / f"trace{len(metrics)}.pb"
        r = run_tool(f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}", "--inputs=x",
                     "--targets=t", "--loss=binary_crossentropy", f"--batch_size={BATCH}",
                     "--epochs=1", f"--step_stats={trace}", *metrics)
        assert r.returncode == 0, r.stdout + r.stderr
        meta = config_pb2.RunMetadata()
        meta.ParseFromString(trace.read_bytes())
        names.append({n.node_name for d in meta.step_stats.dev_stats for n in d.node_stats})
    assert not any("metric" in n for n in names[0])
    assert any("metrics_update" in n for n in names[1])
