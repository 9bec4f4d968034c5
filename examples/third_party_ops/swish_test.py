"""The third-party op's C++ gradient from Python: tf_ext.register_cpp_gradients(library) makes
GradientTape, tf.function and tf.compat.v1 tf.gradients use it (no gradient maths in Python)."""

import os
import sys
import unittest

import numpy as np
import tensorflow as tf

import tf_ext

# This workspace's op library: its runfiles path (Bazel runs tests in the runfiles root), or
# SWISH_OPS_LIBRARY (make test runs this file with tf_ext installed by pip).
_LIBRARY = os.path.realpath(os.environ.get("SWISH_OPS_LIBRARY", "swish_ops.so"))


def _swish_grad(x):
    s = 1.0 / (1.0 + np.exp(-x))
    return s + x * s * (1.0 - s)


class SwishFromPython(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.status = tf_ext.register_cpp_gradients(_LIBRARY)
        cls.swish = staticmethod(tf.load_op_library(_LIBRARY).third_party_swish)

    def test_registration_reports_the_cpp_gradient(self):
        self.assertEqual(self.status, {"ThirdParty>Swish": "bridged"})

    def test_forward(self):
        x = np.array([-2.0, 0.0, 1.5], np.float64)
        np.testing.assert_allclose(self.swish(x).numpy(), x / (1.0 + np.exp(-x)), rtol=1e-12)

    def test_gradient_tape_eager_and_function(self):
        x = tf.constant([-3.0, -0.5, 0.0, 0.25, 4.0], tf.float64)
        dy = tf.constant([1.0, 2.0, -1.0, 0.5, 3.0], tf.float64)

        def grad(xt, dyt):
            with tf.GradientTape() as tape:
                tape.watch(xt)
                y = self.swish(xt)
            return tape.gradient(y, xt, output_gradients=dyt)

        want = dy.numpy() * _swish_grad(x.numpy())
        np.testing.assert_allclose(grad(x, dy).numpy(), want, rtol=1e-12)
        np.testing.assert_allclose(tf.function(grad)(x, dy).numpy(), want, rtol=1e-12)

    def test_tf_gradients_in_a_v1_graph(self):
        x = np.array([-1.0, 0.5, 2.0], np.float32)
        with tf.Graph().as_default():
            xp = tf.compat.v1.placeholder(tf.float32, [3])
            (g,) = tf.gradients(tf.reduce_sum(self.swish(xp)), xp)
            with tf.compat.v1.Session() as sess:
                got = sess.run(g, {xp: x})
        np.testing.assert_allclose(got, _swish_grad(x.astype(np.float64)), rtol=1e-5)

    def test_numeric_gradient(self):
        x = tf.constant([[-1.5, 0.3], [0.7, 2.2]], tf.float64)
        theoretical, numeric = tf.test.compute_gradient(self.swish, [x])
        np.testing.assert_allclose(theoretical[0], numeric[0], atol=1e-6)


if __name__ == "__main__":
    result = unittest.main(exit=False).result
    if not result.testsRun:
        sys.exit("swish_test: no test ran")
    sys.exit(0 if result.wasSuccessful() else 1)
