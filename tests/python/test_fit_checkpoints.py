"""tf_ext_train's checkpoints and stopping (tf_ext/train/loop/callbacks.h) against Python and Keras:
--checkpoint=DIR/NAME writes DIR/NAME-<epoch> and the DIR/checkpoint state that
tf.train.latest_checkpoint reads, keeping the last --keep_checkpoints, each restorable by
tf.train.Checkpoint(root=tf.saved_model.load(export)); 4 epochs straight equal 2 epochs then
--resume=auto to 4 (model and optimizer state); --early_stopping (with min_delta, and with
--restore_best_weights, and on val_accuracy, which rises and repeats values) stops at Keras's
EarlyStopping's epoch with its weights; --save_best keeps the epoch Keras's
ModelCheckpoint(save_best_only=True) keeps; flag errors before training; and a
run SIGKILLed at start-up, mid-epoch, while a checkpoint or NAME-best is being written leaves only
readable checkpoints, and --resume=auto then ends with the weights of a run never killed."""
import os
import random
import signal
import subprocess
import time

import numpy as np
import pytest

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.path.join(RUNFILES, "tf_ext") if RUNFILES else os.getcwd()
TOOL = os.path.join(WORKSPACE, "tf_ext", "tf_ext_train")
LIBRARY = os.path.join(WORKSPACE, "tf_ext", "_tf_ext_ops.so")
BATCH = 16
OPTIMIZER_ITERATIONS = "tf_ext_optimizer/iterations/.ATTRIBUTES/VARIABLE_VALUE"


def run_tool(*flags, timeout=300):
    return subprocess.run([TOOL, f"--library={LIBRARY}"] + list(flags), capture_output=True,
                          text=True, timeout=timeout)


def mlp(seed, hidden=16, layers=1, outputs=2):
    import keras
    keras.utils.set_random_seed(seed)
    x = keras.Input(shape=(5,), name="x")
    h = x
    for _ in range(layers):
        h = keras.layers.Dense(hidden, activation="tanh")(h)
    return keras.Model(x, keras.layers.Dense(outputs)(h))


def setup(tmp_path, seed, n=32, hidden=16, layers=1, validation=False):
    """An exported MLP, its training data (and validation data) as .npz, and the common flags."""
    model = mlp(seed, hidden, layers)
    export = str(tmp_path / "model")
    model.export(export, verbose=False)
    rng = np.random.default_rng(40 + seed)
    x = rng.normal(size=(n, 5)).astype(np.float32)
    t = rng.normal(size=(n, 2)).astype(np.float32)
    np.savez(tmp_path / "d.npz", x=x, t=t)
    flags = [f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}", "--inputs=x",
             "--targets=t", "--loss=mse", f"--batch_size={BATCH}", "--optimizer=adam",
             "--learning_rate=0.05"]
    data = {"model": model, "export": export, "x": x, "t": t, "flags": flags}
    if validation:
        xv = rng.normal(size=(n, 5)).astype(np.float32)
        tv = (xv[:, :2] * 0.5 + rng.normal(size=(n, 2)) * 0.5).astype(np.float32)
        np.savez(tmp_path / "v.npz", x=xv, t=tv)
        flags.append(f"--validation={tmp_path / 'v.npz'}")
        data.update(xv=xv, tv=tv)
    return data


def checkpoint_tensors(prefix):
    """Every tensor of a checkpoint (a read of each checks its data against the index)."""
    import tensorflow as tf
    reader = tf.train.load_checkpoint(prefix)
    return {k: np.asarray(reader.get_tensor(k)) for k in reader.get_variable_to_shape_map()}


def assert_same_floats(a, b):
    assert sorted(a) == sorted(b)
    for k in a:
        if a[k].dtype.kind == "f":
            np.testing.assert_allclose(b[k], a[k], rtol=0, atol=1e-6, err_msg=k)


def prefixes(directory):
    return sorted(os.path.join(directory, f[:-len(".index")]) for f in os.listdir(directory)
                  if f.endswith(".index"))


def restored_outputs(export, prefix, x):
    """The export's outputs on x with a checkpoint restored as Python restores it."""
    import tensorflow as tf
    loaded = tf.saved_model.load(export)
    tf.train.Checkpoint(root=loaded).restore(prefix).assert_existing_objects_matched()
    return list(loaded.signatures["serving_default"](x=tf.constant(x)).values())[0].numpy()


def test_checkpoints_each_epoch_keep_n_and_python_reads_them(tmp_path):
    import tensorflow as tf
    d = setup(tmp_path, seed=1)
    ckpt = tmp_path / "ckpt"
    r = run_tool(*d["flags"], "--epochs=4", f"--checkpoint={ckpt / 'run'}", "--keep_checkpoints=2",
                 f"--save_weights={tmp_path / 'w.npz'}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(os.listdir(ckpt)) == ["checkpoint", "run-3.data-00000-of-00001", "run-3.index",
                                        "run-4.data-00000-of-00001", "run-4.index"]
    assert tf.train.latest_checkpoint(str(ckpt)) == str(ckpt / "run-4")
    state = tf.train.get_checkpoint_state(str(ckpt))
    assert list(state.all_model_checkpoint_paths) == [str(ckpt / "run-3"), str(ckpt / "run-4")]
    assert len(state.all_model_checkpoint_timestamps) == 2
    # relative names in the file, as CheckpointManager writes them
    with open(ckpt / "checkpoint") as f:
        assert 'model_checkpoint_path: "run-4"' in f.read()
    # 2 steps an epoch: the optimizer's iteration count is the epochs' steps
    assert checkpoint_tensors(str(ckpt / "run-3"))[OPTIMIZER_ITERATIONS] == 6
    assert checkpoint_tensors(str(ckpt / "run-4"))[OPTIMIZER_ITERATIONS] == 8
    # Python restores the last one: the trained model
    model = d["model"]
    trained = dict(np.load(tmp_path / "w.npz"))
    model.set_weights([trained[v.path] for v in model.weights])
    np.testing.assert_allclose(restored_outputs(d["export"], str(ckpt / "run-4"), d["x"]),
                               model.predict(d["x"], verbose=0), rtol=1e-5, atol=1e-6)
    # tf.train.CheckpointManager takes the directory over where tf_ext_train left it
    loaded = tf.saved_model.load(d["export"])
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(root=loaded), str(ckpt), max_to_keep=2)
    assert manager.latest_checkpoint == str(ckpt / "run-4")
    assert manager.checkpoints == [str(ckpt / "run-3"), str(ckpt / "run-4")]


def test_two_epochs_then_resume_auto_equal_four_straight(tmp_path):
    d = setup(tmp_path, seed=2)
    straight, split = tmp_path / "straight", tmp_path / "split"
    r = run_tool(*d["flags"], "--epochs=4", f"--checkpoint={straight / 'c'}", "--keep_checkpoints=4")
    assert r.returncode == 0, r.stdout + r.stderr
    # --resume=auto with no checkpoint yet starts fresh
    r = run_tool(*d["flags"], "--epochs=2", f"--checkpoint={split / 'c'}", "--resume=auto")
    assert r.returncode == 0, r.stdout + r.stderr
    assert [f for f in sorted(os.listdir(split)) if f.endswith(".index")] == ["c-2.index"]
    r = run_tool(*d["flags"], "--epochs=4", f"--checkpoint={split / 'c'}", "--resume=auto")
    assert r.returncode == 0, r.stdout + r.stderr
    a, b = checkpoint_tensors(str(straight / "c-4")), checkpoint_tensors(str(split / "c-4"))
    assert a[OPTIMIZER_ITERATIONS] == b[OPTIMIZER_ITERATIONS] == 8
    assert_same_floats(a, b)
    # --resume=PREFIX: from that checkpoint's epoch (3 of 4: one more epoch)
    r = run_tool(*d["flags"], "--epochs=4", f"--checkpoint={tmp_path / 'again' / 'c'}",
                 f"--resume={straight / 'c-3'}")
    assert r.returncode == 0, r.stdout + r.stderr
    again = checkpoint_tensors(str(tmp_path / "again" / "c-4"))
    assert again[OPTIMIZER_ITERATIONS] == 8
    assert not os.path.exists(tmp_path / "again" / "c-1.index")


@pytest.mark.parametrize("flags, keras_args", [
    # val_loss falls to its best at epoch 8 of 15, then rises for 3: stops after epoch 11 and
    # restores epoch 8's weights
    (["--early_stopping=val_loss:3", "--restore_best_weights"],
     dict(monitor="val_loss", patience=3, restore_best_weights=True)),
    # loss falls by 0.0085 at epoch 3: less than min_delta 0.02, so patience 1 stops there
    (["--early_stopping=loss:1:0.02"], dict(monitor="loss", patience=1, min_delta=0.02)),
], ids=["val_loss-restore_best_weights", "loss-min_delta"])
def test_early_stopping_and_save_best_as_keras(flags, keras_args, tmp_path):
    import keras
    d = setup(tmp_path, seed=1, validation=True)
    ckpt = tmp_path / "ckpt"
    r = run_tool(*d["flags"], "--epochs=15", f"--checkpoint={ckpt / 'c'}", "--save_best=val_loss",
                 f"--save_weights={tmp_path / 'w.npz'}", *flags)
    assert r.returncode == 0, r.stdout + r.stderr
    model = d["model"]
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse", jit_compile=False)
    best_path = str(tmp_path / "keras_best.weights.h5")
    fit = model.fit(d["x"], d["t"], batch_size=BATCH, epochs=15, shuffle=False, verbose=0,
                    validation_data=(d["xv"], d["tv"]),
                    callbacks=[keras.callbacks.EarlyStopping(**keras_args),
                               keras.callbacks.ModelCheckpoint(best_path, monitor="val_loss",
                                                               save_best_only=True,
                                                               save_weights_only=True)])
    epochs = len(fit.history["loss"])
    assert 2 < epochs < 15  # it stopped early, not at once
    # the epochs run: the last checkpoint is NAME-<epochs>
    import tensorflow as tf
    assert tf.train.latest_checkpoint(str(ckpt)) == str(ckpt / f"c-{epochs}")
    # the weights it ended with (restored or not) are Keras's
    trained = dict(np.load(tmp_path / "w.npz"))
    for v in model.weights:
        np.testing.assert_allclose(trained[v.path], v.numpy(), rtol=1e-4, atol=1e-5, err_msg=v.path)
    # NAME-best: the epoch ModelCheckpoint(save_best_only=True) kept (the first of the lowest
    # val_loss), its weights those of Keras's best file
    val = fit.history["val_loss"]
    best_epoch = int(np.argmin(val)) + 1
    with open(ckpt / "c-best.state") as f:
        state = dict(line.split(": ", 1) for line in f.read().splitlines())
    assert state["monitor"] == '"val_loss"' and int(state["epoch"]) == best_epoch, state
    np.testing.assert_allclose(float(state["value"]), min(val), rtol=1e-4)
    model.load_weights(best_path)
    np.testing.assert_allclose(restored_outputs(d["export"], str(ckpt / "c-best"), d["x"]),
                               model.predict(d["x"], verbose=0), rtol=1e-4, atol=1e-5)


def test_a_rising_metric_with_ties_as_keras(tmp_path):
    """val_accuracy (mode 'auto': it rises) over 48 examples repeats values: an equal value is no
    improvement, for EarlyStopping (patience 2: stops after epoch 10, restores epoch 8) and for
    ModelCheckpoint(save_best_only=True) alike (the first epoch of the highest value)."""
    import keras
    keras.utils.set_random_seed(0)
    x = keras.Input(shape=(5,), name="x")
    h = keras.layers.Dense(16, activation="tanh")(x)
    model = keras.Model(x, keras.layers.Dense(3)(h))
    export = str(tmp_path / "model")
    model.export(export, verbose=False)
    rng = np.random.default_rng(60)

    def classes(n):
        xs = rng.normal(size=(n, 5)).astype(np.float32)
        return xs, ((xs[:, 0] > 0).astype(np.int32) + (xs[:, 1] > 1).astype(np.int32))
    (xt, yt), (xv, yv) = classes(48), classes(48)
    np.savez(tmp_path / "d.npz", x=xt, y=yt)
    np.savez(tmp_path / "v.npz", x=xv, y=yv)
    ckpt = tmp_path / "ckpt"
    r = run_tool(f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}",
                 f"--validation={tmp_path / 'v.npz'}", "--inputs=x", "--targets=y",
                 "--loss=sparse_categorical_crossentropy:from_logits", "--metrics=accuracy",
                 f"--batch_size={BATCH}", "--optimizer=adam", "--learning_rate=0.02", "--epochs=20",
                 f"--checkpoint={ckpt / 'c'}", "--save_best=val_accuracy",
                 "--early_stopping=val_accuracy:2", "--restore_best_weights",
                 f"--save_weights={tmp_path / 'w.npz'}")
    assert r.returncode == 0, r.stdout + r.stderr
    model.compile(optimizer=keras.optimizers.Adam(0.02),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], jit_compile=False)
    fit = model.fit(xt, yt, batch_size=BATCH, epochs=20, shuffle=False, verbose=0,
                    validation_data=(xv, yv),
                    callbacks=[keras.callbacks.EarlyStopping(monitor="val_accuracy", patience=2,
                                                             restore_best_weights=True)])
    val = fit.history["val_accuracy"]
    epochs, best_epoch = len(val), int(np.argmax(val)) + 1
    assert len(set(val)) < len(val) and best_epoch < epochs  # ties, and a best before the end
    import tensorflow as tf
    assert tf.train.latest_checkpoint(str(ckpt)) == str(ckpt / f"c-{epochs}")
    trained = dict(np.load(tmp_path / "w.npz"))
    for v in model.weights:
        np.testing.assert_allclose(trained[v.path], v.numpy(), rtol=1e-4, atol=1e-5, err_msg=v.path)
    with open(ckpt / "c-best.state") as f:
        assert f"epoch: {best_epoch}\n" in f.read()


def test_monitor_and_flag_errors_before_training(tmp_path):
    d = setup(tmp_path, seed=3)
    ckpt = str(tmp_path / "ckpt" / "c")
    cases = [
        (["--early_stopping=val_loss:2"], ["--early_stopping=val_loss:2", "--validation", "loss"]),
        (["--checkpoint=" + ckpt, "--save_best=val_loss"], ["--save_best=val_loss", "--validation"]),
        (["--early_stopping=loss:-1"], ["--early_stopping=loss:-1", "PATIENCE"]),
        (["--early_stopping=loss"], ["--early_stopping=loss", "MONITOR:PATIENCE"]),
        (["--early_stopping=accuracy:1"], ["--early_stopping=accuracy:1", "they have: loss"]),
        (["--resume=auto"], ["--resume=auto", "--checkpoint"]),
        (["--checkpoint=" + ckpt, "--keep_checkpoints=0"], ["--keep_checkpoints=0"]),
        (["--restore_best_weights"], ["--restore_best_weights", "--early_stopping"]),
    ]
    for extra, parts in cases:
        r = run_tool(*d["flags"], "--epochs=2", *extra)
        assert r.returncode != 0, extra
        for p in parts:
            assert p in r.stderr, (extra, r.stderr)
        assert not os.path.exists(tmp_path / "ckpt" / "c-1.index"), extra  # nothing trained


def test_sigkill_at_any_moment_leaves_readable_checkpoints_and_resume_completes(tmp_path):
    """A model of ~1M parameters (a 12 MB checkpoint with Adam's slots), so a write takes a
    while: the run is killed at start-up, at random moments, and the moment a checkpoint's
    temporary files, NAME-best-tmp's .state or its checkpoint appear; after each kill every
    checkpoint present is read whole; --resume=auto then finishes with the weights, optimizer
    state and NAME-best of a run never killed."""
    import tensorflow as tf
    d = setup(tmp_path, seed=4, n=64, hidden=1000, layers=2)
    epochs = 6
    common = d["flags"] + [f"--epochs={epochs}", "--keep_checkpoints=2", "--save_best=loss"]
    # loss must fall each epoch for NAME-best to be rewritten each epoch: a gentler rate
    common = [f for f in common if not f.startswith("--learning_rate")] + ["--learning_rate=0.001"]
    started = time.time()
    r = run_tool(*common, f"--checkpoint={tmp_path / 'whole' / 'c'}")
    assert r.returncode == 0, r.stdout + r.stderr
    whole = time.time() - started
    ckpt = tmp_path / "killed"
    flags = common + [f"--checkpoint={ckpt / 'c'}", "--resume=auto"]

    def kill_when(condition, deadline):
        p = subprocess.Popen([TOOL, f"--library={LIBRARY}"] + flags, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        end = time.time() + deadline
        while p.poll() is None and time.time() < end and not condition():
            time.sleep(0.001)
        hit = condition()
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
        p.wait()
        listing = sorted(os.listdir(ckpt)) if os.path.isdir(ckpt) else []
        print("killed" if p.returncode == -signal.SIGKILL else f"exited {p.returncode}",
              "while writing" if hit else "", listing)
        return p.returncode == -signal.SIGKILL, hit

    def writing(mark):
        return lambda: os.path.isdir(ckpt) and any(mark in f for f in os.listdir(ckpt))

    def check_readable():
        if not os.path.isdir(ckpt):
            return
        for prefix in prefixes(str(ckpt)):
            checkpoint_tensors(prefix)
        latest = tf.train.latest_checkpoint(str(ckpt))
        if latest is not None:
            checkpoint_tensors(latest)

    rng = random.Random(7)
    moments = [lambda: kill_when(lambda: False, 0.3),                 # start-up
               lambda: kill_when(writing(".tempstate"), whole),       # a checkpoint being written
               lambda: kill_when(writing("-best-tmp.state"), whole),  # NAME-best's swap begun
               lambda: kill_when(writing("-best-tmp.data"), whole),   # its checkpoint written
               lambda: kill_when(lambda: False, rng.uniform(0.3, 1.0) * whole),
               lambda: kill_when(writing("c-3.data"), whole),         # a later epoch's
               lambda: kill_when(lambda: False, rng.uniform(0.3, 1.0) * whole)]
    outcomes = []
    for kill in moments:
        outcomes.append(kill())
        check_readable()
    # the moments aimed at writes caught them (the process killed while the files were there)
    assert all(outcomes[i] == (True, True) for i in (1, 2, 3)), outcomes
    assert sum(killed for killed, _ in outcomes) >= 4, outcomes
    r = subprocess.run([TOOL, f"--library={LIBRARY}"] + flags, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    check_readable()
    assert tf.train.latest_checkpoint(str(ckpt)) == str(ckpt / f"c-{epochs}")
    assert not [f for f in os.listdir(ckpt) if "tempstate" in f or "-best-tmp" in f or ".tmp" in f]
    a = checkpoint_tensors(str(tmp_path / "whole" / f"c-{epochs}"))
    b = checkpoint_tensors(str(ckpt / f"c-{epochs}"))
    assert a[OPTIMIZER_ITERATIONS] == b[OPTIMIZER_ITERATIONS] == epochs * 4
    assert_same_floats(a, b)
    assert_same_floats(checkpoint_tensors(str(tmp_path / "whole" / "c-best")),
                       checkpoint_tensors(str(ckpt / "c-best")))
