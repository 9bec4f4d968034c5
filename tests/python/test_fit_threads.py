"""tf_ext_train's --threads and what a cluster all-reduces (docs/distributed.md, Performance).

--threads=N sizes the pools of the Session's CPU device: the tool reports the device's intra-op
threads (N, also above the core count; the core count by default), and a run with --threads=1
uses about one core (its CPU time within 1.3x its wall time). Two workers with --threads=1 each
report one thread; each step all-reduces the gradients and the loss, one pack for float32, of
exactly the trainable variables' bytes plus the loss's 4 (no extra copy), an Embedding's table
too (its gradient made dense). Negative and
non-integer values are refused naming the value (the C API's key goes through the same
option table entry, options.cc)."""
import os
import re
import resource
import subprocess
import time

import numpy as np
import pytest
from conftest import free_ports

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.path.join(RUNFILES, "tf_ext") if RUNFILES else os.getcwd()
TOOL = os.path.join(WORKSPACE, "tf_ext", "tf_ext_train")
LIBRARY = os.path.join(WORKSPACE, "tf_ext", "_tf_ext_ops.so")


def setup(tmp_path, n=64, width=16, batch=8, features=5):
    import keras
    keras.utils.set_random_seed(0)
    x = keras.Input(shape=(features,), name="x")
    h = keras.layers.Dense(width, activation="tanh")(x)
    model = keras.Model(x, keras.layers.Dense(2)(h))
    export = str(tmp_path / "model")
    model.export(export, verbose=False)
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x=rng.normal(size=(n, features)).astype(np.float32),
             t=rng.normal(size=(n, 2)).astype(np.float32))
    flags = [f"--library={LIBRARY}", f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}",
             "--inputs=x", "--targets=t", "--loss=mse", "--optimizer=adam", f"--batch_size={batch}"]
    return flags, sum(int(np.prod(w.shape)) * 4 for w in model.trainable_weights), len(model.trainable_weights)


def setup_embedding(tmp_path, n=64, vocab=20):
    """A model whose table is only gathered by rows (a sparse gradient, made dense on a cluster)."""
    import keras
    keras.utils.set_random_seed(0)
    x = keras.Input(shape=(4,), dtype="int32", name="x")
    h = keras.layers.Flatten()(keras.layers.Embedding(vocab, 3)(x))
    model = keras.Model(x, keras.layers.Dense(2)(h))
    export = str(tmp_path / "model")
    model.export(export, verbose=False)
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x=rng.integers(0, vocab, size=(n, 4)).astype(np.int32),
             t=rng.normal(size=(n, 2)).astype(np.float32))
    flags = [f"--library={LIBRARY}", f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}",
             "--inputs=x", "--targets=t", "--loss=mse", "--optimizer=sgd", "--batch_size=8"]
    return flags, sum(int(np.prod(w.shape)) * 4 for w in model.trainable_weights), len(model.trainable_weights)


def kernel_threads(stdout):
    return int(re.search(r"^kernel threads: (\d+) intra-op$", stdout, re.M).group(1))


def test_threads_sets_the_devices_pool(tmp_path):
    flags, _, _ = setup(tmp_path)
    cores = len(os.sched_getaffinity(0))
    for threads, expected in ((None, cores), (1, 1), (3, 3)):
        extra = [] if threads is None else [f"--threads={threads}"]
        r = subprocess.run([TOOL] + flags + extra, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert kernel_threads(r.stdout) == expected, (threads, r.stdout)


def test_one_thread_uses_one_core(tmp_path):
    """The CPU time of a run with --threads=1 (start-up included) stays near its wall time; the
    steps (an MLP wide enough that each matmul would be split over the cores) dominate it."""
    flags, _, _ = setup(tmp_path, n=2048, width=2048, batch=256, features=512)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    r = subprocess.run([TOOL] + flags + ["--threads=1", "--epochs=4"],
                       capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert r.returncode == 0, r.stderr
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert cpu <= 1.3 * wall, (cpu, wall)


@pytest.mark.parametrize("model", ["mlp", "embedding"])
def test_workers_threads_and_all_reduced_bytes(tmp_path, model):
    flags, variable_bytes, variables = (setup if model == "mlp" else setup_embedding)(tmp_path)
    cluster = ",".join(f"127.0.0.1:{p}" for p in free_ports(2))
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    procs = [subprocess.Popen([TOOL] + flags + ["--threads=1", f"--cluster={cluster}", f"--task_index={i}",
                                                "--collective_timeout=20"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for i in range(2)]
    results = []
    for p in procs:
        try:
            results.append((p.returncode,) + p.communicate(timeout=150))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    for p, (_, stdout, stderr) in zip(procs, results):
        assert p.returncode == 0, stderr
        assert kernel_threads(stdout) == 1, stdout
        m = re.search(r"^all-reduce: (\d+) tensors in (\d+) packs, (\d+) bytes a step$", stdout, re.M)
        assert m, stdout
        # The gradients, one per trainable variable, and the loss (float32 scalar), in one pack.
        assert [int(g) for g in m.groups()] == [variables + 1, 1, variable_bytes + 4], stdout


@pytest.mark.parametrize("value,why", [("-1", "'-1' is negative"), ("two", "'two' is not an integer"),
                                       ("1.5", "'1.5' is not an integer")])
def test_bad_threads_are_refused_naming_the_value(tmp_path, value, why):
    flags, _, _ = setup(tmp_path)
    r = subprocess.run([TOOL] + flags + [f"--threads={value}"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert f"--threads: {why}" in r.stderr, r.stderr
