"""tf_ext.layers in Keras models trained with model.fit: the C++ gradients drive training in
the expected direction; the layers save and load."""

from __future__ import annotations

import json
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

import numpy_refs as ref
import tf_ext
from tf_ext import layers


def dense(units: int, seed: int, name: str, trainable: bool = True) -> keras.layers.Dense:
    return keras.layers.Dense(units, name=name, trainable=trainable,
                              kernel_initializer=keras.initializers.RandomNormal(seed=seed),
                              bias_initializer=keras.initializers.RandomNormal(seed=seed + 1))


def regression_data(n: int = 16) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    return x, (x @ np.array([[1.0], [-2.0], [0.5], [1.5]], np.float32)).astype(np.float32)


def reversal_model(scale: float | None, post_trainable: bool = True) -> keras.Model:
    """x -> pre -> [GradientReversal(scale)] -> post; the same initial weights either way."""
    inputs = keras.Input((4,))
    h = dense(3, 1, "pre")(inputs)
    if scale is not None:
        h = layers.GradientReversal(scale)(h)
    model = keras.Model(inputs, dense(1, 3, "post", post_trainable)(h))
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    return model


def weights(model: keras.Model, layer: str) -> list[np.ndarray]:
    return [np.array(w) for w in model.get_layer(layer).get_weights()]


def test_gradient_reversal_reverses_the_update_before_it():
    """One full-batch SGD step: the layer before the reversal moves by -scale times what it
    moves without it; the layer after moves the same (the forward is the identity)."""
    x, y = regression_data()
    scale = 0.5
    deltas = {}
    for name, s in (("plain", None), ("reversed", scale)):
        model = reversal_model(s)
        before = {layer: weights(model, layer) for layer in ("pre", "post")}
        model.fit(x, y, batch_size=len(x), epochs=1, shuffle=False, verbose=0)
        deltas[name] = {layer: [a - b for a, b in zip(weights(model, layer), before[layer])]
                        for layer in ("pre", "post")}
    for plain, reversed_ in zip(deltas["plain"]["pre"], deltas["reversed"]["pre"]):
        assert np.abs(plain).max() > 1e-4  # the step did move the weights
        np.testing.assert_allclose(reversed_, -scale * plain, rtol=1e-4, atol=1e-7)
    for plain, reversed_ in zip(deltas["plain"]["post"], deltas["reversed"]["post"]):
        np.testing.assert_allclose(reversed_, plain, rtol=1e-5, atol=1e-7)


def test_gradient_reversal_ascends_the_loss_before_it():
    """With the head frozen, training only the layer before a reversal increases the loss
    (gradient ascent), while without the reversal the loss decreases."""
    x, y = regression_data()
    losses = {}
    for name, s in (("plain", None), ("reversed", 1.0)):
        model = reversal_model(s, post_trainable=False)
        history = model.fit(x, y, batch_size=len(x), epochs=4, shuffle=False, verbose=0)
        losses[name] = history.history["loss"]
    assert all(a > b for a, b in zip(losses["plain"], losses["plain"][1:])), losses
    assert all(a < b for a, b in zip(losses["reversed"], losses["reversed"][1:])), losses
    assert losses["plain"][0] == pytest.approx(losses["reversed"][0], rel=1e-6)


def conv(seed: int) -> keras.layers.Conv2D:
    return keras.layers.Conv2D(2, 3, padding="same", name="conv",
                               kernel_initializer=keras.initializers.RandomNormal(seed=seed))


def train_and_check(model: keras.Model, inputs, y: np.ndarray, batch_size: int) -> None:
    """Trains a few epochs: the loss decreases every epoch and the conv layer below the tf_ext layer
    learned (its gradient came through the tf_ext op's C++ gradient)."""
    model.compile(optimizer=keras.optimizers.SGD(0.02), loss="mse")
    conv_before = weights(model, "conv")[0]
    history = model.fit(inputs, y, batch_size=batch_size, epochs=5, shuffle=False, verbose=0)
    losses = history.history["loss"]
    assert np.isfinite(losses).all(), losses
    assert all(a > b for a, b in zip(losses, losses[1:])), losses
    conv_after = weights(model, "conv")[0]
    assert np.isfinite(conv_after).all() and np.abs(conv_after - conv_before).max() > 1e-4


def test_median_pool_model_fit(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(16, 6, 6, 1)).astype(np.float32)
    y = x.reshape(16, -1).mean(axis=1, keepdims=True) * 4
    inputs = keras.Input((6, 6, 1))
    pooled = layers.MedianPool2D((3, 3), strides=(1, 1), padding="same", name="median")(
        conv(1)(inputs))
    model = keras.Model(inputs, dense(1, 2, "head")(keras.layers.Flatten()(pooled)))
    assert model.get_layer("median").output.shape == (None, 6, 6, 2)
    train_and_check(model, x, y, batch_size=8)

    # The layer computes the op: the numpy median of the conv output.
    features = keras.Model(inputs, [model.get_layer("conv").output, pooled])
    conv_out, pooled_out = (np.asarray(t) for t in features(x[:2]))
    want, _ = ref.median_pool2d(conv_out, (3, 3), (1, 1), "SAME")
    np.testing.assert_array_equal(pooled_out, want)

    path = str(tmp_path / "median.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded.get_layer("median"), layers.MedianPool2D)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))


def test_roi_pool_model_fit():
    """Per batch of 4 images, ROI k pools from image k % 4 (batch_index counts within the
    batch that fit feeds)."""
    rng = np.random.default_rng(2)
    images = rng.normal(size=(8, 8, 8, 1)).astype(np.float32)
    rois = np.zeros((8, 5), np.float32)
    rois[:, 0] = np.arange(8) % 4
    rois[:, 1:3] = rng.uniform(0, 3, (8, 2))
    rois[:, 3:5] = rois[:, 1:3] + rng.uniform(2, 4, (8, 2))
    y = rng.normal(size=(8, 1)).astype(np.float32)
    data_in, rois_in = keras.Input((8, 8, 1)), keras.Input((5,))
    pooled = layers.RoiPool(2, 2, name="roi_pool")([conv(3)(data_in), rois_in])
    model = keras.Model([data_in, rois_in],
                        dense(1, 4, "head")(keras.layers.Flatten()(pooled)))
    assert model.get_layer("roi_pool").output.shape == (None, 2, 2, 2)
    train_and_check(model, [images, rois], y, batch_size=4)


def distinct(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """float32 values without ties (a median or max then has one answer)."""
    n = int(np.prod(shape))
    return np.random.default_rng(seed).permutation(n).astype(np.float32).reshape(shape) / n


def make_rois(num_images: int, size: int, count: int = 5, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rois = np.zeros((count, 5), np.float32)
    rois[:, 0] = np.arange(count) % num_images
    rois[:, 1:3] = rng.uniform(0, size / 2, (count, 2))
    rois[:, 3:5] = rois[:, 1:3] + rng.uniform(1, size / 2, (count, 2))
    return rois


def test_int_sizes_mean_square_windows():
    assert layers.MedianPool2D(3).pool_size == (3, 3)
    assert layers.MedianPool2D(3).strides == (3, 3)
    assert layers.MedianPool2D(3, 2).strides == (2, 2)
    assert layers.MedianPool2D([2, 3], np.int64(1)).get_config()["strides"] == (1, 1)
    assert (layers.RoiPool(7).pooled_height, layers.RoiPool(7).pooled_width) == (7, 7)
    assert (layers.RoiPool((7, 5)).pooled_height, layers.RoiPool((7, 5)).pooled_width) == (7, 5)
    x = distinct((2, 7, 6, 3))
    np.testing.assert_array_equal(layers.MedianPool2D(3, 2, "same")(x),
                                  layers.MedianPool2D((3, 3), (2, 2), "same")(x))


@pytest.mark.parametrize("padding", ["same", "SAME", "Valid", "valid"])
def test_padding_is_case_insensitive(padding):
    layer = layers.MedianPool2D(2, padding=padding)
    assert layer.padding == padding.lower()
    x = distinct((1, 5, 5, 1))
    want, _ = ref.median_pool2d(x, (2, 2), (2, 2), padding.upper())
    np.testing.assert_array_equal(layer(x), want)


@pytest.mark.parametrize("kwargs, message", [
    ({"padding": "full"}, "padding='full'"),
    ({"padding": "causal"}, "padding='causal'"),
    ({"padding": None}, "padding=None"),
    ({"data_format": "NHWC"}, "data_format='NHWC'"),
    ({"pool_size": 0}, "pool_size=0"),
    ({"pool_size": (2, 2, 2)}, r"pool_size=\(2, 2, 2\)"),
    ({"pool_size": "3"}, "pool_size='3'"),
    ({"pool_size": 2.5}, "pool_size=2.5"),
    ({"strides": (1, -1)}, r"strides=\(1, -1\)"),
])
def test_median_pool_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        layers.MedianPool2D(**kwargs)


def test_roi_pool_rejects_bad_arguments():
    with pytest.raises(ValueError, match="data_format='nchw'"):
        layers.RoiPool(2, data_format="nchw")
    with pytest.raises(ValueError, match="pooled size"):
        layers.RoiPool(0, 2)


MEDIAN_CASES = [
    # (input shape NHWC, pool_size, strides, padding)
    ((2, 7, 6, 3), 3, None, "valid"),
    ((2, 7, 6, 3), (3, 2), (2, 1), "same"),
    ((1, 5, 9, 2), (2, 4), (3, 2), "valid"),
    ((1, 5, 9, 2), (2, 4), (3, 2), "SAME"),
    ((1, 2, 3, 1), (3, 4), 1, "valid"),  # window larger than the image: 0 x 0
    ((1, 2, 3, 1), (5, 6), 1, "valid"),  # ... by more than a stride
    ((3, 1, 1, 4), 2, 1, "same"),
]


@pytest.mark.parametrize("shape, pool_size, strides, padding", MEDIAN_CASES)
@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
def test_median_pool_output_shape_matches_call(shape, pool_size, strides, padding,
                                               data_format):
    if data_format == "channels_first":
        shape = (shape[0], shape[3], shape[1], shape[2])
    layer = layers.MedianPool2D(pool_size, strides, padding, data_format=data_format)
    x = distinct(shape)
    assert layer.compute_output_shape(shape) == tuple(layer(x).shape)
    symbolic = layer(keras.Input(shape[1:]))
    assert tuple(symbolic.shape) == layer.compute_output_shape((None,) + shape[1:])
    assert layer.compute_output_shape((None, None, None, None)) == (None,) * 4


@pytest.mark.parametrize("shape, pool_size, strides, padding", MEDIAN_CASES)
def test_median_pool_channels_first_is_channels_last_transposed(shape, pool_size, strides,
                                                               padding):
    x = distinct(shape)  # NHWC
    last = layers.MedianPool2D(pool_size, strides, padding, data_format="channels_last")(x)
    first = layers.MedianPool2D(pool_size, strides, padding, data_format="channels_first")(
        x.transpose(0, 3, 1, 2))
    np.testing.assert_array_equal(np.asarray(first), np.asarray(last).transpose(0, 3, 1, 2))


def test_data_format_defaults_to_keras_image_data_format():
    assert layers.MedianPool2D().data_format == keras.config.image_data_format()
    assert layers.RoiPool(2).data_format == keras.config.image_data_format()
    assert layers.MedianPool2D(data_format="Channels_First").data_format == "channels_first"


@pytest.mark.parametrize("pooled", [(2, 2), (3, 1), (1, 4)])
@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
def test_roi_pool_output_shape_matches_call(pooled, data_format):
    data, rois = distinct((2, 9, 8, 3)), make_rois(2, 8)
    if data_format == "channels_first":
        data = data.transpose(0, 3, 1, 2)
    layer = layers.RoiPool(*pooled, spatial_scale=0.5, data_format=data_format)
    assert layer.compute_output_shape([data.shape, rois.shape]) == tuple(
        layer([data, rois]).shape)
    symbolic = layer([keras.Input(data.shape[1:]), keras.Input((5,))])
    assert tuple(symbolic.shape) == layer.compute_output_shape(
        [(None,) + data.shape[1:], (None, 5)])


def test_roi_pool_channels_first_is_channels_last_transposed():
    data, rois = distinct((2, 9, 8, 3)), make_rois(2, 8)
    last = layers.RoiPool(3, 2, data_format="channels_last")([data, rois])
    first = layers.RoiPool(3, 2, data_format="channels_first")(
        [data.transpose(0, 3, 1, 2), rois])
    want, _ = ref.roi_pool(data, rois, 3, 2, 1.0)
    np.testing.assert_array_equal(np.asarray(last), want)
    np.testing.assert_array_equal(np.asarray(first), want.transpose(0, 3, 1, 2))


def test_gradient_reversal_output_shape_matches_call():
    layer = layers.GradientReversal(0.5)
    x = distinct((2, 3, 4))
    assert layer.compute_output_shape(x.shape) == tuple(layer(x).shape) == (2, 3, 4)


LAYERS = [
    layers.GradientReversal(0.25),
    layers.MedianPool2D((2, 3), (1, 2), "same"),
    layers.MedianPool2D(3, padding="VALID", data_format="channels_first"),
    layers.RoiPool(3, 2, 0.0625),
    layers.RoiPool((2, 3), spatial_scale=0.5, data_format="channels_first"),
]
LAYER_IDS = [f"{type(l).__name__}-{getattr(l, 'data_format', '')}-{i}"
             for i, l in enumerate(LAYERS)]


@pytest.mark.parametrize("layer", LAYERS, ids=LAYER_IDS)
def test_config_round_trip(layer):
    config = layer.get_config()
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    serialized = keras.saving.serialize_keras_object(layer)
    assert serialized["registered_name"] == f"tf_ext>{type(layer).__name__}"
    # Through JSON, as in a saved model: tuples come back as lists.
    restored = keras.saving.deserialize_keras_object(json.loads(json.dumps(serialized)))
    assert type(restored) is type(layer)
    assert restored.get_config() == config


def model_and_inputs(layer: keras.layers.Layer) -> tuple[keras.Model, Any]:
    """A model conv -> layer (so it has weights to save) and inputs for it."""
    channels_first = getattr(layer, "data_format", None) == "channels_first"
    image = (3, 9, 8) if channels_first else (9, 8, 3)
    data_in = keras.Input(image)
    conv = keras.layers.Conv2D(3, 3, padding="same", name="conv",
                               data_format="channels_first" if channels_first else None,
                               kernel_initializer=keras.initializers.RandomNormal(seed=5))
    h = conv(data_in)
    data = distinct((2,) + image, seed=1)
    if isinstance(layer, layers.RoiPool):
        rois_in = keras.Input((5,))
        return keras.Model([data_in, rois_in], layer([h, rois_in])), [data, make_rois(2, 8)]
    return keras.Model(data_in, layer(h)), data


@pytest.mark.parametrize("layer", LAYERS, ids=LAYER_IDS)
def test_saved_model_gives_identical_outputs(layer, tmp_path):
    model, inputs = model_and_inputs(type(layer).from_config(layer.get_config()))
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    restored = loaded.layers[-1]
    assert type(restored) is type(layer) and restored.get_config() == layer.get_config()
    want = np.asarray(model(inputs))
    assert want.size > 0 and np.abs(want).max() > 0
    np.testing.assert_array_equal(np.asarray(loaded(inputs)), want)


def test_gradient_reversal_layer_gradient():
    x = tf.constant(ref.shuffled_grid((2, 3), np.float32))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layers.GradientReversal(scale=2.0)(x)
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), -2.0 * np.ones((2, 3)))
    assert tf_ext.register_cpp_gradients(["TfExt>GradientReversal"]) == {
        "TfExt>GradientReversal": "bridged"}
