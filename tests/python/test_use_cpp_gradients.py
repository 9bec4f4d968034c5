"""tf_ext.use_cpp_gradients: under the switch tf.GradientTape and tf.gradients use the C++
gradient of every op that has one (TensorFlow's own included), in every mode.

Each parity test takes a gradient twice, with Python's gradients and under the switch, in
eager GradientTape, tf.function and a tf.compat.v1 graph (tf.gradients), and checks the two
agree to 1e-9 (float64) AND that the switch's counts show the C++ gradients of the ops named
were used with no fallback to Python's: a switch that changed nothing would fail the count.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import ops as tf_ops  # the registry, to check it is restored

import tf_ext
from conftest import vjp

RNG = np.random.default_rng(0)
W = RNG.normal(size=(4, 3))


def elementwise(x):
    y = tf.nn.relu(x) * tf.exp(x) + tf.tanh(x) - tf.sigmoid(x) / (2.0 + tf.square(x))
    return tf.sqrt(tf.abs(y) + 1.0)


def matmul_reduce(x):
    w = tf.constant(W)
    y = tf.matmul(tf.reshape(x, [2, 4]), w)
    return tf.reduce_mean(tf.transpose(y), axis=1, keepdims=True) * tf.reduce_sum(y)


def list_ops(x):
    """Pack, ConcatV2, AddN, IdentityN, Unpack, SplitV: list inputs or outputs."""
    a, b = tf.split(x, [3, 5])
    stacked = tf.stack([a * 2.0, tf.sin(a)], axis=1)
    joined = tf.concat([tf.reshape(stacked, [-1]), b], axis=0)
    p, q = tf.identity_n([joined, joined * joined])
    first, *_ = tf.unstack(tf.reshape(q[:10], [5, 2]))
    return tf.add_n([p, q, joined]) * tf.reduce_sum(first)


def defaulted_attrs(x):
    """Ops whose wrappers leave attrs at their defaults: Shape's out_type, Cumsum's exclusive
    and reverse, GatherV2's batch_dims, Max's keep_dims, BiasAdd's data_format."""
    m = tf.reshape(x, tf.concat([tf.shape(x)[:0], [2, 4]], 0))
    y = tf.math.cumsum(m, axis=1) + tf.gather(m, [1, 0, 1], axis=0)[:2]
    y = tf.nn.bias_add(y, tf.constant([0.1, -0.2, 0.3, 0.5], tf.float64))
    return tf.reduce_max(y, axis=1) * tf.reduce_sum(y)


def with_tf_ext_op(x):
    return tf_ext.sign_ste(tf.nn.relu(x) - 0.5, clip=2.0) * tf.exp(x)


CASES: dict[str, tuple[Callable[[tf.Tensor], tf.Tensor], set[str]]] = {
    "elementwise": (elementwise, {"Relu", "Exp", "Tanh", "Sigmoid", "Square", "Sqrt", "Abs",
                                  "Mul", "RealDiv", "AddV2", "Sub"}),
    "matmul_reduce": (matmul_reduce, {"MatMul", "Reshape", "Transpose", "Mean", "Sum"}),
    "list_ops": (list_ops, {"SplitV", "Pack", "ConcatV2", "IdentityN", "Unpack", "AddN"}),
    "defaulted_attrs": (defaulted_attrs, {"Cumsum", "GatherV2", "BiasAdd", "Max",
                                          "StridedSlice"}),
    "tf_ext_op": (with_tf_ext_op, {"TfExt>SignSTE", "Relu", "Exp"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_cpp_gradients_match_python(mode, case):
    f, cpp_ops = CASES[case]
    x = RNG.normal(size=(8,)) + np.linspace(-1.0, 1.0, 8)
    dy = RNG.normal(size=f(tf.constant(x)).shape)
    want = vjp(mode, f, x, dy)
    with tf_ext.use_cpp_gradients() as scope:
        got = vjp(mode, f, x, dy)
    counts = scope.counts()
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
    assert np.count_nonzero(want) > 0
    assert cpp_ops <= set(counts.cpp), cpp_ops - set(counts.cpp)
    assert counts.fallbacks() == {}
    assert not counts.python and not counts.function_ops


def dilated_causal_conv(x):
    """Keras's Conv1D(padding="causal", dilation_rate=2): a left Pad, then a dilated
    convolution, which TensorFlow runs as SpaceToBatchND -> Conv2D -> BatchToSpaceND."""
    w = tf.constant(np.random.default_rng(4).uniform(-1, 1, (3, 3, 2)))
    return tf.nn.convolution(tf.pad(x, [[0, 0], [4, 0], [0, 0]]), w, padding="VALID",
                             dilations=2)


def test_dilated_causal_convolution(mode):
    """SpaceToBatchND's and BatchToSpaceND's gradients (TensorFlow's C++ client gradients as
    functions) call ops whose shape functions need block_shape's size, which a shape-generic
    function argument lacks: importing the FunctionDef failed ("block_shape must have rank
    1"). The bridge builds those per static shapes of the arguments."""
    x = np.random.default_rng(0).uniform(-1, 1, (2, 9, 3))
    dy = np.random.default_rng(1).uniform(-1, 1, (2, 9, 2))
    want = vjp(mode, dilated_causal_conv, x, dy)
    with tf_ext.use_cpp_gradients() as scope:
        got = [vjp(mode, dilated_causal_conv, x, dy)]
        if mode == "eager":
            with tf.GradientTape():  # a tape that could record: the function, not node by node
                got.append(vjp(mode, dilated_causal_conv, x, dy))
    counts = scope.counts()
    for g in got:
        np.testing.assert_allclose(g, want, rtol=1e-9, atol=1e-9)
    assert np.count_nonzero(want) > 0
    ops = {"Pad", "SpaceToBatchND", "Conv2D", "BatchToSpaceND"}
    assert ops <= set(counts.cpp), ops - set(counts.cpp)
    assert counts.fallbacks() == {}
    assert not counts.python and not counts.function_ops


def test_list_op_gradients_are_the_cpp_registrys():
    """Pack's and ConcatV2's C++ gradients have list arguments, which TfExt>GradientFunction
    Def cannot specialise: the bridge then calls them through SymbolicGradient of a one-op
    function (one argument per list element). The gradient is C++'s (counted) in every mode."""
    for mode in ("eager", "function", "graph"):
        with tf_ext.use_cpp_gradients() as scope:
            got = vjp(mode, lambda t: tf.concat([tf.stack([t, 3.0 * t]), [t]], 0),
                      np.arange(3.0), np.ones((3, 3)))
        np.testing.assert_array_equal(got, [5.0, 5.0, 5.0])
        assert {"Pack", "ConcatV2"} <= set(scope.counts().cpp), mode


def fit_losses(build: Callable[[], keras.Model], x: np.ndarray, y: np.ndarray,
               run_eagerly: bool) -> list[float]:
    keras.utils.set_random_seed(0)
    model = build()
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", run_eagerly=run_eagerly)
    history = model.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False)
    return history.history["loss"]


def conv_model() -> keras.Model:
    return keras.Sequential([
        keras.Input((4, 4, 1)), keras.layers.Conv2D(2, 3, activation="relu"),
        keras.layers.Flatten(), keras.layers.Dense(3, activation="tanh"),
        keras.layers.BatchNormalization(), keras.layers.Dense(1)])


@pytest.mark.parametrize("run_eagerly", [False, True])
def test_model_fit_gives_the_same_losses(run_eagerly):
    x = RNG.normal(size=(16, 4, 4, 1)).astype("float32")
    y = RNG.normal(size=(16, 1)).astype("float32")
    want = fit_losses(conv_model, x, y, run_eagerly)
    with tf_ext.use_cpp_gradients() as scope:
        got = fit_losses(conv_model, x, y, run_eagerly)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    counts = scope.counts()
    assert {"Conv2D", "MatMul", "BiasAdd", "Relu", "Tanh", "Rsqrt"} <= set(counts.cpp)
    assert counts.fallbacks() == {}


def test_model_fit_of_an_lstm_differentiates_its_loop_body_with_cpp_gradients():
    """The While loop's own gradient is Python's (counted under function_ops: its C++ gradient
    needs tf_ext's control-flow pass over the whole graph); the body's ops get C++'s."""
    def lstm() -> keras.Model:
        return keras.Sequential([keras.Input((5, 3)), keras.layers.LSTM(4),
                                 keras.layers.Dense(1)])
    x = RNG.normal(size=(16, 5, 3)).astype("float32")
    y = RNG.normal(size=(16, 1)).astype("float32")
    want = fit_losses(lstm, x, y, run_eagerly=False)
    with tf_ext.use_cpp_gradients() as scope:
        got = fit_losses(lstm, x, y, run_eagerly=False)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    counts = scope.counts()
    assert {"Sigmoid", "Tanh", "MatMul", "TensorListSetItem"} <= set(counts.cpp)
    assert set(counts.function_ops) == {"While"} and counts.fallbacks() == {}


def registry_entries() -> dict[str, object]:
    return dict(tf_ops._gradient_registry._registry)  # pylint: disable=protected-access


def test_the_switch_restores_the_registry_exactly_even_on_an_exception():
    tf_ext.library()
    before = registry_entries()
    with pytest.raises(RuntimeError, match="inside"):
        with tf_ext.use_cpp_gradients():
            assert tf_ext.cpp_gradients_enabled()
            inside = registry_entries()
            assert inside["Relu"] is not before["Relu"]
            assert inside["Floor"]["type"] is None  # not differentiable in C++
            raise RuntimeError("inside")
    after = registry_entries()
    assert not tf_ext.cpp_gradients_enabled()
    assert after.keys() == before.keys()
    assert all(after[k] is before[k] for k in before)


def test_nesting_and_the_global_switch():
    relu = registry_entries()["Relu"]
    with tf_ext.use_cpp_gradients():
        switched = registry_entries()["Relu"]
        with tf_ext.use_cpp_gradients():
            assert registry_entries()["Relu"] is switched
        assert tf_ext.cpp_gradients_enabled() and registry_entries()["Relu"] is switched
        with tf_ext.use_cpp_gradients(False):
            assert not tf_ext.cpp_gradients_enabled()
            assert registry_entries()["Relu"] is relu
        assert tf_ext.cpp_gradients_enabled()
    assert registry_entries()["Relu"] is relu
    tf_ext.enable_cpp_gradients()
    try:
        assert tf_ext.cpp_gradients_enabled() and registry_entries()["Relu"] is not relu
        with tf_ext.use_cpp_gradients(False):
            assert registry_entries()["Relu"] is relu
        assert registry_entries()["Relu"] is not relu
    finally:
        tf_ext.disable_cpp_gradients()
    assert not tf_ext.cpp_gradients_enabled() and registry_entries()["Relu"] is relu


def eager_relu_gradient(x: tf.Tensor, slow_path: bool) -> np.ndarray:
    with tf.GradientTape() as tape:
        tape.watch(x)
        # A Python list input sends the generated wrapper down its slow path
        # (execute.execute, then execute.record_gradient) instead of the C fast path.
        y = tf.raw_ops.Relu(features=[x[0], x[1], x[2]] if slow_path else x)
    return tape.gradient(y, x, output_gradients=tf.constant([2.0, 3.0, 4.0], tf.float64))


@pytest.mark.parametrize("slow_path", [False, True])
def test_eager_op_whose_tape_drops_its_input_gets_the_cpp_gradient(slow_path):
    """TensorFlow's tape drops Relu's input (its Python gradient reads the output); the C++
    gradient, ReluGrad(dy, x), reads the input. The switch records Relu again with it."""
    x = tf.constant([-1.0, 0.5, 2.0], tf.float64)
    with tf_ext.use_cpp_gradients() as scope:
        got = eager_relu_gradient(x, slow_path)
    np.testing.assert_array_equal(got, [0.0, 3.0, 4.0])
    counts = scope.counts()
    assert counts.cpp.get("Relu") == 1 and counts.fallbacks() == {}


def test_a_dropped_input_on_another_thread_falls_back_and_is_counted():
    """The switch records eager ops of the thread that switched it on: on another thread the
    tape keeps only what Python's Relu gradient reads, so Python's gradient is used, and the
    counts say so (the check the tests above rely on can fail)."""
    x = tf.constant([-1.0, 0.5, 2.0], tf.float64)
    result = {}
    with tf_ext.use_cpp_gradients() as scope:
        thread = threading.Thread(target=lambda: result.update(g=eager_relu_gradient(x, False)))
        thread.start()
        thread.join()
    np.testing.assert_array_equal(result["g"], [0.0, 3.0, 4.0])
    assert scope.counts().fallbacks() == {"Relu": 1}


def test_ops_without_a_cpp_gradient_keep_pythons_counted():
    """ResourceGather (a gathered variable) has no C++ gradient: Python's, counted in python
    but not as a fallback."""
    v = tf.Variable(np.arange(6.0).reshape(3, 2))
    with tf_ext.use_cpp_gradients() as scope:
        with tf.GradientTape() as tape:
            y = tf.reduce_sum(tf.gather(v, [2, 0]) ** 2)
        g = tape.gradient(y, v)
    np.testing.assert_array_equal(tf.convert_to_tensor(g), [[0, 2], [0, 0], [8, 10]])
    counts = scope.counts()
    assert counts.python == {"ResourceGather": 1} and counts.fallbacks() == {}
    assert {"Sum", "Pow"} <= set(counts.cpp)
