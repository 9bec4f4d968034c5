"""Shared helpers: one way to take gradients in each TensorFlow execution mode."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

from ports import free_ports  # noqa: F401  (re-exported for the distributed tests)

# eager: tf.GradientTape; function: GradientTape inside tf.function; graph: tf.compat.v1 graph
# + tf.gradients run by a Session (TF1 style).
MODES = ("eager", "function", "graph")

Fn = Callable[[tf.Tensor], tf.Tensor]


def evaluate(mode: str, f: Callable[..., Any], *args: np.ndarray) -> Any:
    """f(*args) run in `mode` (eager; a tf.function; a tf.compat.v1 graph with placeholders
    of the arguments' static shapes, run by a Session), as numpy values."""
    if mode in ("eager", "function"):
        fn = tf.function(f) if mode == "function" else f
        out = fn(*[tf.constant(a) for a in args])
        return tf.nest.map_structure(lambda t: t.numpy(), out)
    if mode == "graph":
        with tf.Graph().as_default():
            placeholders = [tf.compat.v1.placeholder(a.dtype, a.shape) for a in args]
            out = f(*placeholders)
            with tf.compat.v1.Session() as sess:
                return sess.run(out, dict(zip(placeholders, args)))
    raise ValueError(mode)


def vjp(mode: str, f: Fn, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """d/dx <f(x), dy>, computed with the gradient machinery of `mode`."""
    if mode == "eager":
        xt = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(xt)
            y = f(xt)
        return tape.gradient(y, xt, output_gradients=tf.constant(dy)).numpy()
    if mode == "function":
        @tf.function
        def grad(xt, dyt):
            with tf.GradientTape() as tape:
                tape.watch(xt)
                y = f(xt)
            return tape.gradient(y, xt, output_gradients=dyt)
        return grad(tf.constant(x), tf.constant(dy)).numpy()
    if mode == "graph":
        with tf.Graph().as_default():
            xp = tf.compat.v1.placeholder(x.dtype, x.shape)
            dyp = tf.compat.v1.placeholder(dy.dtype, dy.shape)
            (g,) = tf.gradients(f(xp), xp, grad_ys=dyp)
            with tf.compat.v1.Session() as sess:
                return sess.run(g, {xp: x, dyp: dy})
    raise ValueError(mode)


def hvp(mode: str, f: Fn, x: np.ndarray, v: np.ndarray) -> np.ndarray:
    """d/dx <grad(sum f)(x), v>: a second-order gradient (tape of tape / tf.gradients twice)."""
    if mode in ("eager", "function"):
        def second(xt, vt):
            with tf.GradientTape() as outer:
                outer.watch(xt)
                with tf.GradientTape() as inner:
                    inner.watch(xt)
                    s = tf.reduce_sum(f(xt))
                g = inner.gradient(s, xt)
            return outer.gradient(g, xt, output_gradients=vt)
        if mode == "function":
            second = tf.function(second)
        return second(tf.constant(x), tf.constant(v)).numpy()
    if mode == "graph":
        with tf.Graph().as_default():
            xp = tf.compat.v1.placeholder(x.dtype, x.shape)
            vp = tf.compat.v1.placeholder(v.dtype, v.shape)
            (g,) = tf.gradients(tf.reduce_sum(f(xp)), xp)
            (h,) = tf.gradients(g, xp, grad_ys=vp)
            with tf.compat.v1.Session() as sess:
                return sess.run(h, {xp: x, vp: v})
    raise ValueError(mode)


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return request.param
