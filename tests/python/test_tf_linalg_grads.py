"""tf_ext's C++ gradients of TensorFlow's linear-algebra ops (tf_ext/grads/tf/linalg_grad.cc)
against Python's gradients of the same op on the same inputs.

The C++ gradient runs alone: a SymbolicGradient node whose function is the op with the node's
attrs, in a tf.compat.v1 Session (`compare` of test_tf_nn_math_grads.py). Python's is
tf.gradients of the same node. Numeric Jacobian checks: tests/tf_linalg_grads_test.cc.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2

import tf_ext
from test_tf_nn_math_grads import cgrid, compare, grid

REAL = [np.float32, np.float64]
ALL = REAL + [np.complex64, np.complex128]
TOL = {np.float32: 1e-4, np.float64: 1e-10, np.complex64: 1e-4, np.complex128: 1e-10}


def values(shape, dtype, seed, lo=-1.0, hi=1.0):
    make = cgrid if np.dtype(dtype).kind == "c" else grid
    return make(shape, dtype, lo, hi, seed=seed)


def conditioned(shape, dtype, seed, boost=3.0):
    """Distinct values with `boost` added to the diagonal: far from singular."""
    return (values(shape, np.float64 if np.dtype(dtype).kind == "f" else np.complex128, seed) +
            boost * np.eye(shape[-1])).astype(dtype)


def hermitian(shape, dtype, seed):
    """M + M^H with diagonal offsets 0, 3, 6, ...: well separated eigenvalues."""
    m = values(shape, np.complex128 if np.dtype(dtype).kind == "c" else np.float64, seed)
    h = m + np.conj(np.swapaxes(m, -1, -2))
    return (h + np.diag(3.0 * np.arange(shape[-1]))).astype(dtype)


def spd(shape, dtype, seed):
    m = values(shape, np.complex128 if np.dtype(dtype).kind == "c" else np.float64, seed)
    return (m @ np.conj(np.swapaxes(m, -1, -2)) + shape[-1] * np.eye(shape[-1])).astype(dtype)


# ------------------------------------------------------------------------------------------
# Inverses, determinants, solves.

@pytest.mark.parametrize("adjoint", [False, True])
@pytest.mark.parametrize("dtype", ALL)
def test_matrix_inverse(adjoint, dtype):
    a = conditioned((2, 3, 3), dtype, 1)
    compare(lambda: tf.raw_ops.MatrixInverse(input=a, adjoint=adjoint), TOL[dtype])


@pytest.mark.parametrize("dtype", REAL)
def test_determinants(dtype):
    """Real matrices, one with a negative determinant. (Complex: Python's gradient is not the
    derivative there; the C++ one is checked numerically.)"""
    a = conditioned((3, 3, 3), dtype, 2)
    a[1] = a[1, ::-1]
    compare(lambda: tf.raw_ops.MatrixDeterminant(input=a), TOL[dtype])
    compare(lambda: tf.raw_ops.LogMatrixDeterminant(input=a), TOL[dtype])


@pytest.mark.parametrize("adjoint", [False, True])
@pytest.mark.parametrize("dtype", ALL)
def test_matrix_solve(adjoint, dtype):
    a = conditioned((2, 3, 3), dtype, 3)
    b = values((2, 3, 2), dtype, 4)
    compare(lambda: tf.raw_ops.MatrixSolve(matrix=a, rhs=b, adjoint=adjoint), TOL[dtype])


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("adjoint", [False, True])
@pytest.mark.parametrize("dtype", ALL)
def test_matrix_triangular_solve(lower, adjoint, dtype):
    """Equal batch shapes, then broadcast ones ([2, 1] against [3])."""
    kw = dict(lower=lower, adjoint=adjoint)
    a, b = conditioned((2, 3, 3), dtype, 5), values((2, 3, 2), dtype, 6)
    compare(lambda: tf.raw_ops.MatrixTriangularSolve(matrix=a, rhs=b, **kw), TOL[dtype])
    a, b = conditioned((2, 1, 3, 3), dtype, 7), values((3, 3, 2), dtype, 8)
    compare(lambda: tf.raw_ops.MatrixTriangularSolve(matrix=a, rhs=b, **kw), TOL[dtype])


@pytest.mark.parametrize("dtype", ALL)
def test_cholesky(dtype):
    a = spd((2, 4, 4), dtype, 9)
    compare(lambda: tf.raw_ops.Cholesky(input=a), TOL[dtype])


# ------------------------------------------------------------------------------------------
# Diagonals (MatrixDiag and MatrixBandPart have TensorFlow's own gradients).

@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_diag_v1(dtype):
    compare(lambda: tf.raw_ops.MatrixDiagPart(input=values((2, 3, 4), dtype, 11)), 0)
    compare(lambda: tf.raw_ops.MatrixSetDiag(input=values((2, 4, 3), dtype, 12),
                                             diagonal=values((2, 3), dtype, 13)), 0)


@pytest.mark.parametrize("align", ["LEFT_LEFT", "LEFT_RIGHT", "RIGHT_LEFT", "RIGHT_RIGHT"])
def test_diag_v3(align):
    """A band k = [-1, 1] with padding (both in the packed diagonals and in the matrix)."""
    k = np.array([-1, 1], np.int32)
    d = values((2, 3, 3), np.float64, 15)
    compare(lambda: tf.raw_ops.MatrixDiagV3(diagonal=d, k=k, num_rows=4, num_cols=3,
                                            padding_value=np.float64(0.5), align=align), 0)
    x = values((2, 4, 3), np.float64, 16)
    compare(lambda: tf.raw_ops.MatrixDiagPartV3(input=x, k=k, padding_value=np.float64(0.5),
                                                align=align), 0)
    compare(lambda: tf.raw_ops.MatrixSetDiagV3(input=x, diagonal=values((2, 3, 3), np.float64, 17),
                                               k=k, align=align), 0)


def test_diag_v2_single_diagonal():
    k = np.int32(1)
    compare(lambda: tf.raw_ops.MatrixDiagV2(diagonal=values((2, 3), np.float32, 18), k=k,
                                            num_rows=4, num_cols=4,
                                            padding_value=np.float32(0.5)), 0)
    x = values((2, 4, 3), np.float32, 19)
    compare(lambda: tf.raw_ops.MatrixDiagPartV2(input=x, k=k, padding_value=np.float32(0)), 0)
    compare(lambda: tf.raw_ops.MatrixSetDiagV2(input=x, diagonal=values((2, 2), np.float32, 20),
                                               k=k), 0)


def cpp_and_python(cpp_build, py_build, dy):
    """The C++ gradient of cpp_build's node and Python's of py_build's, for the same d(output)."""
    with tf.Graph().as_default():
        tf_ext.library()
        out = cpp_build()
        f = attr_value_pb2.NameAttrList(name=out.op.type)
        for k, v in out.op.node_def.attr.items():
            f.attr[k].CopyFrom(v)
        cpp = tf.raw_ops.SymbolicGradient(input=list(out.op.inputs) + [dy],
                                          Tout=[t.dtype for t in out.op.inputs], f=f)
        ref = py_build()
        xs = list(ref.op.inputs[:2])
        py = [tf.zeros_like(x) if g is None else g
              for g, x in zip(tf.gradients(ref, xs, grad_ys=dy), xs)]
        with tf.compat.v1.Session() as sess:
            return sess.run([cpp, py])


def test_diag_v2_bands_pack_left_left():
    """A band k = [-1, 1]: the V2 ops pack diagonals as V3's LEFT_LEFT, and so do their C++
    gradients (checked numerically in C++), which equal Python's gradients of the V3 ops with
    align=LEFT_LEFT. (Python's own V2 gradients pack as RIGHT_LEFT, V3's default, so for bands
    of unequal diagonals they are not the derivative.)"""
    k = np.array([-1, 1], np.int32)
    d = values((2, 3, 3), np.float64, 18)
    dy = values((2, 4, 3), np.float64, 21)
    kw = dict(diagonal=d, k=k, num_rows=4, num_cols=3, padding_value=np.float64(0.5))
    cpp, py = cpp_and_python(lambda: tf.raw_ops.MatrixDiagV2(**kw),
                             lambda: tf.raw_ops.MatrixDiagV3(**kw, align="LEFT_LEFT"), dy)
    np.testing.assert_array_equal(cpp[0], py[0])
    x = values((2, 4, 3), np.float64, 19)
    kw = dict(input=x, diagonal=d, k=k)
    cpp, py = cpp_and_python(lambda: tf.raw_ops.MatrixSetDiagV2(**kw),
                             lambda: tf.raw_ops.MatrixSetDiagV3(**kw, align="LEFT_LEFT"), dy)
    np.testing.assert_array_equal(cpp[0], py[0])
    np.testing.assert_array_equal(cpp[1], py[1])
    assert np.count_nonzero(cpp[1]) > 0
    kw = dict(input=x, k=k, padding_value=np.float64(0))
    cpp, py = cpp_and_python(lambda: tf.raw_ops.MatrixDiagPartV2(**kw),
                             lambda: tf.raw_ops.MatrixDiagPartV3(**kw, align="LEFT_LEFT"), d)
    np.testing.assert_array_equal(cpp[0], py[0])


# ------------------------------------------------------------------------------------------
# Decompositions.

@pytest.mark.parametrize("shape,full", [((2, 4, 3), False), ((2, 3, 3), False),
                                        ((2, 3, 5), False), ((3, 3), True), ((2, 2, 4), True)])
@pytest.mark.parametrize("dtype", ALL)
def test_qr(shape, full, dtype):
    """Tall, square and wide matrices (Python's two branches), full factorisations of square and
    wide ones."""
    a = values(shape, dtype, 21)
    compare(lambda: tf.raw_ops.Qr(input=a, full_matrices=full), TOL[dtype])


def test_qr_tall_full_matrices_refused():
    """Python refuses the gradient (NotImplementedError); C++ fails with an InvalidArgument
    naming the op."""
    a = values((4, 3), np.float64, 22)
    with tf.Graph().as_default():
        x = tf.constant(a)
        q, r = tf.raw_ops.Qr(input=x, full_matrices=True)
        with pytest.raises(NotImplementedError):
            tf.gradients([q, r], [x])
    with tf.Graph().as_default():
        tf_ext.library()
        q, r = tf.raw_ops.Qr(input=a, full_matrices=True)
        f = attr_value_pb2.NameAttrList(name="Qr")
        for k, v in q.op.node_def.attr.items():
            f.attr[k].CopyFrom(v)
        g = tf.raw_ops.SymbolicGradient(input=[q.op.inputs[0], tf.ones_like(q), tf.ones_like(r)],
                                        Tout=[tf.float64], f=f)
        with tf.compat.v1.Session() as sess:
            with pytest.raises(tf.errors.InvalidArgumentError, match="Qr: gradient not"):
                sess.run(g)


@pytest.mark.parametrize("compute_v", [True, False])
@pytest.mark.parametrize("dtype", ALL)
def test_self_adjoint_eig(compute_v, dtype):
    a = hermitian((2, 3, 3), dtype, 23)
    compare(lambda: tf.raw_ops.SelfAdjointEigV2(input=a, compute_v=compute_v), TOL[dtype])


@pytest.mark.parametrize("shape,full", [((2, 4, 3), False), ((2, 3, 3), False),
                                        ((2, 3, 5), False), ((2, 4, 3), True), ((3, 3), True),
                                        ((3, 4), True)])
@pytest.mark.parametrize("dtype", ALL)
def test_svd(shape, full, dtype):
    """Python's two branches (tall through A^H), reduced and full factorisations; complex
    included (its phase terms and conjugations as Python's)."""
    a = values(shape, dtype, 24)
    compare(lambda: tf.raw_ops.Svd(input=a, full_matrices=full), TOL[dtype], real_incoming=(0,))


@pytest.mark.parametrize("shape", [(2, 4, 3), (3, 5)])
@pytest.mark.parametrize("dtype", [np.float64, np.complex64])
def test_svd_values_only(shape, dtype):
    a = values(shape, dtype, 25)
    compare(lambda: tf.raw_ops.Svd(input=a, compute_uv=False), TOL[dtype], real_incoming=(0,))


@pytest.mark.parametrize("compute_uv", [True, False])
def test_svd_imaginary_singular_value_gradient_is_ignored(compute_uv):
    """A complex matrix's singular values are real (s's imaginary parts are 0), so an incoming
    gradient i on s changes nothing: C++ gives the derivative, 0; Python's is not (nonzero)."""
    a = values((3, 3), np.complex128, 26)
    with tf.Graph().as_default():
        tf_ext.library()
        op = tf.raw_ops.Svd(input=a, compute_uv=compute_uv)[0].op
        dys = [tf.zeros_like(y) for y in op.outputs]
        dys[0] = tf.complex(tf.zeros_like(tf.math.real(dys[0])), tf.ones_like(tf.math.real(dys[0])))
        f = attr_value_pb2.NameAttrList(name="Svd")
        for k, v in op.node_def.attr.items():
            f.attr[k].CopyFrom(v)
        cpp = tf.raw_ops.SymbolicGradient(input=[op.inputs[0]] + dys, Tout=[tf.complex128], f=f)
        py = tf.gradients(op.outputs, [op.inputs[0]], grad_ys=dys)
        with tf.compat.v1.Session() as sess:
            got, want = sess.run([cpp, py])
    np.testing.assert_allclose(got[0], np.zeros_like(got[0]), atol=1e-12)
    assert np.max(np.abs(want[0])) > 0.1


def banded(shape, dtype, lower, seed):
    a = values(shape, dtype, seed)
    a[..., 0 if lower else shape[-2] - 1, :] += 3.0
    return a


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("adjoint", [False, True])
@pytest.mark.parametrize("dtype", ALL)
def test_banded_triangular_solve(lower, adjoint, dtype):
    """Equal batch shapes, then broadcast ones."""
    kw = dict(lower=lower, adjoint=adjoint)
    a, b = banded((2, 2, 4), dtype, lower, 26), values((2, 4, 2), dtype, 27)
    compare(lambda: tf.raw_ops.BandedTriangularSolve(matrix=a, rhs=b, **kw), TOL[dtype])
    a, b = banded((2, 1, 3, 4), dtype, lower, 28), values((3, 4, 1), dtype, 29)
    compare(lambda: tf.raw_ops.BandedTriangularSolve(matrix=a, rhs=b, **kw), TOL[dtype])


@pytest.mark.parametrize("dtype", ALL)
def test_tridiagonal_matmul(dtype):
    p, d, q = (values((2, 1, 4), dtype, s) for s in (30, 31, 32))
    b = values((2, 4, 3), dtype, 33)
    compare(lambda: tf.raw_ops.TridiagonalMatMul(superdiag=p, maindiag=d, subdiag=q, rhs=b),
            TOL[dtype])


@pytest.mark.parametrize("pivoting", [True, False])
@pytest.mark.parametrize("dtype", REAL)
def test_tridiagonal_solve(pivoting, dtype):
    """Real types (for complex ones Python's gradient is not the derivative: it conjugates
    neither the matrix nor the solution; the C++ one is checked numerically)."""
    d = values((2, 3, 4), dtype, 34)
    d[..., 1, :] += 3.0
    b = values((2, 4, 2), dtype, 35)
    compare(lambda: tf.raw_ops.TridiagonalSolve(diagonals=d, rhs=b, partial_pivoting=pivoting),
            TOL[dtype])


@pytest.mark.parametrize("shape_a,shape_b,l2", [((2, 3, 3), (2, 3, 2), 0.0),
                                                ((2, 4, 3), (2, 4, 2), 0.0),
                                                ((4, 3), (4, 1), 0.5),
                                                ((2, 3, 4), (2, 3, 2), 0.0),
                                                ((3, 5), (3, 2), 0.25)])
@pytest.mark.parametrize("dtype", REAL)
def test_matrix_solve_ls(shape_a, shape_b, l2, dtype):
    """Python's two kinds of normal equations (chosen from the static shape there, at run time
    in C++). Real types: for complex ones Python's first kind is not the derivative."""
    a, b = values(shape_a, dtype, 36), values(shape_b, dtype, 37)
    compare(lambda: tf.raw_ops.MatrixSolveLs(matrix=a, rhs=b, l2_regularizer=np.float64(l2)),
            TOL[dtype] * 10)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_matrix_solve_ls_complex_wide(dtype):
    """The second kind (a wide matrix) is Python's for complex types too."""
    a, b = values((2, 3, 4), dtype, 38), values((2, 3, 2), dtype, 39)
    compare(lambda: tf.raw_ops.MatrixSolveLs(matrix=a, rhs=b, l2_regularizer=np.float64(0.1)),
            TOL[dtype] * 10)


@pytest.mark.parametrize("dtype", REAL)
def test_matrix_square_root(dtype):
    """Real types (for complex ones Python's Sylvester system uses R^T where the derivative
    needs R^H; the C++ gradient is checked numerically)."""
    compare(lambda: tf.raw_ops.MatrixSquareRoot(input=spd((2, 3, 3), dtype, 40)), TOL[dtype] * 10)
    compare(lambda: tf.raw_ops.MatrixSquareRoot(input=conditioned((3, 3), dtype, 41, 4.0)),
            TOL[dtype] * 10)


@pytest.mark.parametrize("compute_v", [True, False])
@pytest.mark.parametrize("dtype", ALL)
def test_eig(compute_v, dtype):
    """Real matrices (complex eigenvalue pairs among them) and complex ones."""
    a = values((2, 3, 3), dtype, 42)
    tout = np.complex64 if dtype in (np.float32, np.complex64) else np.complex128
    compare(lambda: tf.raw_ops.Eig(input=a, Tout=tout, compute_v=compute_v),
            TOL[dtype] * 10)


# ------------------------------------------------------------------------------------------
# Where Python's complex gradient is not the derivative: central differences side with C++.

def numeric_gradient(op, inputs, k, dys, eps=1e-6):
    """d/dRe + i d/dIm of sum Re(conj(dy) * y) over op's outputs, w.r.t. inputs[k]."""
    def loss(args):
        ys = op(*args)
        ys = ys if isinstance(ys, (list, tuple)) else [ys]
        return sum(float(np.real(np.sum(np.conj(dy) * y.numpy()))) for y, dy in zip(ys, dys))
    x = inputs[k]
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        for d in (1, 1j):
            plus, minus = x.copy(), x.copy()
            plus[idx] += eps * d
            minus[idx] -= eps * d
            args_p, args_m = list(inputs), list(inputs)
            args_p[k], args_m[k] = plus, minus
            g[idx] += (loss(args_p) - loss(args_m)) / (2 * eps) * d
    return g


@pytest.mark.parametrize("name", ["MatrixDeterminant", "LogMatrixDeterminant", "TridiagonalSolve",
                                  "MatrixSquareRoot", "MatrixSolveLs"])
def test_complex_derivative_where_python_is_not(name):
    c = np.complex128
    diags = values((2, 3, 4), c, 43)
    diags[..., 1, :] += 3.0
    cases = {
        "MatrixDeterminant": (lambda a: tf.raw_ops.MatrixDeterminant(input=a),
                              [conditioned((2, 3, 3), c, 44)]),
        "LogMatrixDeterminant": (lambda a: tf.raw_ops.LogMatrixDeterminant(input=a),
                                 [conditioned((2, 3, 3), c, 45)]),
        "TridiagonalSolve": (lambda d, b: tf.raw_ops.TridiagonalSolve(diagonals=d, rhs=b),
                             [diags, values((2, 4, 2), c, 46)]),
        "MatrixSquareRoot": (lambda a: tf.raw_ops.MatrixSquareRoot(input=a),
                             [conditioned((3, 3), c, 47, 4.0)]),
        "MatrixSolveLs": (lambda a, b: tf.raw_ops.MatrixSolveLs(matrix=a, rhs=b,
                                                                 l2_regularizer=np.float64(0.5)),
                          [values((4, 3), c, 48), values((4, 2), c, 49)]),
    }
    op, inputs = cases[name]
    with tf.Graph().as_default():
        tf_ext.library()
        out = op(*[tf.constant(x) for x in inputs])
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        node = outs[0].op
        dys = [cgrid(y.shape, c, seed=50 + i) for i, y in enumerate(node.outputs)]
        f = attr_value_pb2.NameAttrList(name=node.type)
        for k, v in node.node_def.attr.items():
            f.attr[k].CopyFrom(v)
        cpp = tf.raw_ops.SymbolicGradient(input=list(node.inputs) + [tf.constant(d) for d in dys],
                                          Tout=[t.dtype for t in node.inputs], f=f)
        py = tf.gradients(node.outputs, [node.inputs[0]],
                          grad_ys=[tf.constant(d) for d in dys])
        with tf.compat.v1.Session() as sess:
            got, want_py = sess.run([cpp[0], py[0]])
    num = numeric_gradient(op, inputs, 0, dys)
    scale = max(1.0, float(np.max(np.abs(num))))
    np.testing.assert_allclose(got, num, atol=1e-6 * scale, rtol=0)
    assert np.max(np.abs(want_py - num)) > 1e-3 * scale, "Python's gradient is the derivative"
