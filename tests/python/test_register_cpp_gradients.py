"""tf_ext.register_cpp_gradients on a second, independent op library (tests/testlib) whose
ops have C++ gradients only."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.autograph.impl.api import StagingError

import tf_ext
from conftest import hvp, vjp

X = np.array([[1.5, -2.0, 0.5], [3.0, -0.25, 2.0]])
DY = np.array([[1.0, -3.0, 2.0], [0.5, 4.0, -1.5]])


@pytest.fixture(scope="module")
def testlib():
    """The library, with the error a GradientTape gave BEFORE bridging (first use of its ops
    in this process: this module is the only one that loads it)."""
    lib = tf.load_op_library(os.environ["TF_EXT_TEST_LIBRARY"])
    x = tf.constant([1.0, 2.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = lib.tf_ext_test_cube(x)
    try:
        tape.gradient(y, x)
        error = None
    except LookupError as e:
        error = e
    status = tf_ext.register_cpp_gradients(lib)
    return lib, error, status


def test_no_gradient_before_bridging(testlib):
    _, error, _ = testlib
    assert isinstance(error, LookupError)
    assert "TfExtTest>Cube" in str(error)


def test_bridging_status(testlib):
    lib, _, status = testlib
    assert status == {"TfExtTest>Cube": "bridged", "TfExtTest>CubeDedicated": "bridged",
                      "TfExtTest>CubeDedicatedGrad": "missing"}
    assert tf_ext.register_cpp_gradients(lib) == status  # idempotent
    assert tf_ext.register_cpp_gradients(["TfExtTest>Cube"]) == {"TfExtTest>Cube": "bridged"}


@pytest.mark.parametrize("op", ["tf_ext_test_cube", "tf_ext_test_cube_dedicated"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gradient_is_3x2_dy(testlib, mode, op, dtype):
    lib, _, _ = testlib
    x, dy = X.astype(dtype), DY.astype(dtype)
    dx = vjp(mode, getattr(lib, op), x, dy)
    np.testing.assert_allclose(dx, 3 * x**2 * dy, rtol=1e-6 if dtype == np.float32 else 1e-12)


def test_numeric_gradient(testlib):
    lib, _, _ = testlib
    # delta small enough that the central difference's truncation error (delta^2) is negligible.
    theoretical, numerical = tf.test.compute_gradient(
        lib.tf_ext_test_cube, [tf.constant(X)], delta=1e-6)
    np.testing.assert_allclose(theoretical[0], numerical[0], rtol=1e-7, atol=1e-7)
    np.testing.assert_allclose(theoretical[0], np.diag(3 * X.ravel() ** 2), rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_second_order_through_stock_ops(testlib, mode, dtype):
    """Cube's C++ gradient is built from stock ops: d<3x^2, v>/dx = 6 x v."""
    lib, _, _ = testlib
    x, v = X.astype(dtype), DY.astype(dtype)
    h = hvp(mode, lib.tf_ext_test_cube, x, v)
    np.testing.assert_allclose(h, 6 * x * v, rtol=1e-6 if dtype == np.float32 else 1e-12)


def test_second_order_through_op_without_gradient_names_it(testlib, mode):
    lib, _, _ = testlib
    # tf.function's AutoGraph re-raises a LookupError from tracing as a StagingError that
    # carries the original message.
    expected = StagingError if mode == "function" else LookupError
    with pytest.raises(expected) as e:
        hvp(mode, lib.tf_ext_test_cube_dedicated, X, DY)
    message = str(e.value)
    assert "LookupError" in message or isinstance(e.value, LookupError)
    assert "TfExtTest>CubeDedicated" in message
    assert "TfExtTest>CubeDedicatedGrad" in message
