"""tf_ext's C++ gradients of TensorFlow's gather, scatter, strided-update, Reshape, BroadcastTo and Print ops
(tf_ext/grads/tf/array_grad.cc), fake-quantisation ops (quantization_grad.cc), stateless
gamma and truncated-normal samplers (random_grad.cc) and AccumulateNV2 (math_grad.cc) against Python's gradients of the same op on the same inputs:
duplicate indices, ties of TensorScatterMax/Min, broadcast strided updates, int64 indices,
inputs outside the quantisation range.

The C++ gradient runs alone (a SymbolicGradient node in a tf.compat.v1 Session, `compare` of
test_tf_nn_math_grads.py); Python's is tf.gradients of the same node. Numeric Jacobians and
out-of-range / empty cases: tests/tf_array_misc_grads_test.cc.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2

import tf_ext
from test_tf_nn_math_grads import compare, grid

FLOATS = [np.float32, np.float64]
TOL = {np.float32: 2e-5, np.float64: 1e-12}


def cpp_gradient(build, dys):
    """The C++ gradient of the node `build` returns (in a fresh graph), for incoming gradients
    `dys` (numpy arrays)."""
    with tf.Graph().as_default():
        tf_ext.library()
        op = build().op
        f = attr_value_pb2.NameAttrList(name=op.type)
        for k, v in op.node_def.attr.items():
            f.attr[k].CopyFrom(v)
        grads = tf.raw_ops.SymbolicGradient(input=list(op.inputs) + list(dys),
                                            Tout=[t.dtype for t in op.inputs], f=f)
        with tf.compat.v1.Session() as sess:
            return sess.run(grads)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", FLOATS)
def test_gather_with_duplicates(index_dtype, dtype):
    params = grid((5, 3), dtype, seed=1)
    indices = np.array([[0, 4], [4, 2], [4, 4]], index_dtype)
    compare(lambda: tf.raw_ops.Gather(params=params, indices=indices), TOL[dtype])


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", FLOATS)
def test_broadcast_to_either_index_type(index_dtype, dtype):
    # (a scalar input's gradient is the sum of compare's incoming grid, zero by symmetry:
    # tests/tf_array_misc_grads_test.cc checks it against central differences)
    for in_shape in [(1, 3, 1), (3, 4), (2, 1, 1, 1)]:
        x = grid(in_shape, dtype, seed=4)
        shape = np.array([2, 2, 3, 4], index_dtype)
        compare(lambda: tf.raw_ops.BroadcastTo(input=x, shape=shape), TOL[dtype])


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_reshape_either_index_type(index_dtype):
    x = grid((3, 4), np.float64, seed=7)
    compare(lambda: tf.raw_ops.Reshape(tensor=x, shape=np.array([2, -1, 3], index_dtype)),
            TOL[np.float64])


def test_reshape_int64_shape_in_a_graph_under_use_cpp_gradients():
    """tf.gradients in a tf.function of a Reshape to an int64 shape, through C++."""
    x = tf.constant(grid((3, 4), np.float64, seed=8))
    dy = tf.constant(grid((4, 3), np.float64, seed=9))

    @tf.function
    def grad(a):
        return tf.gradients(tf.reshape(a, tf.constant([4, 3], tf.int64)), [a], grad_ys=[dy])[0]

    want = grad(x)
    with tf_ext.use_cpp_gradients():
        got = tf.function(grad.python_function)(x)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_broadcast_to_int64_shape_under_use_cpp_gradients():
    """tf.broadcast_to with an int64 shape differentiated by GradientTape through C++."""
    x = tf.constant(grid((1, 3, 1), np.float64, seed=5))
    shape = tf.constant([2, 3, 4], tf.int64)

    def grad():
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.broadcast_to(x, shape) * tf.constant(grid((2, 3, 4), np.float64, seed=6))
        return tape.gradient(y, x)

    want = grad()
    with tf_ext.use_cpp_gradients():
        got = grad()
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


@pytest.mark.parametrize("op", ["TensorScatterAdd", "TensorScatterSub", "TensorScatterUpdate"])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", FLOATS)
def test_tensor_scatter_with_duplicates(op, index_dtype, dtype):
    tensor = grid((5, 3), dtype, seed=2)
    indices = np.array([[3], [1], [3], [0]], index_dtype)  # row 3 twice
    updates = grid((4, 3), dtype, seed=3)
    compare(lambda: getattr(tf.raw_ops, op)(tensor=tensor, indices=indices, updates=updates),
            TOL[dtype])
    # element indices (K = 2)
    indices2 = np.array([[2, 1], [0, 0], [2, 1]], index_dtype)
    compare(lambda: getattr(tf.raw_ops, op)(tensor=tensor, indices=indices2,
                                            updates=grid((3,), dtype, seed=4)), TOL[dtype])


@pytest.mark.parametrize("op", ["TensorScatterMax", "TensorScatterMin"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_tensor_scatter_max_min_ties(op, dtype):
    """Ties between the tensor and an update, and between two updates of one slot: Python
    shares the gradient equally among them; so must C++."""
    tensor = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [0.5, -1.0, 2.0]], dtype)
    indices = np.array([[0], [2], [0]], np.int32)
    updates = np.array([[1.0, 7.0, -3.0], [0.5, 3.0, 1.0], [1.0, 7.0, 3.0]], dtype)
    compare(lambda: getattr(tf.raw_ops, op)(tensor=tensor, indices=indices, updates=updates),
            TOL[dtype])


@pytest.mark.parametrize("dtype", FLOATS)
def test_tensor_strided_slice_update(dtype):
    x = grid((5, 4, 3), dtype, seed=5)
    # x[1:5:2, ::-1, 1] = value, value broadcast from [1, 4]
    compare(lambda: tf.raw_ops.TensorStridedSliceUpdate(
        input=x, begin=np.array([1, 0, 1], np.int32), end=np.array([5, 0, 2], np.int32),
        strides=np.array([2, -1, 1], np.int32), value=grid((1, 4), dtype, seed=6),
        begin_mask=2, end_mask=2, shrink_axis_mask=4), TOL[dtype])
    # an ellipsis and a new axis, int64 begin/end/strides
    compare(lambda: tf.raw_ops.TensorStridedSliceUpdate(
        input=x, begin=np.array([0, 1], np.int64), end=np.array([0, 3], np.int64),
        strides=np.array([1, 1], np.int64), value=grid((5, 4, 2), dtype, seed=7),
        ellipsis_mask=1), TOL[dtype])


def test_print_passes_the_gradient_through():
    """Print(input, data) = input: d(input) = d(output); the data (a string and an integer
    here) get zeros, where Python returns None."""
    x = grid((2, 3), np.float32, seed=8)
    build = lambda: tf.raw_ops.Print(input=x, data=[tf.constant("s"), tf.constant([1, 2])],
                                     message="m", first_n=1)
    dy = grid((2, 3), np.float32, seed=9)
    dx, d_string, d_int = cpp_gradient(build, [dy])
    np.testing.assert_array_equal(dx, dy)
    assert d_string == b"" and d_int.tolist() == [0, 0]
    with tf.Graph().as_default():
        out = build()
        (py,) = tf.gradients(out, out.op.inputs[0], grad_ys=tf.constant(dy))
        with tf.compat.v1.Session() as sess:
            np.testing.assert_array_equal(sess.run(py), dx)


@pytest.mark.parametrize("op", ["TensorScatterAdd", "TensorScatterMin", "Gather"])
def test_out_of_range_index_names_the_op(op):
    x = grid((4, 2), np.float32, seed=10)
    if op == "Gather":
        build = lambda: tf.raw_ops.Gather(params=x, indices=np.array([1, 7], np.int32))
        dys = [np.ones((2, 2), np.float32)]
    else:
        build = lambda: getattr(tf.raw_ops, op)(tensor=x, indices=np.array([[-2]], np.int32),
                                                updates=np.ones((1, 2), np.float32))
        dys = [np.ones((4, 2), np.float32)]
    # Session errors start "Graph execution error:", then the kernel's message
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=f"(^|\n){op}: an index is out of range"):
        cpp_gradient(build, dys)


# ------------------------------------------------------------------------------------------
# Fake quantisation (quantization_grad.cc): inputs inside and outside the nudged range.

QUANT_X = np.array([[-2.0, -0.5, 0.3, 0.99], [1.5, 3.0, -1.2, 0.0]], np.float32)


@pytest.mark.parametrize("narrow_range", [False, True])
@pytest.mark.parametrize("num_bits", [8, 4])
def test_fake_quant_with_min_max_args(num_bits, narrow_range):
    compare(lambda: tf.raw_ops.FakeQuantWithMinMaxArgs(
        inputs=QUANT_X, min=-1.0, max=1.0, num_bits=num_bits, narrow_range=narrow_range),
        TOL[np.float32])


@pytest.mark.parametrize("narrow_range", [False, True])
def test_fake_quant_with_min_max_vars(narrow_range):
    compare(lambda: tf.raw_ops.FakeQuantWithMinMaxVars(
        inputs=QUANT_X, min=np.float32(-1.0), max=np.float32(1.0), narrow_range=narrow_range),
        TOL[np.float32])


def test_fake_quant_with_min_max_vars_per_channel():
    compare(lambda: tf.raw_ops.FakeQuantWithMinMaxVarsPerChannel(
        inputs=QUANT_X, min=np.array([-1.0, -0.4, 0.0, -3.0], np.float32),
        max=np.array([1.0, 0.2, 0.5, 0.5], np.float32)), TOL[np.float32])


@pytest.mark.parametrize("dtype", FLOATS)
def test_quantize_and_dequantize_v2(dtype):
    compare(lambda: tf.raw_ops.QuantizeAndDequantizeV2(
        input=QUANT_X.astype(dtype), input_min=dtype(-1.0), input_max=dtype(1.0),
        range_given=True), TOL[dtype])


@pytest.mark.parametrize("dtype", FLOATS)
def test_quantize_and_dequantize_v4(dtype):
    """TensorFlow's own C++ gradient of this op fails to build; tf_ext's is Python's, for a
    range given or taken from the input, and per channel."""
    x = QUANT_X.astype(dtype)
    compare(lambda: tf.raw_ops.QuantizeAndDequantizeV4(
        input=x, input_min=dtype(-1.0), input_max=dtype(1.0), range_given=True), TOL[dtype])
    compare(lambda: tf.raw_ops.QuantizeAndDequantizeV4(
        input=x, input_min=dtype(0.0), input_max=dtype(0.0), range_given=False), TOL[dtype])
    compare(lambda: tf.raw_ops.QuantizeAndDequantizeV4(
        input=x, input_min=np.array([-1, -0.5, -2, -0.1], dtype),
        input_max=np.array([1, 0.5, 2, 0.1], dtype), range_given=True, axis=1), TOL[dtype])


def test_quantize_and_dequantize_v2_api_under_use_cpp_gradients():
    """tf.quantization.quantize_and_dequantize_v2 (the V4 op) on a GradientTape through C++."""
    x = tf.constant(QUANT_X.astype(np.float32))

    def grad():
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.quantization.quantize_and_dequantize_v2(x, -1.0, 1.0, range_given=True)
        return tape.gradient(y, x, output_gradients=tf.constant(grid((2, 4), np.float32, seed=13)))

    want = grad()
    with tf_ext.use_cpp_gradients() as scope:
        got = grad()
    assert scope.counts().cpp.get("QuantizeAndDequantizeV4", 0) == 1, scope.counts()
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_quantize_and_dequantize_v4_grad():
    """Python's own gradient of this op cannot run (it fails with a TypeError); C++ gives the
    derivative: the range mask applied to the incoming gradient, zeros for the rest."""
    g = grid((2, 4), np.float64, seed=11)
    build = lambda: tf.raw_ops.QuantizeAndDequantizeV4Grad(
        gradients=g, input=QUANT_X.astype(np.float64), input_min=np.float64(-1.0),
        input_max=np.float64(1.0))[0]
    dz = grid((2, 4), np.float64, seed=12)
    zeros = np.zeros((), np.float64)
    dg, dx, dmin, dmax = cpp_gradient(build, [dz, zeros, zeros])
    inside = (QUANT_X >= -1.0) & (QUANT_X <= 1.0)
    np.testing.assert_array_equal(dg, np.where(inside, dz, 0.0))
    assert not dx.any() and dmin == 0 and dmax == 0


# ------------------------------------------------------------------------------------------
# Stateless gamma samplers (random_grad.cc): the gradient recomputes the same sample.

@pytest.mark.parametrize("version", ["V2", "V3"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_stateless_random_gamma(version, dtype):
    alpha = np.array([[0.5, 2.0, 7.5], [1.0, 0.3, 3.0]], dtype)

    def build():
        if version == "V2":
            return tf.raw_ops.StatelessRandomGammaV2(
                shape=np.array([4, 2, 3], np.int32), seed=np.array([7, 11], np.int64),
                alpha=alpha)
        return tf.raw_ops.StatelessRandomGammaV3(
            shape=np.array([4, 2, 3], np.int64), key=np.array([5], np.uint64),
            counter=np.array([0, 9], np.uint64), alg=np.int32(1), alpha=alpha)
    compare(build, 1e-4 if dtype == np.float32 else 1e-10)



@pytest.mark.parametrize("dtype", FLOATS)
def test_stateless_parameterized_truncated_normal(dtype):
    """Parameters broadcast against each other ([3], [2, 1], scalars) and against extra leading
    sample axes; one narrow interval far in the tail."""
    means = np.array([0.0, 1.0, -0.5], dtype)
    stddevs = np.array([[1.0], [0.5]], dtype)
    minvals = np.array([-1.0, 0.5, -3.0], dtype)
    maxvals = dtype(2.0)
    compare(lambda: tf.raw_ops.StatelessParameterizedTruncatedNormal(
        shape=np.array([5, 2, 3], np.int32), seed=np.array([3, 4], np.int32), means=means,
        stddevs=stddevs, minvals=minvals, maxvals=maxvals),
        2e-4 if dtype == np.float32 else 1e-10)


@pytest.mark.parametrize("dtype", FLOATS)
def test_accumulate_n_v2(dtype):
    """AccumulateNV2 (math_grad.cc): every input gets the incoming gradient, as AddN's."""
    xs = [grid((2, 3), dtype, seed=20 + i) for i in range(3)]
    compare(lambda: tf.raw_ops.AccumulateNV2(inputs=xs, shape=[2, 3]), TOL[dtype])
