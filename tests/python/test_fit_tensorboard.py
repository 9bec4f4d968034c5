"""tf_ext_train --tensorboard=DIR (tf_ext/train/loop/summary.h) against Keras 3's
keras.callbacks.TensorBoard: the event files read back with the tensorboard package's reader.
First what Keras's callback writes, pinned (the layout the logger reproduces): DIR/train's
epoch_<log> and epoch_learning_rate at step epoch, batch_<log> (the running batch logs) every
update_freq batches at the batch count from 1, DIR/validation's evaluation_<log>_vs_iterations
at the optimizer's iterations and epoch_<log> at step epoch, every value a float32 tensor with
the "scalars" plugin's metadata; the History without learning_rate; Keras dropping an epoch's
summaries under update_freq=N when the batch count is not a multiple of N (tf_ext writes them).
Then tf_ext_train on the same model and data as model.fit with the callback: the same tags in
each directory, the same steps, values within 1e-5 relative, the same encoding; and a bad
--update_freq refused by name."""
import glob
import os
import subprocess

import numpy as np
import pytest

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.path.join(RUNFILES, "tf_ext") if RUNFILES else os.getcwd()
TOOL = os.path.join(WORKSPACE, "tf_ext", "tf_ext_train")
LIBRARY = os.path.join(WORKSPACE, "tf_ext", "_tf_ext_ops.so")

# 36 training examples in batches of 4 (9 steps an epoch), 12 validation examples (3 batches):
# both multiples of 3, so Keras's callback writes every epoch's summaries with update_freq=3.
N, N_VAL, BATCH, EPOCHS = 36, 12, 4, 3
LR, DECAY_RATE, DECAY_STEPS = 0.1, 0.5, 4
SCALARS_METADATA = b"\n\t\n\x07scalars"  # SummaryMetadata(plugin_data { plugin_name: "scalars" })


def read_run(log_dir):
    """{subdirectory: {tag: [(step, value)]}} of a TensorBoard log directory, each directory's
    one event file read with tensorboard's raw event reader; checks that every value is written
    as tf.summary.scalar writes it (a float32 scalar tensor, the scalars plugin) but for Keras's
    model-config summary ("keras"), which is left out."""
    from tensorboard.backend.event_processing import event_file_loader
    from tensorboard.compat.proto import event_pb2
    from tensorboard.util import tensor_util
    run = {}
    for sub in sorted(os.listdir(log_dir)):
        files = glob.glob(os.path.join(log_dir, sub, "events.out.tfevents.*"))
        assert len(files) == 1, (sub, files)
        assert files[0].endswith(".v2"), files[0]
        tags = run.setdefault(sub, {})
        events = [event_pb2.Event.FromString(r)
                  for r in event_file_loader.RawEventFileLoader(files[0]).Load()]
        assert events[0].file_version == "brain.Event:2"
        for e in events[1:]:
            for v in e.summary.value:
                if v.metadata.plugin_data.plugin_name == "graph_keras_model":
                    assert (sub, v.tag) == ("train", "keras")
                    continue
                assert v.WhichOneof("value") == "tensor", (sub, v.tag, "not a tensor summary")
                assert v.metadata.SerializeToString() == SCALARS_METADATA, (sub, v.tag, v.metadata)
                value = tensor_util.make_ndarray(v.tensor)
                assert value.dtype == np.float32 and value.shape == (), (sub, v.tag, value)
                tags.setdefault(v.tag, []).append((e.step, float(value)))
    return run


def data():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(N + N_VAL, 5)).astype(np.float32)
    y = (x[:, :1] + 0.5 * x[:, 1:2] > 0).astype(np.float32)
    return x[:N], y[:N], x[N:], y[N:]


def model():
    import keras
    keras.utils.set_random_seed(0)
    x = keras.Input(shape=(5,), name="x")
    h = keras.layers.Dense(4, activation="tanh")(x)
    return keras.Model(x, keras.layers.Dense(1, activation="sigmoid")(h))


def keras_fit(log_dir, update_freq, m=None, n=N, epochs=EPOCHS, validation=True):
    """model.fit with Keras's TensorBoard callback; returns the model and its History."""
    import keras
    x, y, xv, yv = data()
    m = m or model()
    m.compile(optimizer=keras.optimizers.SGD(keras.optimizers.schedules.ExponentialDecay(
        LR, decay_steps=DECAY_STEPS, decay_rate=DECAY_RATE)),
        loss="binary_crossentropy", metrics=["accuracy"], jit_compile=False)
    uf = int(update_freq) if update_freq.isdigit() else update_freq
    history = m.fit(x[:n], y[:n], batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0,
                    validation_data=(xv, yv) if validation else None,
                    callbacks=[keras.callbacks.TensorBoard(str(log_dir), update_freq=uf)])
    return m, history


def lr_at(iterations):
    return LR * DECAY_RATE ** (iterations / DECAY_STEPS)


@pytest.mark.parametrize("update_freq", ["epoch", "batch", "3"])
def test_keras_callback_layout(tmp_path, update_freq):
    """What keras.callbacks.TensorBoard writes, derived from the History: the layout
    TensorBoardLogger reproduces (summary.h). Fails when a Keras release changes it."""
    _, history = keras_fit(tmp_path / "logs", update_freq)
    h = history.history
    assert "learning_rate" not in h, "the callback's learning_rate reached the History"
    assert sorted(h) == ["accuracy", "loss", "val_accuracy", "val_loss"], sorted(h)
    run = read_run(tmp_path / "logs")
    assert sorted(run) == ["train", "validation"]
    steps = N // BATCH
    freq = {"epoch": 0, "batch": 1}[update_freq] if not update_freq.isdigit() else int(update_freq)
    train, val = run["train"], run["validation"]
    epochs = list(range(EPOCHS))
    for name in ["loss", "accuracy"]:
        np.testing.assert_allclose([v for _, v in train[f"epoch_{name}"]], h[name], rtol=1e-6)
        assert [s for s, _ in train[f"epoch_{name}"]] == epochs
        np.testing.assert_allclose([v for _, v in val[f"epoch_{name}"]], h[f"val_{name}"], rtol=1e-6)
        assert [s for s, _ in val[f"epoch_{name}"]] == epochs
        ev = val[f"evaluation_{name}_vs_iterations"]
        assert [s for s, _ in ev] == [(e + 1) * steps for e in epochs]
        np.testing.assert_allclose([v for _, v in ev], h[f"val_{name}"], rtol=1e-6)
        if freq:
            batches = train[f"batch_{name}"]
            assert [s for s, _ in batches] == list(range(freq, EPOCHS * steps + 1, freq))
            # the batch logs are running means: each epoch's last one is the epoch's value
            last = dict(batches)
            np.testing.assert_allclose([last[(e + 1) * steps] for e in epochs], h[name], rtol=1e-6)
    lr = train["epoch_learning_rate"]
    assert [s for s, _ in lr] == epochs
    np.testing.assert_allclose([v for _, v in lr], [lr_at((e + 1) * steps) for e in epochs],
                               rtol=1e-6)
    extra = {"epoch_learning_rate"} | ({"batch_loss", "batch_accuracy"} if freq else set())
    assert set(train) == {"epoch_loss", "epoch_accuracy"} | extra, sorted(train)
    assert set(val) == {"epoch_loss", "epoch_accuracy", "evaluation_loss_vs_iterations",
                        "evaluation_accuracy_vs_iterations"}, sorted(val)


def test_keras_drops_epoch_summaries_under_update_freq_n(tmp_path):
    """With update_freq=N Keras's record_if condition of the last batch is still in force at the
    epoch's end: an epoch whose batch count so far is not a multiple of N gets no epoch_*
    values (train and validation alike). tf_ext's logger writes every epoch (summary.h); this
    pins the Keras behaviour that difference is about."""
    # 32 examples: 8 batches an epoch, the counts 8 and 16; N = 16 records only epoch 1's.
    _, history = keras_fit(tmp_path / "logs", "16", n=32, epochs=2, validation=False)
    run = read_run(tmp_path / "logs")
    assert [s for s, _ in run["train"]["epoch_loss"]] == [1]
    assert [s for s, _ in run["train"]["batch_loss"]] == [16]
    assert "validation" not in run


def run_tool(tmp_path, update_freq, validation=True):
    import tf_ext
    export = str(tmp_path / "model")
    tf_ext.export_for_training(model(), export)
    x, y, xv, yv = data()
    np.savez(tmp_path / "train.npz", x=x, y=y)
    np.savez(tmp_path / "val.npz", x=xv, y=yv)
    extra = [f"--validation={tmp_path / 'val.npz'}"] if validation else []
    args = [TOOL, f"--saved_model={export}", f"--data={tmp_path / 'train.npz'}",
            "--inputs=x", "--targets=y",
            "--loss=binary_crossentropy", "--metrics=accuracy", "--optimizer=sgd",
            f"--learning_rate={LR}", f"--lr_schedule=exponential:{DECAY_RATE}:{DECAY_STEPS}",
            f"--batch_size={BATCH}", f"--epochs={EPOCHS}", f"--library={LIBRARY}",
            f"--tensorboard={tmp_path / 'ours'}", f"--update_freq={update_freq}", *extra]
    return subprocess.run(args, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("update_freq,validation",
                         [("epoch", True), ("batch", True), ("3", True), ("batch", False)])
def test_tf_ext_train_matches_keras(tmp_path, update_freq, validation):
    """The same model, data, optimizer and schedule through tf_ext_train --tensorboard and
    model.fit with Keras's callback: the same directories (no validation directory without
    validation data), per directory the same tags, the same steps, values within 1e-5
    relative."""
    r = run_tool(tmp_path, update_freq, validation)
    assert r.returncode == 0, r.stdout + r.stderr
    keras_fit(tmp_path / "keras", update_freq, validation=validation)
    ours, theirs = read_run(tmp_path / "ours"), read_run(tmp_path / "keras")
    assert sorted(ours) == sorted(theirs) == ["train", "validation"][:1 + validation]
    for sub in theirs:
        assert sorted(ours[sub]) == sorted(theirs[sub]), sub
        for tag, points in theirs[sub].items():
            assert [s for s, _ in ours[sub][tag]] == [s for s, _ in points], (sub, tag)
            np.testing.assert_allclose([v for _, v in ours[sub][tag]], [v for _, v in points],
                                       rtol=1e-5, atol=1e-7, err_msg=f"{sub}/{tag}")


@pytest.mark.parametrize("bad", ["sometimes", "0", "-2"])
def test_bad_update_freq(tmp_path, bad):
    r = run_tool(tmp_path, bad)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"'{bad}'" in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "ours" / "train"), "files written before the refusal"
