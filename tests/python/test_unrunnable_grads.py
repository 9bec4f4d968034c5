"""tf_ext's C++ gradients that cannot run in tensorflow-cpu, checked structurally against
Python's: SparseMatrixAdd and SparseMatrixSoftmax (csr_sparse_matrix_grad.cc; their kernels,
and SparseMatrixSoftmaxGrad's and SparseMatrixMul's, are GPU only) and XlaSpmdShardToFullShape
(xla_grad.cc; its gradient op, XlaSpmdFullToShardShape, has no kernel).

Graph construction needs no kernels. For each node, Python's gradient is tf.gradients of the
forward op built in a tf.Graph (CSR operands from DenseToCSRSparseMatrix), and C++'s is the
FunctionDef that the library's C entry point TfExtGradientFunctionDef gives for the same
NodeDef. Both are compared as expression trees, from each input's gradient down to the forward
node's inputs, outputs and incoming gradients: op types, every (non-internal) attr, wiring;
Identity nodes are skipped. The CSR pruning of SparseMatrixAdd's gradient is written
differently on the two sides (C++'s keeps the operand's pattern, Python's drops the entries
the incoming gradient lacks): there each side's SparseTensorToCSRSparseMatrix is compared by
the forward tensors it reads, and the CSR ops of both graphs are counted; the pruning itself
has CPU kernels, so C++'s pruning subgraph is run and compared with numpy and with Python's.
XlaSpmdFullToShardShape has XLA's compile-time kernels: inside an XLA cluster (jit_compile),
for shardings that one CPU device can take, C++'s gradient runs and is compared with Python's.

Otherwise this is a structural check, not a numeric one: SparseMatrixMul, SparseMatrixAdd,
SparseMatrixSoftmax and SparseMatrixSoftmaxGrad never run here.
"""

from __future__ import annotations

import collections
import ctypes
import os

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.compiler.tf2xla.ops import gen_xla_ops
from tensorflow.compiler.tf2xla.python import xla  # noqa: F401  (Python's XLA gradients)
from tensorflow.core.framework import attr_value_pb2, function_pb2, node_def_pb2
from tensorflow.python.framework import function_def_to_graph, kernels, op_def_registry
from tensorflow.python.ops.linalg.sparse import sparse_csr_matrix_grad  # Python's CSR gradients

# The forward-node attr asking for the gradient that reads forward outputs as arguments
# (tf_ext/grads/grad_builder.h, kForwardOutputsAttr): as Python's reads op.outputs.
FORWARD_OUTPUTS_ATTR = "_tf_ext_forward_outputs"

# XLA's OpSharding proto, serialized by hand (xla_data.proto): type = MAXIMAL (field 1 = 1),
# tile_assignment_devices = [0] (field 4, packed).
MAXIMAL_ON_DEVICE_0 = b"\x08\x01\x22\x01\x00"
# type = OTHER (3), tile_assignment_dimensions = [2, 1] (field 3), devices [0, 1]: rows split
# in two.
TILED_2_BY_1 = b"\x08\x03\x1a\x02\x02\x01\x22\x02\x00\x01"

# Python's pruning (what its SparseMatrixAdd gradient does to d(c)).
python_prune = sparse_csr_matrix_grad._PruneCSRMatrix  # pylint: disable=protected-access

CSR_OPS = {"SparseMatrixMul", "SparseTensorToCSRSparseMatrix", "CSRSparseMatrixToSparseTensor"}


def _load():
    path = os.path.realpath(os.environ.get("TF_EXT_LIBRARY", "tf_ext/_tf_ext_ops.so"))
    assert os.path.isfile(path), f"op library not found: {path} (set TF_EXT_LIBRARY)"
    tf.load_op_library(path)
    lib = ctypes.CDLL(path)  # the same, already loaded library
    lib.TfExtGradientFunctionDef.restype = ctypes.c_int
    lib.TfExtGradientFunctionDef.argtypes = [
        ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p),
        ctypes.POINTER(ctypes.c_size_t), ctypes.c_char_p, ctypes.c_size_t]
    lib.TfExtFree.argtypes = [ctypes.c_void_p]
    return lib


LIB = _load()


def cpp_gradient(op, forward_outputs=False):
    """C++'s gradient FunctionDef for a NodeDef of `op`'s type and attrs."""
    node = node_def_pb2.NodeDef(name=op.name, op=op.type)
    for k, v in op.node_def.attr.items():
        node.attr[k].CopyFrom(v)
    if forward_outputs:
        node.attr[FORWARD_OUTPUTS_ATTR].b = True
    data = node.SerializeToString()
    out, size = ctypes.c_void_p(), ctypes.c_size_t()
    error = ctypes.create_string_buffer(4096)
    rc = LIB.TfExtGradientFunctionDef(data, len(data), ctypes.byref(out), ctypes.byref(size),
                                      error, len(error))
    assert rc == 0, f"{op.type}: {error.value.decode()}"
    try:
        return function_pb2.FunctionDef.FromString(ctypes.string_at(out, size.value))
    finally:
        LIB.TfExtFree(out)


def _attrs(op_type, attr_map, forward_attrs):
    """A node's attrs (internal "_" ones aside), the OpDef's defaults filled in and "$x"
    placeholders resolved from the forward node's attrs, as comparable bytes."""
    out = {}
    for a in op_def_registry.get(op_type).attr:
        if a.name in attr_map:
            v = attr_map[a.name]
            if v.placeholder:
                v = forward_attrs[v.placeholder]
        elif a.HasField("default_value"):
            v = a.default_value
        else:
            v = attr_value_pb2.AttrValue()
        out[a.name] = v.SerializeToString(deterministic=True)
    return tuple(sorted(out.items()))


class _Tree:
    """Expression trees of one side's gradient, as nested tuples: ("arg", name) for a forward
    input/output or incoming gradient, (op, attrs, children) for a node; an Identity is its
    input; with `prune`, a SparseTensorToCSRSparseMatrix is ("pruned", the args it reads)."""

    def __init__(self, forward_attrs, prune):
        self.forward_attrs, self.prune = forward_attrs, prune

    def node(self, op_type, attr_map, children, index=None):
        """`index`: which output of a multi-output node (None for a one-output node)."""
        if op_type == "Identity":
            return children[0]
        if self.prune and op_type == "SparseTensorToCSRSparseMatrix":
            return ("pruned", frozenset(_args(children)))
        node = (op_type, _attrs(op_type, attr_map, self.forward_attrs), tuple(children))
        return node if index is None else node + (index,)


def _args(tree):
    if isinstance(tree, (list, tuple)):
        if len(tree) == 2 and tree[0] == "arg":
            yield tree[1]
        elif len(tree) == 2 and tree[0] == "pruned":
            yield from tree[1]
        else:
            for t in tree:
                yield from _args(t)


def python_tree(tensor, names, tree):
    """The tree of `tensor` in a Python graph; `names` maps forward tensors to arg names."""
    if tensor.ref() in names:
        return ("arg", names[tensor.ref()])
    op = tensor.op
    if op.type == "Const":
        return ("Const", op.node_def.attr["value"].SerializeToString(deterministic=True))
    children = [python_tree(t, names, tree) for t in op.inputs]
    return tree.node(op.type, dict(op.node_def.attr.items()), children,
                     tensor.value_index if len(op.outputs) > 1 else None)


def cpp_tree(fdef, ref, tree):
    """The tree of `ref` ("node:out_arg:k" or an argument's name) in a FunctionDef."""
    nodes = {n.name: n for n in fdef.node_def}
    op_defs = {}

    def walk(r):
        parts = r.split(":")
        if len(parts) == 1:
            return ("arg", r)
        n = nodes[parts[0]]
        if n.op == "Const":
            return ("Const", n.attr["value"].SerializeToString(deterministic=True))
        children = [walk(i) for i in n.input if not i.startswith("^")]
        op_def = op_defs.setdefault(n.op, op_def_registry.get(n.op))
        outputs = op_def.output_arg
        assert not any(a.number_attr or a.type_list_attr for a in outputs), n  # not needed here
        # the flat output index, as Python's value_index (output args of one tensor each)
        index = [a.name for a in outputs].index(parts[1]) if len(outputs) > 1 else None
        return tree.node(n.op, dict(n.attr.items()), children, index)

    return walk(ref)


def forward_names(op, grad_ys):
    """Forward tensors -> the C++ gradient function's argument names."""
    op_def = op_def_registry.get(op.type)
    names = {t.ref(): a.name for t, a in zip(op.inputs, op_def.input_arg)}
    names.update({t.ref(): a.name for t, a in zip(op.outputs, op_def.output_arg)})
    names.update({dy.ref(): "d_" + a.name for dy, a in zip(grad_ys, op_def.output_arg)})
    return names


def op_counts(op_types, keep):
    return collections.Counter(t for t in op_types if t in keep)


def gradient_op_types(graph):
    return [op.type for op in graph.get_operations() if op.name.startswith("gradients")]


def csr(dense, indices):
    return tf.raw_ops.DenseToCSRSparseMatrix(dense_input=dense, indices=indices)


def dense_and_pattern(shape, entries, dtype, seed):
    """A dense array of `shape` and a CSR pattern of `entries` (index tuples, row-major)."""
    rng = np.random.default_rng(seed)
    values = rng.uniform(0.5, 1.5, shape)
    if np.issubdtype(dtype, np.complexfloating):
        values = values + 1j * rng.uniform(0.5, 1.5, shape)
    return values.astype(dtype), np.array(entries, np.int64)


def compare_gradients(fwd, xs, grad_ys, prune=False, mutate=None):
    """Python's tf.gradients of fwd (w.r.t. xs, fed grad_ys) against C++'s FunctionDef for the
    same node, tree by tree; returns the C++ FunctionDef. `mutate` edits the FunctionDef first
    (test_a_wrong_gradient_fails)."""
    op = fwd.op
    py_grads = tf.gradients(fwd, xs, grad_ys=grad_ys)
    fdef = cpp_gradient(op, forward_outputs=True)
    if mutate:
        mutate(fdef)
    names = forward_names(op, [grad_ys])
    tree = _Tree({k: v for k, v in op.node_def.attr.items()}, prune)
    op_def = op_def_registry.get(op.type)
    for x, py_grad, arg in zip(xs, py_grads, op_def.input_arg):
        assert names[x.ref()] == arg.name
        got = cpp_tree(fdef, fdef.ret["d_" + arg.name], tree)
        if py_grad is None:  # Python: None; C++: zeros of the input
            assert got[0] == "ZerosLike" and got[2] == (("arg", arg.name),), got
            continue
        want = python_tree(py_grad, names, tree)
        assert got == want, f"{op.type} d({arg.name}):\n C++    {got}\n Python {want}"
    return fdef


# SparseMatrixSoftmax -----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,entries", [
    ((3, 4), [(0, 1), (0, 3), (1, 2), (2, 0), (2, 3)]),
    ((2, 2, 3), [(0, 0, 1), (0, 1, 0), (0, 1, 2), (1, 0, 0), (1, 1, 1)]),
])
def test_sparse_matrix_softmax(dtype, shape, entries):
    """d(logits) = SparseMatrixSoftmaxGrad(softmax, d(softmax); type) on both sides."""
    with tf.Graph().as_default() as g:
        x, idx = dense_and_pattern(shape, entries, dtype, seed=1)
        logits = csr(x, idx)
        sm = tf.raw_ops.SparseMatrixSoftmax(logits=logits, type=dtype)
        dsm = csr(x * 2, idx)
        fdef = compare_gradients(sm, [logits], dsm)
        assert op_counts(gradient_op_types(g), {"SparseMatrixSoftmaxGrad"}) == {
            "SparseMatrixSoftmaxGrad": 1}
    (grad_node,) = [n for n in fdef.node_def if n.op == "SparseMatrixSoftmaxGrad"]
    assert grad_node.attr["type"].type == tf.as_dtype(dtype).as_datatype_enum


def test_sparse_matrix_softmax_recomputes_the_softmax_without_forward_outputs():
    """SymbolicGradient's form (no forward outputs): the softmax is recomputed from logits by
    one SparseMatrixSoftmax node of the forward's attrs, then fed to the same gradient."""
    with tf.Graph().as_default():
        x, idx = dense_and_pattern((3, 4), [(0, 1), (1, 2), (2, 3)], np.float32, seed=2)
        sm = tf.raw_ops.SparseMatrixSoftmax(logits=csr(x, idx), type=tf.float32)
        forward_attrs = {k: v for k, v in sm.op.node_def.attr.items()}
        tree = _Tree(forward_attrs, prune=False)
        with_outputs = cpp_gradient(sm.op, forward_outputs=True)
        plain = cpp_gradient(sm.op)
    recomputed = tree.node("SparseMatrixSoftmax", forward_attrs, [("arg", "logits")])
    want = cpp_tree(with_outputs, with_outputs.ret["d_logits"], tree)
    want = (want[0], want[1], (recomputed,) + want[2][1:])
    assert cpp_tree(plain, plain.ret["d_logits"], tree) == want


# SparseMatrixAdd ---------------------------------------------------------------------------

A_ENTRIES = [(0, 1), (1, 0), (1, 2), (2, 3)]
B_ENTRIES = [(0, 1), (0, 2), (2, 0), (2, 3)]
C_ENTRIES = sorted(set(A_ENTRIES) | set(B_ENTRIES))  # the sum's (and its gradient's) pattern


def _add_graph(dtype, dc_entries, with_sum=True):
    a_x, a_idx = dense_and_pattern((3, 4), A_ENTRIES, dtype, seed=3)
    b_x, b_idx = dense_and_pattern((3, 4), B_ENTRIES, dtype, seed=4)
    dc_x, dc_idx = dense_and_pattern((3, 4), dc_entries, dtype, seed=5)
    a, b, dc = csr(a_x, a_idx), csr(b_x, b_idx), csr(dc_x, dc_idx)
    alpha, beta = tf.constant(dtype(0.5)), tf.constant(dtype(-2.0))
    c = tf.raw_ops.SparseMatrixAdd(a=a, b=b, alpha=alpha, beta=beta) if with_sum else None
    return c, (a, b, alpha, beta), dc, dc_x


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_sparse_matrix_add(dtype):
    """d(a) = SparseMatrixMul(d(c) pruned to a's pattern, alpha), d(b) likewise with beta; no
    gradient (Python: None; C++: zeros) for alpha and beta. Both sides have the same CSR ops:
    two SparseMatrixMul, two CSR -> COO conversions and one COO -> CSR per pruning."""
    with tf.Graph().as_default() as g:
        c, xs, dc, _ = _add_graph(dtype, C_ENTRIES)
        fdef = compare_gradients(c, list(xs), dc, prune=True)
        python_counts = op_counts(gradient_op_types(g), CSR_OPS)
    cpp_counts = op_counts([n.op for n in fdef.node_def], CSR_OPS)
    assert cpp_counts == python_counts == {"SparseMatrixMul": 2,
                                           "CSRSparseMatrixToSparseTensor": 4,
                                           "SparseTensorToCSRSparseMatrix": 2}
    for n in fdef.node_def:
        if n.op in CSR_OPS:
            attr = "type" if n.op == "CSRSparseMatrixToSparseTensor" else "T"
            assert n.attr[attr].type == tf.as_dtype(dtype).as_datatype_enum, n


def _pruned_subgraph(fdef, for_input):
    """The GraphDef of the nodes that C++'s d(for_input) reads through its SparseMatrixMul's
    first input (the pruning, which has CPU kernels), and the flat name of that input."""
    nodes = {n.name: n for n in fdef.node_def}
    mul = nodes[fdef.ret["d_" + for_input].split(":")[0]]
    while mul.op == "Identity":
        mul = nodes[mul.input[0].split(":")[0]]
    assert mul.op == "SparseMatrixMul", mul
    target = mul.input[0]
    graph_def, flat = function_def_to_graph.function_def_to_graph_def(fdef)
    by_name = {n.name: n for n in graph_def.node}
    keep, todo = set(), [flat[target].split(":")[0]]
    while todo:
        name = todo.pop()
        if name not in keep:
            keep.add(name)
            todo.extend(i.lstrip("^").split(":")[0] for i in by_name[name].input)
    sub = tf.compat.v1.GraphDef(versions=graph_def.versions)
    sub.node.extend(n for n in graph_def.node if n.name in keep)
    return sub, flat[target]


@pytest.mark.parametrize("dc_entries", [C_ENTRIES, [(0, 1), (0, 2), (2, 3)]],
                         ids=["dc_has_c_pattern", "dc_lacks_entries"])
@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_sparse_matrix_add_pruning_runs(dtype, dc_entries):
    """C++'s pruning of d(c) to a's and b's patterns, run on CPU: each is a CSR of the operand's
    pattern holding d(c)'s values there (zero where d(c) has none), as numpy's mask; where d(c)
    has every entry (c's pattern, as a gradient of c has), Python's _PruneCSRMatrix gives the
    same matrix."""
    with tf.Graph().as_default():
        c, _, _, _ = _add_graph(dtype, dc_entries)
        fdef = cpp_gradient(c.op, forward_outputs=True)
    # A graph without the forward (a Session needs a kernel for every node of its graph).
    with tf.Graph().as_default():
        _, (a, b, _, _), dc, dc_x = _add_graph(dtype, dc_entries, with_sum=False)
        dc_dense = np.zeros_like(dc_x)
        for e in dc_entries:
            dc_dense[e] = dc_x[e]
        fetches = []
        for name, operand, entries in [("a", a, A_ENTRIES), ("b", b, B_ENTRIES)]:
            sub, target = _pruned_subgraph(fdef, name)
            inputs = {n.name for n in sub.node if n.op == "Placeholder"}
            assert inputs == {name, "d_c"}, inputs
            (pruned,) = tf.graph_util.import_graph_def(
                sub, input_map={name: operand, "d_c": dc}, return_elements=[target],
                name="cpp_" + name)
            want = np.zeros_like(dc_x)
            for e in entries:
                want[e] = dc_dense[e]
            fetches.append((
                tf.raw_ops.CSRSparseMatrixToDense(sparse_input=pruned, type=dtype),
                tf.raw_ops.CSRSparseMatrixToSparseTensor(sparse_matrix=pruned, type=dtype)[0],
                python_prune(dc, operand),
                want, np.array(entries, np.int64)))
        with tf.compat.v1.Session() as sess:
            for dense, indices, python_pruned, want, entries in fetches:
                got_dense, got_indices = sess.run([dense, indices])
                np.testing.assert_array_equal(got_dense, want)
                np.testing.assert_array_equal(got_indices, entries)  # the operand's pattern
                if dc_entries == C_ENTRIES:
                    np.testing.assert_array_equal(sess.run(tf.raw_ops.CSRSparseMatrixToDense(
                        sparse_input=python_pruned, type=dtype)), want)


# XlaSpmdShardToFullShape -------------------------------------------------------------------

@pytest.mark.parametrize("sharding,shard_shape,dim,unspecified", [
    (b"", (4, 3), -1, []),
    (TILED_2_BY_1, (2, 3), -1, []),
    (MAXIMAL_ON_DEVICE_0, (4, 3), 1, [0]),
], ids=["unsharded", "tiled", "maximal_dim1"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
def test_xla_spmd_shard_to_full_shape(dtype, sharding, shard_shape, dim, unspecified):
    """d(input) = XlaSpmdFullToShardShape(d(output); T, manual_sharding, dim,
    unspecified_dims of the forward) on both sides."""
    with tf.Graph().as_default() as g:
        x = tf.constant(np.ones(shard_shape, dtype))
        y = gen_xla_ops.xla_spmd_shard_to_full_shape(
            x, manual_sharding=sharding, full_shape=[4, 3], dim=dim, unspecified_dims=unspecified)
        dy = tf.constant(np.ones((4, 3), dtype))
        fdef = compare_gradients(y, [x], dy)
        assert op_counts(gradient_op_types(g), {"XlaSpmdFullToShardShape"}) == {
            "XlaSpmdFullToShardShape": 1}
    (grad_node,) = [n for n in fdef.node_def if n.op == "XlaSpmdFullToShardShape"]
    assert grad_node.attr["manual_sharding"].s == sharding
    assert grad_node.attr["dim"].i == dim
    assert list(grad_node.attr["unspecified_dims"].list.i) == unspecified


def _runnable_in_xla_cluster(fdef, forward_attrs, x, dy):
    """Python's gradient (a tape) and C++'s (fdef imported, its arguments made Identity nodes
    of x and dy) of XlaSpmdShardToFullShape in one function compiled by XLA."""
    graph_def, flat = function_def_to_graph.function_def_to_graph_def(fdef)
    for n in graph_def.node:
        if n.op == "Placeholder":  # an argument: Identity of the tensor mapped to outer_<name>
            dtype = n.attr["dtype"]
            n.op = "Identity"
            n.input.append("outer_" + n.name)
            n.attr["T"].CopyFrom(dtype)
            for a in ("dtype", "shape"):
                if a in n.attr:
                    del n.attr[a]
    ret = flat[fdef.ret["d_input"]]

    @tf.function(jit_compile=True)
    def run(x, dy):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = gen_xla_ops.xla_spmd_shard_to_full_shape(x, **forward_attrs)
        python = tape.gradient(y, x, output_gradients=dy)
        (cpp,) = tf.graph_util.import_graph_def(
            graph_def, input_map={"outer_input": x, "outer_d_output": dy}, return_elements=[ret])
        return python, cpp

    return run(x, dy)


@pytest.mark.parametrize("sharding,dim,unspecified", [
    (b"", -1, []),
    (MAXIMAL_ON_DEVICE_0, 1, [0]),
], ids=["unsharded", "maximal_dim1"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_xla_spmd_shard_to_full_shape_runs_in_an_xla_cluster(dtype, sharding, dim, unspecified):
    """Outside an XLA cluster nothing runs XlaSpmdFullToShardShape; inside one (jit_compile, on
    the one CPU device) it does for shardings that need one device: C++'s gradient then gives
    Python's values, d(output) itself (on one device the shard is the full tensor). A tiled
    sharding needs several devices: only the structure above checks it."""
    attrs = dict(manual_sharding=sharding, full_shape=[4, 3], dim=dim,
                 unspecified_dims=unspecified)
    with tf.Graph().as_default():
        y = gen_xla_ops.xla_spmd_shard_to_full_shape(tf.constant(np.ones((4, 3), dtype)),
                                                     **attrs)
        fdef = cpp_gradient(y.op)
    rng = np.random.default_rng(7)
    x, dy = rng.normal(size=(4, 3)).astype(dtype), rng.normal(size=(4, 3)).astype(dtype)
    python, cpp = _runnable_in_xla_cluster(fdef, attrs, tf.constant(x), tf.constant(dy))
    np.testing.assert_array_equal(cpp.numpy(), python.numpy())
    np.testing.assert_array_equal(cpp.numpy(), dy)


def _node(fdef, op_type, k=0):
    return [n for n in fdef.node_def if n.op == op_type][k]


def _swap_inputs(node, i, j):
    node.input[i], node.input[j] = node.input[j], node.input[i]


def _swap_muls_scalars(fdef):  # d(a) = beta * ..., d(b) = alpha * ...
    a, b = _node(fdef, "SparseMatrixMul", 0), _node(fdef, "SparseMatrixMul", 1)
    a.input[1], b.input[1] = b.input[1], a.input[1]


def _prune_a_with_b(fdef):  # d(a) pruned to b's pattern
    for n in fdef.node_def:
        n.input[:] = ["b" if i == "a" else i for i in n.input]


@pytest.mark.parametrize("case,mutate", [
    ("softmax", lambda f: _swap_inputs(_node(f, "SparseMatrixSoftmaxGrad"), 0, 1)),
    ("softmax", lambda f: _node(f, "SparseMatrixSoftmaxGrad").attr["type"].CopyFrom(
        attr_value_pb2.AttrValue(type=tf.float64.as_datatype_enum))),
    ("add", _swap_muls_scalars),
    ("add", _prune_a_with_b),
    ("add", lambda f: _node(f, "SparseMatrixMul").attr["T"].CopyFrom(
        attr_value_pb2.AttrValue(type=tf.float64.as_datatype_enum))),
    ("xla", lambda f: _node(f, "XlaSpmdFullToShardShape").attr["dim"].CopyFrom(
        attr_value_pb2.AttrValue(i=-1))),
    ("xla", lambda f: _node(f, "XlaSpmdFullToShardShape").attr["unspecified_dims"].CopyFrom(
        attr_value_pb2.AttrValue(list=attr_value_pb2.AttrValue.ListValue(i=[1])))),
    ("xla", lambda f: _node(f, "XlaSpmdFullToShardShape").attr["manual_sharding"].CopyFrom(
        attr_value_pb2.AttrValue(s=b""))),
], ids=["softmax_inputs_swapped", "softmax_type", "add_alpha_beta_swapped",
        "add_pruned_to_the_other_pattern", "add_mul_type", "xla_dim", "xla_unspecified_dims",
        "xla_sharding"])
def test_a_wrong_gradient_fails(case, mutate):
    """The comparison fails for a C++ gradient that differs from Python's in one input or attr
    (C++'s FunctionDef edited before it is compared)."""
    with tf.Graph().as_default(), pytest.raises(AssertionError, match="C\\+\\+ "):
        if case == "softmax":
            x, idx = dense_and_pattern((3, 4), [(0, 1), (1, 2), (2, 3)], np.float32, seed=8)
            logits = csr(x, idx)
            sm = tf.raw_ops.SparseMatrixSoftmax(logits=logits, type=tf.float32)
            compare_gradients(sm, [logits], csr(x, idx), mutate=mutate)
        elif case == "add":
            c, xs, dc, _ = _add_graph(np.float32, C_ENTRIES)
            compare_gradients(c, list(xs), dc, prune=True, mutate=mutate)
        else:
            x = tf.constant(np.ones((4, 3), np.float32))
            y = gen_xla_ops.xla_spmd_shard_to_full_shape(
                x, manual_sharding=MAXIMAL_ON_DEVICE_0, full_shape=[4, 3], dim=1,
                unspecified_dims=[0])
            compare_gradients(y, [x], tf.constant(np.ones((4, 3), np.float32)), mutate=mutate)


def test_these_gradients_cannot_run_here():
    """Why the checks above are structural: the gradient ops have no CPU kernel in
    tensorflow-cpu (XlaSpmdFullToShardShape has only XLA's compile-time kernels, used inside an
    XLA cluster). If a release adds them, these gradients should be checked numerically."""
    for op in ["SparseMatrixAdd", "SparseMatrixMul", "SparseMatrixSoftmax",
               "SparseMatrixSoftmaxGrad", "XlaSpmdFullToShardShape"]:
        devices = {k.device_type for k in kernels.get_registered_kernels_for_op(op).kernel}
        assert "CPU" not in devices, (op, devices)
