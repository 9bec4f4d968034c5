"""Keras layers over tf_ext ops (TensorFlow backend; no weights, gradients from C++)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras

from tf_ext import ops


@keras.saving.register_keras_serializable(package="tf_ext")
class GradientReversal(keras.layers.Layer):
    """Identity forward; multiplies the gradient by -scale backward (tf_ext.gradient_reversal)."""

    def __init__(self, scale: float = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scale = float(scale)

    def call(self, inputs: Any) -> Any:
        return ops.gradient_reversal(inputs, scale=self.scale)

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "scale": self.scale}


@keras.saving.register_keras_serializable(package="tf_ext")
class MedianPool2D(keras.layers.Layer):
    """Median pooling of NHWC inputs (tf_ext.median_pool2d)."""

    def __init__(self, pool_size: Sequence[int] = (3, 3), strides: Sequence[int] | None = None,
                 padding: str = "VALID", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pool_size = tuple(int(k) for k in pool_size)
        self.strides = tuple(int(s) for s in (strides or self.pool_size))
        self.padding = padding.upper()

    def call(self, inputs: Any) -> Any:
        return ops.median_pool2d(inputs, self.pool_size, self.strides, self.padding)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "pool_size": self.pool_size, "strides": self.strides,
                "padding": self.padding}


@keras.saving.register_keras_serializable(package="tf_ext")
class RoiPool(keras.layers.Layer):
    """RoI max pooling: call([data, rois]) -> pooled (tf_ext.roi_pool; argmax is dropped).

    rois' batch_index counts images of the same call's data: under model.fit, positions within
    the batch.
    """

    def __init__(self, pooled_height: int, pooled_width: int, spatial_scale: float = 1.0,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pooled_height = int(pooled_height)
        self.pooled_width = int(pooled_width)
        self.spatial_scale = float(spatial_scale)

    def call(self, inputs: Sequence[Any]) -> Any:
        data, rois = inputs
        pooled, _ = ops.roi_pool(data, rois, self.pooled_height, self.pooled_width,
                                 self.spatial_scale)
        return pooled

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "pooled_height": self.pooled_height,
                "pooled_width": self.pooled_width, "spatial_scale": self.spatial_scale}
