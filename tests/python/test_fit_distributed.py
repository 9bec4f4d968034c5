"""tf_ext_train over several worker processes on loopback (tf_ext/train/distribute/distributed.h): 2 and 3
workers (TF_CONFIG, and --cluster/--task_index) give the per-step losses and final weights of one
process with the same global --batch_size (1e-5 relative; with sample weights too), every worker
ends with bitwise the same variables, only the chief writes; 2 workers resumed with --resume=auto from the chief's checkpoint
end as a run never stopped; a worker killed with SIGKILL makes the others exit non-zero
within --collective_timeout + 10 s naming the lost task, and the job restarted with
--resume=auto goes on from the chief's last checkpoint; each task's server listens on its
cluster address alone (--listen_address=0.0.0.0: every interface), and an address not of this
machine is refused; a port in use, a peer that never comes
and a worker with another batch size fail with clear errors; bad cluster values are refused
before anything starts; 2 workers' per-epoch losses equal Python's MultiWorkerMirroredStrategy's
(1e-4) on the same cluster shape, with and without BatchNormalization (training mode), and so
does their per-epoch mae metric (summed over the workers as Keras's metric state is); 2 workers'
metrics (accuracy, auc, mae, per step, per epoch and on validation data) equal one process's; an
Embedding's sparse gradient, made dense for the all-reduce, gives one process's training;
--shard_by=files gives each worker whole TFRecord files and equals one process fed the same
global batches, an epoch ending for all when one worker's files run out; the C API alone
(TfExtNewTrainer with cluster keys) writes tf_ext_train's epochs CSV. Each case runs its own
processes (TensorFlow's server cannot be stopped)."""
import csv
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import free_ports

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.path.join(RUNFILES, "tf_ext") if RUNFILES else os.getcwd()
TOOL = os.path.join(WORKSPACE, "tf_ext", "tf_ext_train")
LIBRARY = os.path.join(WORKSPACE, "tf_ext", "_tf_ext_ops.so")
N, BATCH, EPOCHS = 48, 12, 2
TIMEOUT = 10  # --collective_timeout in every case


def setup(tmp_path, seed=3):
    import keras
    keras.utils.set_random_seed(seed)
    x = keras.Input(shape=(5,), name="x")
    h = keras.layers.Dense(16, activation="tanh")(x)
    model = keras.Model(x, keras.layers.Dense(2)(h))
    export = str(tmp_path / "model")
    model.export(export, verbose=False)
    rng = np.random.default_rng(seed)
    np.savez(tmp_path / "d.npz", x=rng.normal(size=(N, 5)).astype(np.float32),
             t=rng.normal(size=(N, 2)).astype(np.float32),
             w=rng.uniform(0, 2, size=(N,)).astype(np.float32))
    return [f"--library={LIBRARY}", f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}",
            "--inputs=x", "--targets=t", "--loss=mse", "--optimizer=adam", "--learning_rate=0.05",
            f"--epochs={EPOCHS}", "--shuffle", "--seed=7", f"--collective_timeout={TIMEOUT}"]


def tf_config(ports, index, chief=False):
    addresses = [f"127.0.0.1:{p}" for p in ports]
    if chief:
        cluster = {"chief": addresses[:1], "worker": addresses[1:]}
        task = {"type": "chief", "index": 0} if index == 0 else {"type": "worker", "index": index - 1}
    else:
        cluster, task = {"worker": addresses}, {"type": "worker", "index": index}
    return json.dumps({"cluster": cluster, "task": task})


def start(flags, config=None):
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    if config is not None:
        env["TF_CONFIG"] = config
    return subprocess.Popen([TOOL] + flags, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def finish(procs, timeout=150):
    out = []
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        out.append((p.returncode, stdout, stderr))
    return out


def step_losses(path):
    with open(path) as f:
        return np.array([float(r["loss"]) for r in csv.DictReader(f)])


def fingerprint(stdout):
    return re.search(r"variables fingerprint: ([0-9a-f]+)", stdout).group(1)


@pytest.mark.parametrize("workers,how", [(2, "tf_config"), (3, "cluster"), (3, "chief"),
                                         (2, "sample_weights")])
def test_workers_equal_one_process(tmp_path, workers, how):
    flags = setup(tmp_path) + (["--sample_weights=w"] if how == "sample_weights" else [])
    one = subprocess.run([TOOL] + flags + [f"--batch_size={BATCH}", f"--history={tmp_path / 'one.csv'}",
                          f"--save_weights={tmp_path / 'one.npz'}"],
                         capture_output=True, text=True, timeout=120)
    assert one.returncode == 0, one.stderr
    ports = free_ports(workers)
    procs = []
    for i in range(workers):
        own = [f"--batch_size={BATCH}", f"--history={tmp_path / f'h{i}.csv'}",
               f"--save_weights={tmp_path / f'w{i}.npz'}", f"--checkpoint={tmp_path / f'ck{i}' / 'ckpt'}"]
        if how == "cluster":
            cluster = ",".join(f"127.0.0.1:{p}" for p in ports)
            procs.append(start(flags + own + [f"--cluster={cluster}", f"--task_index={i}",
                                              "--communication_hint=ring"]))
        else:
            procs.append(start(flags + own, tf_config(ports, i, chief=how == "chief")))
    results = finish(procs)
    for code, stdout, stderr in results:
        assert code == 0, stderr
    # The chief's per-step losses (each the global batch's) and weights are one process's.
    expected = step_losses(tmp_path / "one.csv")
    assert len(expected) == EPOCHS * N // BATCH
    np.testing.assert_allclose(step_losses(tmp_path / "h0.csv"), expected, rtol=1e-5, atol=1e-7)
    a, b = np.load(tmp_path / "one.npz"), np.load(tmp_path / "w0.npz")
    assert sorted(a.files) == sorted(b.files)
    for k in a.files:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-5, atol=1e-6, err_msg=k)
    # Every worker ends with the chief's variables, bit for bit; only the chief wrote files.
    assert len({fingerprint(stdout) for _, stdout, _ in results}) == 1
    for i in range(1, workers):
        for name in (f"h{i}.csv", f"w{i}.npz", f"ck{i}"):
            assert not (tmp_path / name).exists(), name
    assert (tmp_path / "ck0").is_dir()
    # The epoch lines every worker prints are the global batch's.
    lines = [[l for l in stdout.splitlines() if l.startswith("epoch ")] for _, stdout, _ in results]
    assert all(l == lines[0] for l in lines) and len(lines[0]) == EPOCHS


def test_resume_from_the_chiefs_checkpoint(tmp_path):
    flags = setup(tmp_path)
    straight = subprocess.run([TOOL] + flags + [f"--batch_size={BATCH}", f"--save_weights={tmp_path / 'one.npz'}"],
                              capture_output=True, text=True, timeout=120)
    assert straight.returncode == 0, straight.stderr
    ports = free_ports(2)
    checkpoint = f"--checkpoint={tmp_path / 'ck' / 'ckpt'}"
    first = [f if not f.startswith("--epochs") else "--epochs=1" for f in flags]
    results = finish([start(first + [f"--batch_size={BATCH}", checkpoint], tf_config(ports, i)) for i in range(2)])
    assert all(code == 0 for code, _, _ in results), results
    ports = free_ports(2)
    results = finish([start(flags + [f"--batch_size={BATCH}", checkpoint, "--resume=auto",
                                     f"--save_weights={tmp_path / 'w.npz'}"], tf_config(ports, i))
                      for i in range(2)])
    assert all(code == 0 for code, _, _ in results), results
    for _, stdout, _ in results:
        assert "optimizer iterations: %d" % (EPOCHS * N // BATCH) in stdout
        assert len([l for l in stdout.splitlines() if l.startswith("epoch ")]) == 1
    assert len({fingerprint(stdout) for _, stdout, _ in results}) == 1
    a, b = np.load(tmp_path / "one.npz"), np.load(tmp_path / "w.npz")
    for k in a.files:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-5, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("when", ["start-up", "training"])
def test_killed_worker_stops_the_others_and_the_job_resumes(tmp_path, when):
    flags = setup(tmp_path) + [f"--batch_size={BATCH}", f"--checkpoint={tmp_path / 'ck' / 'ckpt'}"]
    flags = [f if not f.startswith("--epochs") else "--epochs=100000" for f in flags]
    ports = free_ports(3)
    procs = [start(flags, tf_config(ports, i)) for i in range(3)]
    if when == "training":  # under way once the chief prints an epoch
        line = ""
        deadline = time.time() + 120
        while not line.startswith("epoch ") and time.time() < deadline:
            line = procs[0].stdout.readline()
            assert line or procs[0].poll() is None, procs[0].stderr.read()
        assert line.startswith("epoch ")
    else:
        time.sleep(0.3)
    procs[2].send_signal(signal.SIGKILL)
    killed = time.time()
    for p in procs[:2]:
        try:
            _, stderr = p.communicate(timeout=TIMEOUT + 10)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("a worker did not stop within collective_timeout + 10 s of its peer's death")
        assert p.returncode != 0
        assert "lost task worker 2 (127.0.0.1:%d)" % ports[2] in stderr, stderr
    assert time.time() - killed < TIMEOUT + 10
    # The whole job restarted with --resume=auto goes on from the chief's last checkpoint.
    import tensorflow as tf
    latest = tf.train.latest_checkpoint(str(tmp_path / "ck"))
    done = int(latest.rsplit("-", 1)[1]) if latest else 0
    flags = [f if not f.startswith("--epochs") else f"--epochs={done + 1}" for f in flags]
    ports = free_ports(3)
    results = finish([start(flags + ["--resume=auto"], tf_config(ports, i)) for i in range(3)])
    for code, stdout, stderr in results:
        assert code == 0, stderr
        assert "optimizer iterations: %d" % ((done + 1) * N // BATCH) in stdout
    assert len({fingerprint(stdout) for _, stdout, _ in results}) == 1


def test_peer_that_never_comes(tmp_path):
    flags = setup(tmp_path)
    ports = free_ports(2)
    begun = time.time()
    flags = [f if not f.startswith("--collective_timeout") else "--collective_timeout=3" for f in flags]
    code, _, stderr = finish([start(flags + [f"--batch_size={BATCH}"], tf_config(ports, 0))])[0]
    assert code != 0
    assert "did not all join within 3 s" in stderr, stderr
    assert "lost task worker 1 (127.0.0.1:%d)" % ports[1] in stderr, stderr
    assert time.time() - begun < 3 + 30  # start-up (loading TensorFlow) + the timeout


def test_port_in_use(tmp_path):
    flags = setup(tmp_path)
    ports = free_ports(2)
    taken = socket.socket()
    taken.bind(("127.0.0.1", ports[0]))
    taken.listen()
    try:
        code, _, stderr = finish([start(flags + [f"--batch_size={BATCH}"], tf_config(ports, 0))])[0]
    finally:
        taken.close()
    assert code != 0
    assert ("cannot start TensorFlow's gRPC server for task worker 0 (127.0.0.1:%d) on 127.0.0.1 (is port %d "
            "in use? IPv6 socket: Address already in use" % (ports[0], ports[0])) in stderr, stderr


def listeners(port):
    """The addresses the sockets listening on `port` are bound to, from /proc/net/tcp{,6}, as
    text ("127.0.0.1", "::ffff:127.0.0.1", "0.0.0.0", "::")."""
    found = []
    for name, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        with open(name) as f:
            for line in f.read().splitlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                address, hexport = local.split(":")
                if state != "0A" or int(hexport, 16) != port:
                    continue
                raw = bytes.fromhex(address)  # the kernel prints each 32-bit word in host order
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                found.append(socket.inet_ntop(family, raw))
    return found


def connects(host, port):
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex((host, port)) == 0


@pytest.mark.parametrize("listen", [None, "0.0.0.0"])
def test_server_listens_on_the_cluster_address(tmp_path, listen):
    """TensorFlow's server alone listens on every interface; each task's listens on its
    cluster address only (127.0.0.2 is loopback too, so a wildcard listener would answer it),
    unless --listen_address=0.0.0.0 asks for every interface."""
    flags = setup(tmp_path)
    ports = free_ports(2)
    extra = [] if listen is None else [f"--listen_address={listen}"]
    worker = start(flags + [f"--batch_size={BATCH}"] + extra, tf_config(ports, 0))
    try:
        deadline = time.time() + 60
        while not connects("127.0.0.1", ports[0]):  # it waits for worker 1, which never comes
            assert worker.poll() is None and time.time() < deadline, worker.communicate()[1]
            time.sleep(0.2)
        bound = listeners(ports[0])
        other = connects("127.0.0.2", ports[0])
    finally:
        worker.kill()
        worker.communicate()
    if listen is None:
        assert bound == ["::ffff:127.0.0.1"] or bound == ["127.0.0.1"], bound
        assert not other
    else:
        assert bound == ["::"] or bound == ["0.0.0.0"], bound
        assert other


@pytest.mark.parametrize("listen,message", [
    ("192.0.2.1", "cannot start TensorFlow's gRPC server for task worker 0 (127.0.0.1:{port}): "
                  "192.0.2.1 is not an address of this machine (IPv6 socket: Cannot assign requested "
                  "address; IPv4 socket: Cannot assign requested address; set option "
                  "'listen_address' to one that is, or to 0.0.0.0 for every interface)"),
    # An IPv6 address: the error is the IPv6 socket's (gRPC's IPv4 retry does not hide it).
    ("2001:db8::77", "cannot start TensorFlow's gRPC server for task worker 0 (127.0.0.1:{port}): "
                     "2001:db8::77 is not an address of this machine (IPv6 socket: Cannot assign "
                     "requested address"),
    ("no-such-host.invalid", "task worker 0 (127.0.0.1:{port}): cannot choose the address to "
                             "listen on: host 'no-such-host.invalid' does not resolve"),
])
def test_listen_address_that_cannot_be_bound(tmp_path, listen, message):
    flags = setup(tmp_path)
    ports = free_ports(2)
    code, _, stderr = finish([start(flags + [f"--batch_size={BATCH}", f"--listen_address={listen}"],
                                    tf_config(ports, 0))])[0]
    assert code != 0
    assert message.format(port=ports[0]) in stderr, stderr


def test_mismatched_batch_size(tmp_path):
    flags = setup(tmp_path)
    ports = free_ports(2)
    results = finish([start(flags + [f"--batch_size={b}"], tf_config(ports, i))
                      for i, b in enumerate([BATCH, BATCH // 2])])
    for code, stdout, stderr in results:
        assert code != 0
        assert "the workers were not started alike" in stderr, stderr
        assert "has batch_size 6 where this task" in stderr or "has batch_size 12 where this task" in stderr, stderr
        assert not re.search(r"^epoch ", stdout, re.M)


@pytest.mark.parametrize("config,flags,message", [
    ('{"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 3}}', [],
     "TF_CONFIG's task.index 3 is not a task of job 'worker' (1 tasks)"),
    ('{"cluster": {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}, "task": {"type": "worker", "index": 0}}', [],
     "TF_CONFIG's cluster has a 'ps' job; only 'worker' and 'chief' are supported"),
    ('{"cluster": {"worker": ["127.0.0.1"]}, "task": {"type": "worker", "index": 0}}', [],
     "TF_CONFIG's cluster.worker: '127.0.0.1' is not host:port"),
    ('{"cluster": ', [], "TF_CONFIG is not valid JSON"),
    (None, ["--cluster=127.0.0.1:1,127.0.0.1:2", "--task_index=2"],
     "option 'task_index': 2 is not a task of the cluster (2 workers: 0 to 1)"),
    (None, ["--cluster=127.0.0.1:1,127.0.0.1:2", "--task_index=0", "--batch_size=5"],
     "batch_size=5 (the global batch) does not split over 2 workers: use a multiple of 2"),
    (None, ["--cluster=127.0.0.1:1,127.0.0.1:2", "--task_index=0", "--shard_by=files"],
     "option 'shard_by': 'files' shards TFRecord files over the workers; "),
    (None, ["--cluster=127.0.0.1:1,127.0.0.1:2", "--task_index=0", "--shard_by=rows"],
     "'rows' is not one of batch, files"),
])
def test_bad_cluster_values(tmp_path, config, flags, message):
    common = setup(tmp_path)
    code, stdout, stderr = finish([start(common + flags, config)], timeout=60)[0]
    assert code != 0
    assert message in stderr, stderr


MODELS = r"""
def build(kind):
    import keras
    keras.utils.set_random_seed(3)
    x = keras.Input(shape=(5,), name="x")
    if kind == "mlp":
        h = keras.layers.Dense(16, activation="tanh")(x)
    else:  # its batch statistics are each worker's slice's, in Keras as here
        h = keras.layers.Dense(16, use_bias=False)(x)
        h = keras.layers.Activation("tanh")(keras.layers.BatchNormalization(momentum=0.9)(h))
    return keras.Model(x, keras.layers.Dense(2)(h))
"""
exec(MODELS)

MWMS_WORKER = MODELS + r"""
import sys
import numpy as np
import tensorflow as tf
import keras
kind, index, batch, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
strategy = tf.distribute.MultiWorkerMirroredStrategy()
workers = strategy.num_replicas_in_sync
data, weights = np.load(sys.argv[5]), np.load(sys.argv[6])
x, t = data["x"], data["t"]
with strategy.scope():
    model = build(kind)
    model.set_weights([weights[f"arr_{i}"] for i in range(len(weights.files))])
    optimizer = keras.optimizers.Adam(0.05)
    mae = keras.metrics.MeanAbsoluteError()

@tf.function
def step(x, t):
    def replica(x, t):
        with tf.GradientTape() as tape:
            y = model(x, training=True)
            loss = tf.reduce_sum(tf.reduce_mean(tf.square(y - t), axis=-1)) / batch
        mae.update_state(t, y)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return strategy.reduce("SUM", strategy.run(replica, args=(x, t)), axis=None)

share = batch // workers
for epoch in range(epochs):
    losses = []
    mae.reset_state()
    for b in range(0, len(x), batch):
        rows = slice(b + index * share, b + (index + 1) * share)
        losses.append(float(step(tf.constant(x[rows]), tf.constant(t[rows]))))
    print("epoch_loss %d %.9g %.9g" % (epoch, np.mean(losses), float(mae.result())), flush=True)
"""


@pytest.mark.parametrize("kind", ["mlp", "batchnorm"])
def test_two_workers_match_multi_worker_mirrored_strategy(tmp_path, kind):
    """Per-epoch losses of tf_ext_train on 2 workers against Python's MultiWorkerMirroredStrategy
    (a strategy.run + GradientTape loop, each worker its slice of each global batch, no
    shuffle) on the same cluster shape on loopback; with BatchNormalization in training mode
    (tf_ext.export_for_training), whose batch statistics are each worker's slice's in both."""
    flags = [f for f in setup(tmp_path) if f not in ("--shuffle", "--seed=7")]
    model = build(kind)
    if kind == "batchnorm":
        import tf_ext
        export = str(tmp_path / "bn_model")
        tf_ext.export_for_training(model, export)
        flags = [f if not f.startswith("--saved_model") else f"--saved_model={export}" for f in flags]
        flags.append("--signature=train")
    else:
        model.export(str(tmp_path / "model"), verbose=False)
    np.savez(tmp_path / "weights.npz", *model.get_weights())
    ports = free_ports(2)
    results = finish([start(flags + [f"--batch_size={BATCH}", f"--history={tmp_path / f'h{i}.csv'}",
                                     "--metrics=mae"], tf_config(ports, i)) for i in range(2)])
    assert all(code == 0 for code, _, _ in results), results
    with open(tmp_path / "h0.epochs.csv") as f:
        rows = list(csv.DictReader(f))
    ours = [float(r["loss"]) for r in rows]
    our_mae = [float(r["mae"]) for r in rows]
    script = tmp_path / "mwms_worker.py"
    script.write_text(MWMS_WORKER)
    ports = free_ports(2)
    procs = [start_python([sys.executable, str(script), kind, str(i), str(BATCH), str(EPOCHS),
                           str(tmp_path / "d.npz"), str(tmp_path / "weights.npz")], tf_config(ports, i))
             for i in range(2)]
    theirs = finish(procs, timeout=150)
    for code, _, stderr in theirs:
        assert code == 0, stderr[-3000:]
    logged = [l.split() for l in theirs[0][1].splitlines() if l.startswith("epoch_loss")]
    losses, their_mae = [float(l[2]) for l in logged], [float(l[3]) for l in logged]
    assert len(ours) == len(losses) == EPOCHS
    np.testing.assert_allclose(ours, losses, rtol=0, atol=1e-4)
    # The metric over the global batch (Keras sums its state over the workers), not a slice's.
    np.testing.assert_allclose(our_mae, their_mae, rtol=0, atol=1e-4)


def start_python(argv, config):
    env = dict(os.environ)
    env["TF_CONFIG"] = config
    env["CUDA_VISIBLE_DEVICES"] = ""
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def run_one(flags):
    one = subprocess.run([TOOL] + flags, capture_output=True, text=True, timeout=120)
    assert one.returncode == 0, one.stderr
    return one


def read_csv(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return {k: np.array([float(r[k]) for r in rows]) for k in rows[0]}


def run_two(tmp_path, flags, name="h"):
    """Two workers (TF_CONFIG) with `flags`, each its own --history and --save_weights."""
    ports = free_ports(2)
    results = finish([start(flags + [f"--history={tmp_path / f'{name}{i}.csv'}",
                                     f"--save_weights={tmp_path / f'{name}{i}.npz'}"], tf_config(ports, i))
                      for i in range(2)])
    for code, _, stderr in results:
        assert code == 0, stderr
    # Every worker ends with the chief's variables, bit for bit, and prints the same epochs.
    assert len({fingerprint(stdout) for _, stdout, _ in results}) == 1
    lines = [[l for l in stdout.splitlines() if l.startswith("epoch ")] for _, stdout, _ in results]
    assert lines[0] == lines[1] and lines[0]
    return results


def assert_same_weights(a_path, b_path, rtol):
    a, b = np.load(a_path), np.load(b_path)
    assert sorted(a.files) == sorted(b.files)
    for k in a.files:
        np.testing.assert_allclose(b[k], a[k], rtol=rtol, atol=rtol / 10, err_msg=k)


def test_metrics_are_the_global_batchs(tmp_path):
    """--metrics with a cluster: each step's metric state increments are summed over the
    workers, so every worker logs the global batch's running metrics, as one process does."""
    import keras
    keras.utils.set_random_seed(4)
    x = keras.Input(shape=(5,), name="x")
    h = keras.layers.Dense(8, activation="tanh")(x)
    keras.Model(x, keras.layers.Dense(1, activation="sigmoid")(h)).export(str(tmp_path / "clf"), verbose=False)
    rng = np.random.default_rng(4)
    for name, n in [("c", N), ("cv", 20)]:
        xs = rng.normal(size=(n, 5)).astype(np.float32)
        np.savez(tmp_path / f"{name}.npz", x=xs, y=(xs[:, :1] + rng.normal(size=(n, 1)) > 0).astype(np.float32))
    flags = [f"--library={LIBRARY}", f"--saved_model={tmp_path / 'clf'}", f"--data={tmp_path / 'c.npz'}",
             f"--validation={tmp_path / 'cv.npz'}", "--inputs=x", "--targets=y", "--loss=binary_crossentropy",
             "--metrics=accuracy,auc,mae", "--optimizer=adam", "--learning_rate=0.05", f"--epochs={EPOCHS}",
             "--shuffle", "--seed=7", f"--collective_timeout={TIMEOUT}", f"--batch_size={BATCH}"]
    run_one(flags + [f"--history={tmp_path / 'one.csv'}", f"--save_weights={tmp_path / 'one.npz'}"])
    run_two(tmp_path, flags)
    for suffix in (".csv", ".epochs.csv"):
        one, two = read_csv(tmp_path / f"one{suffix}"), read_csv(tmp_path / f"h0{suffix}")
        assert sorted(one) == sorted(two)
        assert {"accuracy", "auc", "mae"} <= set(one)
        for k in one:
            tol = 1e-5 if "loss" in k else 1e-6
            np.testing.assert_allclose(two[k], one[k], rtol=tol, atol=tol, err_msg=f"{suffix} {k}")
    assert_same_weights(tmp_path / "one.npz", tmp_path / "h0.npz", 1e-5)


def test_embedding_sparse_gradient(tmp_path):
    """An Embedding (a variable gathered by rows: a sparse gradient in one process) is trained
    with a cluster by all-reducing its gradient made dense: one process's losses and weights."""
    import keras
    keras.utils.set_random_seed(5)
    ids = keras.Input(shape=(6,), dtype="int32", name="ids")
    h = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(20, 4)(ids))
    keras.Model(ids, keras.layers.Dense(2)(h)).export(str(tmp_path / "emb"), verbose=False)
    rng = np.random.default_rng(5)
    np.savez(tmp_path / "e.npz", ids=rng.integers(0, 20, size=(N, 6)).astype(np.int32),
             t=rng.normal(size=(N, 2)).astype(np.float32))
    flags = [f"--library={LIBRARY}", f"--saved_model={tmp_path / 'emb'}", f"--data={tmp_path / 'e.npz'}",
             "--inputs=ids", "--targets=t", "--loss=mse", "--optimizer=sgd", "--momentum=0.9",
             "--learning_rate=0.5", f"--epochs={EPOCHS}", "--shuffle", "--seed=7",
             f"--collective_timeout={TIMEOUT}", f"--batch_size={BATCH}"]
    run_one(flags + [f"--history={tmp_path / 'one.csv'}", f"--save_weights={tmp_path / 'one.npz'}"])
    run_two(tmp_path, flags)
    np.testing.assert_allclose(step_losses(tmp_path / "h0.csv"), step_losses(tmp_path / "one.csv"),
                               rtol=1e-5, atol=1e-7)
    assert_same_weights(tmp_path / "one.npz", tmp_path / "h0.npz", 1e-5)
    # The table is among the weights compared.
    assert any(np.load(tmp_path / "one.npz")[k].shape == (20, 4) for k in np.load(tmp_path / "one.npz").files)


def write_examples(path, x, t):
    import tensorflow as tf
    with tf.io.TFRecordWriter(str(path)) as w:
        for xi, ti in zip(x, t):
            w.write(tf.train.Example(features=tf.train.Features(feature={
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=xi)),
                "t": tf.train.Feature(float_list=tf.train.FloatList(value=ti))})).SerializeToString())


@pytest.mark.parametrize("files", [4, 5])
def test_shard_by_files(tmp_path, files):
    """--shard_by=files: worker i reads files i, i + 2, ... (sorted), 4 examples a step of the
    global 8. With 4 files of 8 examples each epoch sees exactly their union: the training equals
    one process fed, step by step, worker 0's 4 examples then worker 1's. With a fifth file,
    worker 0 has more; the epoch ends for both when worker 1's run out (the same training)."""
    flags = setup(tmp_path)
    rng = np.random.default_rng(9)
    per_file, batch = 8, 8
    x = rng.normal(size=(files, per_file, 5)).astype(np.float32)
    t = rng.normal(size=(files, per_file, 2)).astype(np.float32)
    for i in range(files):
        write_examples(tmp_path / f"part-{i}.tfrecord", x[i], t[i])
    # One process: each global step worker 0's next 4 examples (of files 0, 2), then worker 1's
    # (of files 1, 3).
    share = batch // 2
    mine = [np.concatenate([x[i] for i in (0, 2)]), np.concatenate([x[i] for i in (1, 3)])]
    theirs = [np.concatenate([t[i] for i in (0, 2)]), np.concatenate([t[i] for i in (1, 3)])]
    steps = len(mine[1]) // share
    order_x = np.concatenate([w[k * share:(k + 1) * share] for k in range(steps) for w in mine])
    order_t = np.concatenate([w[k * share:(k + 1) * share] for k in range(steps) for w in theirs])
    np.savez(tmp_path / "ordered.npz", x=order_x, t=order_t)
    common = [f for f in flags if f not in ("--shuffle", "--seed=7") and not f.startswith("--data=")]
    common.append(f"--batch_size={batch}")
    run_one(common + [f"--data={tmp_path / 'ordered.npz'}", f"--history={tmp_path / 'one.csv'}",
                      f"--save_weights={tmp_path / 'one.npz'}"])
    files_flags = common + [f"--data={tmp_path / 'part-*.tfrecord'}", "--features=t:float32:2",
                            "--shard_by=files"]
    results = run_two(tmp_path, files_flags)
    for _, stdout, _ in results:
        assert "optimizer iterations: %d" % (EPOCHS * steps) in stdout, stdout
    np.testing.assert_allclose(step_losses(tmp_path / "h0.csv"), step_losses(tmp_path / "one.csv"),
                               rtol=1e-5, atol=1e-7)
    assert_same_weights(tmp_path / "one.npz", tmp_path / "h0.npz", 1e-5)
    if files == 4:
        # Fewer files than workers: refused before any peer is waited for.
        code, _, stderr = finish([start(common + [f"--data={tmp_path / 'part-0.tfrecord'}",
                                                  "--features=t:float32:2", "--shard_by=files",
                                                  "--cluster=127.0.0.1:1,127.0.0.1:2", "--task_index=0"])],
                                 timeout=60)[0]
        assert code != 0
        assert "'files' needs at least one file per worker; " in stderr and "has 1 for 2 workers" in stderr, stderr


# tests/train_fit_c_test.c, one process per worker (the cluster in its keys).
C_RUNNER = os.path.join(WORKSPACE, "tests", "train_fit_c_test")


def test_c_api_workers_equal_the_tool(tmp_path):
    """Two workers driven through the C API alone (TfExtNewTrainer with cluster and task_index
    keys, TfExtTrainerFit) write the epochs CSV tf_ext_train's two workers write, byte for byte,
    with metrics."""
    flags = setup(tmp_path) + [f"--batch_size={BATCH}", "--metrics=mae"]
    ports = free_ports(2)
    cluster = ",".join(f"127.0.0.1:{p}" for p in ports)
    results = finish([start(flags + [f"--cluster={cluster}", f"--task_index={i}",
                                     f"--history={tmp_path / f'cli{i}.csv'}"]) for i in range(2)])
    assert all(code == 0 for code, _, _ in results), results
    keys = [f[2:] for f in flags if not f.startswith(("--library", "--saved_model"))]
    keys = [k if "=" in k else k + "=1" for k in keys]  # --shuffle
    export = [f.split("=", 1)[1] for f in flags if f.startswith("--saved_model")][0]
    ports = free_ports(2)
    cluster = ",".join(f"127.0.0.1:{p}" for p in ports)
    env = dict(os.environ, TF_EXT_LIBRARY=LIBRARY)
    env.pop("TF_CONFIG", None)
    procs = [subprocess.Popen([C_RUNNER, export] + keys + [f"cluster={cluster}", f"task_index={i}",
                                                          f"history={tmp_path / f'c{i}.csv'}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for i in range(2)]
    results = finish(procs)
    for code, stdout, stderr in results:
        assert code == 0, stderr
        assert stdout.startswith("epochs %d" % EPOCHS), stdout
    # Both workers' last logs are the global ones.
    assert results[0][1] == results[1][1]
    with open(tmp_path / "cli0.epochs.csv") as a, open(tmp_path / "c0.epochs.csv") as b:
        assert a.read() == b.read()
    assert not (tmp_path / "c1.csv").exists()


def test_memory_budget_with_workers(tmp_path):
    """--memory_budget with a cluster: each worker plans the step for its share of the global
    batch (the collectives in its graph kept), and two budgeted workers train bitwise as two
    without a budget, metrics included."""
    import keras
    keras.utils.set_random_seed(5)
    x = keras.Input(shape=(64,), name="x")
    h = x
    for _ in range(6):
        h = keras.layers.Dense(128, activation="tanh")(h)
    keras.Model(x, keras.layers.Dense(2)(h)).export(str(tmp_path / "deep"), verbose=False)
    rng = np.random.default_rng(5)
    np.savez(tmp_path / "d.npz", x=rng.normal(size=(1024, 64)).astype(np.float32),
             t=rng.normal(size=(1024, 2)).astype(np.float32))
    flags = [f"--library={LIBRARY}", f"--saved_model={tmp_path / 'deep'}", f"--data={tmp_path / 'd.npz'}",
             "--inputs=x", "--targets=t", "--loss=mse", "--metrics=mae", "--optimizer=adam",
             "--epochs=1", f"--collective_timeout={TIMEOUT}", "--batch_size=512"]
    base = run_two(tmp_path, flags, name="base")
    budget = run_two(tmp_path, flags + ["--memory_budget=0.85"], name="budget")
    for _, stdout, _ in budget:
        assert re.search(r"^memory budget .*: recomputes \d+ nodes", stdout, re.M), stdout
    assert fingerprint(budget[0][1]) == fingerprint(base[0][1])
    for suffix in (".csv", ".epochs.csv"):
        assert (tmp_path / f"budget0{suffix}").read_text() == (tmp_path / f"base0{suffix}").read_text()
