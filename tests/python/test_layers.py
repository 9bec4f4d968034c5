"""tf_ext.layers in Keras models trained with model.fit: the C++ gradients drive training in
the expected direction; the layers save and load."""

from __future__ import annotations

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


@pytest.mark.parametrize("layer", [layers.GradientReversal(0.25),
                                   layers.MedianPool2D((2, 3), (1, 2), "same"),
                                   layers.RoiPool(3, 2, 0.0625)])
def test_config_round_trip(layer):
    config = layer.get_config()
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    serialized = keras.saving.serialize_keras_object(layer)
    assert serialized["registered_name"] == f"tf_ext>{type(layer).__name__}"
    assert type(keras.saving.deserialize_keras_object(serialized)) is type(layer)


def test_gradient_reversal_layer_gradient():
    x = tf.constant(ref.shuffled_grid((2, 3), np.float32))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layers.GradientReversal(scale=2.0)(x)
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), -2.0 * np.ones((2, 3)))
    assert tf_ext.register_cpp_gradients(["TfExt>GradientReversal"]) == {
        "TfExt>GradientReversal": "bridged"}
