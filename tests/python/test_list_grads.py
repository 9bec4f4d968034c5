"""C++ gradients of TensorList and TensorArray ops (tf_ext/grads/tf/list_grad.cc,
tensor_array_grad.cc), outside any loop, against Python's gradients of the same graphs.

Three C++ paths:
  - SymbolicGradient of a function holding the ops (tf.compat.v1 Session): TensorFlow's own
    function-level builder (core/common_runtime/gradients.cc) calls each op's C++ gradient and
    adds ZerosLike / AddN of DT_VARIANT lists where a list has no or several consumers;
  - SymbolicGradient of single TensorArray ops, chained by hand;
  - tf_ext_grad (a C++ process) on graphs frozen from a tf.function with
    convert_variables_to_constants_v2(lower_control_flow=False).
References: eager GradientTape for lists; tf.gradients in a tf.compat.v1 graph for TensorArrayV3
(eager cannot differentiate TensorArrayV3: Python's gradient keys the gradient array by the
graph's name scope). Tolerances: float32 max|g - ref| / max|ref| <= 1e-4, float64 <= 1e-9.
"""
from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import function as defun_lib
from tensorflow.python.framework.convert_to_constants import (
    convert_variables_to_constants_v2)
from tensorflow.python.ops import list_ops as L

from tf_ext import _c_api
from tf_ext._c_api import GradientKind

WORKSPACE = os.getcwd()  # Bazel runs tests in the workspace's runfiles root
# Canonical path: tf_ext's loader refuses a second copy under another name.
LIBRARY = os.path.realpath(os.environ.get("TF_EXT_LIBRARY") or os.path.join(
    WORKSPACE, "bazel-bin", "tf_ext", "_tf_ext_ops.so"))
TOOL = next((p for p in (os.path.join(WORKSPACE, "tf_ext", "tf_ext_grad"),
                         os.path.join(WORKSPACE, "bazel-bin", "tf_ext", "tf_ext_grad"))
             if os.path.isfile(p)), None)
tf.load_op_library(LIBRARY)

TOL = {np.float32: 1e-4, np.float64: 1e-9}
R = tf.raw_ops


def assert_close(got, ref, dtype, what):
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    scale = np.abs(ref).max() if ref.size else 0.0
    if scale == 0:
        np.testing.assert_array_equal(got, ref, err_msg=what)
        return
    rel = np.abs(got - ref).max() / scale
    assert rel <= TOL[dtype], "%s: max relative error %.3g" % (what, rel)


# ---------------------------------------------------------------------------------------------
# TensorList graphs: f(x) for x of shape (3, 2) (or as given), each op outside any loop.

def from_tensor(x, shape=(2,)):
    return L.tensor_list_from_tensor(x, None if shape is None else list(shape))


def stack(lst, x, **kw):
    return L.tensor_list_stack(lst, x.dtype, **kw)


LIST_CASES = {
    # TensorListFromTensor + TensorListStack
    "from_tensor_stack": lambda x: stack(from_tensor(x), x) * 3.0,
    "get_item": lambda x: L.tensor_list_get_item(from_tensor(x), 1, x.dtype) * 2.0,
    "set_item": lambda x: stack(L.tensor_list_set_item(from_tensor(x), 1, x[0] * 3.0), x),
    "set_item_resize": lambda x: stack(
        L.tensor_list_set_item(from_tensor(x), 4, x[1] * 2.0,
                               resize_if_index_out_of_bounds=True), x, element_shape=[2]),
    "push_back": lambda x: stack(L.tensor_list_push_back(from_tensor(x), x[2] * x[2]), x),
    "pop_back": lambda x: (lambda lt: stack(lt[0], x) * 2.0 + lt[1] * lt[1])(
        L.tensor_list_pop_back(from_tensor(x), x.dtype)),
    # The popped list gets no incoming gradient: the builder adds ZerosLike of a variant list.
    "pop_back_unused_list": lambda x: L.tensor_list_pop_back(from_tensor(x), x.dtype)[1] * 5.0,
    "gather": lambda x: L.tensor_list_gather(from_tensor(x), [2, 0], x.dtype) * x[:2],
    "scatter_v2": lambda x: stack(L.tensor_list_scatter(x * x, [2, 0, 1], [2]), x,
                                  element_shape=[2]),
    "scatter_v1": lambda x: stack(R.TensorListScatter(tensor=x * x, indices=[2, 0, 1],
                                                      element_shape=[2]), x),
    "scatter_into_existing": lambda x: stack(
        L.tensor_list_scatter(x[:2] * 3.0, [2, 0], input_handle=from_tensor(x)), x),
    # TensorListSplit + TensorListConcatV2
    "split_concat_v2": lambda x: L.tensor_list_concat(
        L.tensor_list_split(x * x, [-1, 2], [1, 2]), x.dtype) * 2.0,
    "concat_v1": lambda x: R.TensorListConcat(
        input_handle=L.tensor_list_split(x * x, [-1, 2], [2, 1]), element_dtype=x.dtype,
        element_shape=tf.TensorShape([None, 2]))[0],
    "resize_grow": lambda x: stack(L.tensor_list_resize(from_tensor(x), 5), x,
                                   element_shape=[2]),
    "resize_shrink": lambda x: stack(L.tensor_list_resize(from_tensor(x), 2), x),
    # One list, several consumers: the builder sums the lists' gradients with AddN (variant).
    "two_consumers": lambda x: (lambda lst: L.tensor_list_get_item(lst, 0, x.dtype) * 3.0
                                + stack(lst, x)[2] * L.tensor_list_get_item(lst, 2, x.dtype))(
        from_tensor(x)),
    # Two partial gradient lists (element 1 uninitialised in both) summed, then stacked.
    "two_get_items": lambda x: (lambda lst: L.tensor_list_get_item(lst, 0, x.dtype)
                                * L.tensor_list_get_item(lst, 2, x.dtype))(from_tensor(x)),
    "reserve_set_get": lambda x: L.tensor_list_get_item(
        L.tensor_list_set_item(L.tensor_list_reserve([2], 3, x.dtype), 1, x[0] * x[1]), 1,
        x.dtype),
    # Degenerate: unknown element shapes, empty lists.
    "unknown_shape": lambda x: L.tensor_list_get_item(from_tensor(x, None), 1, x.dtype) * 2.0,
    "unknown_shape_reserve": lambda x: stack(L.tensor_list_set_item(
        L.tensor_list_set_item(L.tensor_list_reserve(None, 2, x.dtype), 0, x[0]), 1, x[1] * 2.0),
        x),
    "unknown_shape_gather": lambda x: L.tensor_list_gather(
        L.tensor_list_push_back(from_tensor(x, None), x[0] * 4.0), [3, 1], x.dtype),
    "unknown_shape_concat": lambda x: L.tensor_list_concat(
        from_tensor(tf.reshape(x, [3, 1, 2]), None), x.dtype) * x,
    "unknown_shape_split_stack": lambda x: stack(L.tensor_list_split(x * x, None, [1, 1, 1]), x),
    "unknown_shape_reserve_gather": lambda x: L.tensor_list_gather(
        L.tensor_list_set_item(L.tensor_list_reserve(None, 3, x.dtype), 1, x[0] * x[2]), [1],
        x.dtype),
    "empty_from_tensor_stack": lambda x: stack(from_tensor(x[:0]), x) * 2.0 + x[:0],
    "empty_reserve_push_back": lambda x: stack(L.tensor_list_push_back(
        L.tensor_list_reserve([2], 0, x.dtype), x[1] * 3.0), x),
}


def tape_gradient(fn, x, w):
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = fn(xt)
    g = tape.gradient(y, xt, output_gradients=tf.constant(w))
    return np.zeros_like(x) if g is None else g.numpy()


def symbolic_gradient(fn, x, w):
    """d/dx <fn(x), w> through SymbolicGradient of a function holding fn's ops (C++ only)."""
    with tf.Graph().as_default():
        @defun_lib.Defun(tf.as_dtype(x.dtype))
        def forward(xx):
            return fn(xx)

        xt = tf.constant(x)
        forward(xt)  # adds the function to the graph's library
        (g,) = R.SymbolicGradient(input=[xt, tf.constant(w)], Tout=[tf.as_dtype(x.dtype)],
                                  f=tf.compat.v1.NameAttrList(name=forward.name))
        with tf.compat.v1.Session() as sess:
            return sess.run(g)


def case_input(name, dtype, seed):
    x = np.random.default_rng(seed).standard_normal((3, 2)).astype(dtype)
    y = LIST_CASES[name](tf.constant(x)).numpy()
    w = np.random.default_rng(seed + 100).standard_normal(y.shape).astype(dtype)
    return x, w


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", sorted(LIST_CASES))
def test_list_symbolic_gradient_matches_tape(name, dtype):
    x, w = case_input(name, dtype, seed=len(name))
    ref = tape_gradient(LIST_CASES[name], x, w)
    got = symbolic_gradient(LIST_CASES[name], x, w)
    assert got.dtype == dtype
    assert_close(got, ref, dtype, name)
    if not name.startswith("empty"):
        assert np.abs(ref).max() > 0, name  # a case whose gradient is not trivially zero


def test_list_ops_have_cpp_gradients():
    differentiable = [
        "TensorListFromTensor", "TensorListStack", "TensorListGetItem", "TensorListSetItem",
        "TensorListPushBack", "TensorListPopBack", "TensorListGather", "TensorListScatter",
        "TensorListScatterV2", "TensorListScatterIntoExistingList", "TensorListConcat",
        "TensorListConcatV2", "TensorListSplit", "TensorListResize", "TensorArrayReadV3",
        "TensorArrayWriteV3", "TensorArrayGatherV3", "TensorArrayScatterV3",
        "TensorArrayConcatV3", "TensorArraySplitV3"]
    not_differentiable = [
        "TensorListLength", "TensorListElementShape", "TensorListConcatLists",
        "TensorListPushBackBatch", "EmptyTensorList", "TensorListReserve", "TensorArrayV3",
        "TensorArrayGradV3", "TensorArraySizeV3", "TensorArrayCloseV3"]
    for op in differentiable:
        assert _c_api.gradient_kind(op)[0] == GradientKind.FUNCTION, op
    for op in not_differentiable:
        assert _c_api.gradient_kind(op)[0] == GradientKind.NONE, op


# ---------------------------------------------------------------------------------------------
# TensorArrayV3 graphs (x of shape (3, 2)).

def ta(x, size=3, shape=(2,), **kw):
    return R.TensorArrayV3(size=size, dtype=x.dtype, element_shape=tf.TensorShape(shape), **kw)


def ta_write_read(x):
    h, flow = ta(x)
    for i in range(3):
        flow = R.TensorArrayWriteV3(handle=h, index=i, value=x[i] * float(i + 1), flow_in=flow)
    a = R.TensorArrayReadV3(handle=h, index=0, flow_in=flow, dtype=x.dtype)
    b = R.TensorArrayReadV3(handle=h, index=2, flow_in=flow, dtype=x.dtype)
    return a * b + a  # element 1 is never read: its write gets zeros


def ta_scatter_gather(x):
    h, flow = ta(x)
    flow = R.TensorArrayScatterV3(handle=h, indices=[2, 0, 1], value=x * x, flow_in=flow)
    return R.TensorArrayGatherV3(handle=h, indices=[1, 2], flow_in=flow, dtype=x.dtype,
                                 element_shape=tf.TensorShape([2]))


def ta_split_concat(x):
    h, flow = ta(x, shape=(1, 2))
    flow = R.TensorArraySplitV3(handle=h, value=x * 2.0, lengths=tf.constant([1, 1, 1], tf.int64),
                                flow_in=flow)
    return R.TensorArrayConcatV3(handle=h, flow_in=flow, dtype=x.dtype)[0] ** 2


def ta_split_concat_ragged(x):
    h, flow = R.TensorArrayV3(size=2, dtype=x.dtype, identical_element_shapes=False)
    flow = R.TensorArraySplitV3(handle=h, value=x * 2.0, lengths=tf.constant([1, 2], tf.int64),
                                flow_in=flow)
    return R.TensorArrayConcatV3(handle=h, flow_in=flow, dtype=x.dtype)[0] ** 2


def ta_unknown_shape_unread_write(x):
    # Degenerate: an element written but never read, in an array of unknown element shape.
    # Its gradient is read from an unwritten element of the gradient array: zeros, of the
    # shape the other gradient wrote (Python gives the same).
    h, flow = R.TensorArrayV3(size=2, dtype=x.dtype, identical_element_shapes=False)
    flow = R.TensorArrayWriteV3(handle=h, index=0, value=x[0] * 2.0, flow_in=flow)
    flow = R.TensorArrayWriteV3(handle=h, index=1, value=x[1] * 3.0, flow_in=flow)
    return R.TensorArrayReadV3(handle=h, index=1, flow_in=flow, dtype=x.dtype)


TA_CASES = {
    "ta_write_read": ta_write_read,
    "ta_scatter_gather": ta_scatter_gather,
    "ta_split_concat": ta_split_concat,
    "ta_unknown_shape_unread_write": ta_unknown_shape_unread_write,
}


def v1_gradient(fn, x, w):
    """Python's tf.gradients in a TF1 graph (TensorArrayV3 needs control flow v1 objects)."""
    tf.compat.v1.disable_control_flow_v2()
    try:
        with tf.Graph().as_default():
            xt = tf.constant(x)
            (g,) = tf.gradients(fn(xt), xt, grad_ys=tf.constant(w))
            with tf.compat.v1.Session() as sess:
                return sess.run(g)
    finally:
        tf.compat.v1.enable_control_flow_v2()


@pytest.mark.parametrize("write_source", [None, "another_gradient"])
def test_tensor_array_symbolic_gradients_chained_by_hand(write_source):
    # y = read(write(array, 1, v), 1); each op's gradient by its own SymbolicGradient node: the
    # read's gradient writes d(value) into the gradient array, the write's reads it back. A
    # write whose node carries another _tf_ext_grad_source reads another (empty) gradient array.
    v = np.array([1.5, -2.0], np.float32)
    dy = np.array([0.5, 4.0], np.float32)
    with tf.Graph().as_default():
        vt = tf.constant(v)
        h, flow0 = ta(vt, size=2)
        flow1 = R.TensorArrayWriteV3(handle=h, index=1, value=vt, flow_in=flow0)
        value = R.TensorArrayReadV3(handle=h, index=1, flow_in=flow1, dtype=tf.float32)

        def func(t, source=None):
            attrs = dict(t.op.node_def.attr)
            if source:
                attrs["_tf_ext_grad_source"] = tf.compat.v1.AttrValue(s=source.encode())
            return tf.compat.v1.NameAttrList(name=t.op.type, attr=attrs)

        _, _, d_flow1 = R.SymbolicGradient(
            input=[h, 1, flow1, tf.constant(dy)], Tout=[tf.float32, tf.int32, tf.float32],
            f=func(value))
        _, _, d_v, _ = R.SymbolicGradient(
            input=[h, 1, vt, flow0, d_flow1], Tout=[tf.float32, tf.int32, tf.float32, tf.float32],
            f=func(flow1, write_source))
        with tf.compat.v1.Session() as sess:
            got_value, got = sess.run([value, d_v])
    np.testing.assert_array_equal(got_value, v)
    # d(v) = d(value): the array is the identity; zeros from an array nobody wrote to.
    np.testing.assert_array_equal(got, np.zeros_like(dy) if write_source else dy)


# ---------------------------------------------------------------------------------------------
# tf_ext_grad on frozen graphs: every case in one graph, one x per case.

def freeze(fns, dtype):
    """A frozen graph with input x_<i> per function and y = sum_i sum(fns[i](x_<i>) * w_i)."""
    xs, ws = [], []
    for i, (name, fn) in enumerate(fns):
        x = np.random.default_rng(i).standard_normal((3, 2)).astype(dtype)
        y = fn(tf.constant(x)).numpy()
        xs.append(x)
        ws.append(np.random.default_rng(100 + i).standard_normal(y.shape).astype(dtype))
    specs = [tf.TensorSpec((3, 2), tf.as_dtype(dtype), name="x_%d" % i) for i in range(len(fns))]

    @tf.function(input_signature=specs)
    def model(*args):
        return tf.add_n([tf.reduce_sum(fn(a) * w) for (_, fn), a, w in zip(fns, args, ws)])

    frozen = convert_variables_to_constants_v2(model.get_concrete_function(),
                                               lower_control_flow=False)
    return frozen.graph.as_graph_def(), xs, ws


def run_tf_ext_grad(tmp_path, graph_def, xs, dtype, *flags):
    graph = tmp_path / "g.pb"
    graph.write_bytes(graph_def.SerializeToString())
    feeds = []
    for i, x in enumerate(xs):
        np.save(tmp_path / ("x_%d.npy" % i), x)
        feeds.append("--feed=x_%d=@%s" % (i, tmp_path / ("x_%d.npy" % i)))
    out = tmp_path / "grad.npz"
    y = [n.name for n in graph_def.node if n.op == "Identity"][-1]
    r = subprocess.run([TOOL, "--library=" + LIBRARY, "--graph=%s" % graph, "--y=" + y,
                        "--x=" + ",".join("x_%d" % i for i in range(len(xs))), "--save=%s" % out]
                       + feeds + list(flags), capture_output=True, text=True)
    return r, (np.load(out) if r.returncode == 0 else None)


# tf_ext_grad inlines each op's gradient as plain ops by default; --symbolic_gradients keeps one
# SymbolicGradient node (a function call) per op.
MODES = {"inlined": [], "symbolic": ["--symbolic_gradients"]}


@pytest.mark.skipif(TOOL is None, reason="tf_ext_grad not built")
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_list_graphs_through_tf_ext_grad(tmp_path, dtype, mode):
    fns = sorted(LIST_CASES.items())
    graph_def, xs, ws = freeze(fns, dtype)
    ops = {n.op for n in graph_def.node}
    assert {"TensorListFromTensor", "TensorListSplit", "TensorListConcatV2"} <= ops, ops
    r, got = run_tf_ext_grad(tmp_path, graph_def, xs, dtype, *MODES[mode])
    assert r.returncode == 0, r.stderr[-3000:]
    for i, (name, fn) in enumerate(fns):
        ref = tape_gradient(fn, xs[i], ws[i])
        assert_close(got["d_x_%d" % i], ref, dtype, name)


@pytest.mark.skipif(TOOL is None, reason="tf_ext_grad not built")
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_tensor_array_graphs_through_tf_ext_grad(tmp_path, dtype, mode):
    fns = sorted(TA_CASES.items())
    graph_def, xs, ws = freeze(fns, dtype)
    assert "TensorArrayV3" in {n.op for n in graph_def.node}
    r, got = run_tf_ext_grad(tmp_path, graph_def, xs, dtype, *MODES[mode])
    assert r.returncode == 0, r.stderr[-3000:]
    for i, (name, fn) in enumerate(fns):
        ref = v1_gradient(fn, xs[i], ws[i])
        assert np.abs(ref).max() > 0, name
        assert_close(got["d_x_%d" % i], ref, dtype, name)


@pytest.mark.skipif(TOOL is None, reason="tf_ext_grad not built")
def test_tensor_array_ragged_concat_through_tf_ext_grad(tmp_path):
    # Inlined (the default), ConcatV3's gradient gets the forward `lengths` from the forward
    # node: exact for elements of different shapes. With --symbolic_gradients (SymbolicGradient
    # passes only inputs) it splits evenly and says so when the rows do not divide (never a
    # silently wrong split).
    graph_def, xs, ws = freeze([("ragged", ta_split_concat_ragged)], np.float32)
    r, got = run_tf_ext_grad(tmp_path, graph_def, xs, np.float32)
    assert r.returncode == 0, r.stderr[-3000:]
    assert_close(got["d_x_0"], v1_gradient(ta_split_concat_ragged, xs[0], ws[0]), np.float32,
                 "ragged")
    r, _ = run_tf_ext_grad(tmp_path, graph_def, xs, np.float32, "--symbolic_gradients")
    assert r.returncode != 0
    assert "TensorArrayConcatV3: without the forward output lengths, its gradient assumes" \
        in r.stderr, r.stderr[-3000:]


def test_tensor_array_ragged_concat_with_forward_outputs_is_exact():
    # A front end that has the forward node passes ConcatV3's outputs (kForwardOutputsAttr):
    # the gradient then splits by the forward lengths, also for elements of different shapes.
    from tensorflow.core.framework import function_pb2  # pylint: disable=g-import-not-at-top
    lib = tf.load_op_library(LIBRARY)
    v = np.arange(6, dtype=np.float32).reshape(3, 2)
    dvalue = np.random.default_rng(1).standard_normal((3, 2)).astype(np.float32)
    graph = tf.Graph()
    with graph.as_default():
        vt = tf.constant(v)
        lengths = tf.constant([1, 2], tf.int64)
        h, flow0 = R.TensorArrayV3(size=2, dtype=tf.float32, identical_element_shapes=False)
        flow1 = R.TensorArraySplitV3(handle=h, value=vt, lengths=lengths, flow_in=flow0)
        value, out_lengths = R.TensorArrayConcatV3(handle=h, flow_in=flow1, dtype=tf.float32)
    node = tf.compat.v1.NodeDef()
    node.CopyFrom(value.op.node_def)
    del node.input[:]
    node.attr["_tf_ext_forward_outputs"].b = True
    fdef = function_pb2.FunctionDef.FromString(
        lib.tf_ext_gradient_function_def(node.SerializeToString()).numpy())
    with graph.as_default():
        assert [a.name for a in fdef.signature.input_arg] == [
            "handle", "flow_in", "value", "lengths", "d_value", "d_lengths"]
        concat_grad = defun_lib._from_definition(fdef)  # pylint: disable=protected-access
        _, d_flow1 = concat_grad(h, flow1, value, out_lengths, tf.constant(dvalue),
                                 tf.zeros_like(out_lengths))
        d_v = R.SymbolicGradient(
            input=[h, vt, lengths, flow0, d_flow1],
            Tout=[tf.float32, tf.float32, tf.int64, tf.float32],
            f=tf.compat.v1.NameAttrList(name=flow1.op.type, attr=dict(flow1.op.node_def.attr)))[1]
        with tf.compat.v1.Session() as sess:
            got_value, got = sess.run([value, d_v])
    np.testing.assert_array_equal(got_value, v)
    np.testing.assert_array_equal(got, dvalue)  # concat(split(v)) = v
