"""tf_ext's C++ gradients of TensorFlow's sparse-tensor ops (tf_ext/grads/tf/sparse_grad.cc),
CSR sparse-matrix conversions and transpose (csr_sparse_matrix_grad.cc) and CTC losses
(ctc_grad.cc) against Python's gradients of the same op on the same inputs:
unordered indices, entries dropped by SparseAdd's threshold, broadcast dense operands,
adjoints, int32 and int64 indices, empty rows.

The C++ gradient runs alone (a SymbolicGradient node in a tf.compat.v1 Session, `compare` of
test_tf_nn_math_grads.py); Python's is tf.gradients of the same node. Numeric Jacobians,
out-of-range and empty cases, CTC's refused second derivative and TopK (v1, which no Python
graph can hold): tests/tf_sparse_grads_test.cc.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2

import tf_ext
from test_tf_nn_math_grads import compare, grid

FLOATS = [np.float32, np.float64]
TOL = {np.float32: 2e-5, np.float64: 1e-12, np.complex64: 2e-5, np.complex128: 1e-12}

# a [3, 4] sparse matrix, 5 entries in row-major order
IDX = np.array([[0, 1], [0, 3], [1, 2], [2, 0], [2, 3]], np.int64)
SHAPE = np.array([3, 4], np.int64)
# a [2, 3, 4] sparse tensor, 6 entries in row-major order
IDX3 = np.array([[0, 0, 1], [0, 2, 3], [1, 0, 1], [1, 0, 3], [1, 2, 2], [1, 2, 3]], np.int64)
SHAPE3 = np.array([2, 3, 4], np.int64)


def symbolic_gradient(op, dys):
    f = attr_value_pb2.NameAttrList(name=op.type)
    for k, v in op.node_def.attr.items():
        f.attr[k].CopyFrom(v)
    return tf.raw_ops.SymbolicGradient(input=list(op.inputs) + list(dys),
                                       Tout=[t.dtype for t in op.inputs], f=f)


def central_differences(sess, loss, feed, placeholder, step, complex_=False):
    """d loss / d feed[placeholder] by central differences of `step`; complex_: also along the
    imaginary axis (the real-valued loss's gradient as TensorFlow defines it, d/dRe + i d/dIm)."""
    x = feed[placeholder]
    num = np.zeros_like(x)
    for i in np.ndindex(*x.shape):
        for d in ([1, 1j] if complex_ else [1]):
            xp, xm = x.copy(), x.copy()
            xp[i] += step * d
            xm[i] -= step * d
            fp, fm = dict(feed), dict(feed)
            fp[placeholder], fm[placeholder] = xp, xm
            num[i] += d * (sess.run(loss, fp) - sess.run(loss, fm)) / (2 * step)
    return num


@pytest.mark.parametrize("dtype", FLOATS)
def test_sparse_reorder(dtype):
    unordered = np.array([[2, 0], [0, 3], [1, 1], [0, 1], [2, 2]], np.int64)
    compare(lambda: tf.raw_ops.SparseReorder(
        input_indices=unordered, input_values=grid((5,), dtype, seed=1), input_shape=SHAPE),
        TOL[dtype])


@pytest.mark.parametrize("thresh", [0.0, 0.3])
@pytest.mark.parametrize("dtype", FLOATS)
def test_sparse_add(dtype, thresh):
    """b overlaps a at (0, 3) and (2, 0); a positive threshold drops small sums (their values
    then get zero gradient on both sides)."""
    b_idx = np.array([[0, 0], [0, 3], [2, 0]], np.int64)
    compare(lambda: tf.raw_ops.SparseAdd(
        a_indices=IDX, a_values=grid((5,), dtype, seed=2), a_shape=SHAPE, b_indices=b_idx,
        b_values=grid((3,), dtype, seed=3), b_shape=SHAPE, thresh=dtype(thresh)), TOL[dtype])


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", FLOATS)
def test_sparse_tensor_dense_add(dtype, index_dtype):
    compare(lambda: tf.raw_ops.SparseTensorDenseAdd(
        a_indices=IDX.astype(index_dtype), a_values=grid((5,), dtype, seed=4),
        a_shape=SHAPE.astype(index_dtype), b=grid((3, 4), dtype, seed=5)), TOL[dtype])


@pytest.mark.parametrize("keep_dims", [False, True])
@pytest.mark.parametrize("axes", [[1], [-1, 0], [0, 1, 2], 2])
@pytest.mark.parametrize("dtype", FLOATS)
def test_sparse_reduce_sum(dtype, axes, keep_dims):
    compare(lambda: tf.raw_ops.SparseReduceSum(
        input_indices=IDX3, input_values=grid((6,), dtype, seed=6), input_shape=SHAPE3,
        reduction_axes=np.array(axes, np.int32), keep_dims=keep_dims), TOL[dtype])


@pytest.mark.parametrize("dtype", FLOATS)
def test_sparse_slice(dtype):
    compare(lambda: tf.raw_ops.SparseSlice(
        indices=IDX, values=grid((5,), dtype, seed=7), shape=SHAPE,
        start=np.array([1, 1], np.int64), size=np.array([2, 3], np.int64)), TOL[dtype])


@pytest.mark.parametrize("adjoint_b", [False, True])
@pytest.mark.parametrize("adjoint_a", [False, True])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", FLOATS + [np.complex128])
def test_sparse_tensor_dense_mat_mul(dtype, index_dtype, adjoint_a, adjoint_b):
    inner = 3 if adjoint_a else 4
    b_shape = (2, inner) if adjoint_b else (inner, 2)
    values = grid((5,), np.float64, seed=8) + (1j * grid((5,), np.float64, seed=9)
                                               if dtype == np.complex128 else 0)
    b = grid(b_shape, np.float64, seed=10) + (1j * grid(b_shape, np.float64, seed=11)
                                              if dtype == np.complex128 else 0)
    compare(lambda: tf.raw_ops.SparseTensorDenseMatMul(
        a_indices=IDX.astype(index_dtype), a_values=values.astype(dtype), a_shape=SHAPE,
        b=b.astype(dtype), adjoint_a=adjoint_a, adjoint_b=adjoint_b), TOL[dtype])


@pytest.mark.parametrize("dense_shape", [(2, 3, 4), (3, 1), (2, 1, 4), (4,)])
@pytest.mark.parametrize("op", ["SparseDenseCwiseMul", "SparseDenseCwiseDiv"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_sparse_dense_cwise(dtype, op, dense_shape):
    compare(lambda: getattr(tf.raw_ops, op)(
        sp_indices=IDX3, sp_values=grid((6,), dtype, seed=12), sp_shape=SHAPE3,
        dense=grid(dense_shape, dtype, lo=0.5, hi=1.5, seed=13)), TOL[dtype])


@pytest.mark.parametrize("op", ["SparseDenseCwiseMul", "SparseDenseCwiseDiv"])
def test_sparse_dense_cwise_scalar_dense(op):
    """A scalar dense operand, which Python's gradient cannot take (its gather_nd needs a
    vector): against Python's gradient of the same product on the dense values."""
    values, y = grid((6,), np.float64, seed=14), np.float64(1.25)
    with tf.Graph().as_default():
        tf_ext.library()
        out = getattr(tf.raw_ops, op)(sp_indices=IDX3, sp_values=values, sp_shape=SHAPE3,
                                      dense=y)
        dy = tf.constant(grid((6,), np.float64, seed=15))
        cpp = symbolic_gradient(out.op, [dy])
        v, d = tf.constant(values), tf.constant(y)
        ref = v * d if op == "SparseDenseCwiseMul" else v / d
        py = tf.gradients(ref, [v, d], grad_ys=dy)
        with tf.compat.v1.Session() as sess:
            got, want = sess.run([cpp, py])
    np.testing.assert_allclose(got[1], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[3], want[1], rtol=1e-12)
    assert got[3].shape == ()


@pytest.mark.parametrize("dtype", FLOATS)
def test_sparse_softmax(dtype):
    # rows of 1, 2 and 3 entries in a [2, 2, 4] tensor, one row empty
    idx = np.array([[0, 0, 1], [0, 1, 0], [0, 1, 3], [1, 0, 0], [1, 0, 2], [1, 0, 3]], np.int64)
    compare(lambda: tf.raw_ops.SparseSoftmax(
        sp_indices=idx, sp_values=grid((6,), dtype, lo=-2, hi=2, seed=16),
        sp_shape=np.array([2, 2, 4], np.int64)), TOL[dtype])


@pytest.mark.parametrize("dtype", FLOATS)
def test_sparse_fill_empty_rows(dtype):
    """Rows 1 and 3 of 5 empty. tf.gradients takes no incoming gradient for the boolean
    empty_row_indicator, so only output_values is differentiated (zeros for the others)."""
    with tf.Graph().as_default():
        tf_ext.library()
        out = tf.raw_ops.SparseFillEmptyRows(
            indices=np.array([[0, 1], [0, 2], [2, 0], [4, 1]], np.int64),
            values=grid((4,), dtype, seed=17), dense_shape=np.array([5, 3], np.int64),
            default_value=dtype(0.25))
        op = out.output_values.op
        dv = tf.constant(grid((6,), dtype, seed=18))
        dys = [tf.zeros_like(op.outputs[0]), dv, tf.zeros_like(op.outputs[2]),
               tf.zeros_like(op.outputs[3])]
        cpp = symbolic_gradient(op, dys)
        py = tf.gradients(op.outputs[1], list(op.inputs), grad_ys=dv)
        py = [tf.zeros_like(t) if g is None else g for g, t in zip(py, op.inputs)]
        with tf.compat.v1.Session() as sess:
            got, want = sess.run([cpp, py])
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=TOL[dtype], atol=TOL[dtype])
    assert np.count_nonzero(want[1]) == 4 and want[3] != 0  # values and the default


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", FLOATS)
def test_sparse_to_dense(dtype, index_dtype):
    compare(lambda: tf.raw_ops.SparseToDense(
        sparse_indices=IDX.astype(index_dtype), output_shape=SHAPE.astype(index_dtype),
        sparse_values=grid((5,), dtype, seed=18), default_value=dtype(0.5)), TOL[dtype])


def test_sparse_to_dense_scalar_value():
    """One value for every index: its gradient is the sum over the indices (Python's gives a
    [N] gradient for the scalar; tf.gradients of the scalar sums it the same way)."""
    with tf.Graph().as_default():
        tf_ext.library()
        value = tf.constant(1.5, tf.float64)
        out = tf.raw_ops.SparseToDense(sparse_indices=IDX, output_shape=SHAPE,
                                       sparse_values=value, default_value=np.float64(-0.5))
        dy = tf.constant(grid((3, 4), np.float64, seed=19))
        cpp = symbolic_gradient(out.op, [dy])
        with tf.compat.v1.Session() as sess:
            got = sess.run(cpp)
    dy_np = grid((3, 4), np.float64, seed=19)
    at = dy_np[IDX[:, 0], IDX[:, 1]]
    assert got[2].shape == ()
    np.testing.assert_allclose(got[2], at.sum(), rtol=1e-12)
    np.testing.assert_allclose(got[3], dy_np.sum() - at.sum(), rtol=1e-12)


@pytest.mark.parametrize("op", ["SparseTensorDenseMatMul", "SparseReduceSum", "SparseAdd"])
def test_out_of_range_index_names_the_op(op):
    bad = np.array([[0, 1], [0, 4], [1, 2]], np.int64)  # (0, 4) in [3, 4]
    v = grid((3,), np.float32, seed=20)
    with tf.Graph().as_default():
        tf_ext.library()
        if op == "SparseTensorDenseMatMul":
            out = tf.raw_ops.SparseTensorDenseMatMul(a_indices=bad, a_values=v, a_shape=SHAPE,
                                                     b=grid((4, 2), np.float32, seed=21))
            dys = [tf.ones((3, 2))]
        elif op == "SparseReduceSum":
            out = tf.raw_ops.SparseReduceSum(input_indices=bad, input_values=v,
                                             input_shape=SHAPE, reduction_axes=[0])
            dys = [tf.ones((4,))]
        else:
            out = tf.raw_ops.SparseAdd(a_indices=bad, a_values=v, a_shape=SHAPE,
                                       b_indices=IDX, b_values=grid((5,), np.float32, seed=22),
                                       b_shape=SHAPE, thresh=np.float32(0))[1]
            dys = [tf.zeros((8, 2), tf.int64), tf.ones((8,)), tf.zeros((2,), tf.int64)]
        cpp = symbolic_gradient(out.op, dys)
        with tf.compat.v1.Session() as sess:
            with pytest.raises(tf.errors.InvalidArgumentError,
                               match=f"(^|\n){op}: an index.* is out of range"):
                sess.run(cpp)


# ------------------------------------------------------------------------------------------
# ApproxTopK (nn_grad.cc): no CPU kernel in the C++ test binaries; Python's runtime has one
# for the last axis only, so that is checked here, against Python and central differences
# (other axes, with the forward's indices given: tests/tf_sparse_grads_test.cc).

@pytest.mark.parametrize("shape", [(3, 5, 4), (4, 6)])
def test_approx_top_k(shape):
    dim = -1
    x = grid(shape, np.float32, seed=60)
    build = lambda: tf.raw_ops.ApproxTopK(input=x, k=2, reduction_dimension=dim)
    compare(build, TOL[np.float32])
    with tf.Graph().as_default():
        tf_ext.library()
        xs = tf.compat.v1.placeholder(tf.float32, x.shape)
        values = tf.raw_ops.ApproxTopK(input=xs, k=2, reduction_dimension=dim)[0]
        dv = tf.constant(grid(values.shape, np.float32, seed=61))
        cpp = symbolic_gradient(values.op, [dv, tf.zeros(values.shape, tf.int32)])[0]
        loss = tf.reduce_sum(dv * values)
        with tf.compat.v1.Session() as sess:
            got = sess.run(cpp, {xs: x})
            # distinct inputs: no ties within the step
            num = central_differences(sess, loss, {xs: x}, xs, 1e-3)
    np.testing.assert_allclose(got, num, rtol=1e-3, atol=1e-3)
    assert np.count_nonzero(got) == values.shape.num_elements()


# ------------------------------------------------------------------------------------------
# CTC (ctc_grad.cc). inputs [time 5, batch 2, classes 4].

CTC_IDX = np.array([[0, 0], [0, 1], [1, 0], [1, 1], [1, 2]], np.int64)
CTC_LABELS = np.array([1, 2, 0, 0, 2], np.int32)  # blank = 3
CTC_LENGTHS = np.array([5, 4], np.int32)


@pytest.mark.parametrize("merge", [True, False])
@pytest.mark.parametrize("dtype", FLOATS)
def test_ctc_loss(dtype, merge):
    compare(lambda: tf.raw_ops.CTCLoss(
        inputs=grid((5, 2, 4), dtype, lo=-2, hi=2, seed=23), labels_indices=CTC_IDX,
        labels_values=CTC_LABELS, sequence_length=CTC_LENGTHS, ctc_merge_repeated=merge),
        1e-6 if dtype == np.float32 else 1e-12)


def test_ctc_loss_v2_is_pythons_blank_first_ctc_loss():
    """CTCLossV2 (blank 0; its kernel is cuDNN's, so no CPU forward here) against Python's
    tf.nn.ctc_loss with blank_index=0, which rotates the classes for CTCLoss on the CPU."""
    x = grid((5, 2, 4), np.float32, lo=-2, hi=2, seed=24)
    labels = CTC_LABELS + 1
    dloss = np.array([0.7, -1.3], np.float32)
    with tf.Graph().as_default():
        tf_ext.library()
        xs = tf.constant(x)
        f = attr_value_pb2.NameAttrList(name="CTCLossV2")
        for k, v in [("preprocess_collapse_repeated", False), ("ctc_merge_repeated", True),
                     ("ignore_longer_outputs_than_inputs", False)]:
            f.attr[k].b = v
        cpp = tf.raw_ops.SymbolicGradient(
            input=[xs, CTC_IDX, labels, CTC_LENGTHS, dloss, tf.zeros_like(xs)],
            Tout=[tf.float32, tf.int64, tf.int32, tf.int32], f=f)
        sparse = tf.SparseTensor(CTC_IDX, labels, [2, 3])
        loss = tf.nn.ctc_loss(labels=sparse, logits=xs, label_length=None,
                              logit_length=CTC_LENGTHS, blank_index=0)
        (py,) = tf.gradients(loss, xs, grad_ys=tf.constant(dloss))
        with tf.compat.v1.Session() as sess:
            got, want = sess.run([cpp[0], py])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert np.abs(want).max() > 0.01


# ------------------------------------------------------------------------------------------
# CSR sparse matrices (csr_sparse_matrix_grad.cc). A CSR matrix is a variant: its gradient is
# checked through chains dense/COO -> CSR ops -> dense/COO, as a function (a Defun) whose
# SymbolicGradient TensorFlow's graph-level builder forms from the C++ registry, against
# Python's tf.gradients of the same chain built inline and against central differences.

def _csr_chain(name, x, dtype, rank):
    if name == "dense":  # DenseToCSRSparseMatrix -> SparseMatrixTranspose -> ToDense
        idx = IDX if rank == 2 else np.array([[0, 0, 1], [0, 2, 3], [1, 0, 0], [1, 1, 2]],
                                             np.int64)
        csr = tf.raw_ops.DenseToCSRSparseMatrix(dense_input=x, indices=idx)
        t = tf.raw_ops.SparseMatrixTranspose(input=csr, type=dtype, conjugate=True)
        return tf.raw_ops.CSRSparseMatrixToDense(sparse_input=t, type=dtype)
    # SparseTensorToCSRSparseMatrix -> SparseMatrixTranspose -> CSRSparseMatrixToSparseTensor;
    # the values scaled by themselves, so that the chain is not linear
    csr = tf.raw_ops.SparseTensorToCSRSparseMatrix(indices=IDX, values=x * x, dense_shape=SHAPE)
    t = tf.raw_ops.SparseMatrixTranspose(input=csr, type=dtype, conjugate=False)
    return tf.raw_ops.CSRSparseMatrixToSparseTensor(sparse_matrix=t, type=dtype).values


@pytest.mark.parametrize("chain,shape,dtype", [
    ("dense", (3, 4), np.float64), ("dense", (2, 3, 4), np.float64),
    ("dense", (3, 4), np.complex128), ("dense", (3, 4), np.float32),
    ("coo", (5,), np.float64), ("coo", (5,), np.complex128), ("coo", (5,), np.float32)])
def test_csr_sparse_matrix_chains(chain, shape, dtype):
    from tensorflow.python.framework import function  # Defun: a graph function
    tfdtype = tf.as_dtype(dtype)
    x = grid(shape, np.float64, lo=-2, hi=2, seed=30)
    if dtype == np.complex128:
        x = x + 1j * grid(shape, np.float64, seed=31)
    x = x.astype(dtype)
    with tf.Graph().as_default():
        tf_ext.library()

        @function.Defun(tfdtype)
        def chain_fn(t):
            t.set_shape(shape)  # the CSR ops' shape functions need the rank
            return _csr_chain(chain, t, tfdtype, len(shape))

        xs = tf.compat.v1.placeholder(tfdtype, shape)
        inline = _csr_chain(chain, xs, tfdtype, len(shape))
        called = chain_fn(xs)
        # the dense chain's output is the transpose; the COO chain's, the 5 values
        out_shape = (5,) if chain == "coo" else shape[:-2] + (shape[-1], shape[-2])
        dy = grid(out_shape, np.float64, seed=32)
        if dtype == np.complex128:
            dy = dy + 1j * grid(out_shape, np.float64, seed=33)
        dy = tf.constant(dy.astype(dtype))
        f = attr_value_pb2.NameAttrList(name=chain_fn.name)
        cpp = tf.raw_ops.SymbolicGradient(input=[xs, dy], Tout=[tfdtype], f=f)[0]
        (py,) = tf.gradients(inline, xs, grad_ys=dy)
        loss = tf.reduce_sum(tf.math.real(tf.math.conj(dy) * called))
        with tf.compat.v1.Session() as sess:
            got, want = sess.run([cpp, py], {xs: x})
            tol = 1e-5 if dtype == np.float32 else 1e-12
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
            assert np.count_nonzero(want) > 0
            if dtype == np.float32:
                return
            # central differences of sum(Re(conj(dy) * chain(x))), real and imaginary parts
            num = central_differences(sess, loss, {xs: x}, xs, 1e-6, dtype == np.complex128)
            np.testing.assert_allclose(got, num, rtol=1e-6, atol=1e-6)


_MATMUL_FLAGS = [
    {}, {"transpose_a": True}, {"adjoint_a": True}, {"transpose_b": True}, {"adjoint_b": True},
    {"transpose_a": True, "adjoint_b": True}, {"adjoint_a": True, "transpose_b": True},
    {"transpose_a": True, "transpose_b": True}, {"adjoint_a": True, "adjoint_b": True},
    {"transpose_output": True}, {"conjugate_output": True},
    {"adjoint_a": True, "transpose_output": True, "conjugate_output": True},
    {"transpose_b": True, "transpose_output": True}]


# every flag combination unbatched; batched (rank 3), one flag at a time
_MATMUL_CASES = (
    [(d, f, False) for d in (np.float64, np.complex128, np.float32) for f in _MATMUL_FLAGS] +
    [(d, f, True) for d in (np.float64, np.complex128) for f in _MATMUL_FLAGS if len(f) <= 1])


@pytest.mark.parametrize(
    "dtype,flags,batched", _MATMUL_CASES,
    ids=[f"{np.dtype(d).name}-{'-'.join(sorted(f)) or 'plain'}{'-batched' * b}"
         for d, f, b in _MATMUL_CASES])
def test_sparse_matrix_mat_mul(dtype, flags, batched):
    """d(a) (through DenseToCSRSparseMatrix: the dense entries of a's pattern) and d(b) of
    SparseMatrixMatMul(a, b) against Python's and central differences."""
    from tensorflow.python.framework import function
    tfdtype = tf.as_dtype(dtype)
    ta = flags.get("transpose_a") or flags.get("adjoint_a")
    tb = flags.get("transpose_b") or flags.get("adjoint_b")
    a_shape = (4, 3) if ta else (3, 4)     # op(a) is [3, 4]
    b_shape = (2, 4) if tb else (4, 2)     # op(b) is [4, 2]
    idx = np.array([[0, 1], [1, 0], [1, 2], [2, 2], [3, 0]] if ta else
                   [[0, 1], [0, 3], [1, 2], [2, 0], [2, 3]], np.int64)
    if batched:
        a_shape, b_shape = (2,) + a_shape, (2,) + b_shape
        idx = np.concatenate([np.concatenate([np.full((5, 1), i), idx], 1) for i in (0, 1)])

    def values(shape, seed):
        v = grid(shape, np.float64, lo=-2, hi=2, seed=seed)
        if dtype == np.complex128:
            v = v + 1j * grid(shape, np.float64, seed=seed + 100)
        return v.astype(dtype)

    xa, xb = values(a_shape, 40), values(b_shape, 41)

    def chain(a, b):
        csr = tf.raw_ops.DenseToCSRSparseMatrix(dense_input=a, indices=idx)
        return tf.raw_ops.SparseMatrixMatMul(a=csr, b=b, **flags)

    with tf.Graph().as_default():
        tf_ext.library()

        @function.Defun(tfdtype, tfdtype)
        def chain_fn(a, b):
            a.set_shape(a_shape)
            b.set_shape(b_shape)
            return chain(a, b)

        pa = tf.compat.v1.placeholder(tfdtype, a_shape)
        pb = tf.compat.v1.placeholder(tfdtype, b_shape)
        inline = chain(pa, pb)
        out_shape = (3, 2)[::-1] if flags.get("transpose_output") else (3, 2)
        dy = tf.constant(values((2,) + out_shape if batched else out_shape, 42))
        cpp = tf.raw_ops.SymbolicGradient(input=[pa, pb, dy], Tout=[tfdtype, tfdtype],
                                          f=attr_value_pb2.NameAttrList(name=chain_fn.name))
        py = tf.gradients(inline, [pa, pb], grad_ys=dy)
        loss = tf.reduce_sum(tf.math.real(tf.math.conj(dy) * chain_fn(pa, pb)))
        with tf.compat.v1.Session() as sess:
            feed = {pa: xa, pb: xb}
            got, want = sess.run([cpp, py], feed)
            tol = 1e-5 if dtype == np.float32 else 1e-12
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=tol, atol=tol * max(1, np.abs(w).max()))
                assert np.count_nonzero(w) > 0
            if dtype == np.float32:
                return
            for k, p in enumerate([pa, pb]):
                num = central_differences(sess, loss, feed, p, 1e-6, dtype == np.complex128)
                np.testing.assert_allclose(got[k], num, rtol=1e-6, atol=1e-6)


_SPSP_FLAGS = [
    {}, {"transpose_a": True}, {"adjoint_a": True}, {"transpose_b": True}, {"adjoint_b": True},
    {"transpose_a": True, "adjoint_b": True}, {"adjoint_a": True, "transpose_b": True},
    {"transpose_a": True, "transpose_b": True}, {"adjoint_a": True, "adjoint_b": True}]
_SPSP_CASES = (
    [(d, f, False, False) for d in (np.float64, np.complex128, np.float32)
     for f in _SPSP_FLAGS] +
    [(d, f, True, False) for d in (np.float64, np.complex128) for f in _SPSP_FLAGS
     if len(f) <= 1] +
    [(d, f, False, True) for d in (np.float64, np.complex128) for f in _SPSP_FLAGS])


@pytest.mark.parametrize(
    "dtype,flags,batched,empty_row", _SPSP_CASES,
    ids=[f"{np.dtype(d).name}-{'-'.join(sorted(f)) or 'plain'}{'-batched' * b}"
         f"{'-empty_row' * e}" for d, f, b, e in _SPSP_CASES])
def test_sparse_matrix_sparse_mat_mul(dtype, flags, batched, empty_row):
    """SparseMatrixSparseMatMul(a, b), both through DenseToCSRSparseMatrix: d(a) and d(b) are
    the dense gradients at the operands' entries, against Python's and central differences.
    With an empty row of op(b) (`empty_row`), a's entries in that column have no entry in
    G op(b)^H: C++ gives them zero gradient; Python's pruning then indexes past its arrays and
    fails (InvalidArgument), so those cases are checked against central differences only."""
    from tensorflow.python.framework import function
    tfdtype = tf.as_dtype(dtype)
    ta = flags.get("transpose_a") or flags.get("adjoint_a")
    tb = flags.get("transpose_b") or flags.get("adjoint_b")
    a_shape = (4, 3) if ta else (3, 4)     # op(a) is [3, 4]
    b_shape = (2, 4) if tb else (4, 2)     # op(b) is [4, 2]
    a_idx = [[0, 1], [1, 0], [1, 2], [2, 2], [3, 0]] if ta else \
        [[0, 1], [0, 3], [1, 2], [2, 0], [2, 3]]
    if empty_row:  # row 3 of op(b) empty
        b_idx = [[0, 0], [0, 2], [1, 1], [1, 2]] if tb else [[0, 0], [1, 1], [2, 1], [2, 0]]
    else:
        b_idx = [[0, 0], [0, 3], [1, 1], [1, 2]] if tb else [[0, 0], [1, 1], [2, 1], [3, 0]]
    a_idx, b_idx = np.array(a_idx, np.int64), np.array(b_idx, np.int64)
    if batched:
        a_shape, b_shape = (2,) + a_shape, (2,) + b_shape
        a_idx = np.concatenate([np.concatenate([np.full((5, 1), i), a_idx], 1) for i in (0, 1)])
        b_idx = np.concatenate([np.concatenate([np.full((4, 1), i), b_idx], 1) for i in (0, 1)])

    def values(shape, seed):
        v = grid(shape, np.float64, lo=-2, hi=2, seed=seed)
        if dtype == np.complex128:
            v = v + 1j * grid(shape, np.float64, seed=seed + 100)
        return v.astype(dtype)

    xa, xb = values(a_shape, 50), values(b_shape, 51)

    def chain(a, b):
        ca = tf.raw_ops.DenseToCSRSparseMatrix(dense_input=a, indices=a_idx)
        cb = tf.raw_ops.DenseToCSRSparseMatrix(dense_input=b, indices=b_idx)
        c = tf.raw_ops.SparseMatrixSparseMatMul(a=ca, b=cb, type=tfdtype, **flags)
        return tf.raw_ops.CSRSparseMatrixToDense(sparse_input=c, type=tfdtype)

    with tf.Graph().as_default():
        tf_ext.library()

        @function.Defun(tfdtype, tfdtype)
        def chain_fn(a, b):
            a.set_shape(a_shape)
            b.set_shape(b_shape)
            return chain(a, b)

        pa = tf.compat.v1.placeholder(tfdtype, a_shape)
        pb = tf.compat.v1.placeholder(tfdtype, b_shape)
        inline = chain(pa, pb)
        dy = tf.constant(values((2, 3, 2) if batched else (3, 2), 52))
        cpp = tf.raw_ops.SymbolicGradient(input=[pa, pb, dy], Tout=[tfdtype, tfdtype],
                                          f=attr_value_pb2.NameAttrList(name=chain_fn.name))
        py = tf.gradients(inline, [pa, pb], grad_ys=dy)
        loss = tf.reduce_sum(tf.math.real(tf.math.conj(dy) * chain_fn(pa, pb)))
        with tf.compat.v1.Session() as sess:
            feed = {pa: xa, pb: xb}
            got = sess.run(cpp, feed)
            if not empty_row:
                want = sess.run(py, feed)
                tol = 1e-5 if dtype == np.float32 else 1e-12
                for g, w in zip(got, want):
                    np.testing.assert_allclose(g, w, rtol=tol,
                                               atol=tol * max(1, np.abs(w).max()))
                    assert np.count_nonzero(w) > 0
            if dtype == np.float32:
                return
            for k, p in enumerate([pa, pb]):
                num = central_differences(sess, loss, feed, p, 1e-6, dtype == np.complex128)
                np.testing.assert_allclose(got[k], num, rtol=1e-6, atol=1e-6)
                assert np.count_nonzero(got[k]) > 0
