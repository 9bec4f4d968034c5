"""tf.distribute.MirroredStrategy over two logical CPU devices trains a tiny Keras model whose
layer uses a tf_ext op (model.fit); the result matches single-device training, i.e. the C++
gradient runs per replica and is all-reduced correctly. Runs in its own process (py_test):
logical devices must be configured before TensorFlow initialises."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

import tf_ext

_CPU = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(_CPU, [tf.config.LogicalDeviceConfiguration()] * 2)

KEEP = 4  # flat index of the one kernel weight MaskedDense uses


class MaskedDense(keras.layers.Layer):
    """x @ zero_out(kernel, KEEP): one active weight; its gradient comes from C++ ZeroOut."""

    def __init__(self, units: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape) -> None:
        self.kernel = self.add_weight(
            shape=(input_shape[-1], self.units), name="kernel",
            initializer=keras.initializers.RandomNormal(seed=1))

    def call(self, x):
        return tf.matmul(x, tf_ext.zero_out(tf.convert_to_tensor(self.kernel),
                                            preserve_index=KEEP))


def train(strategy: tf.distribute.Strategy) -> tuple[list[np.ndarray], list[float]]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 3)).astype(np.float32)
    y = (x @ np.array([[0.5], [-1.0], [2.0]], np.float32)).astype(np.float32)
    with strategy.scope():
        model = keras.Sequential([
            keras.Input((3,)),
            MaskedDense(4),
            keras.layers.Dense(1, kernel_initializer=keras.initializers.RandomNormal(seed=2)),
        ])
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    history = model.fit(x, y, batch_size=8, epochs=4, shuffle=False, verbose=0)
    return [w.numpy() if hasattr(w, "numpy") else np.asarray(w) for w in model.weights], \
        history.history["loss"]


def test_mirrored_strategy_matches_single_device():
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert mirrored.num_replicas_in_sync == 2
    weights, losses = train(mirrored)
    ref_weights, ref_losses = train(tf.distribute.OneDeviceStrategy("/cpu:0"))
    for w, ref in zip(weights, ref_weights):
        np.testing.assert_allclose(w, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    assert losses[-1] < losses[0]

    # Only the preserved kernel entry learned: every other one got a zero gradient.
    init = keras.initializers.RandomNormal(seed=1)(shape=(3, 4)).numpy()
    changed = (weights[0] != init).ravel()
    assert changed[KEEP] and changed.sum() == 1, weights[0]
