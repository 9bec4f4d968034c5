"""C++ gradients of the TensorArray version 1 and 2 ops (TensorArrayRead, TensorArrayReadV2,
Write, Gather, Scatter, Concat, Split and their V2 forms; tf_ext/grads/tf/tensor_array_grad.cc).

TensorFlow 2.21 builds and runs those ops only in graphs whose GraphDef producer version is
below the version that removed them (16 for version 1, 26 for version 2): the graphs here
import an empty GraphDef of producer 15. Python registers gradients for them (the version 3
functions), but they cannot build in TensorFlow 2.21 (checked below); so the reference is
Python's tf.gradients of the same graph written in version 3 ops, and central differences of
the version 1/2 graph itself.

Each op's C++ gradient runs as its own SymbolicGradient node, chained by hand in reverse order
(`backprop` below), as tests/python/test_list_grads.py does for version 3; and through
tf_ext_grad (a C++ process: tf_ext's graph-level builder) on the GraphDef.
"""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

import tf_ext

R = tf.raw_ops
WORKSPACE = os.getcwd()  # Bazel runs tests in the workspace's runfiles root
TOOL = next((p for p in (os.path.join(WORKSPACE, "tf_ext", "tf_ext_grad"),
                         os.path.join(WORKSPACE, "bazel-bin", "tf_ext", "tf_ext_grad"))
             if os.path.isfile(p)), None)
PRODUCER = 15  # below 16: version 1 and version 2 ops both build and run
TOL = {np.float32: 1e-6, np.float64: 1e-12}


def old_graph() -> tf.Graph:
    g = tf.Graph()
    gd = graph_pb2.GraphDef()
    gd.versions.producer = PRODUCER
    with g.as_default():
        tf.compat.v1.import_graph_def(gd, name="")
    assert g.graph_def_versions.producer == PRODUCER
    return g


class Ops:
    """The TensorArray ops of one version, called with version 3's arguments."""

    def __init__(self, version):
        self.version = version
        self.suffix = {1: "", 2: "V2", 3: "V3"}[version]

    def op(self, base):
        return getattr(R, "TensorArray" + base + self.suffix)

    def create(self, size, dtype, shape, **kw):
        """(handle, flow)."""
        make = R.TensorArray if self.version == 1 else self.op("")
        out = make(size=size, dtype=dtype, element_shape=tf.TensorShape(shape), **kw)
        return (out if self.version == 3 else (out, tf.constant(0.0)))


# The cases: ys = f(ops, xs), TensorArray ops only; the shapes of xs and of ys.
def write_read(ta, xs):
    h, flow = ta.create(3, xs[0].dtype, (2,))
    for i in range(3):
        flow = ta.op("Write")(handle=h, index=i, value=xs[i], flow_in=flow)
    # index 1 is written and never read: its value gets zeros
    return [ta.op("Read")(handle=h, index=k, flow_in=flow, dtype=xs[0].dtype) for k in (0, 2)]


def scatter_gather(ta, xs):
    h, flow = ta.create(3, xs[0].dtype, (2,))
    flow = ta.op("Scatter")(handle=h, indices=[2, 0, 1], value=xs[0], flow_in=flow)
    return [ta.op("Gather")(handle=h, indices=[1, 2], flow_in=flow, dtype=xs[0].dtype,
                            element_shape=tf.TensorShape([2]))]


def split_concat(ta, xs):
    h, flow = ta.create(3, xs[0].dtype, (1, 2))
    flow = ta.op("Split")(handle=h, value=xs[0], lengths=tf.constant([1, 1, 1], tf.int64),
                          flow_in=flow)
    return [ta.op("Concat")(handle=h, flow_in=flow, dtype=xs[0].dtype)[0]]


CASES = {
    "write_read": (write_read, [(2,), (2,), (2,)], [(2,), (2,)]),
    "scatter_gather": (scatter_gather, [(3, 2)], [(2, 2)]),
    "split_concat": (split_concat, [(3, 2)], [(3, 2)]),
}
OPS_OF_CASE = {"write_read": ("Write", "Read"), "scatter_gather": ("Scatter", "Gather"),
               "split_concat": ("Split", "Concat")}


def backprop(ys, dys, xs):
    """d(sum(dys * ys)) / d(xs): each TensorArray op's C++ gradient as a SymbolicGradient node,
    in reverse creation order; gradients sent to one tensor are summed."""
    sent = {y.ref(): [dy] for y, dy in zip(ys, dys)}
    graph = ys[0].graph
    ops = [op for op in graph.get_operations()
           if op.type.startswith("TensorArray") and op.type not in
           ("TensorArray", "TensorArrayV2", "TensorArrayV3")]
    for op in reversed(ops):
        outs = []
        for out in op.outputs:
            grads = sent.get(out.ref(), [])
            outs.append(tf.add_n(grads) if grads else tf.zeros_like(out))
        f = tf.compat.v1.NameAttrList(name=op.type, attr=dict(op.node_def.attr))
        tout = [t.dtype.base_dtype for t in op.inputs]
        tout = [tf.float32 if t == tf.resource else t for t in tout]  # version 3's handle
        grads = R.SymbolicGradient(input=list(op.inputs) + outs, Tout=tout, f=f)
        for t, g in zip(op.inputs, grads):
            if t.dtype.base_dtype in (tf.float32, tf.float64):
                sent.setdefault(t.ref(), []).append(g)
    return [tf.add_n(sent[x.ref()]) if x.ref() in sent else tf.zeros_like(x) for x in xs]


def inputs_and_weights(case, dtype):
    _, x_shapes, y_shapes = CASES[case]
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal(s).astype(dtype) for s in x_shapes]
    ws = [rng.standard_normal(s).astype(dtype) for s in y_shapes]
    return xs, ws


def cpp_gradient(case, version, xs, ws):
    fn = CASES[case][0]
    with old_graph().as_default():
        tf_ext.library()
        xts = [tf.constant(x) for x in xs]
        ys = fn(Ops(version), xts)
        types = {op.type for op in ys[0].graph.get_operations()}
        for base in OPS_OF_CASE[case]:
            assert "TensorArray" + base + Ops(version).suffix in types, types
        grads = backprop(ys, [tf.constant(w) for w in ws], xts)
        with tf.compat.v1.Session() as sess:
            return sess.run(grads)


def python_v3_gradient(case, xs, ws):
    """Python's tf.gradients of the same graph in version 3 ops (control flow v1 objects, as
    Python's TensorArray gradients need)."""
    fn = CASES[case][0]
    tf.compat.v1.disable_control_flow_v2()
    try:
        with tf.Graph().as_default():
            xts = [tf.constant(x) for x in xs]
            ys = fn(Ops(3), xts)
            grads = tf.gradients(ys, xts, grad_ys=[tf.constant(w) for w in ws])
            with tf.compat.v1.Session() as sess:
                return sess.run(grads)
    finally:
        tf.compat.v1.enable_control_flow_v2()


def numeric_gradient(case, version, xs, ws, delta=1e-3):
    """Central differences of L = sum(w * y) in the version 1/2 graph (float64)."""
    fn = CASES[case][0]
    with old_graph().as_default():
        feeds = [tf.compat.v1.placeholder(tf.float64, x.shape) for x in xs]
        ys = fn(Ops(version), feeds)
        loss = tf.add_n([tf.reduce_sum(y * w) for y, w in zip(ys, ws)])
        out = []
        with tf.compat.v1.Session() as sess:
            for k, x in enumerate(xs):
                numeric = np.zeros_like(x)
                for idx in np.ndindex(x.shape):
                    plus, minus = [a.copy() for a in xs], [a.copy() for a in xs]
                    plus[k][idx] += delta
                    minus[k][idx] -= delta
                    lp = sess.run(loss, dict(zip(feeds, plus)))
                    lm = sess.run(loss, dict(zip(feeds, minus)))
                    numeric[idx] = (lp - lm) / (2 * delta)
                out.append(numeric)
    return out


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_matches_python_version_3(case, version, dtype):
    xs, ws = inputs_and_weights(case, dtype)
    got = cpp_gradient(case, version, xs, ws)
    want = python_v3_gradient(case, xs, ws)
    nonzero = 0
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, k
        np.testing.assert_allclose(g, w, rtol=TOL[dtype], atol=TOL[dtype], err_msg=f"input {k}")
        nonzero += np.count_nonzero(w)
    assert nonzero > 0
    if case == "write_read":  # the unread write gets zeros
        np.testing.assert_array_equal(got[1], np.zeros(2, dtype))


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_central_differences(case, version):
    xs, ws = inputs_and_weights(case, np.float64)
    got = cpp_gradient(case, version, xs, ws)
    for k, (g, n) in enumerate(zip(got, numeric_gradient(case, version, xs, ws))):
        np.testing.assert_allclose(g, n, rtol=1e-8, atol=1e-8, err_msg=f"input {k}")


@pytest.mark.parametrize("version", [1, 2])
def test_handle_gets_empty_strings(version):
    """The string handle's gradient: zeros of a string (empty strings), as Python's None."""
    with old_graph().as_default():
        tf_ext.library()
        ta = Ops(version)
        v = tf.constant([1.0, 2.0])
        h, flow = ta.create(1, tf.float32, (2,))
        flow1 = ta.op("Write")(handle=h, index=0, value=v, flow_in=flow)
        value = ta.op("Read")(handle=h, index=0, flow_in=flow1, dtype=tf.float32)
        f = tf.compat.v1.NameAttrList(name=value.op.type, attr=dict(value.op.node_def.attr))
        d_h, d_index, d_flow = R.SymbolicGradient(
            input=list(value.op.inputs) + [tf.ones([2])],
            Tout=[tf.string, tf.int32, tf.float32], f=f)
        with tf.compat.v1.Session() as sess:
            got_h, got_index = sess.run([d_h, d_index])
    np.testing.assert_array_equal(got_h, np.array([b"", b""], object))
    assert got_index == 0


@pytest.mark.parametrize("version", [1, 2])
def test_ragged_concat_without_lengths_names_the_op(version):
    """A bare SymbolicGradient has no forward `lengths`: the concat's gradient splits evenly and
    fails naming the version's op when the rows do not divide (as version 3's)."""
    ta = Ops(version)
    with old_graph().as_default():
        tf_ext.library()
        x = tf.constant(np.arange(6, dtype=np.float32).reshape(3, 2))
        h, flow = ta.create(2, tf.float32, None)
        flow = ta.op("Split")(handle=h, value=x, lengths=tf.constant([1, 2], tf.int64),
                              flow_in=flow)
        value, lengths = ta.op("Concat")(handle=h, flow_in=flow, dtype=tf.float32)
        f = tf.compat.v1.NameAttrList(name=value.op.type, attr=dict(value.op.node_def.attr))
        grads = R.SymbolicGradient(input=list(value.op.inputs) + [tf.ones([3, 2]),
                                                                  tf.zeros([2], tf.int64)],
                                   Tout=[tf.string, tf.float32], f=f)
        with tf.compat.v1.Session() as sess:
            with pytest.raises(tf.errors.InvalidArgumentError,
                               match=f"TensorArrayConcat{ta.suffix}: without the forward "
                                     "output lengths"):
                sess.run(grads)


@pytest.mark.parametrize("version", [1, 2])
def test_python_gradients_cannot_build(version):
    """Why the reference is version 3: Python's registered function for these ops fails to
    build in TensorFlow 2.21, with control flow v2 (an assert in its TensorArray wrapper) and
    with control flow v1 (TensorArrayGradV3 on a string handle)."""
    for v1_control_flow in (False, True):
        if v1_control_flow:
            tf.compat.v1.disable_control_flow_v2()
        try:
            with old_graph().as_default():
                ta = Ops(version)
                v = tf.constant([1.0, 2.0])
                h, flow = ta.create(1, tf.float32, (2,))
                flow1 = ta.op("Write")(handle=h, index=0, value=v, flow_in=flow)
                value = ta.op("Read")(handle=h, index=0, flow_in=flow1, dtype=tf.float32)
                with pytest.raises((AssertionError, TypeError)):
                    tf.gradients(value, v)
        finally:
            tf.compat.v1.enable_control_flow_v2()


def test_removed_in_current_graphs():
    """The versions that removed them, as TensorFlow 2.21 says (the reason for PRODUCER)."""
    with tf.Graph().as_default():
        with pytest.raises(NotImplementedError, match="removed in version 26"):
            R.TensorArrayV2(size=1, dtype=tf.float32)
        with pytest.raises(NotImplementedError, match="removed in version 16"):
            R.TensorArray(size=1, dtype=tf.float32)


@pytest.mark.skipif(TOOL is None, reason="tf_ext_grad not built")
@pytest.mark.parametrize("mode", [[], ["--symbolic_gradients"]], ids=["inlined", "symbolic"])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("version", [1, 2])
def test_through_tf_ext_grad(tmp_path, version, case, mode):
    """The GraphDef of producer 15 differentiated by tf_ext_grad: y = sum_k sum(w_k * y_k)."""
    xs, ws = inputs_and_weights(case, np.float32)
    with old_graph().as_default() as g:
        feeds = [tf.compat.v1.placeholder(tf.float32, x.shape, name=f"x_{k}")
                 for k, x in enumerate(xs)]
        ys = CASES[case][0](Ops(version), feeds)
        tf.identity(tf.add_n([tf.reduce_sum(y * w) for y, w in zip(ys, ws)]), name="y")
    graph = tmp_path / "g.pb"
    graph.write_bytes(g.as_graph_def().SerializeToString())
    args = [TOOL, "--library=" + tf_ext.library_path(), f"--graph={graph}", "--y=y",
            "--x=" + ",".join(f"x_{k}" for k in range(len(xs))),
            f"--save={tmp_path / 'grad.npz'}"] + mode
    for k, x in enumerate(xs):
        np.save(tmp_path / f"x_{k}.npy", x)
        args.append(f"--feed=x_{k}=@{tmp_path / f'x_{k}.npy'}")
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    got = np.load(tmp_path / "grad.npz")
    want = python_v3_gradient(case, xs, ws)
    for k, w in enumerate(want):
        np.testing.assert_allclose(got[f"d_x_{k}"], w, rtol=1e-6, atol=1e-6, err_msg=f"x_{k}")
