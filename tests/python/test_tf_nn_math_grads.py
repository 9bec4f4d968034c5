"""tf_ext's C++ gradients of TensorFlow's nn and math ops (tf_ext/grads/tf/nn_grad.cc,
math_grad.cc) against Python's gradients of the same op on the same inputs.

The C++ gradient runs alone (no Python bridge): a SymbolicGradient node whose function is the
op with the node's attrs, in a tf.compat.v1 Session after the library is loaded. Python's is
tf.gradients of the same node (Python's registry; None counts as zeros). This covers the cases
where the two could disagree by convention: ReluGrad / Relu6Grad exactly at their kinks,
max-pooling ties, Round's zero gradient, and batch norm in training mode, whose gradient
recomputes the batch statistics (the numeric checks in tests/tf_grads_gradcheck_test.cc can only
check inference mode). Numeric checks of every op: tests/tf_grads_gradcheck_test.cc.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2

import tf_ext

FLOATS = [np.float32, np.float64]
TOL = {np.float32: 2e-5, np.float64: 1e-12}


def grid(shape, dtype, lo=-1.0, hi=1.0, seed=0) -> np.ndarray:
    """Distinct values in [lo, hi], shuffled."""
    n = int(np.prod(shape))
    v = np.linspace(lo, hi, n)
    np.random.default_rng(seed).shuffle(v)
    return v.reshape(shape).astype(dtype)


def cgrid(shape, dtype, lo=-1.0, hi=1.0, seed=0) -> np.ndarray:
    """Complex values: distinct real and imaginary parts in [lo, hi]."""
    return (grid(shape, np.float64, lo, hi, seed) +
            1j * grid(shape, np.float64, lo, hi, seed + 1000)).astype(dtype)


def incoming(y: tf.Tensor, seed: int) -> tf.Tensor:
    """A distinct-valued incoming gradient for y (computed in the graph where y's shape is
    only known at run time, e.g. a segment reduction's); zeros for integer outputs."""
    if not (y.dtype.is_floating or y.dtype.is_complex):
        return tf.zeros_like(y)
    if y.shape.is_fully_defined():
        make = cgrid if y.dtype.is_complex else grid
        return tf.constant(make(y.shape, y.dtype.as_numpy_dtype, seed=seed))
    real = y.dtype.real_dtype
    k = tf.cast(tf.range(tf.size(y)), real)
    g = tf.reshape(tf.sin(k * 1.7 + seed), tf.shape(y))
    return tf.complex(g, tf.cos(g * 2.3)) if y.dtype.is_complex else g


def compare(build: Callable[[], tf.Tensor], tol: float, min_nonzero: int = 1,
            zeros_not_python: tuple[int, ...] = (), real_incoming: tuple[int, ...] = ()) -> None:
    """`build` makes (in a fresh graph) the op under test from constants and returns one of its
    outputs, or a list of them. Compares the C++ gradient (SymbolicGradient) of the node with
    Python's (tf.gradients), for random incoming gradients of every float output. Inputs in
    `zeros_not_python` must get zeros from C++ whatever Python returns; outputs in
    `real_incoming` (complex, real-valued by construction) get real incoming gradients."""
    with tf.Graph().as_default():
        tf_ext.library()
        out = build()
        op = out[0].op if isinstance(out, (list, tuple)) else out.op
        ys = [o for o in op.outputs]
        dys = [incoming(y, 10 + i) for i, y in enumerate(ys)]
        dys = [tf.complex(tf.math.real(dy), tf.zeros_like(tf.math.real(dy)))
               if i in real_incoming and dy.dtype.is_complex else dy for i, dy in enumerate(dys)]
        f = attr_value_pb2.NameAttrList(name=op.type)
        for k, v in op.node_def.attr.items():
            f.attr[k].CopyFrom(v)
        cpp = tf.raw_ops.SymbolicGradient(
            input=list(op.inputs) + dys, Tout=[t.dtype for t in op.inputs], f=f)
        py = tf.gradients(ys, list(op.inputs), grad_ys=dys)
        py = [tf.zeros_like(t) if g is None else tf.convert_to_tensor(g)  # IndexedSlices
              for g, t in zip(py, op.inputs)]
        with tf.compat.v1.Session() as sess:
            got, want = sess.run([cpp, py])
    nonzero = 0
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, (op.type, i)
        if i in zeros_not_python:
            np.testing.assert_array_equal(g, np.zeros_like(g))
            continue
        scale = max(1.0, float(np.max(np.abs(w))) if w.size else 1.0)
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * scale,
                                   err_msg=f"{op.type} input {i} ({op.inputs[i].name})")
        nonzero += int(np.count_nonzero(w))
    assert nonzero >= min_nonzero, op.type  # the comparison is not vacuous


# ------------------------------------------------------------------------------------------
# Activations' backward ops, exactly at their kinks included.

@pytest.mark.parametrize("dtype", FLOATS)
def test_relu_grad_at_zero(dtype):
    """ReluGrad(g, x) at x = 0: both give d(g) = 0 there (the mask is x > 0)."""
    x = np.array([-1.0, -0.0, 0.0, 0.5, 2.0, -3.0], dtype)
    g = grid((6,), dtype, seed=1)
    compare(lambda: tf.raw_ops.ReluGrad(gradients=g, features=x), TOL[dtype])


@pytest.mark.parametrize("dtype", FLOATS)
def test_relu6_grad_at_kinks(dtype):
    x = np.array([-1.0, 0.0, 0.5, 6.0, 7.0, 3.0], dtype)
    g = grid((6,), dtype, seed=2)
    compare(lambda: tf.raw_ops.Relu6Grad(gradients=g, features=x), TOL[dtype])


@pytest.mark.parametrize("op", ["EluGrad", "SeluGrad"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_exp_linear_unit_grads(op, dtype):
    outputs = np.array([-0.9, -0.3, 0.0, 0.4, 1.5, -0.05], dtype)
    g = grid((6,), dtype, seed=3)
    compare(lambda: getattr(tf.raw_ops, op)(gradients=g, outputs=outputs), TOL[dtype])


@pytest.mark.parametrize("dtype", FLOATS)
def test_softplus_grad(dtype):
    compare(lambda: tf.raw_ops.SoftplusGrad(gradients=grid((3, 4), dtype, seed=4),
                                            features=grid((3, 4), dtype, -4, 4, seed=5)),
            TOL[dtype])


@pytest.mark.parametrize("op,lo,hi", [("TanhGrad", -0.9, 0.9), ("SigmoidGrad", 0.05, 0.95),
                                      ("SqrtGrad", 0.3, 3.0), ("RsqrtGrad", 0.3, 3.0),
                                      ("ReciprocalGrad", -3.0, -0.3)])
@pytest.mark.parametrize("dtype", FLOATS)
def test_math_backward_ops(op, lo, hi, dtype):
    y = grid((3, 4), dtype, lo, hi, seed=6)
    dy = grid((3, 4), dtype, seed=7)
    compare(lambda: getattr(tf.raw_ops, op)(y=y, dy=dy), TOL[dtype])


@pytest.mark.parametrize("op", ["TanhGrad", "SigmoidGrad", "SqrtGrad", "RsqrtGrad",
                                "ReciprocalGrad", "InvGrad"])
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_math_backward_ops_complex(op, dtype):
    """Complex types: Python conjugates some arguments (per op); C++ must do the same."""
    y = cgrid((3, 4), dtype, 0.3, 1.5, seed=8)
    dy = cgrid((3, 4), dtype, seed=9)
    compare(lambda: getattr(tf.raw_ops, op)(y=y, dy=dy), 1e-5 if dtype == np.complex64 else 1e-12)


@pytest.mark.parametrize("op", ["Round", "Rint", "Ceil"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_piecewise_constant_ops_have_zero_gradient(op, dtype):
    """Python's gradient is None (zeros); C++'s is zeros too, also at .5 ties."""
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.3, -0.7], dtype)
    compare(lambda: getattr(tf.raw_ops, op)(x=x), TOL[dtype], min_nonzero=0)
    with tf.Graph().as_default():
        tf_ext.library()
        f = attr_value_pb2.NameAttrList(name=op)
        f.attr["T"].type = tf.as_dtype(dtype).as_datatype_enum
        (dx,) = tf.raw_ops.SymbolicGradient(
            input=[tf.constant(x), tf.ones_like(tf.constant(x))], Tout=[tf.as_dtype(dtype)], f=f)
        with tf.compat.v1.Session() as sess:
            np.testing.assert_array_equal(sess.run(dx), np.zeros_like(x))


# ------------------------------------------------------------------------------------------
# Bias, pooling, convolution.

@pytest.mark.parametrize("data_format,shape", [("NHWC", (2, 3, 4)), ("NCHW", (2, 3, 4, 5))])
@pytest.mark.parametrize("dtype", FLOATS)
def test_bias_add_grad(data_format, shape, dtype):
    compare(lambda: tf.raw_ops.BiasAddGrad(out_backprop=grid(shape, dtype, seed=8),
                                           data_format=data_format), TOL[dtype])


@pytest.mark.parametrize("padding,ksize,strides", [("VALID", 2, 2), ("SAME", 3, 2),
                                                   ("VALID", 3, 1)])
@pytest.mark.parametrize("dtype", FLOATS)
def test_avg_pool_grad(padding, ksize, strides, dtype):
    x = grid((2, 5, 5, 3), dtype, seed=9)

    def build():
        y = tf.raw_ops.AvgPool(value=x, ksize=[1, ksize, ksize, 1],
                               strides=[1, strides, strides, 1], padding=padding)
        return tf.raw_ops.AvgPoolGrad(orig_input_shape=tf.shape(x), grad=tf.ones_like(y) * 0.5,
                                      ksize=[1, ksize, ksize, 1],
                                      strides=[1, strides, strides, 1], padding=padding)
    # Python returns stop_gradient(orig_input_shape), the integer shape itself, as the
    # "gradient" of the shape input; C++ gives zeros (an integer shape has no gradient, and no
    # consumer of it, Shape, is differentiable).
    compare(build, TOL[dtype], zeros_not_python=(0,))


def pool_input_with_ties(dtype) -> np.ndarray:
    """A 1x4x4x2 input whose 2x2 windows hold repeated maxima (ties), and a second channel
    without ties."""
    ties = np.array([[1, 1, 0, 2], [1, 0, 2, 2], [3, 3, 1, 1], [3, 3, 1, 1]], np.float64)
    distinct = grid((4, 4), np.float64, seed=11)
    return np.stack([ties, distinct], axis=-1)[None].astype(dtype)


@pytest.mark.parametrize("padding,ksize,strides", [("VALID", 2, 2), ("SAME", 3, 2),
                                                   ("VALID", 2, 1)])
@pytest.mark.parametrize("dtype", FLOATS)
def test_max_pool_grad_grad_and_v2_with_ties(padding, ksize, strides, dtype):
    """MaxPoolGradGrad / MaxPoolGradV2 on consistent inputs (orig_output = MaxPool(orig_input))
    with tied maxima: C++ and Python route the gradient to the same element."""
    x = pool_input_with_ties(dtype)
    k, s = [1, ksize, ksize, 1], [1, strides, strides, 1]

    def orig_output():
        return tf.raw_ops.MaxPool(input=x, ksize=k, strides=s, padding=padding)

    def grad_grad():
        y = orig_output()
        return tf.raw_ops.MaxPoolGradGrad(orig_input=x, orig_output=y,
                                          grad=grid(x.shape, dtype, seed=12), ksize=k,
                                          strides=s, padding=padding)

    def grad_v2():
        y = orig_output()
        return tf.raw_ops.MaxPoolGradV2(orig_input=x, orig_output=y,
                                        grad=grid(y.shape, dtype, seed=13), ksize=k,
                                        strides=s, padding=padding)
    compare(grad_grad, TOL[dtype])
    compare(grad_v2, TOL[dtype])


@pytest.mark.parametrize("padding,strides", [("VALID", 1), ("SAME", 2)])
@pytest.mark.parametrize("dtype", FLOATS)
def test_conv_backprops(padding, strides, dtype):
    x = grid((2, 5, 5, 2), dtype, seed=14)
    w = grid((3, 3, 2, 3), dtype, seed=15)
    dw_ = grid((3, 3, 2, 2), dtype, seed=16)
    st = [1, strides, strides, 1]

    def conv_filter():
        y = tf.raw_ops.Conv2D(input=x, filter=w, strides=st, padding=padding)
        return tf.raw_ops.Conv2DBackpropFilter(
            input=x, filter_sizes=tf.shape(w), out_backprop=tf.ones_like(y) * 0.3 + y,
            strides=st, padding=padding)

    def depthwise_input():
        y = tf.raw_ops.DepthwiseConv2dNative(input=x, filter=dw_, strides=st, padding=padding)
        return tf.raw_ops.DepthwiseConv2dNativeBackpropInput(
            input_sizes=tf.shape(x), filter=dw_, out_backprop=y, strides=st, padding=padding)

    def depthwise_filter():
        y = tf.raw_ops.DepthwiseConv2dNative(input=x, filter=dw_, strides=st, padding=padding)
        return tf.raw_ops.DepthwiseConv2dNativeBackpropFilter(
            input=x, filter_sizes=tf.shape(dw_), out_backprop=y, strides=st, padding=padding)

    for build in (conv_filter, depthwise_input, depthwise_filter):
        compare(build, TOL[dtype])


# ------------------------------------------------------------------------------------------
# Batch normalisation, training and inference, NHWC and NCHW.

BN_TOL = 1e-4  # float only; sums over 2x4x4 elements per channel


def bn_inputs(data_format):
    shape = (2, 4, 4, 3) if data_format == "NHWC" else (2, 3, 4, 4)
    x = grid(shape, np.float32, -2, 2, seed=20)
    scale = np.array([0.7, 1.3, -0.9], np.float32)
    offset = np.array([0.1, -0.2, 0.3], np.float32)
    return x, scale, offset


@pytest.mark.parametrize("version", ["FusedBatchNormGrad", "FusedBatchNormGradV2",
                                     "FusedBatchNormGradV3"])
@pytest.mark.parametrize("is_training", [True, False])
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_fused_batch_norm_grad_grad(version, is_training, data_format):
    x, scale, offset = bn_inputs(data_format)
    forward = {"FusedBatchNormGrad": tf.raw_ops.FusedBatchNorm,
               "FusedBatchNormGradV2": tf.raw_ops.FusedBatchNormV2,
               "FusedBatchNormGradV3": tf.raw_ops.FusedBatchNormV3}[version]

    def build():
        pop_mean = tf.constant([0.05, -0.1, 0.2])
        pop_var = tf.constant([0.8, 1.2, 1.5])
        fwd = forward(x=x, scale=scale, offset=offset,
                      mean=pop_mean if not is_training else tf.constant([], tf.float32),
                      variance=pop_var if not is_training else tf.constant([], tf.float32),
                      epsilon=0.01, data_format=data_format, is_training=is_training)
        reserve = list(fwd[3:])
        if not is_training:  # the backward op of inference mode takes the population stats
            reserve[0], reserve[1] = pop_mean, pop_var
        dy = tf.constant(grid(x.shape, np.float32, seed=21))
        args = dict(y_backprop=dy, x=x, scale=scale, reserve_space_1=reserve[0],
                    reserve_space_2=reserve[1], epsilon=0.01, data_format=data_format,
                    is_training=is_training)
        if version == "FusedBatchNormGradV3":
            args["reserve_space_3"] = reserve[2]
        return getattr(tf.raw_ops, version)(**args)
    compare(build, BN_TOL)


@pytest.mark.parametrize("version", ["FusedBatchNorm", "FusedBatchNormV2"])
@pytest.mark.parametrize("is_training", [True, False])
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_fused_batch_norm(version, is_training, data_format):
    x, scale, offset = bn_inputs(data_format)

    def build():
        empty = tf.constant([], tf.float32)
        return getattr(tf.raw_ops, version)(
            x=x, scale=scale, offset=offset,
            mean=empty if is_training else tf.constant([0.05, -0.1, 0.2]),
            variance=empty if is_training else tf.constant([0.8, 1.2, 1.5]),
            epsilon=0.01, data_format=data_format, is_training=is_training)
    compare(build, BN_TOL)


def test_training_batch_norm_grad_grad_matches_finite_differences():
    """Training mode's second derivative: d/dx <v, FusedBatchNormGradV3(g, x, s, stats(x))>,
    the batch statistics recomputed from x, differenced numerically in float64 through the
    composite (FusedBatchNormV3 then its backward op) against the C++ gradient."""
    x, scale, _ = bn_inputs("NHWC")
    x = x[:, :2, :2, :]  # 2x2x2x3: few finite differences
    dy = grid(x.shape, np.float32, seed=22)
    v = grid(x.shape, np.float32, seed=23)

    with tf.Graph().as_default():
        tf_ext.library()
        xp = tf.compat.v1.placeholder(tf.float32, x.shape)
        fwd = tf.raw_ops.FusedBatchNormV3(x=xp, scale=scale, offset=np.zeros(3, np.float32),
                                          mean=tf.constant([], tf.float32),
                                          variance=tf.constant([], tf.float32), epsilon=0.01,
                                          is_training=True)
        bwd = tf.raw_ops.FusedBatchNormGradV3(y_backprop=dy, x=xp, scale=scale,
                                              reserve_space_1=fwd[3], reserve_space_2=fwd[4],
                                              reserve_space_3=fwd[5], epsilon=0.01,
                                              is_training=True)
        objective = tf.reduce_sum(bwd[0] * v)
        op = bwd[0].op
        f = attr_value_pb2.NameAttrList(name=op.type)
        for k, a in op.node_def.attr.items():
            f.attr[k].CopyFrom(a)
        zeros3 = tf.zeros([3])
        cpp = tf.raw_ops.SymbolicGradient(
            input=list(op.inputs) + [tf.constant(v), zeros3, zeros3, zeros3, zeros3],
            Tout=[t.dtype for t in op.inputs], f=f)
        with tf.compat.v1.Session() as sess:
            analytic = sess.run(cpp[1], {xp: x})
            numeric = np.zeros(x.size)
            eps = 1e-2
            for i in range(x.size):
                e = np.zeros(x.size, np.float32)
                e[i] = eps
                e = e.reshape(x.shape)
                plus = sess.run(objective, {xp: x + e})
                minus = sess.run(objective, {xp: x - e})
                numeric[i] = (np.float64(plus) - np.float64(minus)) / (2 * eps)
    numeric = numeric.reshape(x.shape)
    assert np.max(np.abs(numeric)) > 0.1
    np.testing.assert_allclose(analytic, numeric, rtol=2e-2, atol=2e-2 * np.max(np.abs(numeric)))


# ------------------------------------------------------------------------------------------
# Special functions, including the points where Python imputes a limit (x = 0 for BesselI1,
# BesselI1e, BesselJ1; x = 1 for Spence).

UNARY_SPECIAL = [
    ("Digamma", 0.5, 4.0), ("Dawsn", -3.0, 3.0), ("Expint", 0.3, 3.0),
    ("FresnelCos", -2.0, 2.0), ("FresnelSin", -2.0, 2.0), ("Spence", 0.2, 3.0),
    ("BesselI0", -3.0, 3.0), ("BesselI0e", -3.0, 3.0), ("BesselI1", -3.0, 3.0),
    ("BesselI1e", -3.0, 3.0), ("BesselJ0", -5.0, 5.0), ("BesselJ1", -5.0, 5.0),
    ("BesselK0", 0.5, 4.0), ("BesselK0e", 0.5, 4.0), ("BesselK1", 0.5, 4.0),
    ("BesselK1e", 0.5, 4.0), ("BesselY0", 0.5, 4.0), ("BesselY1", 0.5, 4.0),
]
# Points where the closed form is 0/0 and Python substitutes the limit.
IMPUTED = {"BesselI1": 0.0, "BesselI1e": 0.0, "BesselJ1": 0.0, "Spence": 1.0}


@pytest.mark.parametrize("op,lo,hi", UNARY_SPECIAL, ids=[u[0] for u in UNARY_SPECIAL])
@pytest.mark.parametrize("dtype", FLOATS)
def test_special_unary(op, lo, hi, dtype):
    x = grid((3, 4), dtype, lo, hi, seed=30)
    if op in IMPUTED:
        x.flat[5] = IMPUTED[op]
    fn = getattr(tf.raw_ops, op)
    compare(lambda: fn(x=x), 1e-5 if dtype == np.float32 else 1e-10)


@pytest.mark.parametrize("dtype", FLOATS)
def test_special_binary(dtype):
    tol = 1e-5 if dtype == np.float32 else 1e-10
    a = grid((3, 4), dtype, 0.5, 3, seed=31)
    x = grid((3, 4), dtype, 0.3, 4, seed=32)
    u = grid((3, 4), dtype, 0.05, 0.95, seed=33)
    for op in ("Igamma", "Igammac"):
        compare(lambda: getattr(tf.raw_ops, op)(a=a, x=x), tol)
        compare(lambda: getattr(tf.raw_ops, op)(a=np.array(2.0, dtype), x=x), tol)  # broadcast
    compare(lambda: tf.raw_ops.Betainc(a=a, b=x, x=u), tol)
    compare(lambda: tf.raw_ops.Betainc(a=np.array(1.0, dtype), b=np.array(3.0, dtype), x=u), tol)
    compare(lambda: tf.raw_ops.Zeta(x=a + 1.2, q=x), tol)
    compare(lambda: tf.raw_ops.Zeta(x=np.array(2.5, dtype), q=x), tol)
    compare(lambda: tf.raw_ops.Polygamma(a=np.round(a), x=x), tol)
    compare(lambda: tf.raw_ops.Polygamma(a=np.array(1.0, dtype), x=x), tol)


# ------------------------------------------------------------------------------------------
# Other math ops and the sparse softmax cross entropy.

@pytest.mark.parametrize("dtype", FLOATS)
def test_other_math_ops(dtype):
    tol = 1e-5 if dtype == np.float32 else 1e-10
    x = grid((3, 4), dtype, -3, 3, seed=40)
    y = grid((3, 4), dtype, 0.5, 2, seed=41)
    compare(lambda: tf.raw_ops.FloorMod(x=x, y=y), tol)
    compare(lambda: tf.raw_ops.FloorMod(x=x, y=np.array(1.3, dtype)), tol)
    a, b = grid((4, 3), dtype, seed=42), grid((4, 3), dtype, seed=43)
    compare(lambda: tf.raw_ops.Cross(a=a, b=b), tol)
    for axes, keep in (([1], False), ([-1, 0], True), (0, False)):
        compare(lambda: tf.raw_ops.EuclideanNorm(input=x, axis=axes, keep_dims=keep),
                tol)
    compare(lambda: tf.raw_ops.NextAfter(x1=x, x2=np.array(0.25, dtype)), tol)
    # Cumprod with a zero in x: d(x) = cumsum(...) / x, 0 there (div_no_nan) on both sides.
    xz = grid((3, 4), dtype, 0.5, 2, seed=44)
    xz[1, 2] = 0
    for exclusive in (False, True):
        for reverse in (False, True):
            compare(lambda: tf.raw_ops.Cumprod(x=xz, axis=1, exclusive=exclusive,
                                               reverse=reverse), tol)
            compare(lambda: tf.raw_ops.CumulativeLogsumexp(x=x, axis=0, exclusive=exclusive,
                                                           reverse=reverse), tol)


@pytest.mark.parametrize("dtype", FLOATS)
def test_sparse_softmax_cross_entropy(dtype):
    """Both outputs carry gradients (loss, and backprop for second derivatives)."""
    tol = 1e-5 if dtype == np.float32 else 1e-10
    features = grid((4, 5), dtype, -3, 3, seed=45)
    compare(lambda: tf.raw_ops.SparseSoftmaxCrossEntropyWithLogits(
        features=features, labels=np.array([4, 0, 2, 1], np.int32)), tol)


# ------------------------------------------------------------------------------------------
# 3-D convolution and pooling, BiasAddV1, ArgMax / ArgMin, InvGrad.

@pytest.mark.parametrize("padding,strides", [("VALID", 1), ("SAME", 2)])
@pytest.mark.parametrize("dtype", FLOATS)
def test_conv3d_family(padding, strides, dtype):
    x = grid((1, 4, 4, 4, 2), dtype, seed=50)
    w = grid((3, 3, 3, 2, 2), dtype, seed=51)
    st = [1, strides, strides, strides, 1]

    def conv():
        return tf.raw_ops.Conv3D(input=x, filter=w, strides=st, padding=padding)

    def backprop_input():
        y = conv()
        return tf.raw_ops.Conv3DBackpropInputV2(input_sizes=tf.shape(x), filter=w,
                                                out_backprop=y, strides=st, padding=padding)

    def backprop_filter():
        y = conv()
        return tf.raw_ops.Conv3DBackpropFilterV2(input=x, filter_sizes=tf.shape(w),
                                                 out_backprop=y, strides=st, padding=padding)
    for build in (conv, backprop_input, backprop_filter):
        compare(build, 1e-5 if dtype == np.float32 else 1e-10)


@pytest.mark.parametrize("padding,ksize,strides", [("VALID", 2, 2), ("SAME", 3, 2)])
def test_pool3d_grads(padding, ksize, strides):
    """AvgPool3DGrad (float kernels only), MaxPool3DGrad and MaxPool3DGradGrad on consistent
    inputs (orig_output = MaxPool3D(orig_input)), with ties in the first channel."""
    dtype = np.float32
    x = grid((1, 4, 4, 4, 2), dtype, seed=52)
    x[..., 0] = np.round(x[..., 0] * 2)  # few distinct values: tied maxima
    k, s = [1, ksize, ksize, ksize, 1], [1, strides, strides, strides, 1]

    def avg_grad():
        y = tf.raw_ops.AvgPool3D(input=x, ksize=k, strides=s, padding=padding)
        return tf.raw_ops.AvgPool3DGrad(orig_input_shape=tf.shape(x), grad=y, ksize=k,
                                        strides=s, padding=padding)

    def max_grad():
        y = tf.raw_ops.MaxPool3D(input=x, ksize=k, strides=s, padding=padding)
        return tf.raw_ops.MaxPool3DGrad(orig_input=x, orig_output=y,
                                        grad=grid(y.shape, dtype, seed=53), ksize=k, strides=s,
                                        padding=padding)

    def max_grad_grad():
        y = tf.raw_ops.MaxPool3D(input=x, ksize=k, strides=s, padding=padding)
        return tf.raw_ops.MaxPool3DGradGrad(orig_input=x, orig_output=y,
                                            grad=grid(x.shape, dtype, seed=54), ksize=k,
                                            strides=s, padding=padding)
    # AvgPool3DGrad: Python returns the shape itself for orig_input_shape (see AvgPoolGrad).
    compare(avg_grad, 1e-5, zeros_not_python=(0,))
    compare(max_grad, 1e-5)
    compare(max_grad_grad, 1e-5)


@pytest.mark.parametrize("dtype", FLOATS)
def test_bias_add_v1_inv_grad_and_arg_reductions(dtype):
    tol = 1e-5 if dtype == np.float32 else 1e-10
    compare(lambda: tf.raw_ops.BiasAddV1(value=grid((2, 3, 4), dtype, seed=55),
                                         bias=grid((4,), dtype, seed=56)), tol)
    compare(lambda: tf.raw_ops.InvGrad(y=grid((3, 4), dtype, -3, -0.3, seed=57),
                                       dy=grid((3, 4), dtype, seed=58)), tol)
    for op in ("ArgMax", "ArgMin"):  # integer outputs: zeros for both inputs, as Python's None
        compare(lambda: getattr(tf.raw_ops, op)(input=grid((3, 4), dtype, seed=59), dimension=1),
                tol, min_nonzero=0)


# ------------------------------------------------------------------------------------------
# Selection: TopKV2 and MaxPoolWithArgmax with ties; ComplexAbs (0 at x = 0).

TIED = np.array([[[1, 3, 3, 0], [2, 2, 2, 2], [5, -1, 5, 4]],
                 [[0, 0, 1, 1], [7, 6, 7, 6], [-3, -3, -2, -1]]])


@pytest.mark.parametrize("k", [0, 2, 4])
@pytest.mark.parametrize("dtype", FLOATS)
def test_top_k_v2_with_ties(k, dtype):
    x = TIED.astype(dtype)
    compare(lambda: tf.raw_ops.TopKV2(input=x, k=k), TOL[dtype], min_nonzero=0 if k == 0 else 1)


def test_top_k_v2_int64_indices():
    """index_type=int64: Python's own gradient fails there (it adds int32 offsets to int64
    indices); C++ gives what both give for int32 indices."""
    x = TIED.astype(np.float64)
    dy = grid((2, 3, 2), np.float64, seed=61)
    got = {}
    for index_type in (tf.int32, tf.int64):
        with tf.Graph().as_default():
            tf_ext.library()
            out = tf.raw_ops.TopKV2(input=x, k=2, index_type=index_type)
            f = attr_value_pb2.NameAttrList(name="TopKV2")
            for key, v in out[0].op.node_def.attr.items():
                f.attr[key].CopyFrom(v)
            dx, _ = tf.raw_ops.SymbolicGradient(
                input=[tf.constant(x), tf.constant(2), tf.constant(dy),
                       tf.zeros([2, 3, 2], index_type)], Tout=[tf.float64, tf.int32], f=f)
            with tf.compat.v1.Session() as sess:
                got[index_type] = sess.run(dx)
    np.testing.assert_array_equal(got[tf.int64], got[tf.int32])
    assert np.count_nonzero(got[tf.int32]) == dy.size


@pytest.mark.parametrize("include_batch_in_index", [False, True])
@pytest.mark.parametrize("padding", ["VALID", "SAME"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_max_pool_with_argmax_ties(include_batch_in_index, padding, dtype):
    x = np.concatenate([pool_input_with_ties(dtype), pool_input_with_ties(dtype)[..., ::-1]])
    compare(lambda: tf.raw_ops.MaxPoolWithArgmax(
        input=x, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding=padding,
        include_batch_in_index=include_batch_in_index), TOL[dtype])


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_abs(dtype):
    x = cgrid((3, 4), dtype, seed=60)
    x[1, 1] = 0  # the gradient is 0 there (div_no_nan)
    compare(lambda: tf.raw_ops.ComplexAbs(x=x, Tout=tf.as_dtype(dtype).real_dtype),
            1e-5 if dtype == np.complex64 else 1e-12)


@pytest.mark.parametrize("padding,strides", [("VALID", 1), ("SAME", 2)])
@pytest.mark.parametrize("dtype", FLOATS)
def test_dilation2d(padding, strides, dtype):
    x = grid((2, 5, 5, 3), dtype, seed=62)
    w = grid((3, 3, 3), dtype, -0.313, 0.457, seed=63)
    compare(lambda: tf.raw_ops.Dilation2D(input=x, filter=w, strides=[1, strides, strides, 1],
                                          rates=[1, 1, 1, 1], padding=padding), TOL[dtype])


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("dtype", FLOATS)
def test_nth_element_with_ties(reverse, dtype):
    """Tied values share the gradient equally, as in Python."""
    x = TIED.reshape(6, 4).astype(dtype)
    for n in (0, 1, 3):
        compare(lambda: tf.raw_ops.NthElement(input=x, n=n, reverse=reverse), TOL[dtype])


@pytest.mark.parametrize("dtype", FLOATS)
def test_isotonic_regression(dtype):
    x = np.array([[3, 1, 2, 5, 4, 0, 6, 6], [0, 1, 2, 3, 4, 5, 6, 7], [9, 8, 7, 6, 5, 4, 3, 2]],
                 dtype)
    compare(lambda: tf.raw_ops.IsotonicRegression(input=x, output_dtype=dtype), TOL[dtype])


# ------------------------------------------------------------------------------------------
# Segment reductions: ties, zeros in products, negative ids, sparse_gradient.

@pytest.mark.parametrize("dtype", FLOATS)
def test_segment_reductions(dtype):
    tol = TOL[dtype]
    data = np.array([[1, 2], [1, 0], [3, 0], [0, 0], [2, 5], [-1, 4]], dtype)  # ties, zeros
    ids = np.array([0, 0, 1, 1, 1, 3], np.int32)
    for op in ("SegmentMean", "SegmentMax", "SegmentMin", "SegmentProd"):
        compare(lambda: getattr(tf.raw_ops, op)(data=data, segment_ids=ids), tol)
    unsorted_ids = np.array([2, -1, 0, 2, 0, 2], np.int64)
    compare(lambda: tf.raw_ops.UnsortedSegmentProd(data=data, segment_ids=unsorted_ids,
                                                   num_segments=4), tol)


@pytest.mark.parametrize("sparse_gradient", [False, True])
@pytest.mark.parametrize("dtype", FLOATS)
def test_sparse_segment_reductions(sparse_gradient, dtype):
    """sparse_gradient: Python returns IndexedSlices, C++ the same values densely."""
    data = grid((5, 3), dtype, seed=70)
    indices = np.array([4, 4, 0, 2], np.int32)
    ids = np.array([0, 2, 2, 3], np.int32)
    for norm in ("Sum", "Mean", "SqrtN"):
        op = getattr(tf.raw_ops, "SparseSegment" + norm)
        compare(lambda: op(data=data, indices=indices, segment_ids=ids,
                           sparse_gradient=sparse_gradient), TOL[dtype])
        op = getattr(tf.raw_ops, "SparseSegment" + norm + "WithNumSegments")
        compare(lambda: op(data=data, indices=indices, segment_ids=ids, num_segments=6,
                           sparse_gradient=sparse_gradient), TOL[dtype])


@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("a_is_sparse,b_is_sparse", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_sparse_mat_mul(transpose_a, transpose_b, a_is_sparse, b_is_sparse, dtype):
    """SparseMatMul (no double kernel to difference): float and bfloat16 inputs."""
    a = grid((4, 3) if transpose_a else (3, 4), np.float32, seed=71)
    b = grid((5, 4) if transpose_b else (4, 5), np.float32, seed=72)
    a[a > 0.5] = 0  # sparse-ish, as the hints say
    compare(lambda: tf.raw_ops.SparseMatMul(
        a=tf.cast(a, dtype), b=tf.cast(b, dtype), transpose_a=transpose_a,
        transpose_b=transpose_b, a_is_sparse=a_is_sparse, b_is_sparse=b_is_sparse),
        1e-5 if dtype == tf.float32 else 1e-2)


@pytest.mark.parametrize("version", ["FusedBatchNormGradV2", "FusedBatchNormGradV3"])
@pytest.mark.parametrize("is_training", [True, False])
def test_fused_batch_norm_grad_grad_half(version, is_training):
    """T = half (U = float): computed in float and cast back, as Python does."""
    x, scale, offset = bn_inputs("NHWC")
    forward = (tf.raw_ops.FusedBatchNormV3 if version == "FusedBatchNormGradV3"
               else tf.raw_ops.FusedBatchNormV2)

    def build():
        xh = tf.cast(x, tf.float16)
        pop_mean, pop_var = tf.constant([0.05, -0.1, 0.2]), tf.constant([0.8, 1.2, 1.5])
        empty = tf.constant([], tf.float32)
        fwd = forward(x=xh, scale=scale, offset=offset,
                      mean=empty if is_training else pop_mean,
                      variance=empty if is_training else pop_var, epsilon=0.01,
                      is_training=is_training)
        reserve = list(fwd[3:])
        if not is_training:  # the backward op of inference mode takes the population stats
            reserve[0], reserve[1] = pop_mean, pop_var
        args = dict(y_backprop=tf.cast(grid(x.shape, np.float32, seed=21), tf.float16), x=xh,
                    scale=scale, reserve_space_1=reserve[0], reserve_space_2=reserve[1],
                    epsilon=0.01, is_training=is_training)
        if version == "FusedBatchNormGradV3":
            args["reserve_space_3"] = reserve[2]
        return getattr(tf.raw_ops, version)(**args)
    compare(build, 2e-2)


@pytest.mark.parametrize("op,dtype,message", [
    ("Digamma", tf.float16, "Digamma is not differentiable for T=half"),
    ("Igamma", tf.float16, "Igamma is not differentiable for T=half"),
])
def test_unsupported_types_fail_naming_the_op(op, dtype, message):
    """Where the gradient's kernels lack a type (Polygamma, IgammaGradA: float and double), the
    C++ gradient fails with InvalidArgument naming the op, instead of a kernel lookup error."""
    with tf.Graph().as_default():
        tf_ext.library()
        x = tf.constant([0.5, 1.5], dtype)
        inputs = [x] if op == "Digamma" else [x, x]
        f = attr_value_pb2.NameAttrList(name=op)
        f.attr["T"].type = dtype.as_datatype_enum
        grads = tf.raw_ops.SymbolicGradient(input=inputs + [tf.ones_like(x)],
                                            Tout=[dtype] * len(inputs), f=f)
        with tf.compat.v1.Session() as sess:
            with pytest.raises(tf.errors.InvalidArgumentError, match=message):
                sess.run(grads)


# ------------------------------------------------------------------------------------------
# Ops that pass their input through (array_grad.cc), and PreventGradient's refusal.

@pytest.mark.parametrize("dtype", FLOATS)
def test_pass_through_ops(dtype):
    tol = 1e-6 if dtype == np.float32 else 1e-12
    x = grid((3, 4), dtype, seed=50)
    compare(lambda: tf.raw_ops.PlaceholderWithDefault(input=x, shape=[3, 4]), tol)
    compare(lambda: tf.raw_ops.EnsureShape(input=x, shape=[3, 4]), tol)
    compare(lambda: tf.raw_ops.CheckNumericsV2(tensor=x, message="forward"), tol)


def test_check_numerics_v2_checks_its_gradient():
    # The gradient of CheckNumericsV2 checks the incoming gradient, as Python's does.
    with tf.Graph().as_default():
        tf_ext.library()
        x = tf.constant([1.0, 2.0])
        y = tf.raw_ops.CheckNumericsV2(tensor=x, message="fwd")
        f = attr_value_pb2.NameAttrList(name="CheckNumericsV2")
        for k, v in y.op.node_def.attr.items():
            f.attr[k].CopyFrom(v)
        dx = tf.raw_ops.SymbolicGradient(input=[x, tf.constant([1.0, np.inf])],
                                         Tout=[tf.float32], f=f)
        with tf.compat.v1.Session() as sess:
            with pytest.raises(tf.errors.InvalidArgumentError, match="detected in gradient. fwd"):
                sess.run(dx)


def test_prevent_gradient_is_an_error_naming_the_op():
    with tf.Graph().as_default():
        tf_ext.library()
        x = tf.constant([1.0, 2.0])
        f = attr_value_pb2.NameAttrList(name="PreventGradient")
        f.attr["T"].type = tf.float32.as_datatype_enum
        f.attr["message"].s = b"not here"
        dx = tf.raw_ops.SymbolicGradient(input=[x, tf.ones_like(x)], Tout=[tf.float32], f=f)
        with tf.compat.v1.Session() as sess:
            with pytest.raises(tf.errors.InvalidArgumentError,
                               match="PreventGradient: gradient explicitly disabled. Reason: "
                                     "not here"):
                sess.run(dx)
