"""Keras layers over tf_ext ops (TensorFlow backend; no weights, gradients from C++).

They follow Keras's conventions: sizes are an int or a tuple, `padding` is "valid" or "same"
in any case, `data_format` is "channels_last" or "channels_first" (default: Keras's
`image_data_format()`, "channels_last" unless configured). The ops themselves are NHWC only:
channels_first inputs are transposed to NHWC, pooled, and the result transposed back. Each
layer's `supports_jit` is true when the op library's XLA kernels are registered (always, but
for a library that failed to register them: tf_ext.xla_status() says why), so Keras's
jit_compile="auto" compiles models with these layers with XLA where it compiles others.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

from tf_ext import _bridge, ops

_TO_NHWC = (0, 2, 3, 1)
_TO_NCHW = (0, 3, 1, 2)


def _pair(value: int | Sequence[int], name: str) -> tuple[int, int]:
    """An int n as (n, n), or a sequence of two ints; each >= 1 (ValueError otherwise)."""
    items = [value] if isinstance(value, numbers.Integral) else value
    try:
        items = list(items)
    except TypeError:
        items = []
    if len(items) == 1:
        items = items * 2
    if len(items) != 2 or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool)
                                  and v >= 1 for v in items):
        raise ValueError(f"`{name}` must be an int or a tuple of 2 ints, each >= 1; "
                         f"received {name}={value!r}")
    return int(items[0]), int(items[1])


def _padding(value: str) -> str:
    padding = value.lower() if isinstance(value, str) else value
    if padding not in ("valid", "same"):
        raise ValueError(f'`padding` must be "valid" or "same" (any case); '
                         f"received padding={value!r}")
    return padding


def _data_format(value: str | None) -> str:
    data_format = keras.config.image_data_format() if value is None else value
    data_format = data_format.lower() if isinstance(data_format, str) else data_format
    if data_format not in ("channels_last", "channels_first"):
        raise ValueError(f'`data_format` must be "channels_last" or "channels_first"; '
                         f"received data_format={value!r}")
    return data_format


def _pooled_size(size: int | None, window: int, stride: int, padding: str) -> int | None:
    """Output length of a pooled axis, as tf.nn.max_pool2d (VALID with a window larger than
    the input gives 0)."""
    if size is None:
        return None
    if padding == "same":
        return -(-size // stride)
    return max(0, -(-(size - window + 1) // stride))


@keras.saving.register_keras_serializable(package="tf_ext")
class GradientReversal(keras.layers.Layer):
    """Identity forward; multiplies the gradient by -scale backward
    (tf_ext.gradient_reversal), for domain-adversarial training.

    Args:
        scale: float, the gradient multiplier (finite). Defaults to 1.0.
        **kwargs: base layer keyword arguments, such as `name` and `dtype`.

    Input shape:
        Any shape.

    Output shape:
        The input's shape.
    """

    def __init__(self, scale: float = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.supports_jit = not _bridge.xla_status()
        self.scale = float(scale)

    def call(self, inputs: Any) -> Any:
        return ops.gradient_reversal(inputs, scale=self.scale)

    def compute_output_shape(self, input_shape: Any) -> Any:
        return tuple(input_shape)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "scale": self.scale}


@keras.saving.register_keras_serializable(package="tf_ext")
class MedianPool2D(keras.layers.Layer):
    """Median pooling over 2-D windows of each channel (tf_ext.median_pool2d): each output
    is the lower median of its window's in-image elements (padding never counts).

    Args:
        pool_size: int or tuple of 2 ints, the window (height, width); an int n means
            (n, n). Defaults to (3, 3).
        strides: int or tuple of 2 ints, or None (= pool_size).
        padding: "valid" or "same" (case-insensitive); output sizes as for
            keras.layers.MaxPooling2D.
        data_format: "channels_last" (inputs (batch, height, width, channels)) or
            "channels_first" (inputs (batch, channels, height, width), transposed to
            channels_last for the op and back). Defaults to Keras's image_data_format().
        **kwargs: base layer keyword arguments, such as `name` and `dtype`.

    Input shape:
        - If `data_format="channels_last"`: 4D tensor `(batch, height, width, channels)`.
        - If `data_format="channels_first"`: 4D tensor `(batch, channels, height, width)`.
        float16, float32 or float64.

    Output shape:
        - If `data_format="channels_last"`:
            `(batch, pooled_height, pooled_width, channels)`.
        - If `data_format="channels_first"`:
            `(batch, channels, pooled_height, pooled_width)`.
        With "valid" padding pooled = floor((size - pool) / stride) + 1 (0 if the window
        is larger than the input); with "same" padding pooled = ceil(size / stride).
    """

    def __init__(self, pool_size: int | Sequence[int] = (3, 3),
                 strides: int | Sequence[int] | None = None, padding: str = "valid",
                 data_format: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.supports_jit = not _bridge.xla_status()
        self.pool_size = _pair(pool_size, "pool_size")
        self.strides = self.pool_size if strides is None else _pair(strides, "strides")
        self.padding = _padding(padding)
        self.data_format = _data_format(data_format)
        self.input_spec = keras.layers.InputSpec(ndim=4)

    def call(self, inputs: Any) -> Any:
        x = inputs
        if self.data_format == "channels_first":
            x = tf.transpose(x, _TO_NHWC)
        y = ops.median_pool2d(x, self.pool_size, self.strides, self.padding.upper())
        if self.data_format == "channels_first":
            y = tf.transpose(y, _TO_NCHW)
        return y

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        shape = tuple(input_shape)
        if self.data_format == "channels_first":
            batch, channels, height, width = shape
        else:
            batch, height, width, channels = shape
        height = _pooled_size(height, self.pool_size[0], self.strides[0], self.padding)
        width = _pooled_size(width, self.pool_size[1], self.strides[1], self.padding)
        if self.data_format == "channels_first":
            return (batch, channels, height, width)
        return (batch, height, width, channels)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "pool_size": self.pool_size, "strides": self.strides,
                "padding": self.padding, "data_format": self.data_format}


@keras.saving.register_keras_serializable(package="tf_ext")
class RoiPool(keras.layers.Layer):
    """RoI max pooling: call([data, rois]) -> pooled (tf_ext.roi_pool; argmax is dropped).

    rois' batch_index counts images of the same call's data: under model.fit, positions within
    the batch.

    Args:
        pooled_height: int, the output grid's height; or, with pooled_width None, an int n
            for an (n, n) grid or a tuple (pooled_height, pooled_width).
        pooled_width: int or None (see pooled_height).
        spatial_scale: float > 0, feature-map size / input-image size (e.g. 1/16), mapping
            the ROI coordinates onto `data`. Defaults to 1.0.
        data_format: "channels_last" or "channels_first" for `data` and the output
            ("channels_first" transposes to channels_last for the op and back). Defaults to
            Keras's image_data_format().
        **kwargs: base layer keyword arguments, such as `name` and `dtype`.

    Input shape:
        A list of two tensors:
        - data: if `data_format="channels_last"` `(batch, height, width, channels)`, if
          "channels_first" `(batch, channels, height, width)`; float16, float32 or float64.
        - rois: `(num_rois, 5)` float32 rows [batch_index, x1, y1, x2, y2] in input-image
          coordinates.

    Output shape:
        - If `data_format="channels_last"`:
            `(num_rois, pooled_height, pooled_width, channels)`.
        - If `data_format="channels_first"`:
            `(num_rois, channels, pooled_height, pooled_width)`.
    """

    def __init__(self, pooled_height: int | Sequence[int], pooled_width: int | None = None,
                 spatial_scale: float = 1.0, data_format: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.supports_jit = not _bridge.xla_status()
        size = pooled_height if pooled_width is None else (pooled_height, pooled_width)
        self.pooled_height, self.pooled_width = _pair(size, "pooled size")
        self.spatial_scale = float(spatial_scale)
        self.data_format = _data_format(data_format)
        self.input_spec = [keras.layers.InputSpec(ndim=4), keras.layers.InputSpec(ndim=2)]

    def call(self, inputs: Sequence[Any]) -> Any:
        data, rois = inputs
        if self.data_format == "channels_first":
            data = tf.transpose(data, _TO_NHWC)
        pooled, _ = ops.roi_pool(data, rois, self.pooled_height, self.pooled_width,
                                 self.spatial_scale)
        if self.data_format == "channels_first":
            pooled = tf.transpose(pooled, _TO_NCHW)
        return pooled

    def compute_output_shape(self, input_shape: Sequence[Any]) -> tuple[int | None, ...]:
        data_shape, rois_shape = input_shape
        num_rois = tuple(rois_shape)[0]
        if self.data_format == "channels_first":
            return (num_rois, tuple(data_shape)[1], self.pooled_height, self.pooled_width)
        return (num_rois, self.pooled_height, self.pooled_width, tuple(data_shape)[3])

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "pooled_height": self.pooled_height,
                "pooled_width": self.pooled_width, "spatial_scale": self.spatial_scale,
                "data_format": self.data_format}
