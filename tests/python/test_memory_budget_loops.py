"""tf_ext_grad --memory_budget on loops (tf_ext/graph/engine/control_flow.h, docs/memory.md).

Under a budget a loop saves only what recomputing its body needs (the loop variables at the
iteration's start, the outputs of stateful nodes) and its gradient loop recomputes the rest;
the loop variables (the carried state) are checkpointed at a stride growing as sqrt(iteration),
and the gradient loop recomputes a segment's state from its checkpoint. Checked here: gradients
with and without a budget are equal (within 1e-6 of the largest entry, bitwise on the GRU and
LSTM below; --optimize=false) on every control-flow case of test_control_flow.py (functional and
lowered frames), on Keras LSTM, GRU, SimpleRNN and a masked Bidirectional LSTM, on loops of 0, 1
and up to 50 iterations (segments cut short by the loop's end) and on one whose trip count
depends on x's values; the loop saves fewer tensors; a stateful random op inside the loop is not
recomputed (its draws are the forward's) and its loop saves its state every iteration instead of
checkpointing it; on a Keras GRU(128) over 4000 steps the measured rise of VmHWM stays within
1.1x the budget + 32 MB where the unbudgeted rise is at least 3x the budget; and on a GRU(128)
and an LSTM(128) over 4000 steps the checkpoints lower the measured rise by at least half the
carried state's size (T x batch x units x 4 bytes, x2 for an LSTM's h and c) against the same
budget with TF_EXT_LOOP_CHECKPOINTS=0 (the state saved every iteration), gradients bitwise
equal. No timings are asserted.
"""
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_control_flow as cf  # noqa: E402  (its cases, freezing and tf_ext_grad runner)

# A budget in bytes that the straight-line part of these graphs meets without recomputing:
# only the loops change.
BUDGET = "--memory_budget=256M"


def saved_tensors(stdout):
    m = re.search(r"saving (\d+) tensors for their gradients", stdout)
    assert m, stdout
    return int(m.group(1))


def checkpointed(dump):
    """Whether the backward graph tf_ext_grad dumped recomputes a loop's state from checkpoints
    (the step loop's function, control_flow.cc)."""
    return "_tf_ext_recompute_segment" in dump.read_text()


def with_and_without_budget(tmp_path, graph_def, x_val, *flags):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    y0, g0, r0 = cf.tf_ext_grad(tmp_path / "a", graph_def, x_val, "--optimize=false", *flags)
    y1, g1, r1 = cf.tf_ext_grad(tmp_path / "b", graph_def, x_val, "--optimize=false", BUDGET,
                                *flags)
    np.testing.assert_array_equal(y0, y1)
    # Bitwise where the run is deterministic; a lowered loop's gradient sums its list's
    # elements in the order they arrive, which moves the last bit between runs even without a
    # budget (sequence_read_and_returned, lowered).
    assert np.abs(g1 - g0).max() <= 1e-6 * np.abs(g0).max(), (g0, g1)
    return r0, r1


# Lists stacked or concatenated outside the loop whose sizes shape inference cannot tell: the
# straight-line part's budget is refused for them, as for any graph of unknown forward sizes.
UNKNOWN_SIZES = {"tensor_list_unstack_in_loop", "unknown_element_shape_in_loop"}


@pytest.mark.parametrize("lower", [False, True], ids=["functional", "lowered"])
@pytest.mark.parametrize("case", sorted(cf.CASES))
def test_control_flow_gradients_equal_with_budget(tmp_path, case, lower):
    graph_def = cf.freeze(cf.CASES[case], cf.X, lower)
    if case in UNKNOWN_SIZES:
        graph = tmp_path / "model.pb"
        graph.write_bytes(graph_def.SerializeToString())
        r = subprocess.run([cf.TOOL, "--library=" + cf.LIBRARY, "--graph=%s" % graph, "--y=y",
                            "--x=x", BUDGET], capture_output=True, text=True)
        assert r.returncode != 0 and "forward tensors unknown" in r.stderr, r.stderr[-2000:]
        return
    r0, r1 = with_and_without_budget(tmp_path, graph_def, cf.X)
    assert saved_tensors(r1.stdout) <= saved_tensors(r0.stdout)


@pytest.mark.parametrize("lower", [False, True], ids=["functional", "lowered"])
@pytest.mark.parametrize("name", ["LSTM", "stacked_GRU", "SimpleRNN_go_backwards",
                                  "masked_stacked_Bidirectional_LSTM"])
def test_keras_recurrent_gradients_equal_with_budget(tmp_path, name, lower):
    graph_def = cf.freeze(cf.keras_model(name), cf.RNN_X, lower)
    r0, r1 = with_and_without_budget(tmp_path, graph_def, cf.RNN_X)
    # The gates and activations are recomputed, the carried state saved (a functional
    # SimpleRNN saves its tanh's output and the step without a budget, its state and the step
    # with one).
    if name == "SimpleRNN_go_backwards":
        assert saved_tensors(r1.stdout) <= saved_tensors(r0.stdout)
    else:
        assert saved_tensors(r1.stdout) < saved_tensors(r0.stdout), (r0.stdout, r1.stdout)


def test_random_op_in_a_loop_is_not_recomputed(tmp_path):
    # h = x * r_1 * ... * r_4, r_i a stateful draw per iteration; y = sum(h), so
    # dy/dx = prod r_i, and y == <x, dy/dx> only when the backward loop reads the forward's
    # draws (a recomputed RandomUniform would draw new ones).
    def fn(x):
        def body(i, h):
            r = tf.random.uniform(tf.shape(x), 0.5, 1.5, dtype=x.dtype)
            return i + 1, h * r
        _, h = tf.while_loop(lambda i, h: i < 4, body, [tf.constant(0), x])
        return tf.reduce_sum(h)
    for lower in (False, True):
        graph_def = cf.freeze(fn, cf.X, lower)
        dump = tmp_path / "backward.pbtxt"
        y, g, r = cf.tf_ext_grad(tmp_path, graph_def, cf.X, "--optimize=false", BUDGET,
                                 "--dump_backward=" + str(dump))
        assert g.min() > 0.5 ** 4 and g.max() < 1.5 ** 4
        np.testing.assert_allclose(y, np.sum(cf.X * g), rtol=1e-5)
        # h's next value reads the draw: no step recomputes it, h is saved every iteration.
        assert not checkpointed(dump)


def gated_loop(steps):
    """A loop of `steps` iterations (a tensor, or a Python int frozen as a constant) carrying
    h and c through a gated update."""
    def fn(x):
        w = cf.weights((3, 3), x.dtype.as_numpy_dtype)
        def body(i, h, c):
            c = c * 0.9 + tf.tanh(tf.matmul(h, w))
            return i + 1, tf.sigmoid(c + x) * tf.tanh(c), c
        n = steps(x) if callable(steps) else steps
        _, h, c = tf.while_loop(lambda i, h, c: i < n, body, [tf.constant(0), x, x * 0.5])
        return tf.reduce_sum(h) + tf.reduce_sum(c * c)
    return fn


# Trip counts: none, one, and counts whose last segment (counted from the end: the gradient
# loop's first) is cut short; checkpoints are at 0, 1, 2, 3, 4, 6, 8, 9, 12, 15, 16, 20, 24, 25, ...
@pytest.mark.parametrize("lower", [False, True], ids=["functional", "lowered"])
@pytest.mark.parametrize("steps", [0, 1, 2, 5, 11, 17, 50])
def test_checkpointed_state_gradients_equal(tmp_path, steps, lower):
    graph_def = cf.freeze(gated_loop(steps), cf.X, lower)
    dump = tmp_path / "backward.pbtxt"
    r0, r1 = with_and_without_budget(tmp_path, graph_def, cf.X, "--dump_backward=" + str(dump))
    assert checkpointed(dump)
    assert saved_tensors(r1.stdout) <= saved_tensors(r0.stdout)


@pytest.mark.parametrize("lower", [False, True], ids=["functional", "lowered"])
def test_checkpointed_state_trip_count_known_at_run_time(tmp_path, lower):
    # The trip count depends on x's values (36 for cf.X): the checkpoints' stride does not
    # need it in advance.
    def steps(x):
        return tf.cast(tf.reduce_sum(tf.abs(x)) * 15.0, tf.int32)
    graph_def = cf.freeze(gated_loop(steps), cf.X, lower)
    y_ref, g_ref = cf.eager_gradient(gated_loop(steps), cf.X)
    dump = tmp_path / "backward.pbtxt"
    with_and_without_budget(tmp_path, graph_def, cf.X, "--dump_backward=" + str(dump))
    assert checkpointed(dump)
    _, g, _ = cf.tf_ext_grad(tmp_path, graph_def, cf.X, "--optimize=false", BUDGET)
    assert np.abs(g - g_ref).max() <= 1e-4 * np.abs(g_ref).max()


def measured_rise(stdout):
    m = re.search(r"peak resident memory: (\d+) MB \((\d+) MB once", stdout)
    assert m, stdout
    return int(m.group(1)) - int(m.group(2))


STEPS, BATCH, FEATURES, UNITS = 4000, 16, 8, 128


def long_recurrent_graph(layer):
    """A Keras `layer`(128) over 4000 steps of 8 features, batch 16, frozen functional."""
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input((STEPS, FEATURES)),
                                 getattr(tf.keras.layers, layer)(UNITS)])
    x = np.random.default_rng(5).standard_normal((BATCH, STEPS, FEATURES)).astype(np.float32)

    def fn(v):
        return tf.reduce_sum(model(v, training=False))
    return cf.freeze(fn, x, False), x


def budgeted_runs(tmp_path, monkeypatch, graph_def, x, budget_mb):
    """tf_ext_grad under the budget with checkpoints, then with the state saved every
    iteration (TF_EXT_LOOP_CHECKPOINTS=0): gradients equal bitwise; returns both rises."""
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "every_step").mkdir()
    budget = "--memory_budget=%dM" % budget_mb
    _, g1, r1 = cf.tf_ext_grad(tmp_path / "checkpoints", graph_def, x, "--optimize=false", budget)
    monkeypatch.setenv("TF_EXT_LOOP_CHECKPOINTS", "0")
    _, g2, r2 = cf.tf_ext_grad(tmp_path / "every_step", graph_def, x, "--optimize=false", budget)
    monkeypatch.delenv("TF_EXT_LOOP_CHECKPOINTS")
    np.testing.assert_array_equal(g1, g2)
    return g1, measured_rise(r1.stdout), measured_rise(r2.stdout)


def test_keras_recurrent_peak_drops(tmp_path, monkeypatch):
    # GRU(128) over 4000 steps, batch 16: 7 tensors saved per step without a budget (about
    # 300 MB measured); its state (h, 33 MB) checkpointed with one.
    graph_def, x = long_recurrent_graph("GRU")
    budget_mb = 80
    (tmp_path / "none").mkdir()
    _, g0, r0 = cf.tf_ext_grad(tmp_path / "none", graph_def, x, "--optimize=false")
    g1, budgeted, every_step = budgeted_runs(tmp_path, monkeypatch, graph_def, x, budget_mb)
    np.testing.assert_array_equal(g0, g1)
    base = measured_rise(r0.stdout)
    carried_mb = STEPS * BATCH * UNITS * 4 / 2 ** 20
    print("VmHWM rise: %d MB without a budget, %d MB with %d MB, %d MB with the state saved "
          "every step (%.0f MB of state)" % (base, budgeted, budget_mb, every_step, carried_mb))
    assert base >= 3 * budget_mb, (base, budgeted)
    assert budgeted <= 1.1 * budget_mb + 32, (base, budgeted)
    assert every_step - budgeted >= 0.5 * carried_mb, (budgeted, every_step)


def test_lstm_checkpoints_bound_the_carried_state(tmp_path, monkeypatch):
    # LSTM(128) over 4000 steps, batch 16: h and c over every step are 62.5 MB; checkpointed,
    # about 4 sqrt(T) of each are held at once (4 MB).
    graph_def, x = long_recurrent_graph("LSTM")
    _, budgeted, every_step = budgeted_runs(tmp_path, monkeypatch, graph_def, x, 64)
    carried_mb = 2 * STEPS * BATCH * UNITS * 4 / 2 ** 20
    print("VmHWM rise with a 64 MB budget: %d MB checkpointed, %d MB with the state saved every "
          "step (%.0f MB of state)" % (budgeted, every_step, carried_mb))
    assert every_step - budgeted >= 0.5 * carried_mb, (budgeted, every_step)
