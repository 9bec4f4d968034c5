"""Registry unification seen from Python: the counts, and a TensorFlow op whose only C++
gradient was a client gradient (Pad, MirrorPad, Elu) differentiated through SymbolicGradient
(the function registry) in a TF1 graph Session, against closed forms."""
import os
import re

import numpy as np
import pytest
import tensorflow as tf

import tf_ext


def test_counts_after_unification():
    counts = tf_ext.unify_cpp_gradient_registries()
    assert set(counts) == {"before", "after"}
    after = counts["after"]
    assert after["function_only"] == 0 and after["client_only"] == 0
    assert after["both"] > 200
    # Loading the library already unified, so this second call changes nothing.
    assert counts["before"] == after
    assert after["ops"] == after["both"] + after["neither"]


def symbolic_gradient(op_type, attrs, inputs, dys):
    """d(inputs) of op_type through a SymbolicGradient node run by a tf.compat.v1 Session:
    the C++ function registry, not Python's."""
    tf_ext.library()  # loads the op library, which unifies the registries
    with tf.Graph().as_default():
        ins = [tf.constant(v) for v in inputs + dys]
        f = tf.compat.v1.NameAttrList(name=op_type)
        for k, v in attrs.items():
            f.attr[k].CopyFrom(v)
        grads = tf.raw_ops.SymbolicGradient(input=ins, Tout=[t.dtype for t in ins[:len(inputs)]],
                                            f=f)
        with tf.compat.v1.Session() as sess:
            return sess.run(grads)


def type_attr(dtype):
    return tf.compat.v1.AttrValue(type=tf.as_dtype(dtype).as_datatype_enum)


def test_pad_gradient_through_symbolic_gradient():
    x = np.arange(6, dtype=np.float64).reshape(2, 3)
    paddings = np.array([[1, 0], [0, 2]], np.int32)
    dy = np.arange(3 * 5, dtype=np.float64).reshape(3, 5)
    dx, dpad = symbolic_gradient("Pad", {"T": type_attr(np.float64), "Tpaddings": type_attr(np.int32)},
                                 [x, paddings], [dy])
    np.testing.assert_array_equal(dx, dy[1:, :3])  # the slice of dy where x sits
    np.testing.assert_array_equal(dpad, np.zeros_like(paddings))


def test_mirror_pad_gradient_through_symbolic_gradient():
    x = np.array([1.0, 2.0, 3.0])
    dy = np.array([10.0, 20.0, 30.0, 40.0, 50.0])  # REFLECT by 1: [x1, x0, x1, x2, x1]
    dx, _ = symbolic_gradient("MirrorPad", {"T": type_attr(np.float64),
                                            "Tpaddings": type_attr(np.int32),
                                            "mode": tf.compat.v1.AttrValue(s=b"REFLECT")},
                              [x, np.array([[1, 1]], np.int32)], [dy])
    np.testing.assert_array_equal(dx, [20.0, 10.0 + 30.0 + 50.0, 40.0])


@pytest.mark.parametrize("x", [-1.5, -0.25, 0.5, 2.0])
def test_elu_gradient_through_symbolic_gradient(x):
    (dx,) = symbolic_gradient("Elu", {"T": type_attr(np.float64)}, [np.array([x])],
                              [np.array([3.0])])
    np.testing.assert_allclose(dx, [3.0 * (np.exp(x) if x < 0 else 1.0)], rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# Overrides of TensorFlow's defective gradients (tf_ext/grads/manifest.h Overrides).

def _registries_doc() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    for root in (os.getcwd(), os.path.dirname(os.path.dirname(here))):
        path = os.path.join(root, "docs", "registries.md")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                return f.read()
    pytest.fail("docs/registries.md not found (data dependency of this test)")


def test_docs_list_every_override():
    """docs/registries.md's table of overrides names exactly the ops the library overrides."""
    from tf_ext import _c_api
    overrides = _c_api.gradient_overrides()
    ops = sorted(o["op"] for o in overrides)
    assert {"Conv2D", "GatherV2", "MaxPoolGrad", "Slice", "Sum", "Exp", "Real"} <= set(ops), ops
    assert all(o["defect"] and o["rule"] for o in overrides)
    doc = _registries_doc()
    section = doc[doc.index("## Overrides of TensorFlow's gradients"):]
    section = section[:section.find("\n## ", 1)] if "\n## " in section[1:] else section
    listed = sorted(re.findall(r"^\| `([A-Za-z0-9]+)` \|", section, re.M))
    assert listed == ops, listed


def test_overridden_gradients_through_symbolic_gradient_in_python():
    """A SymbolicGradient node in a TF1 graph resolves tf_ext's override: the gradient of an
    explicitly padded convolution (TensorFlow's own failed) against Python's gradient."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (1, 6, 5, 2))
    w = rng.uniform(-1, 1, (2, 3, 2, 3))
    dy = rng.uniform(-1, 1, (1, 3, 6, 3))
    with tf.Graph().as_default():
        xs = tf.constant(x)
        ws = tf.constant(w)
        dys = tf.constant(dy)
        f = tf.compat.v1.NameAttrList()
        f.name = "Conv2D"
        f.attr["T"].type = tf.float64.as_datatype_enum
        f.attr["strides"].list.i.extend([1, 2, 1, 1])
        f.attr["padding"].s = b"EXPLICIT"
        f.attr["explicit_paddings"].list.i.extend([0, 0, 1, 0, 2, 1, 0, 0])
        grads = tf.raw_ops.SymbolicGradient(input=[xs, ws, dys], Tout=[tf.float64, tf.float64],
                                            f=f)
        y = tf.nn.conv2d(xs, ws, strides=[1, 2, 1, 1], padding=[[0, 0], [1, 0], [2, 1], [0, 0]])
        ref = tf.gradients(y, [xs, ws], grad_ys=dys)
        with tf.compat.v1.Session() as sess:
            got, want = sess.run([grads, ref])
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-12)


# The conjugation overrides (tf_ext/grads/tf/complex_grad.cc): op -> (its Python function on a
# list of inputs, the inputs' shapes; broadcasting where an op allows it).
R = tf.raw_ops
COMPLEX_CASES = {
    **{op: (lambda a, op=op: getattr(R, op)(x=a[0]), [(2, 3)])
       for op in ["Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Cos", "Cosh", "Exp",
                  "Expm1", "Inv", "Log", "Log1p", "Reciprocal", "Rsqrt", "Sigmoid", "Sin",
                  "Sinh", "Sqrt", "Square", "Tan", "Tanh"]},
    **{op: (lambda a, op=op: getattr(R, op)(x=a[0], y=a[1]), [(2, 3), (3,)])
       for op in ["Div", "DivNoNan", "Pow", "RealDiv", "Xdivy", "Xlog1py", "Xlogy"]},
    "MatMul": (lambda a: R.MatMul(a=a[0], b=a[1], transpose_b=True), [(2, 3), (4, 3)]),
    "BatchMatMul": (lambda a: R.BatchMatMul(x=a[0], y=a[1], adj_x=True), [(2, 3, 2), (2, 3, 4)]),
    "BatchMatMulV2": (lambda a: R.BatchMatMulV2(x=a[0], y=a[1], adj_y=True),
                      [(2, 2, 3), (1, 4, 3)]),
}


def _random(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.2, 0.8, shape)  # real: inside every real domain but Acosh's
    if np.dtype(dtype).kind == "c":
        x = x * rng.choice([-1, 1], shape) + 1j * rng.uniform(-0.6, 0.6, shape)
    return x.astype(dtype)


def _symbolic_gradient_and_pythons(fn, inputs, seed):
    """d(inputs) of fn's one op through a SymbolicGradient node (the C++ function registry, the
    op's attrs as Python's op creation filled them in) and through tf.gradients (Python's)."""
    tf_ext.library()
    with tf.Graph().as_default():
        xs = [tf.constant(v) for v in inputs]
        y = fn(xs)
        dy = tf.constant(_random(y.shape, y.dtype.as_numpy_dtype, seed))
        f = tf.compat.v1.NameAttrList(name=y.op.type)
        for k, v in y.op.node_def.attr.items():
            f.attr[k].CopyFrom(v)
        got = tf.raw_ops.SymbolicGradient(input=xs + [dy], Tout=[x.dtype for x in xs], f=f)
        want = tf.gradients(y, xs, grad_ys=dy)
        with tf.compat.v1.Session() as sess:
            return sess.run([got, want])


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64, np.float64])
@pytest.mark.parametrize("op", sorted(COMPLEX_CASES))
def test_complex_gradients_are_pythons_through_symbolic_gradient(op, dtype):
    fn, shapes = COMPLEX_CASES[op]
    if op == "Acosh" and np.dtype(dtype).kind == "f":
        inputs = [1.5 + _random(shapes[0], dtype, 1) ** 2]  # the domain x > 1
    else:
        inputs = [_random(s, dtype, i + 1) for i, s in enumerate(shapes)]
    got, want = _symbolic_gradient_and_pythons(fn, inputs, seed=9)
    tol = 1e-10 if dtype != np.complex64 else 2e-5
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


@pytest.mark.parametrize("parts, whole", [(np.float64, np.complex128), (np.float32, np.complex64)])
@pytest.mark.parametrize("op", ["Real", "Imag", "Angle", "Complex"])
def test_real_imag_angle_complex_gradients_through_symbolic_gradient(op, parts, whole):
    if op == "Complex":  # broadcasting parts
        fn = lambda a: R.Complex(real=a[0], imag=a[1], Tout=tf.as_dtype(whole))
        inputs = [_random((2, 3), parts, 1), _random((1, 3), parts, 2)]
    else:
        fn = lambda a: getattr(R, op)(input=a[0], Tout=tf.as_dtype(parts))
        inputs = [_random((2, 3), whole, 1)]
    got, want = _symbolic_gradient_and_pythons(fn, inputs, seed=4)
    tol = 1e-12 if parts == np.float64 else 1e-6
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def test_atan2_gradient_is_reduced_under_broadcasting():
    inputs = [_random((2, 3), np.float64, 1), _random((3,), np.float64, 2)]
    got, want = _symbolic_gradient_and_pythons(lambda a: R.Atan2(y=a[0], x=a[1]), inputs, seed=3)
    assert [g.shape for g in got] == [(2, 3), (3,)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


# Overrides found by the attribute-sweep audit (scripts/audit_gradients.py): each against
# Python's gradient through a SymbolicGradient node (numeric checks of MaxPool, Split, Prod and
# SoftmaxCrossEntropyWithLogits: tests/registry_override_test.cc; Split, Prod and
# SoftmaxCrossEntropyWithLogits against Python's: tests/python/test_audit_gradients.py).
AUDIT_CASES = {
    # TensorFlow's LRN gradient built LRNGrad with the default attrs.
    "LRN": (lambda a: R.LRN(input=a[0], depth_radius=2, bias=2.0, alpha=0.5, beta=0.75),
            [(1, 2, 2, 6)], np.float32),
    # TensorFlow's MaxPool gradient dropped explicit_paddings.
    "MaxPool": (lambda a: R.MaxPool(input=a[0], ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1],
                                    padding="EXPLICIT",
                                    explicit_paddings=[0, 0, 1, 0, 0, 1, 0, 0]),
                [(1, 4, 5, 2)], np.float64),
}


@pytest.mark.parametrize("op", sorted(AUDIT_CASES))
def test_audit_overrides_are_pythons_through_symbolic_gradient(op):
    fn, shapes, dtype = AUDIT_CASES[op]
    inputs = [_random(s, dtype, i + 1) for i, s in enumerate(shapes)]
    got, want = _symbolic_gradient_and_pythons(fn, inputs, seed=5)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
