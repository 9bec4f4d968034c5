"""Eager GradientTape memory and forward outputs: tf_ext's ops keep alive on a tape only what
their gradient reads (the declaration's Reads(...)), and a gradient that reads forward outputs
(RoiPool's argmax) gets them instead of recomputing the forward (tf_ext/grads/grad_builder.h,
"Forward outputs")."""

import gc
import weakref

import numpy as np
import pytest
import tensorflow as tf

import tf_ext
from tf_ext import _bridge


def _alive_after_forward(make_input, op):
    """Whether the tape keeps op's input and output objects alive after the forward."""
    x = tf.random.uniform([64], -2.0, 2.0, seed=1)
    with tf.GradientTape() as tape:
        tape.watch(x)
        t = make_input(x)
        out = op(t)
        refs = weakref.ref(t), weakref.ref(out)
        y = tf.identity(out)  # the tape's next op holds this output, not op's own
        del t, out
    gc.collect()
    alive = [r() is not None for r in refs]
    return alive, tape, x, y


def test_gradient_reversal_keeps_nothing():
    alive, tape, x, y = _alive_after_forward(lambda x: x * 2.0,
                                             lambda t: tf_ext.gradient_reversal(t, 0.5))
    assert alive == [False, False]
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), -1.0 * np.ones(64))


def test_sign_ste_keeps_its_input_only():
    alive, tape, x, y = _alive_after_forward(lambda x: x * 1.0, tf_ext.sign_ste)
    assert alive == [True, False]
    want = (np.abs(x.numpy()) <= 1.0).astype(np.float32)
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), want)


def test_median_pool_keeps_its_input_only():
    def op(t):
        return tf_ext.median_pool2d(tf.reshape(t, [1, 8, 8, 1]), [3, 3], [1, 1], "SAME")
    x = tf.random.normal([1, 8, 8, 1], seed=2)
    with tf.GradientTape() as tape:
        tape.watch(x)
        t = x * 1.0
        out = tf_ext.median_pool2d(t, [3, 3], [1, 1], "SAME")
        refs = weakref.ref(t), weakref.ref(out)
        y = tf.identity(out)
        del t, out
    gc.collect()
    assert [r() is not None for r in refs] == [True, False]

    @tf.function
    def graph_grad(x):
        with tf.GradientTape() as g:
            g.watch(x)
            y = tf.identity(tf_ext.median_pool2d(x * 1.0, [3, 3], [1, 1], "SAME"))
        return g.gradient(y, x)
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), graph_grad(x).numpy())


def _rois():
    return tf.constant([[0, 0, 0, 5, 5], [1, 2, 1, 7, 6], [0, 3, 3, 3, 3]], tf.float32)


def test_roi_pool_gradient_uses_the_forward_argmax_eager_and_in_graphs():
    data = tf.random.normal([2, 8, 8, 3], seed=3)
    rois = _rois()
    with tf.GradientTape() as tape:
        tape.watch(data)
        pooled, argmax = tf_ext.roi_pool(data * 1.0, rois, 2, 2)
    eager = tape.gradient(pooled, data)

    @tf.function
    def graph(data):
        with tf.GradientTape() as g:
            g.watch(data)
            pooled, _ = tf_ext.roi_pool(data, rois, 2, 2)
        return g.gradient(pooled, data)
    np.testing.assert_array_equal(eager.numpy(), graph(data).numpy())
    # The reference: d(pooled) = 1 scattered at argmax.
    want = np.zeros([2, 64, 3], np.float32)
    for r, row in enumerate(rois.numpy()):
        for c in range(3):
            for a in argmax.numpy()[r, ..., c].ravel():
                if a >= 0:
                    want[int(row[0]), a, c] += 1
    np.testing.assert_array_equal(eager.numpy().reshape(2, 64, 3), want)
    # Every gradient function built for RoiPool takes argmax instead of recomputing it.
    fdefs = [e.fdef for e in _bridge._cache.values() if e.op_type == "TfExt>RoiPool"]
    assert fdefs
    for fdef in fdefs:
        assert "argmax" in [a.name for a in fdef.signature.input_arg]
        assert "TfExt>RoiPool" not in [n.op for n in fdef.node_def]


def test_symbolic_gradient_form_still_recomputes_argmax():
    # Without the forward-outputs attr (SymbolicGradient's calling convention) the function
    # recomputes argmax with one forward node.
    node = tf.compat.v1.NodeDef(op="TfExt>RoiPool")
    node.attr["T"].type = tf.float32.as_datatype_enum
    node.attr["pooled_height"].i = 2
    node.attr["pooled_width"].i = 2
    node.attr["spatial_scale"].f = 1.0
    fdef = _bridge._run_gradient_function_def(node)
    assert "argmax" not in [a.name for a in fdef.signature.input_arg]
    assert "TfExt>RoiPool" in [n.op for n in fdef.node_def]


def test_variables_still_get_gradients():
    v = tf.Variable(tf.random.uniform([16], -2.0, 2.0, seed=4))
    with tf.GradientTape() as tape:
        y = tf_ext.sign_ste(v)
    want = (np.abs(v.numpy()) <= 1.0).astype(np.float32)
    np.testing.assert_array_equal(tape.gradient(y, v).numpy(), want)


def test_second_order_through_a_recorded_op():
    x = tf.constant([0.5, -0.25, 3.0])
    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            y = tf_ext.gradient_reversal(x * x, 2.0)
        g = inner.gradient(y, x)  # -2 * 2x
    np.testing.assert_allclose(g.numpy(), -4.0 * x.numpy())
    np.testing.assert_allclose(outer.gradient(g, x).numpy(), [-4.0, -4.0, -4.0])


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))


def _counting_function_calls(monkeypatch):
    """Counts the bridge's direct (single-op) calls of gradient functions."""
    calls = []
    real = _bridge._tf_compat.call_function

    def counting(name, inputs, num_outputs):
        calls.append(name)
        return real(name, inputs, num_outputs)

    monkeypatch.setattr(_bridge._tf_compat, "call_function", counting)
    return calls


def test_first_order_eager_gradient_runs_the_function_as_one_op(monkeypatch):
    calls = _counting_function_calls(monkeypatch)
    x = tf.random.uniform([64], -2.0, 2.0, seed=4)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf_ext.sign_ste(x) * 3.0
    g = tape.gradient(y, x)
    assert len(calls) == 1  # the direct call, not a ConcreteFunction
    np.testing.assert_array_equal(g.numpy(), 3.0 * (np.abs(x.numpy()) <= 1.0))
    # The op-level path (a raw library op on a tape, _bridged_gradient) takes it too.
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = _bridge.library().tf_ext_gradient_reversal(x, scale=2.0)
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), -2.0 * np.ones(64))
    assert len(calls) == 2


def test_gradient_under_a_recording_tape_stays_differentiable(monkeypatch):
    # An outer tape records the inner gradient: the ConcreteFunction path, so the second
    # derivative exists (the direct call would be invisible to the outer tape).
    calls = _counting_function_calls(monkeypatch)
    x = tf.constant([0.3, -0.7, 2.0])
    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            y = tf_ext.gradient_reversal(x * x, 0.5)
        dx = inner.gradient(y, x)  # -0.5 * 2x
    np.testing.assert_allclose(dx.numpy(), -x.numpy())
    np.testing.assert_allclose(outer.gradient(dx, x).numpy(), -np.ones(3))
    assert calls == []
