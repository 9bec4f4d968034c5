"""GradientSession from a SavedModel (tf_ext/graph/runtime/saved_model.h) through the C API
(TfExtNewGradientSessionFromSavedModel), run by tests/run_gradient_session.c, a C program with
no Python: SavedModels written by tf.saved_model.save (a tf.Module) and by Keras 3's
model.export (an Embedding model, whose ResourceGather is frozen into a GatherV2; a CNN with
BatchNormalization), compared with Python's GradientTape gradient of the loaded signature, with
and without an incoming gradient; a Keras LSTM, whose loop body reads its weights (read once
before the loop instead: tf_ext/graph/passes/loop_variables.h), and a tf.cond whose branches read
variables (read before the If the same way), each branch taken. A variable the signature assigns is
refused by name; unknown keys are refused listing the signature's keys."""
import os
import subprocess

import numpy as np
import pytest
import tensorflow as tf

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.path.join(RUNFILES, "tf_ext") if RUNFILES else os.getcwd()
RUNNER = os.path.join(WORKSPACE, "tests", "run_gradient_session")


class Mlp(tf.Module):
    def __init__(self):
        rng = np.random.default_rng(1)
        self.w1 = tf.Variable(rng.normal(size=(8, 16)).astype(np.float32) * 0.4)
        self.b1 = tf.Variable(rng.normal(size=(16,)).astype(np.float32) * 0.1)
        self.w2 = tf.Variable(rng.normal(size=(16, 3)).astype(np.float32) * 0.4)

    @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": tf.matmul(tf.tanh(tf.matmul(x, self.w1) + self.b1), self.w2)}


def save_mlp(path):
    m = Mlp()
    tf.saved_model.save(m, path, signatures={"serving_default": m.__call__})
    return "x", "y", {"x": (4, 8)}


class Cond(tf.Module):
    """tf.cond with variables read in both branches (their handles are If inputs)."""

    def __init__(self, threshold):
        rng = np.random.default_rng(2)
        self.threshold = threshold
        self.w = tf.Variable(rng.normal(size=(3, 2)).astype(np.float32))
        self.u = tf.Variable(rng.normal(size=(3, 2)).astype(np.float32))
        self.v = tf.Variable(np.array([0.5, -1.5], np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": tf.cond(tf.reduce_mean(x) > self.threshold,
                             lambda: tf.tanh(tf.matmul(x, self.w)) * self.v,
                             lambda: tf.matmul(x * x, self.u) - self.v)}


def save_cond(threshold, path):
    m = Cond(threshold)
    tf.saved_model.save(m, path, signatures={"serving_default": m.__call__})
    return "x", "y", {"x": (4, 3)}


def save_cond_then(path):
    return save_cond(-100.0, path)


def save_cond_else(path):
    return save_cond(100.0, path)


def export_embedding(path):
    import keras
    keras.utils.set_random_seed(2)
    ids = keras.Input(shape=(5,), dtype="int32", name="ids")
    feats = keras.Input(shape=(4,), name="feats")
    e = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(50, 6)(ids))
    y = keras.layers.Dense(3, activation="tanh")(keras.layers.Concatenate()([e, feats]))
    keras.Model([ids, feats], y).export(path, verbose=False)
    return "feats", None, {"ids": (2, 5), "feats": (2, 4)}


def export_cnn(path):
    import keras
    keras.utils.set_random_seed(3)
    x = keras.Input(shape=(8, 8, 3), name="image")
    h = keras.layers.Conv2D(4, 3, activation="relu")(x)
    h = keras.layers.BatchNormalization()(h)
    y = keras.layers.Dense(2)(keras.layers.Flatten()(h))
    model = keras.Model(x, y)
    # moving statistics that are not the initial 0 and 1
    bn = model.layers[2]
    bn.moving_mean.assign(np.linspace(-0.5, 0.5, 4).astype(np.float32))
    bn.moving_variance.assign(np.linspace(0.5, 2.0, 4).astype(np.float32))
    model.export(path, verbose=False)
    return "image", None, {"image": (2, 8, 8, 3)}


def export_lstm(path):
    import keras
    keras.utils.set_random_seed(4)
    x = keras.Input(shape=(5, 3), name="seq")
    keras.Model(x, keras.layers.LSTM(4)(x)).export(path, verbose=False)
    return "seq", None, {"seq": (2, 5, 3)}


_LOADED = []  # the loaded objects own the variables their signatures read


def signature(path):
    loaded = tf.saved_model.load(path)
    _LOADED.append(loaded)
    return loaded.signatures["serving_default"]


def feeds_for(shapes, sig):
    rng = np.random.default_rng(7)
    feeds = {}
    for key, shape in shapes.items():
        spec = sig.structured_input_signature[1][key]
        if spec.dtype == tf.int32:
            feeds[key] = rng.integers(0, 50, size=shape).astype(np.int32)
        else:
            feeds[key] = rng.normal(size=shape).astype(np.float32)
    return feeds


def run_c(path, y_key, x_key, feeds, dy, tmp):
    args = [RUNNER, path, "serving_default", y_key, x_key, "1" if dy is not None else "0",
            str(tmp / "out_")]
    all_feeds = dict(feeds)
    if dy is not None:
        all_feeds["d_" + y_key] = dy
    for key, value in all_feeds.items():
        f = tmp / f"{key}.raw"
        value.tofile(f)
        dtype = "int32" if value.dtype == np.int32 else "float32"
        dims = "x".join(str(d) for d in value.shape) or "scalar"
        args.append(f"{key}:{dtype}:{dims}:{f}")
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    return r


def python_gradient(sig, y_key, x_key, feeds, dy):
    tensors = {k: tf.constant(v) for k, v in feeds.items()}
    with tf.GradientTape() as tape:
        tape.watch(tensors[x_key])
        y = sig(**tensors)[y_key]
    return y.numpy(), tape.gradient(y, tensors[x_key], output_gradients=dy).numpy()


@pytest.mark.parametrize("maker", [save_mlp, export_embedding, export_cnn, export_lstm,
                                   save_cond_then, save_cond_else])
@pytest.mark.parametrize("incoming", [False, True])
def test_saved_model_gradient_matches_python(maker, incoming, tmp_path):
    path = str(tmp_path / "model")
    x_key, y_key, shapes = maker(path)
    sig = signature(path)
    if y_key is None:
        y_key = list(sig.structured_outputs)[0]
    feeds = feeds_for(shapes, sig)
    y_shape = sig(**{k: tf.constant(v) for k, v in feeds.items()})[y_key].shape
    dy = (np.random.default_rng(9).normal(size=y_shape).astype(np.float32) if incoming
          else None)
    r = run_c(path, y_key, x_key, feeds, dy, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    # requests name the signature's keys, and the incoming gradient d_<output key>
    names = r.stdout.split("inputs:")[1].split()
    assert set(names) == set(shapes) | ({"d_" + y_key} if incoming else set())
    want_y, want_dx = python_gradient(sig, y_key, x_key, feeds,
                                      dy if incoming else np.ones(y_shape, np.float32))
    got_y = np.fromfile(tmp_path / "out_y", np.float32).reshape(want_y.shape)
    got_dx = np.fromfile(tmp_path / "out_dx", np.float32).reshape(want_dx.shape)
    np.testing.assert_allclose(got_y, want_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_dx, want_dx, rtol=1e-4, atol=1e-5)
    assert np.abs(want_dx).max() > 0


def test_wrong_keys_and_wrong_feeds_are_refused(tmp_path):
    path = str(tmp_path / "model")
    save_mlp(path)
    x = np.ones((4, 8), np.float32)
    r = run_c(path, "nope", "x", {"x": x}, None, tmp_path)
    assert r.returncode == 3 and "y 'nope' is not an output of signature 'serving_default'" in r.stdout
    assert "its outputs: y" in r.stdout
    r = run_c(path, "y", "w", {"x": x}, None, tmp_path)
    assert r.returncode == 3 and "x 'w' is not an input" in r.stdout and "its inputs: x" in r.stdout
    r = run_c(path, "y", "x", {"x": np.ones((4, 7), np.float32)}, None, tmp_path)
    assert r.returncode == 3 and "GradientSession: feed 'x' has shape [4,7]" in r.stdout
    r = run_c(path, "y", "x", {"x": x}, np.ones((4, 2), np.float32), tmp_path)
    assert r.returncode == 3 and "GradientSession: feed 'd_y' has shape [4,2]" in r.stdout


class Counting(tf.Module):
    def __init__(self):
        self.calls = tf.Variable(0.0)
        self.w = tf.Variable([[1.0], [2.0]])

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
    def __call__(self, x):
        self.calls.assign_add(1.0)
        return {"y": tf.matmul(x, self.w)}


def test_variable_assigned_by_the_signature_is_refused_by_name(tmp_path):
    path = str(tmp_path / "model")
    m = Counting()
    tf.saved_model.save(m, path, signatures={"serving_default": m.__call__})
    r = run_c(path, "y", "x", {"x": np.ones((3, 2), np.float32)}, None, tmp_path)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "cannot be frozen" in r.stdout and "AssignAddVariableOp" in r.stdout, r.stdout
