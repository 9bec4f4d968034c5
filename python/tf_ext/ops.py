"""Python API of tf_ext's ops: one thin, typed, documented function per op.

Every function only forwards to the generated wrapper of the loaded op library; shapes are
checked by the ops' C++ shape functions and kernels, whose errors start with the op type.
Gradients are the ops' C++ gradients (see tf_ext/grads/manifest.cc), bridged into
tf.GradientTape / tf.gradients by tf_ext._bridge; nothing here computes a gradient. Second
derivatives work for zero_out, sign_ste and gradient_reversal; for roi_pool, ps_roi_align and
median_pool2d (whose gradients are dedicated backward ops) they raise
tf_ext.GradientNotImplementedError.

Layouts are NHWC. `rois` rows are [batch_index, x1, y1, x2, y2] in input-image coordinates,
mapped onto the feature map by `spatial_scale`; batch_index must be an integer in [0, N) and
the coordinates finite. Bad values raise InvalidArgumentError (ValueError while a graph is
built) whose message starts with the op type and names the value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Union

import numpy as np
import tensorflow as tf

from tf_ext import _bridge, _c_api, _loader

TensorLike = Union[tf.Tensor, tf.Variable, np.ndarray, float, int, Sequence[Any]]


# AutoGraph must not convert these thin wrappers (nor the loader they call) when a tf.function
# traces them: they have no tensor-dependent control flow.
_not_converted = tf.autograph.experimental.do_not_convert


class OpNotInLibraryError(NotImplementedError):
    """The loaded op library does not contain the requested op (built from an older tree?)."""


_wrappers: dict[str, Callable[..., Any]] = {}


def _wrapper(op_type: str, python_name: str) -> Callable[..., Any]:
    """op_type's generated wrapper, recorded under an eager GradientTape; made once per op
    (each eager call goes through here)."""
    recorded = _wrappers.get(op_type)
    if recorded is None:
        recorded = _wrappers[op_type] = _make_wrapper(op_type, python_name)
    return recorded


def _make_wrapper(op_type: str, python_name: str) -> Callable[..., Any]:
    fn = getattr(_bridge.library(), python_name, None)  # loaded, gradients bridged
    if fn is None:
        raise OpNotInLibraryError(
            f"{op_type} is not in the loaded op library {_loader.library_path()} (it has "
            f"{', '.join(_loader.op_names())}); rebuild //tf_ext:_tf_ext_ops.so or point "
            f"{_loader.LIBRARY_ENV} at a library that registers {op_type}")

    def recorded(*args: Any, name: str | None = None, **attrs: Any) -> Any:
        # Under an eager GradientTape, kept alive only what the gradient reads (_bridge).
        return _bridge.call_recorded(op_type, fn, args, attrs, name)

    return recorded


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
    """Max-pools each region of interest into a fixed pooled_height x pooled_width grid
    (Fast R-CNN / Caffe RoI pooling).

    Each ROI corner is scaled by `spatial_scale` and rounded to a whole pixel (halves away
    from zero); the ROI spans the pixels x1..x2, y1..y2 inclusive (at least one). Bin (i, j)
    covers rows [floor(i * roi_h / pooled_height), ceil((i + 1) * roi_h / pooled_height))
    from y1 and likewise columns, clipped to the image, and takes each channel's maximum.

    Args:
      data: [N, H, W, C] feature maps, float16, float32 or float64 (float16 is computed in
        float32 and rounded once).
      rois: [R, 5] float32 regions [batch_index, x1, y1, x2, y2].
      pooled_height, pooled_width: output grid size, >= 1.
      spatial_scale: feature-map size / input-image size (e.g. 1/16), > 0.
      name: op name.

    Returns:
      (pooled, argmax), both [R, pooled_height, pooled_width, C]: pooled has data's dtype;
      argmax (int32) is the flat position h * W + w of each maximum within its ROI's image
      (data[batch_index, h, w, c]), the first in row-major order on ties. A bin outside the
      image is empty: pooled 0, argmax -1.

    Gradient: d(data) scatter-adds d(pooled) at the argmax positions (empty bins add
    nothing); rois and argmax are not differentiable.
    """
    pooled, argmax = _wrapper("TfExt>RoiPool", "tf_ext_roi_pool")(
        data, rois, pooled_height=pooled_height, pooled_width=pooled_width,
        spatial_scale=spatial_scale, name=name)
    return pooled, argmax


@_not_converted
def median_pool2d(x: TensorLike, ksize: Sequence[int], strides: Sequence[int],
                  padding: str, name: str | None = None) -> tf.Tensor:
    """2-D median pooling over each channel.

    Each output is the lower median of its window's in-image elements (padding never counts):
    the element of rank (n - 1) // 2 when the n elements are sorted stably by value, the
    window read in row-major order (so equal values keep that order; NaN sorts last). An
    even count thus gives the lower of the two middle values; the output is always one of
    the inputs.

    Args:
      x: [N, H, W, C], float16, float32 or float64 (float16 is computed in float32 and
        rounded once).
      ksize: [window_height, window_width], each >= 1.
      strides: [stride_height, stride_width], each >= 1.
      padding: "SAME" or "VALID"; output sizes as for tf.nn.max_pool2d (VALID with a window
        larger than the image gives a size of 0).
      name: op name.

    Returns:
      [N, out_height, out_width, C], x's dtype.

    Gradient: each window's d(output) goes to exactly the element picked above (with ties,
    the one of that rank in the stable order), summed over overlapping windows.
    """
    return _wrapper("TfExt>MedianPool2D", "tf_ext_median_pool2d")(
        x, ksize=list(ksize), strides=list(strides), padding=padding, name=name)


@_not_converted
def sign_ste(x: TensorLike, clip: float = 1.0, name: str | None = None) -> tf.Tensor:
    """sign(x) with a straight-through gradient estimator.

    Args:
      x: any shape, float16, float32 or float64.
      clip: half-width of the band in which the gradient passes; finite, >= 0 (a float32
        attr).
      name: op name.

    Returns:
      sign(x) like tf.sign: -1, 0 or 1 (a zero keeps its sign bit; NaN stays NaN), same shape
      and dtype.

    Gradient: d(x) = d(y) where |x| <= clip (inclusive), 0 elsewhere and at NaN.
    """
    return _wrapper("TfExt>SignSTE", "tf_ext_sign_ste")(x, clip=clip, name=name)


@_not_converted
def gradient_reversal(x: TensorLike, scale: float = 1.0, name: str | None = None) -> tf.Tensor:
    """Identity forward, scaled and negated gradient backward (domain-adversarial training).

    Args:
      x: any shape, float16, float32 or float64.
      scale: gradient multiplier; finite (a float32 attr, so 0.3 means float32(0.3)).
      name: op name.

    Returns:
      x unchanged (the output shares x's buffer).

    Gradient: d(x) = -scale * d(y).
    """
    return _wrapper("TfExt>GradientReversal", "tf_ext_gradient_reversal")(
        x, scale=scale, name=name)


@_not_converted
def ps_roi_align(features: TensorLike, rois: TensorLike, pooled_height: int,
                 pooled_width: int, spatial_scale: float = 1.0, sampling_ratio: int = 2,
                 name: str | None = None) -> tf.Tensor:
    """Position-sensitive RoI Align (R-FCN, with Detectron's bilinear sampling): bin (i, j)
    of output channel d averages bilinear samples of input channel
    (d * pooled_height + i) * pooled_width + j. So C = D * pooled_height * pooled_width is
    laid out output-channel-major: each output channel owns a block of pooled_height *
    pooled_width consecutive input channels, one per bin in row-major bin order.

    The ROI is scaled by `spatial_scale` without rounding, at least 1 x 1; each bin averages
    grid_h x grid_w samples at the centres of a regular grid over it. A sample with y < -1,
    y > H, x < -1 or x > W reads 0 but still counts in the average.

    Args:
      features: [N, H, W, D * pooled_height * pooled_width], float16, float32 or float64
        (float16 is computed in float32 and rounded once).
      rois: [R, 5] float32 regions [batch_index, x1, y1, x2, y2].
      pooled_height, pooled_width: output grid size, >= 1.
      spatial_scale: feature-map size / input-image size, > 0.
      sampling_ratio: samples per bin and axis (grid_h = grid_w = sampling_ratio); 0 =
        adaptive, ceil(bin size) per ROI and axis.
      name: op name.

    Returns:
      [R, pooled_height, pooled_width, D], features' dtype.

    Gradient: d(features) spreads each bin's d(output) back over its samples with the same
    bilinear weights / (grid_h * grid_w); rois are not differentiable.
    """
    return _wrapper("TfExt>PsRoiAlign", "tf_ext_ps_roi_align")(
        features, rois, pooled_height=pooled_height, pooled_width=pooled_width,
        spatial_scale=spatial_scale, sampling_ratio=sampling_ratio, name=name)


# ---- Ops without a hand-written function above: generated from their declaration ----
# (tf_ext/grads/manifest.h: .Python("name") and .Doc(...)), on first access, so a new op is
# usable from Python with no Python edit. A hand-written function (above) wins.

_generated: dict[str, Callable[..., Any]] = {}


def _python_name_to_generated(op_type: str) -> str:
    # tf.load_op_library's wrapper name: "TfExt>SmoothL1" -> "tf_ext_smooth_l1".
    import re
    name = op_type.replace(">", "_")
    # TensorFlow's rule: "_" before a capital after a lower-case letter ("2D" stays "2d").
    name = re.sub(r"([a-z])([A-Z])", r"\1_\2", name)
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return name.lower()


def declared_ops() -> list[dict[str, Any]]:
    """Every op the loaded library declares (its manifest): op type, one-line doc, Python
    function name, differentiability, gradient rule, differentiable types, non-differentiable
    inputs, ... (see tf_ext/grads/manifest.h)."""
    return _c_api.manifest()


def _make_generated(facts: dict[str, Any]) -> Callable[..., Any]:
    op_type, python_name = facts["op"], facts["python"]

    @_not_converted
    def op_function(*args: Any, **kwargs: Any) -> Any:
        return _wrapper(op_type, _python_name_to_generated(op_type))(*args, **kwargs)

    generated = getattr(_bridge.library(), _python_name_to_generated(op_type), None)
    details = (generated.__doc__ or "").strip() if generated is not None else ""
    op_function.__name__ = op_function.__qualname__ = python_name
    op_function.__module__ = __name__
    op_function.__doc__ = (
        f"{facts['doc']}\n\n"
        f"{op_type}, called with its inputs (positional) and attrs (keywords); generated from "
        f"the op's declaration.\n\nGradient: {facts['rule']}.\n\n{details}").rstrip()
    return op_function


def generated_names() -> list[str]:
    """Python names of the declared ops that have no hand-written function (loads the library)."""
    return sorted(f["python"] for f in _c_api.manifest()
                  if f["python"] and f["python"] not in globals())


def __getattr__(name: str) -> Any:  # PEP 562: generated functions, on first access
    if name.startswith("_"):
        raise AttributeError(name)
    if name not in _generated:
        for facts in _c_api.manifest():
            if facts["python"] == name:
                _generated[name] = _make_generated(facts)
                break
        else:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _generated[name]
