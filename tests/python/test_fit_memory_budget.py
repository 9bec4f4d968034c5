"""tf_ext_train --memory_budget (the trainer option memory_budget; docs/memory.md): the training
step's backward pass recomputes forward tensors rather than keep them, planned by the same pass
as tf_ext_grad's budget (tf_ext/graph/passes/rematerialize.h) with the feeds' shapes at the batch
size. On a deep straight-line Keras MLP (tf_ext.export_for_training) a budget of 0.4 trains to the
same per-step losses and final weights as no budget, bitwise with and without oneDNN's fusions, the
start-up lines report the estimate and the recomputation, and the measured peak (VmHWM) falls
by at least three quarters of the estimated saving. A Keras encoder block trained by Adam
gets the same losses, metric, validation and weights, bitwise; a residual CNN whose batch
normalisations train the same losses, metric and trainable weights. Malformed budgets are
refused naming the value, through the command line and the C API; a byte budget the builder
cannot meet is refused naming the smallest it can, which is then met; a loop (a Keras LSTM) gets
what tf_ext_grad gives it."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.path.join(RUNFILES, "tf_ext") if RUNFILES else os.getcwd()
TOOL = os.path.join(WORKSPACE, "tf_ext", "tf_ext_train")
LIBRARY = os.path.join(WORKSPACE, "tf_ext", "_tf_ext_ops.so")
RUNNER = os.path.join(WORKSPACE, "tests", "train_fit_c_test")
# 48 tanh layers of width 128 at batch 16384: each activation 8 MiB, the unbudgeted estimate
# about 400 MB, the weights 3 MB; two steps.
WIDTH, LAYERS, BATCH, STEPS = 128, 48, 16384, 2


def deep_mlp(path, layers=LAYERS):
    import keras
    import tf_ext
    keras.utils.set_random_seed(7)
    x = keras.Input(shape=(WIDTH,), name="x")
    h = x
    for _ in range(layers):
        h = keras.layers.Dense(WIDTH, activation="tanh")(h)
    tf_ext.export_for_training(keras.Model(x, keras.layers.Dense(4)(h)), str(path))
    return str(path)


def data(tmp_path, n):
    rng = np.random.default_rng(8)
    np.savez(tmp_path / "d.npz", x=rng.normal(size=(n, WIDTH)).astype(np.float32),
             t=rng.normal(size=(n, 4)).astype(np.float32))
    return str(tmp_path / "d.npz")


def flags(export, data_path, batch, name, tmp_path):
    return [f"--library={LIBRARY}", f"--saved_model={export}", f"--data={data_path}", "--inputs=x",
            "--targets=t", "--loss=mse", "--optimizer=sgd", "--learning_rate=0.05",
            f"--batch_size={batch}", "--epochs=1", f"--history={tmp_path / name}.csv",
            f"--save_weights={tmp_path / name}.npz"]


def run_measured(cmd, onednn):
    """(returncode, stdout, stderr, peak VmHWM in MiB) of `cmd` run as the only child of a fresh
    Python (ru_maxrss survives exec: a child of this big process would report its size)."""
    code = ("import json, resource, subprocess, sys; "
            "r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
            "print(json.dumps([r.returncode, r.stdout, r.stderr, "
            "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0]))")
    # glibc raises its mmap threshold when a mapped buffer is freed, after which the 8 MiB
    # activations come from per-thread arenas that keep what they free: the peak then varies by
    # up to 200 MB between runs of the same plan. A fixed threshold maps each buffer and unmaps
    # it when freed, so that VmHWM measures the tensors alive (docs/memory.md).
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="1", TF_ENABLE_ONEDNN_OPTS="1" if onednn else "0",
               MALLOC_MMAP_THRESHOLD_="131072")
    r = subprocess.run([sys.executable, "-c", code] + cmd, capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def losses(path):
    with open(path) as f:
        return [float(line.split(",")[2]) for line in f.read().splitlines()[1:]]


@pytest.mark.parametrize("onednn", [False, True])
def test_budget_trains_the_same_in_less_memory(tmp_path, onednn):
    """Bitwise: without oneDNN's fusions (TF_ENABLE_ONEDNN_OPTS=0) the same kernels run on the
    same values; with them (TensorFlow's default) each recomputed MatMul + BiasAdd + Tanh is fused
    as its original is (the planner keeps or recomputes the three together)."""
    export = deep_mlp(tmp_path / "model")
    d = data(tmp_path, BATCH * STEPS)
    rc, out, err, base_peak = run_measured([TOOL] + flags(export, d, BATCH, "base", tmp_path),
                                           onednn)
    assert rc == 0, err
    assert "estimated peak" not in out  # printed with a budget only
    rc, out, err, budget_peak = run_measured(
        [TOOL, "--memory_budget=0.4"] + flags(export, d, BATCH, "budget", tmp_path), onednn)
    assert rc == 0, err
    m = re.search(r"^estimated peak: ([0-9.]+) MB above the feeds \(the step's forward, loss and "
                  rf"backward at batch {BATCH}; the variables' reads share their buffers and are "
                  r"not counted\)$", out, re.M)
    assert m, out
    estimate = float(m.group(1))
    m = re.search(r"^memory budget ([0-9.]+) MB \(unbudgeted estimate ([0-9.]+) MB, [0-9.]+ MB once "
                  r"TensorFlow optimized the graph\): recomputes "
                  r"(\d+) nodes \(.* FLOPs added\), keeping (every matrix product and convolution and )?"
                  r"1 forward tensor in (\d+)( of the others)?$", out, re.M)
    assert m, out
    budget, unbudgeted = float(m.group(1)), float(m.group(2))
    assert int(m.group(3)) > 0
    assert abs(budget - 0.4 * unbudgeted) < 0.1 and estimate <= budget
    assert unbudgeted > 300  # activations dominate: 48 layers x 3 tensors x 8 MiB
    # The same training: per-step losses and final weights.
    base_losses, budget_losses = losses(tmp_path / "base.csv"), losses(tmp_path / "budget.csv")
    assert len(base_losses) == STEPS
    base_w, budget_w = np.load(tmp_path / "base.npz"), np.load(tmp_path / "budget.npz")
    assert sorted(base_w.files) == sorted(budget_w.files) and len(base_w.files) == 2 * (LAYERS + 1)
    assert budget_losses == base_losses
    for k in base_w.files:
        np.testing.assert_array_equal(budget_w[k], base_w[k], err_msg=k)
    # The measured peak falls by the estimated saving (over 200 MB; measured 0.94x to 1.02x of it
    # with the plan on the graph TensorFlow optimized, oneDNN's fusions on and off).
    saving = base_peak - budget_peak
    assert unbudgeted - estimate > 200
    assert saving >= 0.75 * (unbudgeted - estimate), (base_peak, budget_peak, unbudgeted, estimate)


@pytest.mark.parametrize("bad", ["0", "1.5", "abc", "-3", "0.0"])
def test_malformed_budgets_are_refused_naming_the_value(tmp_path, bad):
    export = str(tmp_path / "none")  # refused before the SavedModel is read
    r = subprocess.run([TOOL, f"--library={LIBRARY}", f"--saved_model={export}", "--data=d.npz",
                        "--inputs=x", f"--memory_budget={bad}"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1
    errors = [line for line in r.stderr.splitlines() if line.startswith("tf_ext_train:")]
    assert errors == [f"tf_ext_train: bad --memory_budget: memory budget '{bad}': "
                      f"{'not a fraction in (0, 1]' if '.' in bad else 'not a positive integer'} "
                      "(a fraction in (0, 1] such as 0.5, or bytes such as 536870912 or 512M) "
                      "(see tf_ext_train --help)"], r.stderr
    r = subprocess.run([RUNNER, export, "data=d.npz", "inputs=x", f"memory_budget={bad}"],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, TF_EXT_LIBRARY=LIBRARY))
    assert r.returncode == 1, r.stdout
    assert (f"FAIL create: trainer option 'memory_budget': memory budget '{bad}': "
            in r.stderr), r.stderr
    assert "Check failed" not in r.stderr and "Segmentation" not in r.stderr


def test_budget_it_cannot_meet_names_the_smallest(tmp_path):
    export = deep_mlp(tmp_path / "model", layers=12)
    d = data(tmp_path, 1024)
    r = subprocess.run([TOOL, "--memory_budget=64K"] + flags(export, d, 1024, "tiny", tmp_path),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1
    m = re.search(r"^tf_ext_train: memory budget of 0\.1 MB \(65536\) cannot be met: the estimated "
                  r"peak is ([0-9.]+) MB without recomputation and the smallest it can meet is "
                  r"([0-9.]+) MB \((\d+) bytes\) \(estimates of the graph once TensorFlow's "
                  r"optimizations ran; the built graph's estimate is [0-9.]+ MB\)$", r.stderr, re.M)
    assert m, r.stderr
    assert not os.path.exists(tmp_path / "tiny.csv")  # refused before training
    r = subprocess.run([TOOL, f"--memory_budget={m.group(3)}"] +
                       flags(export, d, 1024, "smallest", tmp_path),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"memory budget {m.group(2)} MB" in r.stdout and "recomputes" in r.stdout, r.stdout


def test_a_loop_gets_what_tf_ext_grad_gives_it(tmp_path):
    """The budget is planned by the pass tf_ext_grad's is: a Keras LSTM (a While loop) is
    refused with its message (its stacked outputs' sizes unknown), or else trains as without
    one."""
    import keras
    import tf_ext
    keras.utils.set_random_seed(9)
    x = keras.Input(shape=(6, 3), name="x")
    model = keras.Model(x, keras.layers.Dense(4)(keras.layers.LSTM(8)(x)))
    export = str(tmp_path / "lstm")
    tf_ext.export_for_training(model, export)
    rng = np.random.default_rng(10)
    np.savez(tmp_path / "d.npz", x=rng.normal(size=(32, 6, 3)).astype(np.float32),
             t=rng.normal(size=(32, 4)).astype(np.float32))
    base = [f"--library={LIBRARY}", f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}",
            "--inputs=x", "--targets=t", "--batch_size=16"]
    plain = subprocess.run([TOOL, f"--history={tmp_path / 'plain.csv'}"] + base,
                           capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr
    r = subprocess.run([TOOL, "--memory_budget=0.5", f"--history={tmp_path / 'budget.csv'}"] + base,
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        # tf_ext_grad's refusal: the loop's stacked outputs have sizes shape inference cannot
        # tell (a loop itself takes a budget: test_memory_budget_loops.py).
        assert ("tf_ext_train: memory budget: shape inference leaves the size of" in r.stderr
                and "forward tensors unknown" in r.stderr), r.stderr
    else:
        assert "estimated peak:" in r.stdout, r.stdout
        np.testing.assert_allclose(losses(tmp_path / "budget.csv"), losses(tmp_path / "plain.csv"),
                                   rtol=1e-6)


@pytest.mark.parametrize("budget", ["0.5", "0.7"])
def test_transformer_trains_the_same_with_a_budget(tmp_path, budget):
    """A Keras encoder block trained by Adam, the mean absolute error its metric, validated
    after each epoch: the losses, the metric, the validation's and the weights are bitwise
    those without a budget (planned on the step as built, 0.5 was refused and 0.7 differed)."""
    import keras
    import tf_ext
    keras.utils.set_random_seed(11)
    layers = keras.layers
    x = keras.Input(shape=(32, 64), name="x")
    h = layers.LayerNormalization()(x + layers.MultiHeadAttention(4, 16)(x, x))
    h = layers.LayerNormalization()(h + layers.Dense(64)(layers.Dense(128, activation="gelu")(h)))
    model = keras.Model(x, layers.Dense(4)(layers.GlobalAveragePooling1D()(h)))
    export = str(tmp_path / "encoder")
    tf_ext.export_for_training(model, export)
    rng = np.random.default_rng(12)
    for name, n in [("d", 64), ("v", 32)]:
        np.savez(tmp_path / f"{name}.npz", x=rng.normal(size=(n, 32, 64)).astype(np.float32),
                 t=rng.normal(size=(n, 4)).astype(np.float32))
    common = [f"--library={LIBRARY}", f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}",
              f"--validation={tmp_path / 'v.npz'}", "--inputs=x", "--targets=t", "--loss=mse",
              "--optimizer=adam", "--metrics=mae", "--batch_size=32", "--epochs=2"]
    runs = {}
    for name, extra in [("base", []), ("budget", [f"--memory_budget={budget}"])]:
        r = subprocess.run([TOOL, f"--history={tmp_path / name}.csv",
                            f"--save_weights={tmp_path / name}.npz"] + extra + common,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        runs[name] = r
    m = re.search(r"^memory budget .*: recomputes (\d+) nodes", runs["budget"].stdout, re.M)
    assert m and int(m.group(1)) > 0, runs["budget"].stdout
    assert losses(tmp_path / "budget.csv") == losses(tmp_path / "base.csv")
    epochs = lambda name: (tmp_path / f"{name}.epochs.csv").read_text()
    assert epochs("base").splitlines()[0] == "epoch,loss,mae,val_loss,val_mae"
    assert epochs("budget") == epochs("base")
    base_w, budget_w = np.load(tmp_path / "base.npz"), np.load(tmp_path / "budget.npz")
    for k in base_w.files:
        np.testing.assert_array_equal(budget_w[k], base_w[k], err_msg=k)


def test_cnn_with_batch_norm_trains_the_same_with_a_budget(tmp_path):
    """A residual Keras CNN whose batch normalisations train (their moving statistics updated in the
    step), trained by Adam with accuracy as its metric: with a budget that recomputes, the
    losses, the metric and the trainable weights are bitwise those without one (planned on the
    step as built, 17 of its 18 differed, and 40 Adam steps took ResNet-18's apart); the moving
    statistics, which TensorFlow's optimizations compute in another order when they run in two
    stages, within 1e-6."""
    import keras
    import tf_ext
    keras.utils.set_random_seed(13)
    layers = keras.layers
    conv = lambda filters, size: layers.Conv2D(filters, size, padding="same", use_bias=False)
    x = keras.Input(shape=(24, 24, 3), name="x")
    h = layers.ReLU()(layers.BatchNormalization()(conv(16, 3)(x)))
    for filters in (16, 32):  # two residual blocks, as ResNet-18's
        skip = h if filters == 16 else conv(filters, 1)(h)
        y = layers.ReLU()(layers.BatchNormalization()(conv(filters, 3)(h)))
        h = layers.ReLU()(layers.Add()([skip, layers.BatchNormalization()(conv(filters, 3)(y))]))
    h = layers.GlobalAveragePooling2D()(layers.MaxPooling2D()(h))
    model = keras.Model(x, layers.Dense(10)(h))
    export = str(tmp_path / "cnn")
    tf_ext.export_for_training(model, export)
    rng = np.random.default_rng(14)
    np.savez(tmp_path / "d.npz", x=rng.normal(size=(64, 24, 24, 3)).astype(np.float32),
             y=rng.integers(0, 10, size=(64,)).astype(np.int64))
    common = [f"--library={LIBRARY}", f"--saved_model={export}", "--signature=train",
              f"--data={tmp_path / 'd.npz'}", "--inputs=x", "--targets=y",
              "--loss=sparse_categorical_crossentropy:from_logits", "--optimizer=adam",
              "--metrics=accuracy", "--batch_size=32", "--epochs=2"]
    runs = {}
    for name, extra in [("base", []), ("budget", ["--memory_budget=0.75"])]:
        r = subprocess.run([TOOL, f"--history={tmp_path / name}.csv",
                            f"--save_weights={tmp_path / name}.npz"] + extra + common,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        runs[name] = r
    assert "in training mode" in runs["base"].stdout, runs["base"].stdout
    m = re.search(r"^memory budget .*: recomputes (\d+) nodes", runs["budget"].stdout, re.M)
    assert m and int(m.group(1)) > 0, runs["budget"].stdout
    assert (tmp_path / "budget.csv").read_text() == (tmp_path / "base.csv").read_text()
    assert (tmp_path / "budget.epochs.csv").read_text() == (tmp_path / "base.epochs.csv").read_text()
    base_w, budget_w = np.load(tmp_path / "base.npz"), np.load(tmp_path / "budget.npz")
    moving = [k for k in base_w.files if "moving_" in k]
    assert len(moving) == 10 and sorted(budget_w.files) == sorted(base_w.files)
    for k in base_w.files:
        if k in moving:
            np.testing.assert_allclose(budget_w[k], base_w[k], rtol=1e-6, atol=1e-7, err_msg=k)
        else:
            np.testing.assert_array_equal(budget_w[k], base_w[k], err_msg=k)
