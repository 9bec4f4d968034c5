"""One gradient, every entry point: a corpus of small graphs (convolutions in their CPU variants,
pooling, negative axes, keep_dims, slices to the end, broadcasting, complex intermediates)
differentiated through every door a user comes in by, each compared with Python's GradientTape
as max|a - b| / max|reference| <= 1e-9 in float64 (1e-5 in float32: TensorFlow's CPU kernels run
a dilated convolution's gradient only in float32, through oneDNN):

  * tf_ext_grad: default, --symbolic_gradients, --optimize=false, --hoist_constants;
  * the SavedModel of tf_ext_grad --export, run by a Python process that never loads tf_ext;
  * C (tests/c_entry_points.c): TensorFlow's own TF_AddGradients with the op library loaded,
    TfExtAddGradients, TfExtGradientSession;
  * Python: a SymbolicGradient node of a function holding the graph (the function runtime looks
    each op's gradient up in the C++ registry), and GradientTape under tf_ext.use_cpp_gradients()
    (the bridge: each op's C++ gradient as a TfExt>GradientFunctionDef FunctionDef).

The trainer's door is test_train.py's (Keras models against model.fit). The default and
--optimize=false / --hoist_constants inline each op's gradient from TensorFlow's registries;
--symbolic_gradients, TF_AddGradients (for the ops whose gradient tf_ext overrides) and the
SymbolicGradient node leave it to the runtime to resolve: the registries' overrides of
TensorFlow's wrong gradients (docs/registries.md) are what make them all agree.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.path.join(RUNFILES, os.environ.get("TEST_WORKSPACE", "tf_ext")) if RUNFILES \
    else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bazel-bin")
TOOL = os.path.join(WORKSPACE, "tf_ext", "tf_ext_grad")
LIBRARY = os.path.join(WORKSPACE, "tf_ext", "_tf_ext_ops.so")
C_ENTRY_POINTS = os.path.join(WORKSPACE, "tests", "c_entry_points")

# tf_ext_grad's pipeline options.
MODES = {
    "default": [],
    "symbolic_gradients": ["--symbolic_gradients"],
    "no_optimize": ["--optimize=false"],
    "hoist_constants": ["--hoist_constants"],
}
# tests/c_entry_points.c's modes.
C_MODES = ["tf_add_gradients", "tf_ext_add_gradients", "gradient_session"]
# Where the function runtime resolves each op's gradient by itself, one op at a time (not
# inlined into the caller's graph; TF_AddGradients: for the ops whose gradient tf_ext overrides,
# Conv2D among them). A SymbolicGradient of a whole function is inlined into the graph the
# Session optimises, so oneDNN's rewrite runs its dilated convolution's gradient.
RUNTIME_RESOLVED = {"symbolic_gradients", "tf_add_gradients"}
# Control flow in the corpus. Every door differentiates it but two, each pinned below: a
# SymbolicGradient of a function holding it (not rewritten by tf_ext's control-flow pass) and
# TensorFlow's own TF_AddGradients of a frozen (lowered, v1) loop or conditional.
CONTROL_FLOW = {"while_loop_recurrent", "cond_branches"}


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
    "conv1d_strided": ((2, 9, 3), lambda x: tf.nn.conv1d(x, _w(13, 3, 3, 2), 2, "SAME")),
    "depthwise_conv2d_strided": ((1, 7, 7, 2), lambda x: tf.nn.depthwise_conv2d(
        x, _w(14, 3, 3, 2, 2), strides=[1, 2, 2, 1], padding="VALID")),
    "conv3d_strided_same": ((1, 5, 4, 5, 2), lambda x: tf.nn.conv3d(
        x, _w(15, 3, 2, 3, 2, 2), strides=[1, 2, 1, 2, 1], padding="SAME")),
    "pools_3d_float32": ((1, 4, 4, 4, 2), lambda x: tf.nn.max_pool3d(x, 2, 2, "VALID") *
                         tf.nn.avg_pool3d(x, 2, 2, "VALID"), np.float32),  # no float64 kernels
    # Complex intermediates: Complex, the conjugating overrides (Exp, RealDiv, MatMul, Tanh),
    # Real/Imag/Angle and ComplexAbs, back to a real output.
    "complex_intermediates": ((3, 4), lambda x: tf.reduce_sum(tf.abs(tf.tanh(tf.matmul(
        tf.exp(tf.complex(x, 0.5 * x)), tf.complex(_w(16, 4, 2), _w(17, 4, 2))) /
        tf.complex(2.0 + x[:, :2] ** 2, x[:, 1:3]))), -1, keepdims=True) +
        tf.math.angle(tf.complex(x, 1.0 + x ** 2)) +
        tf.math.real(tf.complex(x, x)) * tf.math.imag(tf.complex(x, x ** 2))),
    # Control flow: a While loop carrying a recurrent state (a trip count from the data), and a
    # conditional choosing its branch at run time.
    "while_loop_recurrent": ((3, 4), lambda x: tf.while_loop(
        lambda i, h: i < 3, lambda i, h: (i + 1, tf.tanh(tf.matmul(h, _w(20, 4, 4)) + x)),
        [tf.constant(0), tf.zeros_like(x)])[1]),
    "cond_branches": ((3, 4), lambda x: tf.cond(
        tf.reduce_sum(x) > -100.0, lambda: tf.sin(x) * x + tf.reduce_max(x, -1, keepdims=True),
        lambda: tf.cos(x))),
    # TopKV2's gradient reads Size(Shape(input)); Pow's reads Shape of its scalar exponent
    # ([0]) just before. The default pipeline once made the rank constant from that removed
    # node's shape (0): the run failed at a GatherV2 of index -1 (keras-hub's Mixtral routing).
    "top_k_of_softmax": ((3, 4), lambda x: tf.math.top_k(tf.nn.softmax(x), k=2).values ** 2),
    # A frozen Keras model (its variables made constants): Conv2D, BatchNormalization in
    # inference mode, pooling, Dense.
    "keras_frozen_cnn": ((2, 6, 6, 3), lambda x: KERAS_CNN()(x)),
}


def _keras_cnn():
    import keras
    keras.utils.set_random_seed(21)
    inp = keras.Input((6, 6, 3), dtype="float64")
    h = keras.layers.Conv2D(4, 3, padding="same", dtype="float64")(inp)
    h = keras.layers.BatchNormalization(dtype="float64")(h)
    h = keras.layers.MaxPooling2D(dtype="float64")(keras.layers.Activation("relu", dtype="float64")(h))
    out = keras.layers.Dense(3, dtype="float64")(keras.layers.Flatten(dtype="float64")(h))
    model = keras.Model(inp, out)
    # BatchNormalization's moving statistics away from 0 and 1, so they matter
    bn = model.layers[2]
    bn.moving_mean.assign(np.linspace(-0.5, 0.5, 4))
    bn.moving_variance.assign(np.linspace(0.5, 2.0, 4))
    return model


_KERAS_CNN = []


def KERAS_CNN():
    if not _KERAS_CNN:
        _KERAS_CNN.append(_keras_cnn())
    return _KERAS_CNN[0]


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
        # Variables (a Keras model's) become constants: a frozen graph.
        frozen_fn = convert_variables_to_constants_v2(concrete)
        path = str(root / (name + ".pb"))
        with open(path, "wb") as f:
            f.write(frozen_fn.graph.as_graph_def().SerializeToString())
        x = np.random.default_rng(len(name)).uniform(-1, 1, shape).astype(dtype)
        np.save(str(root / (name + ".npy")), x)
        out[name] = (path, str(root / (name + ".npy")), x, fn)
    return out


def assert_pythons(case, mode, x, fn, y, dx):
    """y and d(sum y)/dx from entry point `mode` equal Python's GradientTape's."""
    y_ref, dx_ref = reference(fn, x)
    tol = 1e-9 if x.dtype == np.float64 else 1e-5
    assert dx.dtype == x.dtype and dx.shape == x.shape, (dx.dtype, dx.shape)
    np.testing.assert_allclose(y, y_ref, rtol=tol, atol=tol)
    scale = np.abs(dx_ref).max()
    assert scale > 0
    err = np.abs(dx - dx_ref).max() / scale
    assert err <= tol, "%s through %s: max|a-b|/max|ref| = %.3g" % (case, mode, err)


def refused_dilation(case, mode, returncode, stderr):
    """A dilated convolution's gradient resolved by the function runtime: TensorFlow's CPU
    backprop kernels reject dilations > 1 outside oneDNN's graph rewrite, which that path does
    not get. A clear error naming the dilation, never an undilated convolution's gradient
    (docs/registries.md)."""
    if case != "conv2d_dilated_float32" or mode not in RUNTIME_RESOLVED:
        return False
    assert returncode != 0
    assert "dilation" in stderr, stderr[-2000:]
    return True


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("case", sorted(CORPUS))
def test_tf_ext_grad_gives_pythons_gradient(frozen, case, mode, tmp_path):
    path, x_path, x, fn = frozen[case]
    saved = str(tmp_path / "grad.npz")
    r = subprocess.run([TOOL, "--library=" + LIBRARY, "--graph=" + path, "--y=y", "--x=x",
                        "--feed=x=@" + x_path, "--save=" + saved] + MODES[mode],
                       capture_output=True, text=True)
    if refused_dilation(case, mode, r.returncode, r.stderr):
        return
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    got = np.load(saved)
    assert_pythons(case, mode, x, fn, got["y"], got["d_x"])


@pytest.mark.parametrize("mode", C_MODES)
@pytest.mark.parametrize("case", sorted(CORPUS))
def test_c_api_gives_pythons_gradient(frozen, case, mode, tmp_path):
    path, _, x, fn = frozen[case]
    raw = tmp_path / "x.raw"
    x.tofile(raw)
    out_y, out_dx = tmp_path / "y.raw", tmp_path / "dx.raw"
    r = subprocess.run([C_ENTRY_POINTS, mode, path, "x", "y", x.dtype.name,
                        "x".join(map(str, x.shape)), str(raw), str(out_y), str(out_dx)],
                       capture_output=True, text=True,
                       env={**os.environ, "TF_EXT_LIBRARY": LIBRARY})
    if refused_dilation(case, mode, r.returncode, r.stderr):
        return
    if mode == "tf_add_gradients" and case in CONTROL_FLOW:
        assert_tf_add_gradients_refuses_v1_control_flow(case, r, x, path, raw, tmp_path)
        return
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    y_ref, _ = reference(fn, x)
    y = np.fromfile(out_y, x.dtype).reshape(y_ref.shape)
    dx = np.fromfile(out_dx, x.dtype).reshape(x.shape)
    assert_pythons(case, mode, x, fn, y, dx)


def assert_tf_add_gradients_refuses_v1_control_flow(case, r, x, path, raw, tmp_path):
    """TensorFlow's own TF_AddGradients on a frozen loop or conditional: the freeze lowers them
    to v1 frames (Enter / Exit / Switch / Merge), which TensorFlow's C++ builder
    (cc/framework/gradients.cc) does not differentiate, and no registry entry reaches.

    * A conditional: TensorFlow's error naming Merge, which has no C++ gradient.
    * A loop: the builder special-cases every Exit node before it looks in any registry, and
      reads the WhileContext that only a loop built in the same process (TF_NewWhile, cc
      BuildWhileLoop) has. An imported loop's Exit has none: the process dies of a segmentation
      fault, with or without tf_ext's library loaded (TensorFlow's bug, which tf_ext cannot
      reach). TfExtAddGradients differentiates both (docs/entry_points.md)."""
    if case == "cond_branches":
        assert r.returncode == 3, r.stdout + r.stderr[-3000:]
        assert "No gradient defined for op: Merge" in r.stderr, r.stderr[-3000:]
        return
    assert r.returncode < 0, (r.returncode, r.stderr[-3000:])  # killed by a signal
    env = {k: v for k, v in os.environ.items() if k != "TF_EXT_LIBRARY"}
    bare = subprocess.run([C_ENTRY_POINTS, "tf_add_gradients", path, "x", "y", x.dtype.name,
                           "x".join(map(str, x.shape)), str(raw), str(tmp_path / "y2.raw"),
                           str(tmp_path / "dx2.raw")],
                          capture_output=True, text=True, env=env)
    assert bare.returncode < 0, ("without tf_ext", bare.returncode, bare.stderr[-3000:])


# Runs in a fresh interpreter that never imports tf_ext: each export's "gradients" signature.
RUN_EXPORTS = """
import sys, numpy as np, tensorflow as tf
out = {}
for name, export, x_path in zip(*[iter(sys.argv[2:])] * 3):
    got = tf.saved_model.load(export).signatures["gradients"](x=tf.constant(np.load(x_path)))
    out[name + "/y"], out[name + "/d_x"] = got["y"].numpy(), got["d_x"].numpy()
    assert not any("tf_ext" in m for m in sys.modules), "tf_ext was imported"
np.savez(sys.argv[1], **out)
"""


@pytest.fixture(scope="module")
def exported(frozen, tmp_path_factory):
    """Every corpus graph's gradient exported by tf_ext_grad --export, run without tf_ext."""
    root = tmp_path_factory.mktemp("exports")
    args, failures = [], {}
    for name, (path, x_path, _, _) in sorted(frozen.items()):
        export = str(root / name)
        r = subprocess.run([TOOL, "--library=" + LIBRARY, "--graph=" + path, "--y=y", "--x=x",
                            "--feed=x=@" + x_path, "--export=" + export],
                           capture_output=True, text=True)
        if r.returncode != 0:
            failures[name] = r.stdout + r.stderr[-3000:]
        else:
            args += [name, export, x_path]
    results = str(root / "results.npz")
    r = subprocess.run([sys.executable, "-c", RUN_EXPORTS, results] + args,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return failures, dict(np.load(results))


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_exported_saved_model_gives_pythons_gradient(frozen, exported, case):
    failures, results = exported
    assert case not in failures, failures.get(case)
    _, _, x, fn = frozen[case]
    assert_pythons(case, "export", x, fn, results[case + "/y"], results[case + "/d_x"])


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_symbolic_gradient_node_from_python_gives_pythons_gradient(frozen, case):
    """A SymbolicGradient node of a function holding the corpus graph, run by a TF1 Session:
    TensorFlow's function runtime differentiates the function op by op through the C++
    function registry (with tf_ext's library loaded).

    A function holding a loop or conditional that tf_ext's control-flow pass has not rewritten
    (here: the functional StatelessWhile / StatelessIf of a Defun) is refused with tf_ext's
    error, never differentiated to zeros: TensorFlow's runtime lowers the function's loops
    before it builds the gradient, and its builder then returns zeros for everything upstream
    of a loop (docs/control_flow.md)."""
    import tf_ext
    from tensorflow.python.framework import function as defun_lib
    tf_ext.library()
    shape, fn, *dtype = CORPUS[case]
    dtype = dtype[0] if dtype else np.float64
    x = np.random.default_rng(len(case)).uniform(-1, 1, shape).astype(dtype)
    y_shape = reference(fn, x)[0].shape
    body = fn
    if case == "keras_frozen_cnn":
        # A Keras model's variables are eager resources, which a Defun cannot capture: its frozen
        # graph (the weights constants) instead.
        with open(frozen[case][0], "rb") as f:
            graph_def = tf.compat.v1.GraphDef.FromString(f.read())
        body = lambda xx: tf.graph_util.import_graph_def(  # noqa: E731
            graph_def, input_map={"x:0": xx}, return_elements=["y:0"])[0]
    with tf.Graph().as_default():
        @defun_lib.Defun(tf.as_dtype(dtype))
        def forward(xx):
            xx.set_shape(shape)  # a Defun's argument has no shape
            return body(xx)

        xt = tf.constant(x)
        y = forward(xt)
        y.set_shape(y_shape)
        dx = tf.raw_ops.SymbolicGradient(input=[xt, tf.ones_like(y)], Tout=[xt.dtype],
                                         f=tf.compat.v1.NameAttrList(name=forward.name))[0]
        with tf.compat.v1.Session() as sess:
            if case in CONTROL_FLOW:
                with pytest.raises(tf.errors.InvalidArgumentError) as e:
                    sess.run(dx)
                op = "StatelessWhile" if case == "while_loop_recurrent" else "StatelessIf"
                assert "SymbolicGradient node 'SymbolicGradient' of function '%s' holds %s " \
                    "node" % (forward.name, op) in e.value.message, e.value.message
                assert op + ": no gradient for a node tf_ext's control-flow pass has not " \
                    "rewritten" in e.value.message, e.value.message
                assert "PrepareFunctionLibraryForGradients" in e.value.message, e.value.message
                return
            try:
                got_y, got_dx = sess.run([y, dx])
            except tf.errors.OpError as e:
                raise AssertionError(e.message) from e
    assert_pythons(case, "symbolic_gradient_node", x, fn, got_y, got_dx)


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_gradient_tape_under_use_cpp_gradients_gives_pythons_gradient(case):
    """GradientTape with every op's C++ gradient (tf_ext.use_cpp_gradients: the Python bridge,
    TfExt>GradientFunctionDef), and not one op falling back to Python's."""
    import tf_ext
    shape, fn, *dtype = CORPUS[case]
    dtype = dtype[0] if dtype else np.float64
    x = np.random.default_rng(len(case)).uniform(-1, 1, shape).astype(dtype)
    with tf_ext.use_cpp_gradients() as scope:
        y, dx = reference(fn, x)
    assert scope.counts().cpp and not scope.counts().fallbacks(), scope.counts()
    assert_pythons(case, "use_cpp_gradients", x, fn, y, dx)
