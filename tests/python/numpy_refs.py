"""Straightforward numpy references for tf_ext's ops, written from the ops' documented
semantics (tf_ext/ops/*.cc) and not from their kernels, plus input helpers for the tests.

Each pooling reference returns the forward value together with the linear map it applies
(which input element feeds which output, with what weight), so the same reference gives the
expected gradient: d(input) = map^T d(output).
"""

from __future__ import annotations

import math

import numpy as np


def shuffled_grid(shape: tuple[int, ...], dtype: type, seed: int = 0,
                  spacing: float = 0.1) -> np.ndarray:
    """Values (k - n/2) * spacing for k = 0..n-1 in random order: distinct and `spacing` apart,
    so a max or median is unique and a finite-difference step cannot change which one wins."""
    n = int(np.prod(shape))
    rng = np.random.default_rng(seed)
    return ((rng.permutation(n) - n // 2) * spacing).astype(dtype).reshape(shape)


def _round_half_away(v: np.float32) -> int:
    """C's round(): halves go away from zero (numpy's round goes to even)."""
    f = float(v)
    return int(math.copysign(math.floor(abs(f) + 0.5), f))


def roi_pool(data: np.ndarray, rois: np.ndarray, ph: int, pw: int,
             scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Fast R-CNN / Caffe max RoI pooling, NHWC: (pooled, argmax), argmax = h * W + w of each
    bin's first maximum in row-major order, -1 (and pooled 0) for an empty bin."""
    n_img, height, width, channels = data.shape
    num_rois = rois.shape[0]
    pooled = np.zeros((num_rois, ph, pw, channels), data.dtype)
    argmax = np.full((num_rois, ph, pw, channels), -1, np.int32)
    f32 = np.float32
    for r in range(num_rois):
        b = int(rois[r, 0])
        assert 0 <= b < n_img
        # The op scales in float32 and rounds to whole feature-map pixels.
        x1, y1, x2, y2 = (_round_half_away(f32(rois[r, k]) * f32(scale)) for k in (1, 2, 3, 4))
        roi_w, roi_h = max(x2 - x1 + 1, 1), max(y2 - y1 + 1, 1)
        bin_h, bin_w = f32(roi_h) / f32(ph), f32(roi_w) / f32(pw)
        for i in range(ph):
            h0 = min(max(int(math.floor(f32(i) * bin_h)) + y1, 0), height)
            h1 = min(max(int(math.ceil(f32(i + 1) * bin_h)) + y1, 0), height)
            for j in range(pw):
                w0 = min(max(int(math.floor(f32(j) * bin_w)) + x1, 0), width)
                w1 = min(max(int(math.ceil(f32(j + 1) * bin_w)) + x1, 0), width)
                if h1 <= h0 or w1 <= w0:
                    continue
                window = data[b, h0:h1, w0:w1, :].reshape(-1, channels)
                k = np.argmax(window, axis=0)  # first maximum in row-major order
                pooled[r, i, j] = window[k, np.arange(channels)]
                argmax[r, i, j] = (h0 + k // (w1 - w0)) * width + w0 + k % (w1 - w0)
    return pooled, argmax


def roi_pool_backward(data_shape: tuple[int, ...], rois: np.ndarray, argmax: np.ndarray,
                      d_pooled: np.ndarray) -> np.ndarray:
    """d(data): each bin's d(pooled) added at its argmax in its ROI's image."""
    _, height, width, channels = data_shape
    d_data = np.zeros(data_shape, np.float64)
    for r, i, j, c in np.ndindex(*argmax.shape):
        a = argmax[r, i, j, c]
        if a >= 0:
            d_data[int(rois[r, 0]), a // width, a % width, c] += d_pooled[r, i, j, c]
    return d_data


def ps_roi_align_taps(features_shape: tuple[int, ...], rois: np.ndarray, ph: int, pw: int,
                      scale: float, sampling_ratio: int,
                      dtype: type) -> list[tuple[tuple[int, ...], tuple[int, ...], float]]:
    """R-FCN position-sensitive RoI Align with Detectron's bilinear rule, NHWC, as a list of
    taps (output index, features index, weight). Bin (i, j) of output channel d reads input
    channel (d * ph + i) * pw + j. Sample positions are computed in `dtype`, like the op."""
    _, height, width, channels = features_shape
    depth = channels // (ph * pw)
    t = np.dtype(dtype).type
    taps = []
    for r in range(rois.shape[0]):
        b = int(rois[r, 0])
        x1, y1, x2, y2 = (t(np.float32(rois[r, k])) * t(np.float32(scale)) for k in (1, 2, 3, 4))
        roi_w, roi_h = max(x2 - x1, t(1)), max(y2 - y1, t(1))
        bin_h, bin_w = roi_h / t(ph), roi_w / t(pw)
        gh = sampling_ratio if sampling_ratio > 0 else int(math.ceil(bin_h))
        gw = sampling_ratio if sampling_ratio > 0 else int(math.ceil(bin_w))
        count = gh * gw
        for i in range(ph):
            for j in range(pw):
                for iy in range(gh):
                    y = y1 + t(i) * bin_h + (t(iy) + t(0.5)) * bin_h / t(gh)
                    for ix in range(gw):
                        x = x1 + t(j) * bin_w + (t(ix) + t(0.5)) * bin_w / t(gw)
                        if y < -1 or y > height or x < -1 or x > width:
                            continue  # reads 0, but still counts in the average
                        yy, xx = max(float(y), 0.0), max(float(x), 0.0)
                        y_lo, x_lo = int(yy), int(xx)
                        if y_lo >= height - 1:
                            y_lo = y_hi = height - 1
                            yy = float(y_lo)
                        else:
                            y_hi = y_lo + 1
                        if x_lo >= width - 1:
                            x_lo = x_hi = width - 1
                            xx = float(x_lo)
                        else:
                            x_hi = x_lo + 1
                        ly, lx = yy - y_lo, xx - x_lo
                        corners = (((y_lo, x_lo), (1 - ly) * (1 - lx)),
                                   ((y_lo, x_hi), (1 - ly) * lx),
                                   ((y_hi, x_lo), ly * (1 - lx)),
                                   ((y_hi, x_hi), ly * lx))
                        for d in range(depth):
                            channel = (d * ph + i) * pw + j
                            for (py, px), weight in corners:
                                taps.append(((r, i, j, d), (b, py, px, channel),
                                             weight / count))
    return taps


def ps_roi_align(features: np.ndarray, rois: np.ndarray, ph: int, pw: int, scale: float,
                 sampling_ratio: int = 2) -> np.ndarray:
    depth = features.shape[3] // (ph * pw)
    out = np.zeros((rois.shape[0], ph, pw, depth), np.float64)
    for o, src, weight in ps_roi_align_taps(features.shape, rois, ph, pw, scale,
                                            sampling_ratio, features.dtype):
        out[o] += weight * float(features[src])
    return out


def ps_roi_align_backward(features: np.ndarray, rois: np.ndarray, d_output: np.ndarray,
                          ph: int, pw: int, scale: float, sampling_ratio: int = 2) -> np.ndarray:
    d_features = np.zeros(features.shape, np.float64)
    for o, src, weight in ps_roi_align_taps(features.shape, rois, ph, pw, scale,
                                            sampling_ratio, features.dtype):
        d_features[src] += weight * float(d_output[o])
    return d_features


def pool_output_size(size: int, k: int, s: int, padding: str) -> tuple[int, int]:
    """(output size, padding before) under tf.nn.max_pool2d's rules."""
    if padding == "VALID":
        return ((size - k) // s + 1 if size >= k else 0), 0
    out = -(-size // s)  # ceil
    pad_total = max((out - 1) * s + k - size, 0) if out > 0 else 0
    return out, pad_total // 2


def median_pool2d(x: np.ndarray, ksize: tuple[int, int], strides: tuple[int, int],
                  padding: str) -> tuple[np.ndarray, np.ndarray]:
    """(y, argmedian): the lower median (rank (n-1)//2 of a stable sort by value, window in
    row-major order) of each window's in-image elements; argmedian is its flat h * W + w."""
    n_img, height, width, channels = x.shape
    out_h, pad_top = pool_output_size(height, ksize[0], strides[0], padding)
    out_w, pad_left = pool_output_size(width, ksize[1], strides[1], padding)
    y = np.zeros((n_img, out_h, out_w, channels), x.dtype)
    arg = np.zeros((n_img, out_h, out_w, channels), np.int64)
    for n, oh, ow, c in np.ndindex(n_img, out_h, out_w, channels):
        h0, w0 = oh * strides[0] - pad_top, ow * strides[1] - pad_left
        positions = [(h, w) for h in range(max(h0, 0), min(h0 + ksize[0], height))
                     for w in range(max(w0, 0), min(w0 + ksize[1], width))]
        values = np.array([x[n, h, w, c] for h, w in positions])
        h, w = positions[np.argsort(values, kind="stable")[(len(values) - 1) // 2]]
        y[n, oh, ow, c] = x[n, h, w, c]
        arg[n, oh, ow, c] = h * width + w
    return y, arg


def median_pool2d_backward(x_shape: tuple[int, ...], argmedian: np.ndarray,
                           dy: np.ndarray) -> np.ndarray:
    width = x_shape[2]
    dx = np.zeros(x_shape, np.float64)
    for n, oh, ow, c in np.ndindex(*argmedian.shape):
        a = argmedian[n, oh, ow, c]
        dx[n, a // width, a % width, c] += dy[n, oh, ow, c]
    return dx
