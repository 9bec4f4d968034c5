"""tf_ext_grad --memory_budget (tf_ext/graph/passes/rematerialize.h, docs/memory.md).

Gradients with and without a budget are bitwise equal, with --optimize=false (the same kernels
run on the same values) and with TensorFlow's graph optimizations (a MatMul or convolution, its
bias and its activation are kept or recomputed together, so that Grappler fuses a copy as it
fuses its original, and the budget is planned on the graph Grappler's first stage made:
runtime/grappler_stages.h); on a straight-line MLP, on a frozen Keras CNN and on a Keras
encoder block, whose backward graph is also byte-identical in every process (built in the
graph's order, not the process's addresses). A budget is honoured, with and without
TensorFlow's optimizations: the measured rise of the process's peak (VmHWM) over its size once
the graph and feeds are loaded stays within 1.1x the budget + 32 MB on a graph whose
unbudgeted estimate is 3x the budget, and with TensorFlow's graph optimizations on, the measured saving is most of
the estimated one (no Grappler pass merged the recomputed copies back). A budget the builder
cannot meet is refused, naming the smallest it can. Loops under a budget:
test_memory_budget_loops.py. No timings are asserted.
"""
import os
import re
import subprocess

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import convert_to_constants

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.path.join(RUNFILES, "tf_ext") if RUNFILES else os.getcwd()
TOOL = os.path.join(WORKSPACE, "tf_ext", "tf_ext_grad")
if not RUNFILES:
    TOOL = os.path.join(WORKSPACE, "bazel-bin", "tf_ext", "tf_ext_grad")


def mlp_graph(batch, width, layers, path):
    """y = sum(h * h), h = tanh(h W_i + b_i) repeated: a straight-line MLP, placeholder x."""
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, width], name="x")
        h = x
        for i in range(layers):
            w = rng.standard_normal((width, width)).astype(np.float32) / np.float32(np.sqrt(width))
            b = (rng.standard_normal(width) * 0.1).astype(np.float32)
            h = tf.tanh(tf.nn.bias_add(tf.matmul(h, tf.constant(w, name=f"w{i}")),
                                       tf.constant(b, name=f"b{i}")))
        tf.reduce_sum(h * h, name="y")
    with open(path, "wb") as f:
        f.write(g.as_graph_def().SerializeToString())


def keras_graph(model, shape, path):
    """The Keras model frozen: y = sum(model(x) * r), r a fixed random projection."""
    r = tf.constant(np.random.default_rng(3).standard_normal(
        model.compute_output_shape(shape)).astype(np.float32))
    fn = tf.function(lambda x: tf.reduce_sum(model(x) * r)).get_concrete_function(
        tf.TensorSpec(shape, tf.float32, name="x"))
    frozen = convert_to_constants.convert_variables_to_constants_v2(fn)
    with open(path, "wb") as f:
        f.write(frozen.graph.as_graph_def().SerializeToString())
    return frozen.outputs[0].name.split(":")[0]


def run(graph, y, xs, x_value, tmp_path, tag, *flags, check=True):
    np.save(tmp_path / "x.npy", x_value)
    out = tmp_path / f"{tag}.npz"
    proc = subprocess.run([TOOL, f"--graph={graph}", f"--y={y}", f"--x={xs}",
                           f"--feed=x=@{tmp_path / 'x.npy'}", f"--save={out}", *flags],
                          capture_output=True, text=True)
    if check:
        assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc, (dict(np.load(out)) if proc.returncode == 0 else None)


def mb(pattern, text):
    m = re.search(pattern, text)
    assert m, text
    return float(m.group(1))


def estimated(text):
    return mb(r"estimated peak: ([0-9.]+) MB", text)


def measured_rise(text):
    m = re.search(r"peak resident memory: (\d+) MB \((\d+) MB once", text)
    assert m, text
    return int(m.group(1)) - int(m.group(2))


def assert_equal_gradients(a, b, bitwise):
    assert a.keys() == b.keys()
    for k in a:
        if bitwise:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        else:
            scale = max(np.abs(a[k]).max(), 1e-30)
            assert np.abs(a[k] - b[k]).max() / scale <= 1e-5, k


def budgeted_equals_base(graph, y, xs, x, tmp_path, optimize, budget):
    """Runs without and with --memory_budget=budget (a fraction), checks the estimate meets it
    by recomputation and the gradients are bitwise those without it (with TensorFlow's
    optimizations, without a budget the weights fed as a budget feeds them: --hoist_constants);
    returns the budgeted run."""
    base, g0 = run(graph, y, xs, x, tmp_path, "base", f"--optimize={optimize}",
                   "--hoist_constants")
    budgeted, g1 = run(graph, y, xs, x, tmp_path, "budget", f"--optimize={optimize}",
                       f"--memory_budget={budget}")
    assert re.search(r"recomputes \d+ nodes \([0-9.e+]+ FLOPs added\)",
                     budgeted.stdout), budgeted.stdout
    assert estimated(budgeted.stdout) <= budget * estimated(base.stdout) + 0.1
    assert_equal_gradients(g0, g1, bitwise=True)
    return budgeted


@pytest.mark.parametrize("optimize", ["false", "true"])
def test_mlp_gradients_equal_with_budget(tmp_path, optimize):
    graph = tmp_path / "mlp.pb"
    mlp_graph(1024, 128, 12, graph)
    x = np.random.default_rng(1).standard_normal((1024, 128)).astype(np.float32)
    # Bitwise with Grappler too: each copied MatMul + BiasAdd + Tanh is fused as its original.
    budgeted_equals_base(graph, "y", "x,w0,w5", x, tmp_path, optimize, 0.6)


@pytest.mark.parametrize("optimize", ["false", "true"])
def test_gradient_session_takes_the_budget(tmp_path, optimize):
    """--benchmark builds a GradientSession (GradientSessionOptions::backward_memory_budget),
    which plans a budget after Grappler's first stage as tf_ext_grad's plain run does."""
    graph = tmp_path / "mlp.pb"
    mlp_graph(1024, 128, 12, graph)
    x = np.random.default_rng(1).standard_normal((1024, 128)).astype(np.float32)
    _, g0 = run(graph, "y", "x,w0", x, tmp_path, "base", f"--optimize={optimize}",
                "--hoist_constants")
    session, g1 = run(graph, "y", "x,w0", x, tmp_path, "session", f"--optimize={optimize}",
                      "--benchmark=1", "--memory_budget=0.6")
    assert "recomputes" in session.stdout and "steady state" in session.stdout, session.stdout
    assert ("once TensorFlow optimized the graph" in session.stdout) == (optimize == "true")
    assert_equal_gradients(g0, g1, bitwise=True)


@pytest.mark.parametrize("optimize", ["false", "true"])
def test_keras_cnn_gradients_equal_with_budget(tmp_path, optimize):
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([
        tf.keras.Input((32, 32, 3)),
        tf.keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
        *[tf.keras.layers.Conv2D(16, 3, padding="same", activation="tanh") for _ in range(6)],
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Conv2D(32, 3, padding="same", activation="tanh"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(10),
    ])
    graph = tmp_path / "cnn.pb"
    y = keras_graph(model, (16, 32, 32, 3), graph)
    x = np.random.default_rng(2).standard_normal((16, 32, 32, 3)).astype(np.float32)
    budgeted = budgeted_equals_base(graph, y, "x", x, tmp_path, optimize, 0.8)
    # The plan is the graph's, not the process's (the schedule's ties are broken by name).
    again, _ = run(graph, y, "x", x, tmp_path, "again", f"--optimize={optimize}",
                   "--memory_budget=0.8")
    plan = lambda out: [l for l in out.splitlines() if l.startswith(("estimated", "memory budget"))]
    assert plan(again.stdout) == plan(budgeted.stdout), (again.stdout, budgeted.stdout)


def encoder_graph(path):
    """A Keras encoder block (attention, layer normalisation, a GELU feed-forward), frozen: its
    input feeds the query, key and value projections and the residual, so its gradient sums
    several contributions. Returns y's name and an input."""
    tf.keras.utils.set_random_seed(0)
    layers = tf.keras.layers
    x = tf.keras.Input((32, 64))
    h = layers.LayerNormalization()(x + layers.MultiHeadAttention(4, 16)(x, x))
    f = layers.Dense(64)(layers.Dense(128, activation="gelu")(h))
    model = tf.keras.Model(x, layers.Dense(8)(layers.LayerNormalization()(h + f)))
    y = keras_graph(model, (8, 32, 64), path)
    return y, np.random.default_rng(4).standard_normal((8, 32, 64)).astype(np.float32)


def test_gradient_graph_is_the_same_in_every_process(tmp_path):
    """The backward graph is built in an order of the graph's own (the order its nodes were
    built in), not of the process's memory addresses: three processes build byte-identical graphs, and their gradients
    are bitwise equal without Grappler (whose arithmetic optimizer would sort a sum's inputs and
    so hide a sum built in another order)."""
    graph = tmp_path / "encoder.pb"
    y, x = encoder_graph(graph)
    dumps, gradients = [], []
    for i in range(3):
        dump = tmp_path / f"backward{i}.pbtxt"
        _, g = run(graph, y, "x", x, tmp_path, f"run{i}", "--optimize=false",
                   f"--dump_backward={dump}")
        dumps.append(dump.read_text())
        gradients.append(g)
    assert dumps[1] == dumps[0] and dumps[2] == dumps[0]
    for g in gradients[1:]:
        assert_equal_gradients(gradients[0], g, bitwise=True)


@pytest.mark.parametrize("optimize,budget", [("false", 0.7), ("true", 0.4), ("true", 0.6)])
def test_keras_encoder_gradients_equal_with_budget(tmp_path, optimize, budget):
    """Bitwise with TensorFlow's optimizations too: the budget is planned on the graph
    Grappler's first stage made, and its second stage runs the remapper alone
    (runtime/grappler_stages.h). Planned before Grappler, the gradient at 0.6 moved by 3e-7
    and 0.4 could not be met. At 0.4 the plan recomputes matrix products, at 0.6 only the
    cheap nodes between them."""
    graph = tmp_path / "encoder.pb"
    y, x = encoder_graph(graph)
    budgeted = budgeted_equals_base(graph, y, "x", x, tmp_path, optimize, budget)
    if optimize == "true":
        assert "once TensorFlow optimized the graph" in budgeted.stdout, budgeted.stdout


def batch_norm_cnn_graph(path):
    """8 x (3x3 convolution, batch normalisation in training mode, ReLU) on [16, 32, 32, 16]:
    FusedBatchNormV3 nodes, whose gradient reads the convolution's output."""
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [16, 32, 32, 16], name="x")
        h = x
        for i in range(8):
            w = (rng.standard_normal((3, 3, 16, 16)) / 12).astype(np.float32)
            h = tf.nn.conv2d(h, tf.constant(w, name=f"w{i}"), 1, "SAME")
            h, _, _ = tf.compat.v1.nn.fused_batch_norm(h, tf.ones([16]), tf.zeros([16]),
                                                       is_training=True)
            h = tf.nn.relu(h)
        tf.reduce_sum(h * h, name="y")
    with open(path, "wb") as f:
        f.write(g.as_graph_def().SerializeToString())


@pytest.mark.parametrize("optimize", ["false", "true"])
def test_cheap_nodes_recomputed_between_kept_convolutions(tmp_path, optimize):
    """The second family of plans: every convolution kept, only the batch normalisations and
    ReLUs between them recomputed (a training-mode FusedBatchNormV3's reserve_space_3, which
    shape inference leaves unknown, is empty on the CPU), and the line says so."""
    graph = tmp_path / "bn.pb"
    batch_norm_cnn_graph(graph)
    x = np.random.default_rng(1).standard_normal((16, 32, 32, 16)).astype(np.float32)
    budgeted = budgeted_equals_base(graph, "y", "x", x, tmp_path, optimize, 0.8)
    m = re.search(r"recomputes (\d+) nodes \(([0-9.e+]+) FLOPs added\), keeping every matrix "
                  r"product and convolution and 1 forward tensor in \d+ of the others$",
                  budgeted.stdout, re.M)
    assert m, budgeted.stdout
    one_convolution = 2 * 16 * 32 * 32 * 16 * 3 * 3 * 16
    assert 0 < float(m.group(2)) < one_convolution / 4


@pytest.mark.parametrize("optimize", ["false", "true"])
def test_budget_honoured(tmp_path, optimize):
    graph = tmp_path / "deep.pb"
    mlp_graph(8192, 256, 64, graph)
    x = np.random.default_rng(1).standard_normal((8192, 256)).astype(np.float32)
    base, _ = run(graph, "y", "x", x, tmp_path, "base", f"--optimize={optimize}",
                  "--hoist_constants")
    unbudgeted = estimated(base.stdout)
    budget_mb = int(unbudgeted / 3)
    budgeted, _ = run(graph, "y", "x", x, tmp_path, "budget", f"--optimize={optimize}",
                      f"--memory_budget={budget_mb}M")
    assert estimated(budgeted.stdout) <= budget_mb
    rise = measured_rise(budgeted.stdout)
    assert rise <= 1.1 * budget_mb + 32, (rise, budget_mb, budgeted.stdout)
    assert measured_rise(base.stdout) > rise


def test_grappler_keeps_the_recomputation(tmp_path):
    """With TensorFlow's graph optimizations on, the measured saving is most of the estimated
    one: no pass merged the recomputed copies back into the forward nodes."""
    graph = tmp_path / "deep.pb"
    mlp_graph(4096, 256, 64, graph)
    x = np.random.default_rng(1).standard_normal((4096, 256)).astype(np.float32)
    base, _ = run(graph, "y", "x", x, tmp_path, "base", "--optimize=true")
    budgeted, _ = run(graph, "y", "x", x, tmp_path, "budget", "--optimize=true",
                      "--memory_budget=0.33")
    estimated_saving = estimated(base.stdout) - estimated(budgeted.stdout)
    measured_saving = measured_rise(base.stdout) - measured_rise(budgeted.stdout)
    assert estimated_saving > 100
    assert measured_saving >= 0.7 * estimated_saving, (measured_saving, estimated_saving)


def test_budget_feeds_the_frozen_weights(tmp_path):
    """Under a budget with TensorFlow's graph optimizations on, the frozen weights are fed
    (as --hoist_constants), not held in Const nodes that Grappler copies and folds: 64 MB of
    weights cost about 1 GB above the loaded graph unbudgeted, and no recomputation wins that
    back. Gradients stay those of --optimize=false within round-off."""
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 1024], name="x")
        h = x
        for i in range(16):
            w = (rng.standard_normal((1024, 1024)) / 32).astype(np.float32)
            s = (1 + 0.1 * rng.standard_normal(1024)).astype(np.float32)
            h = tf.tanh(tf.matmul(h, tf.constant(w, name=f"w{i}")) * tf.constant(s, name=f"s{i}"))
        tf.reduce_sum(h * h, name="y")
    graph = tmp_path / "weights.pb"
    graph.write_bytes(g.as_graph_def().SerializeToString())
    xv = rng.standard_normal((512, 1024)).astype(np.float32)
    plain, _ = run(graph, "y", "x", xv, tmp_path, "plain", "--optimize=true")
    hoisted, _ = run(graph, "y", "x", xv, tmp_path, "hoisted", "--optimize=true",
                     "--hoist_constants", "--memory_budget=0.5")
    budgeted, g1 = run(graph, "y", "x", xv, tmp_path, "budget", "--optimize=true",
                       "--memory_budget=0.5")
    _, g0 = run(graph, "y", "x", xv, tmp_path, "reference", "--optimize=false")
    assert measured_rise(plain.stdout) > measured_rise(hoisted.stdout) + 256, plain.stdout
    assert measured_rise(budgeted.stdout) <= measured_rise(hoisted.stdout) + 32, budgeted.stdout
    assert_equal_gradients(g0, g1, bitwise=False)


def test_gradient_nodes_of_forward_tensors_alone_are_deferred(tmp_path):
    """A gradient body's nodes that read forward tensors alone (SquaredDifference's 2 (x - y))
    run during the forward pass and are held until the backward pass reads them, unless the
    budget defers them to where they are read: without that, no budget below 0.73 of this
    graph's unbudgeted estimate could be met. Gradients are bitwise those without a budget."""
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 256], name="x")
        h = x
        for i in range(24):
            z = tf.matmul(h, tf.constant((rng.standard_normal((256, 256)) / 16).astype(np.float32)))
            h = tf.tanh(tf.math.squared_difference(z, tf.reduce_mean(z, axis=0, keepdims=True)))
        tf.reduce_sum(h * h, name="y")
    graph = tmp_path / "centred.pb"
    graph.write_bytes(g.as_graph_def().SerializeToString())
    xv = rng.standard_normal((4096, 256)).astype(np.float32)
    base, g0 = run(graph, "y", "x", xv, tmp_path, "base", "--optimize=false")
    dump = tmp_path / "backward.pbtxt"
    budgeted, g1 = run(graph, "y", "x", xv, tmp_path, "budget", "--optimize=false",
                       "--memory_budget=0.3", f"--dump_backward={dump}")
    budget_mb = mb(r"memory budget ([0-9.]+) MB", budgeted.stdout)
    assert estimated(budgeted.stdout) <= budget_mb
    assert re.search(r'name: ".*/recompute/.*/x_sub_y', dump.read_text()), "x - y not deferred"
    assert measured_rise(budgeted.stdout) <= 1.1 * budget_mb + 32, budgeted.stdout
    assert_equal_gradients(g0, g1, bitwise=True)


def test_budget_it_cannot_meet_names_the_smallest(tmp_path):
    graph = tmp_path / "mlp.pb"
    mlp_graph(1024, 128, 6, graph)
    x = np.random.default_rng(1).standard_normal((1024, 128)).astype(np.float32)
    proc, _ = run(graph, "y", "x", x, tmp_path, "tiny", "--memory_budget=64K", check=False)
    assert proc.returncode != 0
    m = re.search(r"cannot be met: .* smallest it can meet is ([0-9.]+) MB \((\d+) bytes\)",
                  proc.stderr)
    assert m, proc.stderr
    proc, _ = run(graph, "y", "x", x, tmp_path, "smallest", f"--memory_budget={m.group(2)}")
    assert "recomputes" in proc.stdout


@pytest.mark.parametrize("bad", ["0.0", "1.5", "-3", "12Q", "abc", ""])
def test_bad_budgets_are_refused(tmp_path, bad):
    graph = tmp_path / "mlp.pb"
    mlp_graph(8, 8, 2, graph)
    x = np.zeros((8, 8), np.float32)
    proc, _ = run(graph, "y", "x", x, tmp_path, "bad", f"--memory_budget={bad}", check=False)
    if bad == "":
        assert proc.returncode == 0  # no budget
        return
    assert proc.returncode != 0
    assert f"memory budget '{bad}'" in proc.stderr, proc.stderr
