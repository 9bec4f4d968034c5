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


def test_recorded_calls_get_their_own_attrs_gradient_whatever_their_names():
    # The recording plans are cached by (input dtypes, attrs): calls that differ in attrs, scalar
    # (clip) or list-valued (ksize), interleaved on one tape, each get their own attrs'
    # gradient - the graph-mode gradient of the same call - and calls that differ only in
    # name share a plan, so an eager loop that names every call grows no cache.
    x = tf.random.uniform([1, 9, 9, 2], -2.0, 2.0, seed=4)
    calls = [(tf_ext.sign_ste, (), {"clip": c}) for c in (1.0, 0.25, 1.0, 0.0)]
    calls += [(tf_ext.median_pool2d, (k, [1, 1], "SAME"), {}) for k in ([3, 3], [5, 5], [3, 3])]
    plans = {op: len(_bridge._recorder(op).plans) for op in ("TfExt>SignSTE", "TfExt>MedianPool2D")}
    for step in range(3):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            ys = [f(x, *a, name=f"call{step}_{i}", **kw) for i, (f, a, kw) in enumerate(calls)]
        for (f, a, kw), y in zip(calls, ys):
            dy = tf.random.normal(tf.shape(y), seed=7)

            @tf.function
            def graph_grad(x, dy, f=f, a=a, kw=kw):
                with tf.GradientTape() as g:
                    g.watch(x)
                    out = f(x, *a, **kw)
                return g.gradient(out, x, output_gradients=dy)

            np.testing.assert_array_equal(tape.gradient(y, x, output_gradients=dy).numpy(),
                                          graph_grad(x, dy).numpy(),
                                          err_msg=f"{f.__name__} {a} {kw}")
    grown = {op: len(_bridge._recorder(op).plans) - n for op, n in plans.items()}
    # Recorded by the bridge (not TensorFlow's keep-everything fallback), one plan per attrs.
    assert 1 <= grown["TfExt>SignSTE"] <= 3 and 1 <= grown["TfExt>MedianPool2D"] <= 2, grown


def test_second_order_through_a_recorded_op(monkeypatch):
    # An outer tape records the inner gradient: the ConcreteFunction path, so the second
    # derivative exists (a direct run would be invisible to the outer tape).
    calls = _counting_direct_runs(monkeypatch)
    x = tf.constant([0.5, -0.25, 3.0])
    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            y = tf_ext.gradient_reversal(x * x, 2.0)
        g = inner.gradient(y, x)  # -2 * 2x
    np.testing.assert_allclose(g.numpy(), -4.0 * x.numpy())
    np.testing.assert_allclose(outer.gradient(g, x).numpy(), [-4.0, -4.0, -4.0])
    assert calls == []


def _counting_direct_runs(monkeypatch):
    """Counts the bridge's direct runs of gradient functions: node by node as eager ops, or as
    one function op (either way, no ConcreteFunction)."""
    calls = []
    real_call, real_execute = _bridge._tf_compat.call_function, _bridge._tf_compat.execute_op

    def call_function(name, inputs, num_outputs):
        calls.append(name)
        return real_call(name, inputs, num_outputs)

    def execute_op(op_type, inputs, attrs, num_outputs):
        calls.append(op_type)
        return real_execute(op_type, inputs, attrs, num_outputs)

    monkeypatch.setattr(_bridge._tf_compat, "call_function", call_function)
    monkeypatch.setattr(_bridge._tf_compat, "execute_op", execute_op)
    return calls


def test_first_order_eager_gradient_runs_directly(monkeypatch):
    calls = _counting_direct_runs(monkeypatch)
    x = tf.random.uniform([64], -2.0, 2.0, seed=4)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf_ext.sign_ste(x) * 3.0
    g = tape.gradient(y, x)
    assert calls  # run directly, not through a ConcreteFunction
    np.testing.assert_array_equal(g.numpy(), 3.0 * (np.abs(x.numpy()) <= 1.0))
    # The op-level path (a raw library op on a tape, _bridged_gradient) takes it too.
    del calls[:]
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = _bridge.library().tf_ext_gradient_reversal(x, scale=2.0)
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), -2.0 * np.ones(64))
    assert calls


def _gradient_cases():
    rois = tf.constant([[0, 0, 0, 5, 5], [1, 2, 1, 7, 6]], tf.float32)
    image = tf.random.normal([2, 8, 8, 4], seed=5)
    return {
        "sign_ste": (lambda a: tf_ext.sign_ste(a), tf.random.uniform([50], -2, 2, seed=1)),
        "gradient_reversal": (lambda a: tf_ext.gradient_reversal(a, 0.7),
                              tf.random.normal([50], seed=2)),
        "zero_out": (lambda a: tf_ext.zero_out(a, preserve_index=3), tf.random.normal([50], seed=3)),
        "smooth_l1": (lambda a: tf_ext.smooth_l1(a, 0.5), tf.random.normal([50], seed=4)),
        "median_pool2d": (lambda a: tf_ext.median_pool2d(a, [3, 3], [1, 1], "SAME"), image),
        "roi_pool": (lambda a: tf_ext.roi_pool(a, rois, 2, 2)[0], image),
        "ps_roi_align": (lambda a: tf_ext.ps_roi_align(a, rois, 2, 2), image),
    }


@pytest.mark.parametrize("op", sorted(_gradient_cases()))
def test_node_by_node_gradient_is_the_function_bit_for_bit(op, monkeypatch):
    # Every op's gradient run node by node (the eager first-order path) against the same
    # FunctionDef run as one function op, on the arguments the tape passed.
    seen = []
    real = _bridge._EagerNodes.__call__

    def recording(self, args):
        out = real(self, args)
        seen.append((self, list(args), out))
        return out

    monkeypatch.setattr(_bridge._EagerNodes, "__call__", recording)
    f, x = _gradient_cases()[op]
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    dy = tf.random.normal(tf.shape(y), seed=9)
    tape.gradient(y, x, output_gradients=dy)
    assert len(seen) == 1
    nodes, args, direct = seen[0]
    entry = next(e for e in _bridge._cache.values() if e.nodes is nodes)
    whole = _bridge._tf_compat.call_function(entry.function_name, args, entry.num_outputs)
    assert len(direct) == len(whole) == len(entry.fdef.signature.output_arg)
    for a, b in zip(direct, whole):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a.numpy(), b.numpy())

if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
