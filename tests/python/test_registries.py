"""Registry unification seen from Python: the counts, and a TensorFlow op whose only C++
gradient was a client gradient (Pad, MirrorPad, Elu) differentiated through SymbolicGradient
(the function registry) in a TF1 graph Session, against closed forms."""
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
