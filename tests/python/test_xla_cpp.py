"""The C++ tools' XLA route: tf_ext_grad --jit_compile and tf_ext_train --jit_compile run the
gradient or the training step as one must-compile XLA cluster (tf_ext/graph/passes/
xla_cluster.h) with the default route's results; a graph with an op XLA cannot compile is
refused before it runs, naming the op; the compile time is printed once; a last partial batch
recompiles. (GradientSession and the C API's route: tests/gradient_session_test.cc and
tests/c_gradient_session_test.c.)"""

from __future__ import annotations

import csv
import os
import re
import subprocess

import numpy as np
import tensorflow as tf

import tf_ext
import tf_ext.layers  # noqa: F401

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.path.join(RUNFILES, "tf_ext") if RUNFILES else os.getcwd()
GRAD = os.path.join(WORKSPACE, "tf_ext", "tf_ext_grad")
TRAIN = os.path.join(WORKSPACE, "tf_ext", "tf_ext_train")
LIBRARY = tf_ext.library_path()
XLA_LINE = re.compile(r"XLA: (\d+) nodes compiled as one cluster in ([0-9.]+) s")


def run(tool, *flags):
    r = subprocess.run([tool, f"--library={LIBRARY}"] + list(flags), capture_output=True,
                       text=True, timeout=600)
    return r


def gradients(tmp_path, name, *flags):
    out = tmp_path / f"{name}.npz"
    r = run(GRAD, *flags, f"--save={out}")
    assert r.returncode == 0, r.stderr[-3000:]
    with np.load(out) as z:
        return {k: z[k] for k in z.files}, r.stdout


def frozen_cnn(path):
    """A small CNN through every tf_ext op, frozen to a GraphDef (x [2, 12, 12, 8] fed)."""
    rng = np.random.default_rng(5)
    w = tf.constant(rng.normal(size=(3, 3, 8, 8)).astype(np.float32) * 0.2)
    rois = tf.constant([[0, 1, 1, 9, 8], [1, 0, 2, 11, 11], [0, 3, 0, 7, 10]], tf.float32)

    @tf.function(input_signature=[tf.TensorSpec([2, 12, 12, 8], tf.float32)])
    def model(x):
        y = tf.nn.relu(tf.nn.conv2d(tf_ext.gradient_reversal(x, 0.5), w, 1, "SAME"))
        y = tf_ext.median_pool2d(y, [3, 3], [1, 1], "SAME")
        pooled, _ = tf_ext.roi_pool(tf_ext.sign_ste(y) * y, rois, 2, 2)
        ps = tf_ext.ps_roi_align(y, rois, 2, 2, 1.0, 2)
        return (tf.reduce_sum(tf_ext.smooth_l1(pooled, 0.5)) + tf.reduce_sum(ps * ps) +
                tf.reduce_sum(tf_ext.zero_out(tf.reshape(y, [-1]), 3)))

    graph = model.get_concrete_function().graph.as_graph_def()
    path.write_bytes(graph.SerializeToString())
    out = [n.name for n in graph.node if n.op == "Identity"][-1]
    return out


def test_tf_ext_grad_jit_compile_gives_the_default_routes_gradient(tmp_path):
    for name, flags in [("example", []),
                        ("cnn", None)]:
        if flags is None:
            graph = tmp_path / "cnn.pb"
            y = frozen_cnn(graph)
            x = np.random.default_rng(6).normal(size=(2, 12, 12, 8)).astype(np.float32)
            np.save(tmp_path / "x.npy", x)
            flags = [f"--graph={graph}", f"--y={y}", "--x=x", f"--feed=x=@{tmp_path / 'x.npy'}"]
        want, _ = gradients(tmp_path, name, *flags)
        got, stdout = gradients(tmp_path, name + "_jit", *flags, "--jit_compile")
        m = XLA_LINE.search(stdout)
        assert m and int(m.group(1)) > 20 and float(m.group(2)) > 0, stdout
        assert stdout.count("XLA:") == 1
        assert want.keys() == got.keys()
        # XLA's convolution sums in another order than oneDNN's: an element that cancels to
        # near zero keeps the rounding of its terms, so the absolute tolerance is relative to
        # the gradient's scale (the CNN's d_x: max 11.7, differences up to 8.3e-6 on AVX2).
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5,
                                       atol=1e-5 * max(1.0, float(np.abs(want[k]).max())),
                                       err_msg=f"{name} {k}")


def test_tf_ext_grad_jit_compile_refuses_an_op_xla_cannot_compile(tmp_path):
    @tf.function(input_signature=[tf.TensorSpec([1, 4, 4, 1], tf.float32)])
    def resize(x):
        return tf.reduce_sum(tf.raw_ops.ResizeBicubic(images=x, size=[6, 6], name="bicubic"))

    graph = resize.get_concrete_function().graph.as_graph_def()
    (tmp_path / "g.pb").write_bytes(graph.SerializeToString())
    y = [n.name for n in graph.node if n.op == "Identity"][-1]
    flags = [f"--graph={tmp_path / 'g.pb'}", f"--y={y}", "--x=x", "--feed=x=random:1"]
    assert run(GRAD, *flags).returncode == 0
    r = run(GRAD, *flags, "--jit_compile")
    assert r.returncode != 0
    assert "node 'bicubic' (ResizeBicubic) has no XLA kernel" in r.stderr, r.stderr[-2000:]
    assert "y = sum" not in r.stdout  # refused before running
    r = run(GRAD, *flags, "--jit_compile", "--memory_budget=0.5")
    assert r.returncode != 0 and "jit_compile and a memory budget" in r.stderr, r.stderr[-2000:]


def read_losses(path):
    with open(path) as f:
        return [float(row["loss"]) for row in csv.DictReader(f)]


def test_tf_ext_train_jit_compile_trains_as_without(tmp_path):
    import keras
    keras.utils.set_random_seed(1)
    inp = keras.Input((8, 8, 2), name="images")
    y = tf_ext.layers.MedianPool2D(3, strides=1, padding="same")(inp)
    y = tf_ext.layers.GradientReversal(0.5)(y)
    y = keras.layers.Conv2D(4, 3, activation="relu")(y)
    y = keras.layers.Flatten()(y)
    out = keras.layers.Dense(3, activation="softmax")(y)
    tf_ext.export_for_training(keras.Model(inp, out), str(tmp_path / "model"))
    rng = np.random.default_rng(0)
    # 36 examples in batches of 8: a last partial batch of 4, compiled again.
    np.savez(tmp_path / "data.npz", x=rng.normal(size=(36, 8, 8, 2)).astype(np.float32),
             y=rng.integers(0, 3, 36))
    common = [f"--saved_model={tmp_path / 'model'}", f"--data={tmp_path / 'data.npz'}",
              "--inputs=x:images", "--targets=y", "--loss=sparse_categorical_crossentropy",
              "--metrics=accuracy", "--optimizer=adam", "--batch_size=8", "--epochs=3"]
    runs = {}
    for jit in ("false", "true"):
        r = run(TRAIN, *common, f"--history={tmp_path / jit}.csv", f"--jit_compile={jit}")
        assert r.returncode == 0, r.stderr[-3000:]
        runs[jit] = (read_losses(tmp_path / f"{jit}.csv"), r.stdout)
    (plain, plain_out), (compiled, compiled_out) = runs["false"], runs["true"]
    assert len(plain) == len(compiled) == 15
    np.testing.assert_allclose(compiled, plain, rtol=1e-5)
    assert "XLA:" not in plain_out
    m = re.search(r"XLA: the step's (\d+) nodes compiled as one cluster in ([0-9.]+) s, for 2 "
                  r"batch shapes: XLA compiles each anew \(\[8,8,8,2\], \[4,8,8,2\]\)",
                  compiled_out)
    assert m and int(m.group(1)) > 20 and float(m.group(2)) > 0, compiled_out
    # One shape compiled at most: the last partial batch runs without XLA, training the same.
    r = run(TRAIN, *common, f"--history={tmp_path / 'one'}.csv", "--jit_compile",
            "--jit_compile_cache=1")
    assert r.returncode == 0, r.stderr[-3000:]
    np.testing.assert_allclose(read_losses(tmp_path / "one.csv"), plain, rtol=1e-5)
    assert re.search(r"compiled as one cluster in [0-9.]+ s, for 1 batch shape \(\[8,8,8,2\]\)",
                     r.stdout), r.stdout
    assert "XLA: 1 batch shape past --jit_compile_cache ran without XLA ([4,8,8,2])" in r.stdout
    assert r.stderr.count("steps of shapes past them run without XLA") == 1, r.stderr[-3000:]
    r = run(TRAIN, *common, "--jit_compile", "--jit_compile_cache=0")
    assert r.returncode != 0 and "'0' is below 1" in r.stderr, r.stderr[-2000:]
    r = run(TRAIN, *common, "--jit_compile", "--memory_budget=0.5")
    assert r.returncode != 0 and "jit_compile with a memory budget" in r.stderr, r.stderr[-2000:]
