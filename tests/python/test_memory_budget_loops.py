"""tf_ext_grad --memory_budget on loops (tf_ext/graph/engine/control_flow.h, docs/memory.md).

Under a budget a loop saves per iteration only what recomputing its body needs (the loop
variables at the iteration's start, the outputs of stateful nodes) and its gradient loop
recomputes the rest. Checked here: gradients with and without a budget are equal (within 1e-6
of the largest entry, bitwise on the GRU below; --optimize=false) on every control-flow case of test_control_flow.py (functional and lowered
frames) and on Keras LSTM, GRU, SimpleRNN and a masked Bidirectional LSTM; the loop saves fewer
tensors; a stateful random op inside the loop is not recomputed (its draws are the forward's);
and on a Keras GRU(128) over 4000 steps the measured rise of VmHWM stays within 1.1x the
budget + 32 MB where the unbudgeted rise is at least 3x the budget, gradients bitwise equal. No timings are asserted.
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
        y, g, r = cf.tf_ext_grad(tmp_path, graph_def, cf.X, "--optimize=false", BUDGET)
        assert g.min() > 0.5 ** 4 and g.max() < 1.5 ** 4
        np.testing.assert_allclose(y, np.sum(cf.X * g), rtol=1e-5)


def measured_rise(stdout):
    m = re.search(r"peak resident memory: (\d+) MB \((\d+) MB once", stdout)
    assert m, stdout
    return int(m.group(1)) - int(m.group(2))


@pytest.mark.parametrize("layer,bitwise", [("GRU", True)])
def test_keras_recurrent_peak_drops(tmp_path, layer, bitwise):
    # GRU(128) over 4000 steps, batch 16: 7 tensors saved per step without a budget (about
    # 300 MB measured), its state and the step with one (about 110 MB).
    tf.keras.utils.set_random_seed(0)
    steps, batch, features = 4000, 16, 8
    model = tf.keras.Sequential([tf.keras.Input((steps, features)),
                                 getattr(tf.keras.layers, layer)(128)])
    x = np.random.default_rng(5).standard_normal((batch, steps, features)).astype(np.float32)

    def fn(v):
        return tf.reduce_sum(model(v, training=False))
    graph_def = cf.freeze(fn, x, False)
    budget_mb = 80
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _, g0, r0 = cf.tf_ext_grad(tmp_path / "a", graph_def, x, "--optimize=false")
    _, g1, r1 = cf.tf_ext_grad(tmp_path / "b", graph_def, x, "--optimize=false",
                               "--memory_budget=%dM" % budget_mb)
    if bitwise:
        np.testing.assert_array_equal(g0, g1)
    base, budgeted = measured_rise(r0.stdout), measured_rise(r1.stdout)
    print("VmHWM rise: %d MB without a budget, %d MB with %d MB" % (base, budgeted, budget_mb))
    assert base >= 3 * budget_mb, (base, budgeted)
    assert budgeted <= 1.1 * budget_mb + 32, (base, budgeted)
