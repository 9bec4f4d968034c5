"""tf_ext ops across processes: two tf.distribute.Server tasks on 127.0.0.1 (free ports), the
forward op on task 0 and its (bridged C++) gradient on task 1, in TF2 eager (remote eager
execution) and TF1 (a grpc Session), matching the single-process numbers. Each server loads
the op library itself, as every process that runs tf_ext kernels must."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import tf_ext
from ports import free_ports

SERVER = textwrap.dedent("""
    import json, sys
    import tensorflow as tf
    import tf_ext
    tf_ext.library()  # the kernels (and gradients) must exist in the server process too
    cluster, index = json.loads(sys.argv[1]), int(sys.argv[2])
    server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name="worker",
                                  task_index=index, start=True)
    print("READY", flush=True)
    server.join()
""")

X = np.arange(1, 16, dtype=np.float64).reshape(3, 5) * np.array([1, -1, 1, -1, 1])
DY = np.linspace(-2.0, 3.0, 15).reshape(3, 5)
PRESERVE = 7
TASK0 = "/job:worker/replica:0/task:0/device:CPU:0"
TASK1 = "/job:worker/replica:0/task:1/device:CPU:0"


@pytest.fixture(scope="module")
def cluster():
    spec = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    servers = [subprocess.Popen([sys.executable, "-c", SERVER, json.dumps(spec), str(i)],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                env=env) for i in range(2)]
    try:
        for i, server in enumerate(servers):
            ready, _, _ = select.select([server.stdout], [], [], 120)
            line = server.stdout.readline() if ready else ""
            assert line.strip() == "READY", f"server {i} did not start (exit {server.poll()})"
        yield spec
    finally:
        for server in servers:
            server.kill()
            server.wait()


def single_process() -> tuple[np.ndarray, np.ndarray]:
    x = tf.constant(X)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf_ext.zero_out(x, preserve_index=PRESERVE)
    return y.numpy(), tape.gradient(y, x, output_gradients=tf.constant(DY)).numpy()


def test_tf1_session_forward_on_task0_gradient_on_task1(cluster):
    want_y, want_g = single_process()
    with tf.Graph().as_default():
        x = tf.constant(X)
        with tf.device("/job:worker/task:0"):
            y = tf_ext.zero_out(x, preserve_index=PRESERVE)
        with tf.device("/job:worker/task:1"):
            # TF2's tf.gradients always colocates gradients with their forward op.
            (g,) = tf.compat.v1.gradients(y, x, grad_ys=tf.constant(DY),
                                          colocate_gradients_with_ops=False)
        assert g.op.device == "/job:worker/task:1"
        with tf.compat.v1.Session(f"grpc://{cluster['worker'][0]}") as sess:
            got_y, got_g = sess.run([y, g])
    np.testing.assert_array_equal(got_y, want_y)
    np.testing.assert_array_equal(got_g, want_g)


def test_remote_eager_forward_on_task0_gradient_on_task1(cluster):
    # Last in this module: connecting changes this process's eager context for good. The
    # bridge built this gradient before connecting (single_process): it must rebuild it, as
    # functions registered before connecting never reach the workers.
    want_y, want_g = single_process()
    tf.config.experimental_connect_to_cluster(tf.train.ClusterSpec(cluster))
    x = tf.constant(X)
    with tf.GradientTape() as tape:
        tape.watch(x)
        with tf.device(TASK0):
            y = tf_ext.zero_out(x, preserve_index=PRESERVE)
    with tf.device(TASK1):
        g = tape.gradient(y, x, output_gradients=tf.constant(DY))
    assert y.device == TASK0 and g.device == TASK1
    np.testing.assert_array_equal(y.numpy(), want_y)
    np.testing.assert_array_equal(g.numpy(), want_g)
    assert np.count_nonzero(want_g) == 1
