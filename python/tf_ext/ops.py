"""Python API of tf_ext's ops: one thin, typed, documented function per op.

Every function only forwards to the generated wrapper of the loaded op library; shapes are
checked by the ops' C++ shape functions and kernels, whose errors start with the op type.
Gradients are the ops' C++ gradients (see tf_ext/grads/manifest.cc), bridged into
tf.GradientTape / tf.gradients by tf_ext._bridge; nothing here computes a gradient.

Layouts are NHWC. `rois` rows are [batch_index, x1, y1, x2, y2] in input-image coordinates,
mapped onto the feature map by `spatial_scale`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Union

import numpy as np
import tensorflow as tf

from tf_ext import _loader

TensorLike = Union[tf.Tensor, tf.Variable, np.ndarray, float, int, Sequence[Any]]


# AutoGraph must not convert these thin wrappers (nor the loader they call) when a tf.function
# traces them: they have no tensor-dependent control flow.
_not_converted = tf.autograph.experimental.do_not_convert


class OpNotInLibraryError(NotImplementedError):
    """The loaded op library does not contain the requested op (built from an older tree?)."""


def _wrapper(op_type: str, python_name: str) -> Callable[..., Any]:
    fn = getattr(_loader.library(), python_name, None)
    if fn is None:
        raise OpNotInLibraryError(
            f"{op_type} is not in the loaded op library {_loader.library_path()} (it has "
            f"{', '.join(_loader.op_names())}); rebuild //tf_ext:_tf_ext_ops.so or point "
            f"{_loader.LIBRARY_ENV} at a library that registers {op_type}")
    return fn


@_not_converted
def zero_out(to_zero: TensorLike, preserve_index: int = 0, name: str | None = None) -> tf.Tensor:
    """Zeroes every element except the one at flat (row-major) index `preserve_index`.

    Args:
      to_zero: float32, float64 or int32, any shape with more than `preserve_index` elements.
      preserve_index: int >= 0.
      name: op name.

    Returns:
      `zeroed`, same shape and dtype as `to_zero`.

    Gradient (float types): d(to_zero) = zero_out(d(zeroed), preserve_index), i.e. only the
    preserved element receives its incoming gradient. int32 has no gradient.
    """
    return _wrapper("TfExt>ZeroOut", "tf_ext_zero_out")(
        to_zero, preserve_index=preserve_index, name=name)


@_not_converted
def roi_pool(data: TensorLike, rois: TensorLike, pooled_height: int, pooled_width: int,
             spatial_scale: float = 1.0,
             name: str | None = None) -> tuple[tf.Tensor, tf.Tensor]:
    """Max-pools each region of interest into a fixed pooled_height x pooled_width grid.

    Args:
      data: [N, H, W, C] feature maps, floating point.
      rois: [R, 5] float32 regions [batch_index, x1, y1, x2, y2].
      pooled_height, pooled_width: output grid size, >= 1.
      spatial_scale: feature-map size / input-image size (e.g. 1/16).
      name: op name.

    Returns:
      (pooled, argmax): pooled [R, pooled_height, pooled_width, C] with data's dtype, and
      argmax (int32, same shape) locating each bin's maximum in `data`.

    Gradient: d(data) scatters d(pooled) to the argmax positions (empty bins give nothing);
    rois and argmax are not differentiable.
    """
    pooled, argmax = _wrapper("TfExt>RoiPool", "tf_ext_roi_pool")(
        data, rois, pooled_height=pooled_height, pooled_width=pooled_width,
        spatial_scale=spatial_scale, name=name)
    return pooled, argmax


@_not_converted
def median_pool2d(x: TensorLike, ksize: Sequence[int], strides: Sequence[int],
                  padding: str, name: str | None = None) -> tf.Tensor:
    """2-D median pooling over each channel.

    Args:
      x: [N, H, W, C], floating point.
      ksize: [window_height, window_width].
      strides: [stride_height, stride_width].
      padding: "SAME" or "VALID", as for tf.nn.max_pool2d.
      name: op name.

    Returns:
      [N, out_height, out_width, C], x's dtype.

    Gradient: each window's d(output) goes to the input element that was its median.
    """
    return _wrapper("TfExt>MedianPool2D", "tf_ext_median_pool2d")(
        x, ksize=list(ksize), strides=list(strides), padding=padding, name=name)


@_not_converted
def sign_ste(x: TensorLike, clip: float = 1.0, name: str | None = None) -> tf.Tensor:
    """sign(x) with a straight-through gradient estimator.

    Args:
      x: any shape, floating point.
      clip: half-width of the band in which the gradient passes.
      name: op name.

    Returns:
      sign(x), same shape and dtype.

    Gradient: d(x) = d(y) where |x| <= clip, 0 elsewhere.
    """
    return _wrapper("TfExt>SignSTE", "tf_ext_sign_ste")(x, clip=clip, name=name)


@_not_converted
def gradient_reversal(x: TensorLike, scale: float = 1.0, name: str | None = None) -> tf.Tensor:
    """Identity forward, scaled and negated gradient backward (domain-adversarial training).

    Args:
      x: any shape, floating point.
      scale: gradient multiplier.
      name: op name.

    Returns:
      x unchanged.

    Gradient: d(x) = -scale * d(y).
    """
    return _wrapper("TfExt>GradientReversal", "tf_ext_gradient_reversal")(
        x, scale=scale, name=name)


@_not_converted
def ps_roi_align(features: TensorLike, rois: TensorLike, pooled_height: int,
                 pooled_width: int, spatial_scale: float = 1.0, sampling_ratio: int = 2,
                 name: str | None = None) -> tf.Tensor:
    """Position-sensitive RoI Align (R-FCN): bin (i, j) of each region averages bilinear
    samples from its own group of channels.

    Args:
      features: [N, H, W, C] with C a multiple of pooled_height * pooled_width, floating point.
      rois: [R, 5] float32 regions [batch_index, x1, y1, x2, y2].
      pooled_height, pooled_width: output grid size, >= 1.
      spatial_scale: feature-map size / input-image size.
      sampling_ratio: bilinear samples per bin side; 0 = adaptive (ceil(bin size)).
      name: op name.

    Returns:
      [R, pooled_height, pooled_width, C / (pooled_height * pooled_width)], features' dtype.

    Gradient: d(features) spreads each bin's d(output) back over its samples with the same
    bilinear weights; rois are not differentiable.
    """
    return _wrapper("TfExt>PsRoiAlign", "tf_ext_ps_roi_align")(
        features, rois, pooled_height=pooled_height, pooled_width=pooled_width,
        spatial_scale=spatial_scale, sampling_ratio=sampling_ratio, name=name)
