"""tf.distribute.MirroredStrategy over two logical CPU devices trains a tiny Keras model built
from tf_ext's layers (MedianPool2D, GradientReversal) with model.fit; the result matches
single-device training, i.e. the C++ gradients run per replica and are all-reduced correctly.
Runs in its own process (py_test): logical devices must be configured before TensorFlow
initialises."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tf_ext import layers

_CPU = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(_CPU, [tf.config.LogicalDeviceConfiguration()] * 2)


def train(strategy: tf.distribute.Strategy) -> tuple[list[np.ndarray], list[np.ndarray],
                                                      list[float]]:
    """(initial weights, trained weights, per-epoch losses)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 6, 6, 1)).astype(np.float32)
    y = x.reshape(32, -1)[:, ::3].sum(axis=1, keepdims=True)
    with strategy.scope():
        model = keras.Sequential([
            keras.Input((6, 6, 1)),
            keras.layers.Conv2D(2, 3, padding="same",
                                kernel_initializer=keras.initializers.RandomNormal(seed=1)),
            layers.MedianPool2D((3, 3), strides=(1, 1), padding="same"),
            keras.layers.Flatten(),
            layers.GradientReversal(scale=0.5),
            keras.layers.Dense(1, kernel_initializer=keras.initializers.RandomNormal(seed=2)),
        ])
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    initial = [np.array(w) for w in model.get_weights()]
    history = model.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0)
    return initial, [np.array(w) for w in model.get_weights()], history.history["loss"]


def test_mirrored_strategy_matches_single_device():
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert mirrored.num_replicas_in_sync == 2
    initial, weights, losses = train(mirrored)
    ref_initial, ref_weights, ref_losses = train(tf.distribute.OneDeviceStrategy("/cpu:0"))
    for w, ref in zip(initial, ref_initial):
        np.testing.assert_array_equal(w, ref)
    for w, ref in zip(weights, ref_weights):
        np.testing.assert_allclose(w, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    assert np.isfinite(losses).all()
    # Every weight learned: the conv's gradient came through both C++ gradients (the
    # reversal's and the median's), per replica.
    for before, after in zip(initial, weights):
        assert np.abs(after - before).max() > 1e-4
