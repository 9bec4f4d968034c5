"""Forward passes of RoiPool, PsRoiAlign, MedianPool2D, SignSTE and GradientReversal from
Python: against the numpy references in numpy_refs.py, per dtype and execution mode (eager,
tf.function, tf.compat.v1 graph); error messages; empty inputs."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import numpy_refs as ref
import tf_ext
from conftest import evaluate

FLOATS = [np.float32, np.float64]


def random_rois(rng: np.random.Generator, num_rois: int, num_images: int, image_h: float,
                image_w: float) -> np.ndarray:
    """ROIs in input-image coordinates: mostly inside, some partly outside, corners in random
    order (a reversed ROI is degenerate: 1 pixel wide)."""
    rois = np.zeros((num_rois, 5), np.float32)
    rois[:, 0] = rng.integers(0, num_images, num_rois)
    rois[:, [1, 3]] = rng.uniform(-0.3, 1.3, (num_rois, 2)) * image_w
    rois[:, [2, 4]] = rng.uniform(-0.3, 1.3, (num_rois, 2)) * image_h
    return rois


# --- RoiPool -------------------------------------------------------------------------------

ROI_POOL_CASES = {
    # name: (data shape, rois, pooled_height, pooled_width, spatial_scale)
    "inside": ((2, 6, 7, 3), [[0, 0, 0, 5, 4], [1, 1.2, 0.7, 6.3, 5.9]], 2, 3, 1.0),
    # x1 * 0.25 = -0.5 and y2 * 0.25 = 5.5: halves round away from zero (to -1 and 6).
    "scaled_halves": ((1, 5, 6, 2), [[0, -2, 5, 17, 22], [0, 1.9, 2.1, 2.2, 1.8]], 3, 3, 0.25),
    # Partly outside, fully outside (every bin empty: 0, argmax -1), reversed corners.
    "outside": ((2, 4, 5, 2), [[1, -3, -2, 2, 1], [0, 8, 8, 12, 12], [1, 4, 3, 1, 2]], 2, 2, 1.0),
    # More bins than ROI pixels: bins overlap or are empty.
    "fine_grid": ((1, 4, 4, 1), [[0, 1, 1, 2, 2]], 5, 3, 1.0),
}


def roi_pool_case(name: str, dtype: type):
    shape, rois, ph, pw, scale = ROI_POOL_CASES[name]
    return ref.shuffled_grid(shape, dtype, seed=len(name)), np.array(rois, np.float32), ph, \
        pw, scale


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", sorted(ROI_POOL_CASES))
def test_roi_pool_matches_reference(mode, dtype, case):
    data, rois, ph, pw, scale = roi_pool_case(case, dtype)
    pooled, argmax = evaluate(mode, lambda d, r: tf_ext.roi_pool(d, r, ph, pw, scale), data, rois)
    want_pooled, want_argmax = ref.roi_pool(data, rois, ph, pw, scale)
    assert pooled.dtype == dtype and argmax.dtype == np.int32
    np.testing.assert_array_equal(pooled, want_pooled)  # a max is exact
    np.testing.assert_array_equal(argmax, want_argmax)


@pytest.mark.parametrize("dtype", FLOATS)
def test_roi_pool_random_rois(dtype):
    rng = np.random.default_rng(7)
    data = ref.shuffled_grid((3, 9, 8, 4), dtype, seed=7)
    rois = random_rois(rng, 12, 3, 9 * 8, 8 * 8)
    pooled, argmax = tf_ext.roi_pool(data, rois, 3, 2, spatial_scale=1 / 8)
    want_pooled, want_argmax = ref.roi_pool(data, rois, 3, 2, 1 / 8)
    np.testing.assert_array_equal(pooled.numpy(), want_pooled)
    np.testing.assert_array_equal(argmax.numpy(), want_argmax)


def test_roi_pool_argmax_is_flat_position_in_image():
    """argmax = h * W + w of the bin's maximum inside its ROI's image; -1 for an empty bin."""
    data, rois, ph, pw, scale = roi_pool_case("outside", np.float64)
    pooled, argmax = (t.numpy() for t in tf_ext.roi_pool(data, rois, ph, pw, scale))
    n, h, w, c = data.shape
    images = data.reshape(n, h * w, c)
    assert (argmax[1] == -1).all() and (pooled[1] == 0).all()  # fully outside
    for r, i, j, ch in np.ndindex(*argmax.shape):
        if argmax[r, i, j, ch] >= 0:
            assert images[int(rois[r, 0]), argmax[r, i, j, ch], ch] == pooled[r, i, j, ch]


def test_roi_pool_ties_take_first_in_row_major_order():
    data = np.zeros((1, 3, 3, 1), np.float32)
    data[0, 1, 2, 0] = data[0, 2, 0, 0] = 1.0  # two maxima: (1, 2) comes first
    _, argmax = tf_ext.roi_pool(data, np.array([[0, 0, 0, 2, 2]], np.float32), 1, 1)
    assert argmax.numpy().item() == 1 * 3 + 2


# --- PsRoiAlign ----------------------------------------------------------------------------

PS_CASES = {
    # name: (N, H, W, D, pooled_height, pooled_width, spatial_scale, sampling_ratio)
    "2x2_ratio2": (2, 6, 7, 3, 2, 2, 1.0, 2),
    "2x3_adaptive": (2, 5, 6, 2, 2, 3, 0.5, 0),
    "3x2_ratio1": (1, 7, 5, 1, 3, 2, 1.0, 1),
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", sorted(PS_CASES))
def test_ps_roi_align_matches_reference(mode, dtype, case):
    n, h, w, d, ph, pw, scale, ratio = PS_CASES[case]
    rng = np.random.default_rng(len(case))
    features = rng.uniform(-1, 1, (n, h, w, d * ph * pw)).astype(dtype)
    rois = random_rois(rng, 6, n, h / scale, w / scale)
    out = evaluate(mode, lambda f, r: tf_ext.ps_roi_align(f, r, ph, pw, scale, ratio),
                   features, rois)
    assert out.dtype == dtype and out.shape == (6, ph, pw, d)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, ref.ps_roi_align(features, rois, ph, pw, scale, ratio),
                               rtol=tol, atol=tol)


def test_ps_roi_align_channel_layout():
    """Bin (i, j) of output channel d reads input channel (d * ph + i) * pw + j: with every
    input channel constant (its own index), each output is that channel index."""
    ph, pw, depth = 2, 3, 4
    features = np.broadcast_to(np.arange(depth * ph * pw, dtype=np.float64),
                               (1, 8, 9, depth * ph * pw)).copy()
    out = tf_ext.ps_roi_align(features, np.array([[0, 1, 1, 7, 6]], np.float32), ph, pw)
    want = np.array([[[(d * ph + i) * pw + j for d in range(depth)] for j in range(pw)]
                     for i in range(ph)], np.float64)
    np.testing.assert_allclose(out.numpy()[0], want, rtol=1e-12)


# --- MedianPool2D --------------------------------------------------------------------------

MEDIAN_CASES = [
    # (ksize, strides, padding)
    ((3, 3), (1, 1), "SAME"),
    ((3, 3), (2, 2), "VALID"),
    ((2, 4), (2, 3), "SAME"),
    ((4, 2), (3, 1), "VALID"),
    ((5, 5), (4, 4), "SAME"),  # edge windows hold even counts: the lower median
    ((1, 1), (1, 1), "VALID"),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("ksize,strides,padding", MEDIAN_CASES)
def test_median_pool_matches_reference(mode, dtype, ksize, strides, padding):
    x = ref.shuffled_grid((2, 7, 6, 3), dtype, seed=3)
    y = evaluate(mode, lambda t: tf_ext.median_pool2d(t, ksize, strides, padding), x)
    want, _ = ref.median_pool2d(x, ksize, strides, padding)
    assert y.dtype == dtype and y.shape == want.shape
    np.testing.assert_array_equal(y, want)  # the median is one of the inputs: exact


@pytest.mark.parametrize("ksize,strides,padding", MEDIAN_CASES)
def test_median_pool_output_shape_follows_max_pool(ksize, strides, padding):
    x = tf.zeros([2, 7, 6, 3])
    want = tf.nn.max_pool2d(x, ksize, strides, padding).shape
    assert tf_ext.median_pool2d(x, ksize, strides, padding).shape == want
    with tf.Graph().as_default():  # the shape function agrees
        assert tf_ext.median_pool2d(tf.zeros([2, 7, 6, 3]), ksize, strides, padding).shape == want


def test_median_pool_even_window_takes_lower_median():
    x = np.array([4.0, 1.0, 3.0, 2.0]).reshape(1, 2, 2, 1)
    assert tf_ext.median_pool2d(x, [2, 2], [1, 1], "VALID").numpy().item() == 2.0


def test_median_pool_window_larger_than_image_is_empty_with_valid_padding():
    y = tf_ext.median_pool2d(np.ones((1, 3, 3, 2)), [4, 2], [1, 1], "VALID")
    assert y.shape == (1, 0, 2, 2)


# --- SignSTE and GradientReversal ----------------------------------------------------------

ELEMENTWISE_DTYPES = [np.float16, np.float32, np.float64]


@pytest.mark.parametrize("dtype", ELEMENTWISE_DTYPES)
def test_sign_ste_forward(mode, dtype):
    x = np.array([[-2.5, -0.5, -0.0, 0.0], [0.25, 1.0, 3.0, np.nan]], dtype)
    y = evaluate(mode, lambda t: tf_ext.sign_ste(t, clip=0.5), x)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, np.sign(x))  # NaN stays NaN
    np.testing.assert_array_equal(np.signbit(y[0, 2:]), [True, False])  # zeros keep the sign bit


@pytest.mark.parametrize("dtype", ELEMENTWISE_DTYPES)
def test_gradient_reversal_forward_is_identity(mode, dtype):
    x = ref.shuffled_grid((3, 4), dtype, seed=1)
    y = evaluate(mode, lambda t: tf_ext.gradient_reversal(t, scale=0.7), x)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, x)


@pytest.mark.parametrize("dtype", ELEMENTWISE_DTYPES)
@pytest.mark.parametrize("delta", [1.0, 0.25, 3.0])
def test_smooth_l1_matches_huber(mode, dtype, delta):
    # The generated function (no hand-written wrapper) against the Huber penalty written out in
    # numpy, in float64, with values on both sides of +-delta, exactly at it, zeros and NaN.
    x = np.concatenate([np.linspace(-4, 4, 33), [delta, -delta, 0.0, -0.0, np.nan]])
    x = x.astype(dtype)
    y = evaluate(mode, lambda t: tf_ext.smooth_l1(t, delta=delta), x)
    assert y.dtype == dtype
    v = x.astype(np.float64)
    want = np.where(np.abs(v) < delta, 0.5 * v * v / delta, np.abs(v) - 0.5 * delta)
    tol = {np.float16: 1e-3, np.float32: 1e-6, np.float64: 1e-12}[dtype]
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=tol, atol=tol)
    assert np.isnan(y[-1])


def test_smooth_l1_gradient_is_clipped_slope():
    x = tf.constant(np.linspace(-3, 3, 13), tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf_ext.smooth_l1(x, delta=2.0)
    np.testing.assert_allclose(tape.gradient(y, x), np.clip(x.numpy() / 2.0, -1, 1), rtol=1e-12)


def test_smooth_l1_rejects_bad_delta():
    for delta in (0.0, -1.0, float("nan"), float("inf"), 1e-45):
        with pytest.raises((tf.errors.InvalidArgumentError, ValueError),
                           match=r"TfExt>SmoothL1: delta must be finite and > 0"):
            tf_ext.smooth_l1(tf.constant([1.0]), delta=delta)


# --- errors --------------------------------------------------------------------------------

IMAGES = ref.shuffled_grid((2, 5, 6, 4), np.float32)
ROIS = np.array([[0, 0, 0, 3, 3], [1, 1, 1, 4, 4]], np.float32)


def rois_with(row: int, col: int, value: float) -> np.ndarray:
    rois = ROIS.copy()
    rois[row, col] = value
    return rois


ERRORS = {
    # name: (f, inputs, parts every message must contain)
    "roi_pool_batch_index": (lambda d, r: tf_ext.roi_pool(d, r, 2, 2),
                             (IMAGES, rois_with(1, 0, 2)),
                             ["TfExt>RoiPool", "rois[1] has batch_index 2", "[0, 2)"]),
    "roi_pool_fractional_batch_index": (lambda d, r: tf_ext.roi_pool(d, r, 2, 2),
                                        (IMAGES, rois_with(0, 0, 0.5)),
                                        ["TfExt>RoiPool", "rois[0] has batch_index 0.5"]),
    "roi_pool_nan_coordinate": (lambda d, r: tf_ext.roi_pool(d, r, 2, 2),
                                (IMAGES, rois_with(1, 3, np.nan)),
                                ["TfExt>RoiPool", "rois[1] has a non-finite coordinate nan"]),
    "roi_pool_spatial_scale": (lambda d, r: tf_ext.roi_pool(d, r, 2, 2, spatial_scale=-0.5),
                               (IMAGES, ROIS), ["TfExt>RoiPool", "spatial_scale", "-0.5"]),
    "ps_roi_align_batch_index": (lambda f, r: tf_ext.ps_roi_align(f, r, 2, 2),
                                 (IMAGES, rois_with(0, 0, -1)),
                                 ["TfExt>PsRoiAlign", "rois[0] has batch_index -1"]),
    "ps_roi_align_channels": (lambda f, r: tf_ext.ps_roi_align(f, r, 3, 3),
                              (IMAGES, ROIS),
                              ["TfExt>PsRoiAlign", "channel count of features (4)",
                               "pooled_height * pooled_width = 9"]),
    "median_pool_ksize": (lambda x: tf_ext.median_pool2d(x, [0, 3], [1, 1], "SAME"), (IMAGES,),
                          ["TfExt>MedianPool2D", "ksize", "[0, 3]"]),
    "median_pool_ksize_length": (lambda x: tf_ext.median_pool2d(x, [3, 3, 3], [1, 1], "SAME"),
                                 (IMAGES,), ["TfExt>MedianPool2D", "ksize", "[3, 3, 3]"]),
    "median_pool_strides": (lambda x: tf_ext.median_pool2d(x, [3, 3], [1, -2], "VALID"),
                            (IMAGES,), ["TfExt>MedianPool2D", "strides", "[1, -2]"]),
    "median_pool_rank": (lambda x: tf_ext.median_pool2d(x, [3, 3], [1, 1], "VALID"),
                         (IMAGES[0],), ["TfExt>MedianPool2D", "rank 4", "[5,6,4]"]),
    "sign_ste_clip": (lambda x: tf_ext.sign_ste(x, clip=-1.5), (IMAGES,),
                      ["TfExt>SignSTE", "clip must be finite and >= 0, got -1.5"]),
    "gradient_reversal_scale": (lambda x: tf_ext.gradient_reversal(x, scale=float("inf")),
                                (IMAGES,), ["TfExt>GradientReversal", "scale must be finite",
                                            "inf"]),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_error_names_op_and_value(mode, case):
    """Attr errors come from the shape function (graph construction) or the kernel (eager);
    rois errors from the kernel at run time: either way the op and the value are named."""
    f, inputs, parts = ERRORS[case]
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError)) as e:
        evaluate(mode, f, *inputs)
    for part in parts:
        assert part in str(e.value), (part, str(e.value))


# --- empty inputs --------------------------------------------------------------------------

EMPTY = {
    # name: (f, inputs, expected output shape)
    "roi_pool_no_rois": (lambda d, r: tf_ext.roi_pool(d, r, 2, 3)[0],
                         (IMAGES, np.zeros((0, 5), np.float32)), (0, 2, 3, 4)),
    "roi_pool_no_images": (lambda d, r: tf_ext.roi_pool(d, r, 2, 3)[1],
                           (np.zeros((0, 5, 6, 4), np.float32), np.zeros((0, 5), np.float32)),
                           (0, 2, 3, 4)),
    "ps_roi_align_no_rois": (lambda f, r: tf_ext.ps_roi_align(f, r, 2, 2),
                             (IMAGES, np.zeros((0, 5), np.float32)), (0, 2, 2, 1)),
    "ps_roi_align_no_images": (lambda f, r: tf_ext.ps_roi_align(f, r, 1, 1),
                               (np.zeros((0, 3, 3, 2), np.float64),
                                np.zeros((0, 5), np.float32)), (0, 1, 1, 2)),
    "median_pool_no_images": (lambda x: tf_ext.median_pool2d(x, [3, 3], [1, 1], "SAME"),
                              (np.zeros((0, 5, 6, 2), np.float32),), (0, 5, 6, 2)),
    "median_pool_no_rows": (lambda x: tf_ext.median_pool2d(x, [2, 2], [1, 1], "SAME"),
                            (np.zeros((1, 0, 6, 2), np.float64),), (1, 0, 6, 2)),
    "sign_ste": (lambda x: tf_ext.sign_ste(x), (np.zeros((0, 3), np.float32),), (0, 3)),
    "gradient_reversal": (lambda x: tf_ext.gradient_reversal(x),
                          (np.zeros((2, 0), np.float64),), (2, 0)),
}


@pytest.mark.parametrize("case", sorted(EMPTY))
def test_empty_inputs_give_empty_outputs(mode, case):
    f, inputs, shape = EMPTY[case]
    assert evaluate(mode, f, *inputs).shape == shape
