"""First-order gradients of RoiPool, PsRoiAlign, MedianPool2D, SignSTE and GradientReversal
from Python: the C++ gradients, bridged, against numeric Jacobians (tf.test.compute_gradient)
and against the numpy references' backward maps / closed forms in every execution mode."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import numpy_refs as ref
import tf_ext
from conftest import vjp

FLOATS = [np.float32, np.float64]
# compute_gradient's default step is 1/1024; inputs are spaced 0.01 apart (a shuffled grid), so
# no max/median selection changes within a step. Selections and bilinear sums are linear in the
# input, so the numeric Jacobian is exact up to rounding: float32's is ~1e-4 for |x| < 1.
NUMERIC_TOL = {np.float32: 1e-3, np.float64: 1e-6}

ROIS = np.array([[0, 0.3, 0.6, 4.2, 3.7], [1, 1.4, -0.8, 5.6, 3.1], [1, 2.2, 2.9, 2.6, 3.3],
                 [0, -4, -4, -2, -1]], np.float32)  # the last one is outside: no gradient


def numeric_check(f, x: np.ndarray, dtype: type) -> np.ndarray:
    """Checks f's bridged gradient against finite differences; returns the Jacobian."""
    theoretical, numerical = tf.test.compute_gradient(f, [tf.constant(x)])
    tol = NUMERIC_TOL[dtype]
    np.testing.assert_allclose(theoretical[0], numerical[0], rtol=tol, atol=tol)
    assert np.abs(theoretical[0]).sum() > 0  # the check compared something
    return theoretical[0]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("ph,pw,scale", [(2, 2, 1.0), (3, 2, 0.5)])
def test_roi_pool_numeric_gradient(dtype, ph, pw, scale):
    data = ref.shuffled_grid((2, 5, 6, 3), dtype, seed=ph, spacing=0.01)
    rois = ROIS / np.float32([1, scale, scale, scale, scale])
    jacobian = numeric_check(lambda d: tf_ext.roi_pool(d, rois, ph, pw, scale)[0], data, dtype)
    # A selection: every row of the Jacobian has a single 1, or nothing for an empty bin.
    assert set(np.unique(jacobian)) <= {0.0, 1.0}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("ph,pw,ratio", [(2, 2, 2), (1, 3, 0)])
def test_ps_roi_align_numeric_gradient(dtype, ph, pw, ratio):
    features = ref.shuffled_grid((2, 5, 6, 2 * ph * pw), dtype, seed=ratio, spacing=0.01)
    numeric_check(lambda f: tf_ext.ps_roi_align(f, ROIS, ph, pw, 1.0, ratio), features, dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("ksize,strides,padding",
                         [((3, 3), (1, 1), "SAME"), ((2, 3), (2, 1), "VALID")])
def test_median_pool_numeric_gradient(dtype, ksize, strides, padding):
    x = ref.shuffled_grid((2, 5, 4, 2), dtype, seed=1, spacing=0.01)
    numeric_check(lambda t: tf_ext.median_pool2d(t, ksize, strides, padding), x, dtype)


# The bridged gradients in each mode against the references' backward maps.

@pytest.mark.parametrize("dtype", FLOATS)
def test_roi_pool_gradient_matches_reference(mode, dtype):
    data = ref.shuffled_grid((2, 5, 6, 3), dtype, seed=2)
    _, argmax = ref.roi_pool(data, ROIS, 2, 3, 1.0)
    d_pooled = ref.shuffled_grid(argmax.shape, dtype, seed=3)
    d_data = vjp(mode, lambda d: tf_ext.roi_pool(d, ROIS, 2, 3, 1.0)[0], data, d_pooled)
    assert d_data.dtype == dtype
    np.testing.assert_allclose(d_data, ref.roi_pool_backward(data.shape, ROIS, argmax, d_pooled),
                               rtol=1e-6)


@pytest.mark.parametrize("dtype", FLOATS)
def test_ps_roi_align_gradient_matches_reference(mode, dtype):
    rng = np.random.default_rng(4)
    features = rng.uniform(-1, 1, (2, 5, 6, 8)).astype(dtype)
    d_out = rng.uniform(-1, 1, (len(ROIS), 2, 2, 2)).astype(dtype)
    d_features = vjp(mode, lambda f: tf_ext.ps_roi_align(f, ROIS, 2, 2, 1.0, 0), features, d_out)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(
        d_features, ref.ps_roi_align_backward(features, ROIS, d_out, 2, 2, 1.0, 0),
        rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", FLOATS)
def test_median_pool_gradient_follows_tie_rule(mode, dtype):
    """With many equal values, d(y) goes to the element of rank (n-1)//2 in the stable sort
    by (value, row-major window position)."""
    x = np.random.default_rng(5).integers(0, 3, (2, 5, 6, 2)).astype(dtype)
    dy_shape = (2, 3, 3, 2)
    dy = ref.shuffled_grid(dy_shape, dtype, seed=6)
    dx = vjp(mode, lambda t: tf_ext.median_pool2d(t, [3, 3], [2, 2], "SAME"), x, dy)
    _, argmedian = ref.median_pool2d(x, (3, 3), (2, 2), "SAME")
    assert argmedian.shape == dy_shape
    np.testing.assert_allclose(dx, ref.median_pool2d_backward(x.shape, argmedian, dy), rtol=1e-6)


EMPTY = {
    "roi_pool": (lambda d: tf_ext.roi_pool(d, np.zeros((0, 5), np.float32), 2, 2)[0],
                 (2, 3, 3, 2), (0, 2, 2, 2)),
    "ps_roi_align": (lambda f: tf_ext.ps_roi_align(f, np.zeros((0, 5), np.float32), 1, 2),
                     (1, 3, 3, 4), (0, 1, 2, 2)),
    "median_pool": (lambda x: tf_ext.median_pool2d(x, [2, 2], [1, 1], "VALID"),
                    (0, 3, 3, 2), (0, 2, 2, 2)),
}


@pytest.mark.parametrize("case", sorted(EMPTY))
def test_gradient_of_empty_output_is_zero(mode, case):
    f, x_shape, y_shape = EMPTY[case]
    x = np.ones(x_shape, np.float32)
    dx = vjp(mode, f, x, np.zeros(y_shape, np.float32))
    assert dx.shape == x_shape and not dx.any()


# SignSTE and GradientReversal: closed forms.

ELEMENTWISE_DTYPES = [np.float16, np.float32, np.float64]


@pytest.mark.parametrize("dtype", ELEMENTWISE_DTYPES)
@pytest.mark.parametrize("clip", [0.5, 0.0, 2.0])
def test_sign_ste_gradient_is_dy_inside_clip(mode, dtype, clip):
    # Values on both sides of and exactly at +-clip (inside: |x| <= clip), and NaN (outside).
    x = np.array([[-3.0, -2.0, -0.5, -0.25, 0.0], [0.25, 0.5, 1.0, 2.0, np.nan]], dtype)
    dy = np.array([[1.5, -2.0, 3.0, 0.5, -1.0], [2.5, 4.0, -0.5, 1.0, 8.0]], dtype)
    dx = vjp(mode, lambda t: tf_ext.sign_ste(t, clip=clip), x, dy)
    assert dx.dtype == dtype
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(dx, np.where(np.abs(x) <= clip, dy, 0))


@pytest.mark.parametrize("dtype", ELEMENTWISE_DTYPES)
@pytest.mark.parametrize("scale", [1.0, 0.25, -2.0, 0.0])
def test_gradient_reversal_gradient_is_minus_scale_dy(mode, dtype, scale):
    x = ref.shuffled_grid((3, 4), dtype, seed=7)
    dy = ref.shuffled_grid((3, 4), dtype, seed=8)
    dx = vjp(mode, lambda t: tf_ext.gradient_reversal(t, scale=scale), x, dy)
    assert dx.dtype == dtype
    np.testing.assert_array_equal(dx, (-scale * dy.astype(np.float64)).astype(dtype))


def test_gradient_reversal_inside_a_chain():
    """d/dx sum(w * gr(x^2)) = -scale * w * 2x: the reversal composes with stock gradients.
    (scale is a float32 attr: 0.3 means float32(0.3).)"""
    x = tf.constant([1.0, -2.0, 3.0], tf.float64)
    w = tf.constant([0.5, 1.5, -1.0], tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(x)
        s = tf.reduce_sum(w * tf_ext.gradient_reversal(x * x, scale=0.3))
    scale = float(np.float32(0.3))
    np.testing.assert_allclose(tape.gradient(s, x).numpy(), -scale * w.numpy() * 2 * x.numpy(),
                               rtol=1e-12)
