"""One gradient, every entry point: a corpus of small graphs (convolutions in their CPU variants,
negative axes, keep_dims, slices to the end, broadcasting) differentiated through tf_ext_grad's
pipeline options (default, --symbolic_gradients, --optimize=false, --hoist_constants), each
compared with Python's GradientTape as max|a - b| / max|reference| <= 1e-9 in float64 (1e-5 in
float32: TensorFlow's CPU kernels run a dilated convolution's gradient only in float32, through
oneDNN).

The default and --optimize=false / --hoist_constants inline each op's gradient from TensorFlow's
registries; --symbolic_gradients leaves one SymbolicGradient node per op for the runtime to
resolve: the registries' overrides of TensorFlow's wrong gradients (docs/registries.md) are what
make the two agree.
"""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest
import tensorflow as tf

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.path.join(RUNFILES, os.environ.get("TEST_WORKSPACE", "tf_ext")) if RUNFILES \
    else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bazel-bin")
TOOL = os.path.join(WORKSPACE, "tf_ext", "tf_ext_grad")
LIBRARY = os.path.join(WORKSPACE, "tf_ext", "_tf_ext_ops.so")

MODES = {
    "default": [],
    "symbolic_gradients": ["--symbolic_gradients"],
    "no_optimize": ["--optimize=false"],
    "hoist_constants": ["--hoist_constants"],
}


def _w(seed: int, *shape: int, dtype=np.float64) -> tf.Tensor:
    return tf.constant(np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype))


# name -> (input shape, function of x[, dtype]). Weights are constants of the graph.
CORPUS = {
    "conv2d_same_strided": ((1, 7, 6, 2), lambda x: tf.nn.conv2d(
        x, _w(1, 3, 3, 2, 4), strides=2, padding="SAME")),
    "conv2d_explicit_padding": ((1, 6, 5, 2), lambda x: tf.nn.conv2d(
        x, _w(2, 2, 3, 2, 3), strides=[1, 2, 1, 1], padding=[[0, 0], [1, 0], [2, 1], [0, 0]])),
    "conv2d_dilated_float32": ((1, 8, 7, 2), lambda x: tf.nn.conv2d(
        x, _w(3, 2, 3, 2, 3, dtype=np.float32), strides=1, padding="VALID", dilations=2),
        np.float32),
    # Dilated 1-D convolution as Keras's causal Conv1D freezes it: SpaceToBatchND, Conv2D,
    # BatchToSpaceND (their client gradients converted without static shapes).
    "conv1d_causal_dilated": ((2, 9, 3), lambda x: tf.nn.convolution(
        tf.pad(x, [[0, 0], [4, 0], [0, 0]]), _w(4, 3, 3, 2), padding="VALID", dilations=2)),
    "depthwise_conv2d": ((1, 6, 6, 3), lambda x: tf.nn.depthwise_conv2d(
        x, _w(5, 3, 3, 3, 2), strides=[1, 1, 1, 1], padding="SAME")),
    "separable_conv2d": ((1, 6, 6, 3), lambda x: tf.nn.separable_conv2d(
        x, _w(6, 3, 3, 3, 2), _w(7, 1, 1, 6, 4), strides=[1, 1, 1, 1], padding="VALID")),
    "conv2d_transpose": ((1, 4, 4, 3), lambda x: tf.nn.conv2d_transpose(
        x, _w(8, 3, 3, 2, 3), output_shape=[1, 8, 8, 2], strides=2, padding="SAME")),
    "conv3d": ((1, 4, 5, 4, 2), lambda x: tf.nn.conv3d(
        x, _w(9, 2, 2, 2, 2, 3), strides=[1, 1, 1, 1, 1], padding="VALID")),
    "pools": ((1, 6, 6, 2), lambda x: tf.nn.max_pool2d(x, 2, 2, "VALID") +
              tf.nn.avg_pool2d(x, 2, 2, "VALID")),
    # Weighted: the sum of a normalisation over its axis is constant (a zero gradient).
    "layer_norm_axis_minus_1": ((3, 5), lambda x: _w(12, 1, 5) * (
        x - tf.reduce_mean(x, -1, keepdims=True)) /
        tf.sqrt(tf.math.reduce_variance(x, -1, keepdims=True) + 1e-3)),
    "reduce_max_min_keepdims": ((2, 3, 4), lambda x: tf.reduce_max(x, -1, keepdims=True) *
                                tf.reduce_min(x, [-2, -1], keepdims=True)),
    "reduce_sum_mean_negative": ((2, 3, 4), lambda x: tf.reduce_sum(x ** 2, [-1, 0]) +
                                 tf.reduce_mean(x, -1)[0]),
    "broadcasting": ((2, 3), lambda x: tf.math.atan2(x, _w(10, 1, 3) + 2.0) * _w(11, 2, 1)),
    "gather_negative_axis": ((2, 5), lambda x: tf.gather(x, [3, 0, 3], axis=-1)),
    "slice_size_minus_1": ((4, 5), lambda x: tf.slice(x, [1, 2], [-1, -1])),
}


def reference(fn, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = fn(xt)
    return y.numpy(), tape.gradient(y, xt).numpy()


@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    """Each corpus graph as a GraphDef with placeholder x and output y, and its input."""
    root = tmp_path_factory.mktemp("entry_points")
    out = {}
    for name, (shape, fn, *dtype) in CORPUS.items():
        dtype = dtype[0] if dtype else np.float64
        spec = tf.TensorSpec(shape, tf.as_dtype(dtype), name="x")
        concrete = tf.function(lambda x, fn=fn: tf.identity(fn(x), name="y")).get_concrete_function(spec)
        path = str(root / (name + ".pb"))
        with open(path, "wb") as f:
            f.write(concrete.graph.as_graph_def().SerializeToString())
        x = np.random.default_rng(len(name)).uniform(-1, 1, shape).astype(dtype)
        np.save(str(root / (name + ".npy")), x)
        out[name] = (path, str(root / (name + ".npy")), x, fn)
    return out


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("case", sorted(CORPUS))
def test_every_entry_point_gives_pythons_gradient(frozen, case, mode, tmp_path):
    path, x_path, x, fn = frozen[case]
    y_ref, dx_ref = reference(fn, x)
    saved = str(tmp_path / "grad.npz")
    r = subprocess.run([TOOL, "--library=" + LIBRARY, "--graph=" + path, "--y=y", "--x=x",
                        "--feed=x=@" + x_path, "--save=" + saved] + MODES[mode],
                       capture_output=True, text=True)
    if case == "conv2d_dilated_float32" and mode == "symbolic_gradients":
        # TensorFlow's CPU backprop kernels reject dilations > 1 outside oneDNN's graph rewrite,
        # which a SymbolicGradient resolved by the function runtime does not get: a clear error
        # naming the dilation, never an undilated convolution's gradient (docs/registries.md).
        assert r.returncode != 0
        assert "dilation" in r.stderr, r.stderr[-2000:]
        return
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    got = np.load(saved)
    tol = 1e-9 if x.dtype == np.float64 else 1e-5
    assert got["d_x"].dtype == x.dtype and got["d_x"].shape == x.shape
    np.testing.assert_allclose(got["y"], y_ref, rtol=tol, atol=tol)
    scale = np.abs(dx_ref).max()
    assert scale > 0
    err = np.abs(got["d_x"] - dx_ref).max() / scale
    assert err <= tol, "%s through %s: max|a-b|/max|ref| = %.3g" % (case, mode, err)
