"""TfExt>ZeroOut from Python: forward vs numpy, errors, the C++ gradient through
SymbolicGradient, and the gradient bridge in every execution mode."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2

import tf_ext
from tf_ext import _bridge
from conftest import hvp, vjp

SHAPES = [(), (7,), (3, 4), (2, 3, 5), (2, 1, 3, 2)]
FLOAT_TOL = {np.float32: 1e-6, np.float64: 1e-12}


def reference(x: np.ndarray, preserve_index: int) -> np.ndarray:
    out = np.zeros_like(x)
    out.flat[preserve_index] = x.flat[preserve_index]
    return out


def mask(shape: tuple[int, ...], preserve_index: int, dtype: type) -> np.ndarray:
    return reference(np.ones(shape, dtype), preserve_index)


def distinct(shape: tuple[int, ...], dtype: type, seed: int = 0) -> np.ndarray:
    """Values with no zeros, so a wrongly kept or dropped element always shows."""
    n = int(np.prod(shape))
    rng = np.random.default_rng(seed)
    return (rng.permutation(n) + 1).astype(dtype).reshape(shape) * rng.choice([-1, 1], n).reshape(shape).astype(dtype)


def test_library_loads_with_tf_load_op_library():
    lib = tf.load_op_library(tf_ext.library_path())
    assert hasattr(lib, "tf_ext_zero_out")
    assert "TfExt>ZeroOut" in tf_ext.op_names()
    assert "TfExt>GradientFunctionDef" in tf_ext.op_names()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("shape", SHAPES)
def test_forward_matches_numpy(dtype, shape):
    x = distinct(shape, dtype)
    n = x.size
    for preserve_index in sorted({0, n // 2, n - 1}):
        y = tf_ext.zero_out(x, preserve_index=preserve_index)
        assert y.dtype == dtype and y.shape == shape
        np.testing.assert_array_equal(y.numpy(), reference(x, preserve_index))


def test_forward_in_graph_mode():
    x = distinct((4, 3), np.float64)
    with tf.Graph().as_default():
        y = tf_ext.zero_out(tf.constant(x), preserve_index=5)
        with tf.compat.v1.Session() as sess:
            np.testing.assert_array_equal(sess.run(y), reference(x, 5))


def test_error_names_op_and_values_in_kernel():
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        tf_ext.zero_out(tf.constant([1.0, 2.0, 3.0]), preserve_index=5)
    for part in ("TfExt>ZeroOut", "preserve_index 5", "(3)"):
        assert part in e.value.message


def test_error_names_op_and_values_in_shape_function():
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match=r"TfExt>ZeroOut: preserve_index 4 .*\(4\)"):
            tf_ext.zero_out(tf.zeros([2, 2]), preserve_index=4)


def test_empty_input_is_rejected():
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"TfExt>ZeroOut.*\(0\)"):
        tf_ext.zero_out(tf.zeros([0, 3]), preserve_index=0)


def test_negative_preserve_index_is_rejected():
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match="preserve_index"):
        tf_ext.zero_out(tf.zeros([3]), preserve_index=-1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cpp_gradient_through_symbolic_gradient(dtype):
    """The C++ gradient alone (no Python bridge): SymbolicGradient in a TF1 Session."""
    x = distinct((3, 4), dtype)
    dy = distinct((3, 4), dtype, seed=1)
    f = attr_value_pb2.NameAttrList(name="TfExt>ZeroOut")
    f.attr["T"].type = tf.as_dtype(dtype).as_datatype_enum
    f.attr["preserve_index"].i = 6
    with tf.Graph().as_default():
        tf_ext.library()
        (dx,) = tf.raw_ops.SymbolicGradient(
            input=[tf.constant(x), tf.constant(dy)], Tout=[tf.as_dtype(dtype)], f=f)
        with tf.compat.v1.Session() as sess:
            np.testing.assert_array_equal(sess.run(dx), reference(dy, 6))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(5,), (2, 3, 4)])
def test_bridged_gradient(mode, dtype, shape):
    x = distinct(shape, dtype)
    dy = distinct(shape, dtype, seed=2)
    for preserve_index in (0, x.size - 1):
        dx = vjp(mode, lambda t: tf_ext.zero_out(t, preserve_index=preserve_index), x, dy)
        assert dx.dtype == dtype and dx.shape == shape
        np.testing.assert_array_equal(dx, reference(dy, preserve_index))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_second_order_gradient(mode, dtype):
    """ZeroOut's gradient is ZeroOut again, so the bridged gradient is differentiable:
    for s = sum(zero_out(x)^2), grad s = 2 S x and d<grad s, v>/dx = 2 S v (S: the selector)."""
    x = distinct((3, 4), dtype)
    v = distinct((3, 4), dtype, seed=3)
    h = hvp(mode, lambda t: tf_ext.zero_out(t, preserve_index=7) ** 2, x, v)
    np.testing.assert_allclose(h, 2 * mask((3, 4), 7, dtype) * v, rtol=FLOAT_TOL[dtype])


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-10), (np.float32, 1e-3)])
@pytest.mark.parametrize("shape,preserve_index", [((1,), 0), ((6,), 4), ((2, 3, 2), 11)])
def test_numeric_gradient(dtype, tol, shape, preserve_index):
    x = tf.constant(distinct(shape, dtype) / 7)
    theoretical, numerical = tf.test.compute_gradient(
        lambda t: tf_ext.zero_out(t, preserve_index=preserve_index), [x])
    assert theoretical[0].shape == (x.shape.num_elements(),) * 2
    np.testing.assert_allclose(theoretical[0], numerical[0], atol=tol, rtol=tol)
    # The Jacobian is the selector: exactly one 1 on the diagonal.
    np.testing.assert_array_equal(theoretical[0], np.diag(mask(shape, preserve_index, dtype).ravel()))


def test_gradient_function_is_cached_per_attrs():
    x = distinct((9,), np.float64)
    dy = distinct((9,), np.float64, seed=4)
    requests, size = _bridge.function_def_requests(), _bridge.cache_size()
    for mode in ("eager", "eager", "function", "graph"):
        vjp(mode, lambda t: tf_ext.zero_out(t, preserve_index=8), x, dy)
    # One (op, attrs) -> one FunctionDef request, whatever the mode that first asked.
    assert _bridge.function_def_requests() - requests == 1
    assert _bridge.cache_size() - size == 1
    vjp("eager", lambda t: tf_ext.zero_out(t, preserve_index=3), x, dy)
    vjp("eager", lambda t: tf_ext.zero_out(t, preserve_index=3), x.astype(np.float32),
        dy.astype(np.float32))
    assert _bridge.function_def_requests() - requests == 3
    assert _bridge.cache_size() - size == 3


def test_int32_has_no_gradient():
    """int32 ZeroOut has no C++ gradient; asking the bridge for one says so."""
    with tf.Graph().as_default():
        x = tf.constant([1, 2, 3])
        y = tf_ext.zero_out(x, preserve_index=1)
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match="TfExt>ZeroOut is not differentiable for T=int32"):
            _bridge._bridged_gradient(y.op, tf.ones_like(y))
