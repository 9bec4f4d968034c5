"""Second-order gradients through the bridge: they work where the C++ gradient is made of
differentiable ops (ZeroOut, SignSTE, GradientReversal) and match closed forms, and Prod's
(under use_cpp_gradients) matches Python's; for the ops
with a dedicated backward op (RoiPool, PsRoiAlign, MedianPool2D) C++ registers the backward
op's gradient as not implemented, and Python raises GradientNotImplementedError naming the op
instead of returning zeros or None."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import numpy_refs as ref
import tf_ext
from tf_ext import _bridge, _c_api
from tf_ext._c_api import GradientKind
from conftest import hvp

FLOATS = [np.float32, np.float64]
TOL = {np.float32: 1e-5, np.float64: 1e-12}


@pytest.mark.parametrize("dtype", FLOATS)
def test_sign_ste(mode, dtype):
    """s = sum(sign_ste(x^3) * x). With m = 1[|x^3| <= clip] (the STE's mask):
    ds/dx = sign_ste(x^3) + x * m * 3x^2, and its derivative, again with the STE for the first
    term and the mask constant, is m * 3x^2 + 9 m x^2 = 12 m x^2."""
    clip = 2.0
    x = np.array([[-1.5, -1.2, -0.5, 0.3], [0.7, 1.1, 1.3, 2.0]], dtype)  # |x^3| both sides of 2
    v = ref.shuffled_grid(x.shape, dtype, seed=1)
    h = hvp(mode, lambda t: tf_ext.sign_ste(t * t * t, clip=clip) * t, x, v)
    x64 = x.astype(np.float64)
    mask = np.abs(x64**3) <= clip
    assert 0 < mask.sum() < mask.size
    np.testing.assert_allclose(h, 12 * mask * x64**2 * v, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("dtype", FLOATS)
def test_prod_under_use_cpp_gradients(mode, dtype):
    """Prod's C++ gradient computes its permutation with ListDiff and Mod on int32: ops without
    a gradient that nothing differentiates, so its second derivative is Python's (it was
    refused as "not differentiable")."""
    x = ref.shuffled_grid((3, 4), dtype, seed=2) + 2.0
    v = ref.shuffled_grid((3, 4), dtype, seed=3)
    f = lambda t: tf.reduce_prod(t, axis=1)
    want = hvp(mode, f, x, v)
    with tf_ext.use_cpp_gradients() as scope:
        got = hvp(mode, f, x, v)
    assert scope.counts().cpp.get("Prod", 0) >= 1, scope.counts()
    np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype] * np.abs(want).max())


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("scale", [0.5, 2.0])
def test_gradient_reversal(mode, dtype, scale):
    """s = sum(gr(x)^2 * x), y = gr(x) = x: ds/dx = y^2 - scale * 2 y x, and its derivative
    (each use of y reversed again) is -2 scale y - scale (2 x (-scale) + 2 y)
    = (2 scale^2 - 4 scale) x."""
    x = ref.shuffled_grid((3, 4), dtype, seed=2)
    v = ref.shuffled_grid((3, 4), dtype, seed=3)
    h = hvp(mode, lambda t: tf_ext.gradient_reversal(t, scale=scale) ** 2 * t, x, v)
    np.testing.assert_allclose(h, (2 * scale**2 - 4 * scale) * x.astype(np.float64) * v,
                               rtol=TOL[dtype])


@pytest.mark.parametrize("dtype", FLOATS)
def test_zero_out(mode, dtype):
    """s = sum(zero_out(x) * x^2) = x_p^3: ds/dx = S x^2 + 2x zero_out(x), and its derivative
    is 6 S x (S: the selector of preserve_index p)."""
    x = ref.shuffled_grid((2, 5), dtype, seed=4)
    v = ref.shuffled_grid((2, 5), dtype, seed=5)
    h = hvp(mode, lambda t: tf_ext.zero_out(t, preserve_index=6) * t * t, x, v)
    want = np.zeros((2, 5))
    want.flat[6] = 6 * x.flat[6] * v.flat[6]
    np.testing.assert_allclose(h, want, rtol=TOL[dtype])


ROIS = np.array([[0, 0.5, 0.5, 4.5, 3.5], [1, 1, 1, 5, 4]], np.float32)
DEDICATED = {
    "TfExt>RoiPool": lambda t: tf_ext.roi_pool(t, ROIS, 2, 2)[0] ** 2,
    "TfExt>PsRoiAlign": lambda t: tf_ext.ps_roi_align(t, ROIS, 2, 2) ** 2,
    "TfExt>MedianPool2D": lambda t: tf_ext.median_pool2d(t, [3, 3], [1, 1], "SAME") ** 2,
}


@pytest.mark.parametrize("op", sorted(DEDICATED))
def test_dedicated_backward_ops_raise(mode, op):
    x = ref.shuffled_grid((2, 5, 6, 4), np.float64)
    with pytest.raises(tf_ext.GradientNotImplementedError) as e:
        hvp(mode, DEDICATED[op], x, x)
    message = str(e.value)
    assert f"second-order gradients of {op} are not implemented" in message, message
    assert f"{op}Grad" in message, message  # the backward op that lacks the gradient
    # One error, catchable the TensorFlow way and the Python way.
    assert isinstance(e.value, tf.errors.UnimplementedError)
    assert isinstance(e.value, NotImplementedError)


def test_backward_ops_are_registered_unimplemented():
    status = tf_ext.register_cpp_gradients(
        ["TfExt>RoiPoolGrad", "TfExt>PsRoiAlignGrad", "TfExt>MedianPool2DGrad"])
    assert set(status.values()) == {"unimplemented"}


def test_differentiating_a_backward_op_directly_raises():
    """The Python gradient registered for TfExt>MedianPool2DGrad itself raises."""
    lib = tf_ext.library()
    x = tf.constant(ref.shuffled_grid((1, 4, 4, 1), np.float32))
    dy = tf.ones([1, 2, 2, 1])
    with tf.GradientTape() as tape:
        tape.watch(dy)
        dx = lib.tf_ext_median_pool2d_grad(x, dy, ksize=[2, 2], strides=[2, 2],
                                           padding="VALID")
    with pytest.raises(tf_ext.GradientNotImplementedError,
                       match="TfExt>MedianPool2DGrad: its gradient is not implemented"):
        tape.gradient(dx, dy)


def test_first_order_under_nested_tapes_still_works():
    """A first derivative taken while two outer tapes record (a higher-order tape setting)
    works; only asking an outer tape for the second derivative raises."""
    x = tf.constant(ref.shuffled_grid((2, 5, 6, 4), np.float64))
    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape() as middle:
            middle.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                s = tf.reduce_sum(tf_ext.roi_pool(x, ROIS, 2, 2)[0])
            g = inner.gradient(s, x)
    assert g.numpy().sum() == ROIS.shape[0] * 2 * 2 * 4  # every bin's d(pooled) = 1 lands once
    with pytest.raises(tf_ext.GradientNotImplementedError, match="TfExt>RoiPool"):
        middle.gradient(g, x)


def test_status_and_message_come_from_the_cpp_registry():
    kind, message = _c_api.gradient_kind("TfExt>PsRoiAlignGrad")
    assert kind is GradientKind.UNIMPLEMENTED
    assert "second-order gradients of TfExt>PsRoiAlign" in message
    assert _c_api.gradient_kind("TfExt>PsRoiAlign") == (GradientKind.FUNCTION, "")
    assert _c_api.gradient_kind("TfExt>GradientFunctionDef") == (GradientKind.NONE, "")
    assert _c_api.gradient_kind("TfExt>NoSuchOp") == (GradientKind.MISSING, "")
    assert _bridge._status["TfExt>PsRoiAlignGrad"] == "unimplemented"
