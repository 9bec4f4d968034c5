"""Loops and conditionals differentiated in C++ (tf_ext/graph/engine/control_flow.h, docs/control_flow.md).

Each case is a tf.function of x, frozen twice: with lower_control_flow=False (functional While,
StatelessWhile, StatelessIf, If, Case, TensorList ops) and with the default lowering (v1 frames:
Enter/Exit/Switch/Merge/NextIteration/LoopCond, which tf_ext converts back to While/If).
tf_ext_grad (a C++ process with no Python) differentiates the frozen graph; the reference is
eager GradientTape of the same function (float32: max|g - ref| / max|ref| <= 1e-4; float64:
<= 1e-9).
"""
import os
import subprocess

import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import text_format
from tensorflow.python.framework import convert_to_constants

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.path.join(RUNFILES, "tf_ext") if RUNFILES else os.getcwd()
TOOL = os.path.join(WORKSPACE, "tf_ext", "tf_ext_grad")
LIBRARY = os.path.join(WORKSPACE, "tf_ext", "_tf_ext_ops.so")

TOL = {np.float32: 1e-4, np.float64: 1e-9}
V1_OPS = {"Enter", "Exit", "Switch", "Merge", "NextIteration", "LoopCond"}
FUNCTIONAL_OPS = {"While", "StatelessWhile", "If", "StatelessIf", "Case", "StatelessCase"}


def rng(seed=0):
    return np.random.default_rng(seed)


def weights(shape, dtype=np.float32, seed=1, scale=0.5):
    return tf.constant((rng(seed).standard_normal(shape) * scale).astype(dtype))


# Each case: a function of x returning a scalar, and x's value.
def while_data_dependent_trip_count(x):
    w = weights((3, 3), x.dtype.as_numpy_dtype)
    n = tf.cast(tf.reduce_sum(tf.abs(x)) * 2.0, tf.int32)  # depends on x's values
    def body(i, h, acc):
        h = tf.tanh(tf.matmul(h, w) + x)
        return i + 1, h, acc + tf.reduce_sum(h * h)
    _, h, acc = tf.while_loop(lambda i, h, acc: i < n, body,
                              [tf.constant(0), x, tf.constant(0.0, x.dtype)])
    return tf.reduce_sum(h) + acc


def while_maximum_iterations(x):
    # An unbounded condition stopped by maximum_iterations.
    def body(h):
        return [tf.sin(h) * 1.5 + x * 0.25]
    (h,) = tf.while_loop(lambda h: tf.constant(True), body, [x], maximum_iterations=5)
    return tf.reduce_sum(h * h)


def while_never_runs(x):
    def body(h):
        return [h * x]
    (h,) = tf.while_loop(lambda h: tf.reduce_sum(h) > 1e9, body, [x * 2.0])
    return tf.reduce_sum(tf.exp(h))


def nested_while(x):
    def outer(i, h):
        def inner(j, g):
            return j + 1, tf.sigmoid(g * h + x)
        _, g = tf.while_loop(lambda j, g: j < i + 1, inner, [tf.constant(0), h])
        return i + 1, g * 0.9 + tf.reduce_mean(h)
    _, h = tf.while_loop(lambda i, h: i < 3, outer, [tf.constant(0), x])
    return tf.reduce_sum(h)


def cond_then(x):
    return tf.cond(tf.reduce_sum(x) < 100.0, lambda: tf.reduce_sum(tf.sin(x) * x),
                   lambda: tf.reduce_sum(tf.exp(x)))


def cond_else(x):
    return tf.cond(tf.reduce_sum(x) > 100.0, lambda: tf.reduce_sum(tf.sin(x) * x),
                   lambda: tf.reduce_sum(tf.tanh(x) * tf.exp(x * 0.5)))


def switch_case(x):
    index = tf.cast(tf.reduce_sum(tf.abs(x)), tf.int32) % 3
    return tf.switch_case(index, [lambda: tf.reduce_sum(x * x), lambda: tf.reduce_sum(tf.cos(x)),
                                  lambda: tf.reduce_sum(tf.sigmoid(x) * x)])


def loop_in_cond(x):
    def looped():
        (h,) = tf.while_loop(lambda h: tf.reduce_max(tf.abs(h)) < 4.0, lambda h: [h * 1.3 + 0.1],
                             [x], maximum_iterations=20)
        return tf.reduce_sum(h * x)
    return tf.cond(tf.reduce_sum(x) < 100.0, looped, lambda: tf.reduce_sum(x))


def cond_in_loop(x):
    def body(i, h):
        h = tf.cond(i % 2 == 0, lambda: tf.tanh(h * x), lambda: h * h * 0.5 + x)
        return i + 1, h
    _, h = tf.while_loop(lambda i, h: i < 4, body, [tf.constant(0), x])
    return tf.reduce_sum(h)


def switch_case_in_loop(x):
    # A lowered Case inside a loop body: its N-way switch becomes nested conditionals so the
    # loop converts back to While. Iterations 3 and 4 have an index out of range, which takes
    # the last branch.
    def body(i, h):
        h = tf.switch_case(i, [lambda: tf.tanh(h * x), lambda: h * h * 0.5 + x,
                               lambda: tf.sin(h) + x * h])
        return i + 1, h
    _, h = tf.while_loop(lambda i, h: i < 5, body, [tf.constant(0), x])
    return tf.reduce_sum(h)


def tensor_array_in_loop(x):
    steps = 4
    ta = tf.TensorArray(x.dtype, size=steps)
    def body(i, h, ta):
        h = tf.tanh(h * 1.1 + tf.cast(i, x.dtype) * 0.1)
        return i + 1, h, ta.write(i, h * x)
    _, _, ta = tf.while_loop(lambda i, h, ta: i < steps, body, [tf.constant(0), x, ta])
    return tf.reduce_sum(ta.stack() * tf.range(1.0, steps + 1.0, dtype=x.dtype)[:, None, None])


def tensor_list_unstack_in_loop(x):
    # An RNN's shape: a sequence read with TensorListGetItem, outputs written with SetItem.
    seq = tf.transpose(tf.reshape(tf.tile(x, [1, 2]), [2, 2, 3]), [1, 0, 2])
    w = weights((3, 3), x.dtype.as_numpy_dtype, seed=2)
    n = tf.shape(seq)[0]
    outs = tf.TensorArray(x.dtype, size=n)
    def body(t, h, outs):
        h = tf.tanh(tf.matmul(seq[t], w) + h)
        return t + 1, h, outs.write(t, h)
    _, h, outs = tf.while_loop(lambda t, h, o: t < n, body, [tf.constant(0), tf.zeros_like(x), outs])
    return tf.reduce_sum(outs.stack() ** 2) + tf.reduce_sum(h)


def mean_over_negative_axis_in_loop(x):
    # A LayerNorm-like body: Mean's gradient cannot take a negative axis, which tf_ext makes
    # non-negative in loop bodies too (there the rank may be known only at run time).
    def body(i, h):
        c = h - tf.reduce_mean(h, axis=-1, keepdims=True)
        return i + 1, tf.tanh(c * tf.math.rsqrt(tf.reduce_mean(c * c, axis=-1, keepdims=True) + 0.1) + x)
    _, h = tf.while_loop(lambda i, h: i < 3, body, [tf.constant(0), x])
    return tf.reduce_sum(h * tf.range(6.0, dtype=x.dtype)[None, :3])


def empty_tensor_list_in_loop(x):
    # A loop over an empty sequence: the TensorList has no elements and the loop never runs;
    # the gradient flows only around it.
    seq = tf.zeros([0, 3], x.dtype) + x[0, 0]
    ta = tf.TensorArray(x.dtype, size=0, dynamic_size=True).unstack(seq)
    n = ta.size()
    def body(t, h):
        return t + 1, h + ta.read(t)
    _, h = tf.while_loop(lambda t, h: t < n, body, [tf.constant(0), x[0] * 2.0])
    return tf.reduce_sum(h * h) + tf.reduce_sum(tf.sin(x))


def unknown_element_shape_in_loop(x):
    # A TensorArray written in a loop without a known element shape (its length depends on x).
    n = 2 + tf.cast(tf.reduce_sum(tf.abs(x)) > 100.0, tf.int32)
    ta = tf.TensorArray(x.dtype, size=0, dynamic_size=True, infer_shape=False,
                        element_shape=tf.TensorShape(None))
    def body(t, h, ta):
        h = tf.sin(h) + x
        return t + 1, h, ta.write(t, tf.reshape(h, [-1])[: 2 + t])
    _, _, ta = tf.while_loop(lambda t, h, ta: t < n, body, [tf.constant(0), x, ta])
    return tf.reduce_sum(ta.concat() ** 2)


def sequence(x, rows):
    # A TensorArray of the rows (read more than once: eager mode would clear a read element).
    return tf.TensorArray(x.dtype, size=len(rows), element_shape=x.shape[1:],
                          clear_after_read=False).unstack(tf.stack(rows))


def sequence_read_and_returned(x):
    # An RNN's input sequence read at the step counter and also a loop output read after the
    # loop: its gradient comes from inside the loop and from after it.
    ta = sequence(x, [x[0], x[1], x[0] * x[1]])
    def body(t, h, ta):
        return t + 1, tf.tanh(h * ta.read(t) + 0.1), ta
    _, h, ta = tf.while_loop(lambda t, h, ta: t < 3, body, [tf.constant(0), x[1], ta])
    return tf.reduce_sum(h) + tf.reduce_sum(ta.stack() ** 2)


def sequence_read_at_two_steps(x):
    # Two reads per step, at the counter and at 2 - t: every element is read twice, so its
    # gradient is added into the list.
    ta = sequence(x, [x[0], x[1], x[0] * x[1]])
    def body(t, h):
        return t + 1, tf.sin(h * ta.read(t)) + ta.read(2 - t) * 0.5
    _, h = tf.while_loop(lambda t, h: t < 3, body, [tf.constant(0), x[0]])
    return tf.reduce_sum(h * h)


def sequence_read_every_other_step(x):
    # A counter stepping by 2 reads elements 0 and 2 of 4; 1 and 3 get no gradient from the loop.
    ta = sequence(x, [x[0], x[1], -x[0], x[0] * x[1]])
    def body(t, h):
        return t + 2, tf.tanh(h + ta.read(t))
    _, h = tf.while_loop(lambda t, h: t < 4, body, [tf.constant(0), x[1]])
    return tf.reduce_sum(h)


def sequence_of_unknown_shape_read_every_other_step(x):
    # The same over a list of unknown element shape: elements 1 and 3 of the sequence's
    # gradient are never written, and nothing else says their shape.
    ta = tf.TensorArray(x.dtype, size=4, infer_shape=False, element_shape=tf.TensorShape(None),
                        clear_after_read=False).unstack(tf.stack([x[0], x[1], -x[0], x[0] * x[1]]))
    def body(t, h):
        return t + 2, tf.tanh(h + ta.read(t))
    _, h = tf.while_loop(lambda t, h: t < 4, body, [tf.constant(0), x[1]])
    return tf.reduce_sum(h)


CASES = {
    "sequence_of_unknown_shape_read_every_other_step":
        sequence_of_unknown_shape_read_every_other_step,
    "sequence_read_and_returned": sequence_read_and_returned,
    "sequence_read_at_two_steps": sequence_read_at_two_steps,
    "sequence_read_every_other_step": sequence_read_every_other_step,
    "empty_tensor_list_in_loop": empty_tensor_list_in_loop,
    "unknown_element_shape_in_loop": unknown_element_shape_in_loop,
    "mean_over_negative_axis_in_loop": mean_over_negative_axis_in_loop,
    "while_data_dependent_trip_count": while_data_dependent_trip_count,
    "while_maximum_iterations": while_maximum_iterations,
    "while_never_runs": while_never_runs,
    "nested_while": nested_while,
    "cond_then": cond_then,
    "cond_else": cond_else,
    "switch_case": switch_case,
    "loop_in_cond": loop_in_cond,
    "cond_in_loop": cond_in_loop,
    "switch_case_in_loop": switch_case_in_loop,
    "tensor_array_in_loop": tensor_array_in_loop,
    "tensor_list_unstack_in_loop": tensor_list_unstack_in_loop,
}


def freeze(fn, x_val, lower):
    """fn as a frozen GraphDef whose input is `x` and whose output node is `y`.

    Freezing lowers a Case (tf.switch_case) even with lower_control_flow=False, so the
    functional form of a function without variables is its traced graph, unfrozen."""
    @tf.function(input_signature=[tf.TensorSpec(x_val.shape, tf.as_dtype(x_val.dtype), name="x")])
    def f(x):
        return {"y": fn(x)}
    concrete = f.get_concrete_function()
    if not lower and not concrete.variables:
        frozen = concrete
    else:
        frozen = convert_to_constants.convert_variables_to_constants_v2(
            concrete, lower_control_flow=lower)
    graph_def = frozen.graph.as_graph_def()
    out_name = frozen.outputs[0].name.split(":")[0]
    for n in graph_def.node:
        if n.name == out_name:
            n.name = "y"
        for i, s in enumerate(n.input):
            if s.split(":")[0].lstrip("^") == out_name:
                n.input[i] = s.replace(out_name, "y")
    return graph_def


def op_types(graph_def):
    return ({n.op for n in graph_def.node} |
            {n.op for f in graph_def.library.function for n in f.node_def})


def eager_gradient(fn, x_val):
    x = tf.constant(x_val)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(x)
    return y.numpy(), tape.gradient(y, x).numpy()


def tf_ext_grad(tmp_path, graph_def, x_val, *flags):
    graph = str(tmp_path / "model.pb")
    with open(graph, "wb") as f:
        f.write(graph_def.SerializeToString())
    np.save(str(tmp_path / "x.npy"), x_val)
    out = str(tmp_path / "grad.npz")
    r = subprocess.run([TOOL, "--library=" + LIBRARY, "--graph=" + graph, "--y=y", "--x=x",
                        "--feed=x=@" + str(tmp_path / "x.npy"), "--save=" + out] + list(flags),
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    got = np.load(out)
    return got["y"], got["d_x"], r


def check(tmp_path, fn, x_val, lower):
    graph_def = freeze(fn, x_val, lower)
    ops = op_types(graph_def)
    if lower:
        assert ops & V1_OPS, ops
    else:
        assert ops & FUNCTIONAL_OPS and not ops & V1_OPS, ops
    y_ref, g_ref = eager_gradient(fn, x_val)
    y, g, _ = tf_ext_grad(tmp_path, graph_def, x_val)
    tol = TOL[x_val.dtype.type]
    np.testing.assert_allclose(y, y_ref, rtol=tol)
    assert np.abs(g_ref).max() > 0
    rel = np.abs(g - g_ref).max() / np.abs(g_ref).max()
    assert rel <= tol, "max relative error %.3g" % rel


X = (rng(3).standard_normal((2, 3)) * 0.5).astype(np.float32)


@pytest.mark.parametrize("lower", [False, True], ids=["functional", "lowered"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_case_matches_gradient_tape(tmp_path, case, lower):
    check(tmp_path, CASES[case], X, lower)


@pytest.mark.parametrize("lower", [False, True], ids=["functional", "lowered"])
@pytest.mark.parametrize("case", ["while_data_dependent_trip_count", "nested_while", "cond_else"])
def test_float64(tmp_path, case, lower):
    check(tmp_path, CASES[case], X.astype(np.float64), lower)


@pytest.mark.parametrize("case,once", [("sequence_read_and_returned", True),
                                       ("sequence_read_every_other_step", True),
                                       ("sequence_read_at_two_steps", False)])
def test_sequence_gradient_written_once_per_element(tmp_path, case, once):
    # A list read at the loop's counter (an RNN's input) gets its gradient written once per
    # element, into a fresh list added to the incoming gradient after the loop, rather than
    # added into every iteration (docs/control_flow.md); a list read at another index is not.
    # The values are checked by test_case_matches_gradient_tape.
    graph_def = freeze(CASES[case], X, False)
    dump = tmp_path / "backward.pbtxt"
    tf_ext_grad(tmp_path, graph_def, X, "--dump_backward=" + str(dump))
    assert ("/fresh_list" in dump.read_text()) == once
    # With nothing after the loop reading the list, no gradient comes in: the written list is
    # the gradient, with no zeros of the sequence made and added to it.
    assert ("/fresh_list_sum" in dump.read_text()) == (case == "sequence_read_and_returned")


def test_random_ops_in_a_loop_run_once(tmp_path):
    # y = <x, U>, U the sum of a stateful draw per iteration: d y / d x = U exactly when the
    # gradient reuses the forward's draws, so y == <x, dy/dx>; recomputing the loop would draw
    # another U.
    def fn(x):
        def body(i, acc):
            return i + 1, acc + tf.random.uniform(tf.shape(x), dtype=x.dtype)
        _, u = tf.while_loop(lambda i, acc: i < 3, body, [tf.constant(0), tf.zeros_like(x)])
        return tf.reduce_sum(x * u)
    for lower in (False, True):
        graph_def = freeze(fn, X, lower)
        y, g, _ = tf_ext_grad(tmp_path, graph_def, X)
        assert g.min() > 0 and g.max() < 3  # three draws in [0, 1)
        np.testing.assert_allclose(y, np.sum(X * g), rtol=1e-5)


# Keras recurrent layers (Keras 3 runs them as a tf.while_loop over TensorLists).
def keras_model(name):
    keras = tf.keras
    tf.keras.utils.set_random_seed(0)
    if name == "LSTM":
        layers = [keras.layers.LSTM(4)]
    elif name == "stacked_GRU":
        layers = [keras.layers.GRU(4, return_sequences=True), keras.layers.GRU(3)]
    elif name == "SimpleRNN_go_backwards":
        layers = [keras.layers.SimpleRNN(4, go_backwards=True, return_sequences=True)]
    elif name == "masked_stacked_Bidirectional_LSTM":
        layers = [keras.layers.Masking(0.0),
                  keras.layers.Bidirectional(keras.layers.LSTM(3, return_sequences=True)),
                  keras.layers.LSTM(2)]
    else:
        raise ValueError(name)
    model = keras.Sequential([keras.Input((5, 3))] + layers)
    def fn(x):
        y = model(x, training=False)
        r = tf.constant(np.linspace(-1.0, 1.0, int(np.prod(y.shape))).reshape(y.shape),
                        y.dtype)
        return tf.reduce_sum(y * r)
    return fn


RNN_X = rng(4).standard_normal((2, 5, 3)).astype(np.float32)
RNN_X[1, 3:] = 0.0  # masked steps for the Masking model


@pytest.mark.parametrize("lower", [False, True], ids=["functional", "lowered"])
@pytest.mark.parametrize("name", ["LSTM", "stacked_GRU", "SimpleRNN_go_backwards",
                                  "masked_stacked_Bidirectional_LSTM"])
def test_keras_recurrent_layer(tmp_path, name, lower):
    check(tmp_path, keras_model(name), RNN_X, lower)


def test_malformed_frame_is_one_error_naming_it(tmp_path):
    # A lowered loop whose Enter nodes disagree on their frame is no loop TensorFlow can convert
    # back: one InvalidArgument naming the v1 nodes, no crash.
    graph_def = freeze(CASES["while_data_dependent_trip_count"], X, True)
    enters = [n for n in graph_def.node if n.op == "Enter"]
    assert len(enters) >= 2
    enters[0].attr["frame_name"].s = b"another_frame"
    graph = str(tmp_path / "model.pb")
    with open(graph, "wb") as f:
        f.write(graph_def.SerializeToString())
    np.save(str(tmp_path / "x.npy"), X)
    r = subprocess.run([TOOL, "--library=" + LIBRARY, "--graph=" + graph, "--y=y", "--x=x",
                        "--feed=x=@" + str(tmp_path / "x.npy")], capture_output=True, text=True)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "lowered (v1) control flow (" in r.stderr, r.stderr[-2000:]
    assert "Enter '" in r.stderr, r.stderr[-2000:]


def assert_one_loop_saves(tmp_path, fn, x_val, saved, rtol):
    """fn frozen with its loop functional: tf_ext_grad's gradient matches GradientTape's, and
    its one loop saves `saved` tensors for the gradient."""
    graph_def = freeze(fn, x_val, False)
    y_ref, g_ref = eager_gradient(fn, x_val)
    y, g, r = tf_ext_grad(tmp_path, graph_def, x_val)
    np.testing.assert_allclose(y, y_ref, rtol=1e-5)
    np.testing.assert_allclose(g, g_ref, rtol=rtol, atol=1e-6)
    assert f"1 loop and 0 conditionals saving {saved} tensors" in r.stdout, r.stdout


@pytest.mark.parametrize("flags", [[], ["--memory_budget=64M", "--optimize=false"]],
                         ids=["saved", "checkpointed"])
def test_saved_tensors_share_one_list_per_dtype(tmp_path, flags):
    # A Keras LSTM's gradient reads several float tensors a step and the step counter: the loop
    # that saves them (the forward loop, or with a budget the step loop that recomputes a
    # segment) pushes them onto one list per dtype, not one list each, so each lowered loop
    # carries two more loop variables, not one per tensor. The values are checked by
    # test_keras_recurrent_layer and test_memory_budget_loops.py. (With TensorFlow's
    # optimizations, a budget whose plan recomputes forward nodes dumps the graph Grappler's
    # first stage made, its loops lowered into it: --optimize=false dumps the loops as the
    # control-flow pass built them.)
    graph_def = freeze(keras_model("LSTM"), RNN_X, False)
    dump = tmp_path / "backward.pbtxt"
    y, g, r = tf_ext_grad(tmp_path, graph_def, RNN_X, "--dump_backward=" + str(dump), *flags)
    y_ref, g_ref = eager_gradient(keras_model("LSTM"), RNN_X)
    np.testing.assert_allclose(g, g_ref, rtol=1e-5, atol=1e-6)
    backward = tf.compat.v1.GraphDef()
    text_format.Parse(dump.read_text(), backward)
    bodies = {f.signature.name: f for f in backward.library.function
              if "while_body" in f.signature.name}
    saver = [f for name, f in bodies.items()  # the loop that pushes what the gradient reads
             if ("_tf_ext_recompute_segment" if flags else "_tf_ext_fwd") in name]
    assert len(saver) == 1, list(bodies)
    saver = saver[0]
    pushes = [n for n in saver.node_def
              if n.op == "TensorListPushBack" and "_ckpt/" not in n.name]
    lists = {n.name.rsplit("/push_", 1)[0] for n in pushes}
    dtypes = {n.attr["element_dtype"].type for n in pushes}
    assert len(pushes) >= 4 and len(lists) == len(dtypes) <= 2, [n.name for n in pushes]


def test_list_items_overwritten_in_a_loop_are_not_saved(tmp_path):
    # TensorListSetItem's gradient zeroes the item it overwrote: only the item's shape is needed,
    # so the loop saves h (for d x), tanh(h x) (for TanhGrad) and the index i, not the item 2 h'.
    def fn(x):
        def body(i, h, ta):
            h2 = tf.tanh(h * x)
            return i + 1, h2, ta.write(i, h2 * 2.0)
        ta = tf.TensorArray(x.dtype, size=3, element_shape=x.shape)
        _, _, ta = tf.while_loop(lambda i, h, ta: i < 3, body, [tf.constant(0), x, ta])
        return tf.reduce_sum(ta.stack())
    assert_one_loop_saves(tmp_path, fn, X, 3, rtol=1e-5)


def test_frozen_weights_gradient_reads_are_not_saved(tmp_path):
    # A frozen LSTM's kernels enter its loop (functional, as make bench-models freezes it) as
    # constants, so no gradient is wanted for them: the loop saves the four gates, tanh(c), the
    # previous c and the index (7 tensors), not also the input step and the previous h, which
    # only the kernels' gradients read (9 before).
    assert_one_loop_saves(tmp_path, keras_model("LSTM"), RNN_X, 7, rtol=1e-4)
