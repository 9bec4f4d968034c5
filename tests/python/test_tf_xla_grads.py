"""tf_ext's C++ gradients of XLA's XlaEinsum and XlaSharding (tf_ext/grads/tf/xla_grad.cc)
against Python's gradients of the same node on the same inputs (python/ops/special_math_ops.py,
compiler/tf2xla/python/xla.py). Both ops run on CPU through XLA's compile-on-demand kernels.
Numeric Jacobians: tf_ext/tools/tf_core_gradcheck_spec.txt (//tests:tf_grads_gradcheck_test).
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.compiler.tf2xla.ops import gen_xla_ops
from tensorflow.core.framework import attr_value_pb2, function_pb2, node_def_pb2, types_pb2

import tf_ext
from test_tf_nn_math_grads import cgrid, compare, grid

# XLA's OpSharding proto, serialized by hand (xla_data.proto): type = MAXIMAL (field 1 = 1),
# tile_assignment_devices = [0] (field 4, packed). A sharding XLA's CPU kernel accepts.
MAXIMAL_ON_DEVICE_0 = b"\x08\x01\x22\x01\x00"

EQUATIONS = [
    ("ij,jk->ik", (2, 3), (3, 4)),
    ("bij,bjk->bik", (2, 2, 3), (2, 3, 2)),
    ("ij,kj->ik", (2, 3), (4, 3)),   # a transposed operand
    ("bij,jk->bki", (2, 3, 2), (2, 4)),  # an output permuted
    ("i,j->ij", (3,), (4,)),          # an outer product
]


@pytest.mark.parametrize("equation,sa,sb", EQUATIONS)
def test_xla_einsum_float(equation, sa, sb):
    a, b = grid(sa, np.float32, seed=1), grid(sb, np.float32, seed=2)
    compare(lambda: gen_xla_ops.xla_einsum(a, b, equation=equation), 2e-5)


def test_xla_einsum_complex64_as_python():
    """Python's rule conjugates nothing: d(a) = d(y) b^T for "ij,jk->ik" (TensorFlow's MatMul
    gives d(y) b^H). C++ gives Python's values."""
    a, b = cgrid((2, 3), np.complex64, seed=3), cgrid((3, 4), np.complex64, seed=4)
    compare(lambda: gen_xla_ops.xla_einsum(a, b, equation="ij,jk->ik"), 2e-5)
    dy = cgrid((2, 4), np.complex64, seed=5)
    with tf.Graph().as_default():
        tf_ext.library()
        y = gen_xla_ops.xla_einsum(a, b, equation="ij,jk->ik")
        f = attr_value_pb2.NameAttrList(name="XlaEinsum")
        for k, v in y.op.node_def.attr.items():
            f.attr[k].CopyFrom(v)
        da, db = tf.raw_ops.SymbolicGradient(input=[y.op.inputs[0], y.op.inputs[1], dy],
                                             Tout=[tf.complex64] * 2, f=f)
        with tf.compat.v1.Session() as sess:
            got_a, got_b = sess.run([da, db])
    np.testing.assert_allclose(got_a, dy @ b.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_b, a.T @ dy, rtol=1e-5, atol=1e-5)


def test_xla_einsum_bad_equation_is_invalid_argument():
    """An equation that is not 'A,B->C' fails the gradient with InvalidArgument naming it
    (Python's rule fails to unpack it)."""
    node = node_def_pb2.NodeDef(name="e", op="XlaEinsum", input=["a", "b"])
    node.attr["T"].type = types_pb2.DT_FLOAT
    node.attr["equation"].s = b"ij->ji"
    with pytest.raises(tf.errors.InvalidArgumentError, match="'ij->ji'"):
        tf_ext.library().tf_ext_gradient_function_def(node.SerializeToString())


@pytest.mark.parametrize("sharding,unspecified", [(b"", []), (MAXIMAL_ON_DEVICE_0, [1])])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
def test_xla_sharding(dtype, sharding, unspecified):
    x = (cgrid if np.issubdtype(dtype, np.complexfloating) else grid)((3, 2, 2), dtype, seed=6)
    compare(lambda: gen_xla_ops.xla_sharding(x, sharding=sharding, unspecified_dims=unspecified),
            0.0)


def test_xla_sharding_gradient_node_carries_the_sharding():
    """Python's rule annotates its gradient node with the forward's sharding, unspecified_dims
    and the node attr _XlaSharding (which XLA's partitioner reads): so does C++'s."""
    node = node_def_pb2.NodeDef(name="s", op="XlaSharding", input=["x"])
    node.attr["T"].type = types_pb2.DT_FLOAT
    node.attr["sharding"].s = MAXIMAL_ON_DEVICE_0
    node.attr["unspecified_dims"].list.i.extend([1])
    data = tf_ext.library().tf_ext_gradient_function_def(node.SerializeToString())
    fdef = function_pb2.FunctionDef.FromString(data.numpy())
    (grad_node,) = [n for n in fdef.node_def if n.op == "XlaSharding"]
    assert grad_node.attr["sharding"].s == MAXIMAL_ON_DEVICE_0
    assert list(grad_node.attr["unspecified_dims"].list.i) == [1]
    assert grad_node.attr["_XlaSharding"].s == MAXIMAL_ON_DEVICE_0
