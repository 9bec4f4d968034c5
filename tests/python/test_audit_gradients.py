"""The attribute-sweep audit (scripts/audit_gradients.py, `make audit`): a seeded subset of its
rows (C++'s gradient against Python's on configurations tf_ext_gradcheck --emit_configs
generates from each OpDef, and every row through the other entry points, the doors) has no
unexplained mismatch, and a door that differs or fails is caught; every explanation is in the
docs; and
where the audit explains a mismatch by Python's gradient not being the derivative, a test here
(or the one the explanation names) shows it against central differences. Where Python's gradient
fails and C++'s runs (PY-FAILS), the audit's own central-difference check of C++'s gradient
(shown here to accept the derivative and reject a wrong one), and the both-fail classes."""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2

import tf_ext

RUNFILES = os.environ.get("TEST_SRCDIR", "")
ROOT = os.path.join(RUNFILES, os.environ.get("TEST_WORKSPACE", "tf_ext")) if RUNFILES \
    else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BIN = ROOT if RUNFILES else os.path.join(ROOT, "bazel-bin")
SUBSET, SEED = 1000, 1  # of about 3,500 rows, through every door (`make audit`: all, ~6 min)
EXPORT_ROWS = 100  # of the subset's door rows through the export door (a SavedModel load each)


def _audit_module():
    spec = importlib.util.spec_from_file_location(
        "audit_gradients", os.path.join(ROOT, "scripts", "audit_gradients.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


AUDIT = _audit_module()


def test_seeded_subset_has_no_unexplained_mismatch(capsys):
    rc = AUDIT.main([f"--gradcheck={os.path.join(BIN, 'tf_ext', 'tf_ext_gradcheck')}",
                     f"--library={os.environ['TF_EXT_LIBRARY']}",
                     f"--spec={os.path.join(ROOT, 'tf_ext', 'tools', 'tf_core_gradcheck_spec.txt')}",
                     f"--subset={SUBSET}", f"--seed={SEED}", f"--export_rows={EXPORT_ROWS}",
                     "--quiet"])
    out = capsys.readouterr().out
    assert rc == 0, out
    summary = out.strip().splitlines()[-1]
    assert summary.startswith("audit: ") and " 0 unexplained" in summary, summary
    assert int(summary.split(" configurations")[0].split()[-1]) == SUBSET, summary
    assert int(summary.split(" match")[0].split()[-1]) > SUBSET // 2, summary
    # Every door took most rows (the export door its sample), and none differs or fails
    # unexplained (the summary's 0).
    doors = {line.split(":")[0][len("door "):]: line for line in out.splitlines()
             if line.startswith("door ") and " rows, " in line}
    assert sorted(doors) == sorted(AUDIT.DOORS), doors
    for door, line in doors.items():
        rows, agree = (int(line.split(": ", 1)[1].split(" rows")[0]),
                       int(line.split(" rows, ")[1].split(" agree")[0]))
        assert (rows == EXPORT_ROWS if door == "export" else rows > SUBSET // 2), line
        assert agree > rows * 0.9, line


def test_every_explanation_is_in_the_docs():
    with open(os.path.join(ROOT, "docs", "registries.md"), encoding="utf-8") as f:
        doc = f.read()
    section = doc[doc.index("## Attribute-sweep audit"):]
    section = section[:section.find("\n## ", 1)] if "\n## " in section[1:] else section
    for op, _, _ in list(AUDIT.EXPLAINED) + list(AUDIT.KNOWN):
        assert f"`{op}`" in section, op
    for door, op, _, _ in list(AUDIT.DOOR_EXPLAINED) + list(AUDIT.DOOR_KNOWN):
        assert f"`{op}`" in section and door in section, (door, op)


# ---------------------------------------------------------------------------------------------
# Where Python's gradient is not the derivative: central differences side with C++.

def _numeric(fn, inputs, k, dys, eps=1e-6):
    """d/dRe (+ i d/dIm) of sum Re(conj(dy) * y) over fn's outputs, w.r.t. inputs[k]."""
    def loss(args):
        ys = fn(*[tf.constant(a) for a in args])
        ys = ys if isinstance(ys, (list, tuple)) else [ys]
        return sum(float(np.real(np.sum(np.conj(dy) * y.numpy()))) for y, dy in zip(ys, dys))
    x = inputs[k]
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        for d in ((1, 1j) if np.iscomplexobj(x) else (1,)):
            plus, minus = [a.copy() for a in inputs], [a.copy() for a in inputs]
            plus[k][idx] += eps * d
            minus[k][idx] -= eps * d
            g[idx] += (loss(plus) - loss(minus)) / (2 * eps) * d
    return g


def _cpp_and_python(fn, inputs, dys):
    """Every input's gradient through a SymbolicGradient node (C++) and tf.gradients."""
    tf_ext.library()
    with tf.Graph().as_default():
        xs = [tf.constant(a) for a in inputs]
        out = fn(*xs)
        node = (out[0] if isinstance(out, (list, tuple)) else out).op
        dy_ts = [tf.constant(d) for d in dys]
        f = attr_value_pb2.NameAttrList(name=node.type)
        for k, v in node.node_def.attr.items():
            f.attr[k].CopyFrom(v)
        xs = list(node.inputs)  # with the constants fn adds (axes)
        cpp = tf.raw_ops.SymbolicGradient(input=xs + dy_ts, Tout=[x.dtype for x in xs], f=f)
        py = [tf.zeros_like(x) if g is None else g
              for g, x in zip(tf.gradients(node.outputs, xs, grad_ys=dy_ts), xs)]
        with tf.compat.v1.Session() as sess:
            return sess.run([cpp, py])


def test_mul_no_nan_complex_python_does_not_conjugate():
    """Python's MulNoNan gradient is mul_no_nan(d(z), y): no conj(y), unlike Mul's; C++'s
    (TensorFlow's client gradient) conjugates, the derivative in TensorFlow's convention."""
    rng = np.random.default_rng(3)
    x, y, dz = (rng.uniform(-1, 1, (2, 3)) + 1j * rng.uniform(-1, 1, (2, 3)) for _ in range(3))
    fn = lambda a, b: tf.raw_ops.MulNoNan(x=a, y=b)
    (cpp_dx, cpp_dy), (py_dx, py_dy) = _cpp_and_python(fn, [x, y], [dz])
    for k, cpp, py in ((0, cpp_dx, py_dx), (1, cpp_dy, py_dy)):
        num = _numeric(lambda a, b: fn(a, b), [x, y], k, [dz])
        np.testing.assert_allclose(cpp, num, atol=1e-8)
        assert np.max(np.abs(py - num)) > 0.1, "Python's gradient is the derivative"


def test_squared_difference_complex_gradient_is_pythons_in_both_registries():
    """SquaredDifference computes conj(x - y) (x - y). TensorFlow's client gradient (hence
    TF_AddGradients) conjugated x - y, disagreeing with its function gradient and Python's,
    2 d(z) (x - y), which is the derivative for a real d(z): tf_ext's override puts the function
    gradient in both registries (the audit's tf_add_gradients door agrees on every row)."""
    assert "SquaredDifference" in {o["op"] for o in tf_ext._c_api.gradient_overrides()}
    rng = np.random.default_rng(10)
    x, y = (rng.uniform(-1, 1, (2, 3)) + 1j * rng.uniform(-1, 1, (2, 3)) for _ in range(2))
    dz = rng.uniform(-1, 1, (2, 3)).astype(np.complex128)  # real: the op's output is real
    fn = lambda a, b: tf.raw_ops.SquaredDifference(x=a, y=b)
    (cpp_dx, cpp_dy), (py_dx, py_dy) = _cpp_and_python(fn, [x, y], [dz])
    np.testing.assert_allclose(cpp_dx, py_dx, rtol=1e-12)
    np.testing.assert_allclose(cpp_dy, py_dy, rtol=1e-12)
    np.testing.assert_allclose(cpp_dx, 2 * dz * (x - y), rtol=1e-12)
    np.testing.assert_allclose(cpp_dx, _numeric(fn, [x, y], 0, [dz]), atol=1e-8)


def test_grappler_breaks_an_nchw_bias_add_of_zeros():
    """TensorFlow's gradient of an NCHW BiasAddGrad is BiasAdd(zeros_like(x), d(bias), NCHW).
    Grappler (TensorFlow's graph optimizer, on in a tf.function as in tf_ext's pipeline
    Sessions) rewrites that into an Add broadcasting the bias as NHWC: the run fails. Without
    Grappler (the audit's own Sessions, tf_ext_grad --optimize=false) it runs. TensorFlow's
    bug, which the pipeline door meets on BiasAddGrad's NCHW rows (DOOR_EXPLAINED)."""
    x = tf.constant(np.random.default_rng(11).uniform(-1, 1, (2, 3, 4, 5)))
    bias = tf.constant(np.arange(3.0))

    @tf.function
    def bias_add_of_zeros(x, bias):
        return tf.raw_ops.BiasAdd(value=tf.zeros_like(x), bias=bias, data_format="NCHW")

    with pytest.raises(tf.errors.InvalidArgumentError, match="Incompatible shapes"):
        bias_add_of_zeros(x, bias)
    with tf.Graph().as_default():
        y = tf.raw_ops.BiasAdd(value=tf.zeros_like(x), bias=tf.constant(np.arange(3.0)),
                               data_format="NCHW")
        with tf.compat.v1.Session(config=AUDIT._SESSION_CONFIG) as sess:
            got = sess.run(y)
    np.testing.assert_array_equal(got, np.broadcast_to(np.arange(3.0)[:, None, None], (2, 3, 4, 5)))


def test_softmax_cross_entropy_python_drops_the_backprop_term_of_labels():
    """backprop = softmax(features) - labels: Python's d(labels) leaves out -d(backprop);
    C++'s has it (labels rows are distributions, where backprop is d(loss)/d(features))."""
    rng = np.random.default_rng(4)
    features = rng.uniform(-2, 2, (3, 4))
    labels = rng.uniform(0.1, 1, (3, 4))
    labels /= labels.sum(axis=1, keepdims=True)
    dys = [rng.uniform(-1, 1, (3,)), rng.uniform(-1, 1, (3, 4))]
    fn = lambda f, l: tf.raw_ops.SoftmaxCrossEntropyWithLogits(features=f, labels=l)
    cpp, py = _cpp_and_python(fn, [features, labels], dys)
    for k in (0, 1):
        num = _numeric(fn, [features, labels], k, dys)
        np.testing.assert_allclose(cpp[k], num, atol=1e-8)
    np.testing.assert_allclose(py[0], cpp[0], atol=1e-12)  # d(features) agree
    np.testing.assert_allclose(py[1], cpp[1] + dys[1], atol=1e-12)  # Python's lacks -d(backprop)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_cross_entropy_through_loss_only_is_pythons(dtype):
    """With no incoming gradient on backprop (a loss), C++ and Python agree in both dtypes
    (TensorFlow's own gradient failed for float64)."""
    rng = np.random.default_rng(5)
    features, labels = rng.uniform(-2, 2, (3, 4)).astype(dtype), rng.uniform(0, 1, (3, 4)).astype(dtype)
    dys = [rng.uniform(-1, 1, (3,)).astype(dtype), np.zeros((3, 4), dtype)]
    cpp, py = _cpp_and_python(
        lambda f, l: tf.raw_ops.SoftmaxCrossEntropyWithLogits(features=f, labels=l),
        [features, labels], dys)
    for c, p in zip(cpp, py):
        np.testing.assert_allclose(c, p, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-6)


# Overrides the audit found whose op takes an axis (TensorFlow's gradient of a Split into one
# slice failed; its complex Prod did not conjugate): C++'s against Python's.
@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.complex64])
def test_prod_gradient_is_pythons(dtype):
    rng = np.random.default_rng(6)
    x = (rng.uniform(0.5, 1.5, (2, 3)) + (1j * rng.uniform(-1, 1, (2, 3))
                                          if np.dtype(dtype).kind == "c" else 0)).astype(dtype)
    dy = rng.uniform(-1, 1, (2, 1)).astype(dtype)
    (cpp_dx, _), (py_dx, _) = _cpp_and_python(
        lambda a: tf.raw_ops.Prod(input=a, axis=[-1], keep_dims=True), [x], [dy])
    np.testing.assert_allclose(cpp_dx, py_dx, rtol=1e-5 if dtype == np.complex64 else 1e-12)


@pytest.mark.parametrize("num_split", [1, 3])
def test_split_gradient_is_pythons(num_split):
    rng = np.random.default_rng(7)
    x = rng.uniform(-1, 1, (2, 3))
    dys = [rng.uniform(-1, 1, (2, 3 // num_split)) for _ in range(num_split)]
    (_, cpp_dx), (_, py_dx) = _cpp_and_python(
        lambda a: tf.raw_ops.Split(axis=-1, value=a, num_split=num_split), [x], dys)
    np.testing.assert_allclose(cpp_dx, py_dx, rtol=1e-12)
    np.testing.assert_allclose(cpp_dx, np.concatenate(dys, axis=-1), rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# PY-FAILS rows (Python's gradient fails, C++'s runs): the audit checks C++'s against central
# differences; both-fail rows are classified.

PY_FAILS_OPS = ("ApproxTopK,DebugGradientIdentity,IsotonicRegression,QuantizeAndDequantizeV4Grad,"
                "RFFT,RFFT2D,SoftmaxCrossEntropyWithLogits,SparseToDense,SparseFillEmptyRows,"
                "AvgPoolGrad,PreventGradient,MatrixSolveLs")


def _run_audit(tmp_path, *extra):
    out = tmp_path / "rows.json"
    rc = AUDIT.main([f"--gradcheck={os.path.join(BIN, 'tf_ext', 'tf_ext_gradcheck')}",
                     f"--library={os.environ['TF_EXT_LIBRARY']}",
                     f"--spec={os.path.join(ROOT, 'tf_ext', 'tools', 'tf_core_gradcheck_spec.txt')}",
                     f"--json={out}", "--quiet", *extra])
    with open(out, encoding="utf-8") as f:
        return rc, json.load(f)


def test_py_fails_rows_are_checked_against_central_differences(tmp_path, capsys):
    # Through every door but the export (its SavedModel loads are the seeded subset's part)
    doors = ",".join(d for d in AUDIT.DOORS if d != "export")
    rc, rows = _run_audit(tmp_path, f"--ops={PY_FAILS_OPS}", "--seed=2", f"--doors={doors}")
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert rc == 0, summary
    py_fails = [r for r in rows if r["class"].startswith("PY-FAILS")]
    verdicts = {r["numeric"] for r in py_fails}
    assert verdicts <= {"C++ = numeric", "empty, shape checked"}, [
        (r["op"], r["variant"], r["numeric_detail"]) for r in py_fails
        if r["numeric"] not in ("C++ = numeric", "empty, shape checked")]
    checked = {r["op"] for r in py_fails if r["numeric"] == "C++ = numeric"}
    assert checked >= {"ApproxTopK", "DebugGradientIdentity", "QuantizeAndDequantizeV4Grad", "RFFT",
                       "RFFT2D", "SoftmaxCrossEntropyWithLogits", "SparseToDense"}, checked
    # float32 rows are differenced in float64 where the op has a float64 kernel, else in float32
    details = {(r["op"], r["dtype"]): r["numeric_detail"] for r in py_fails}
    assert details[("RFFT", "float")].startswith("float32 vs float64"), details[("RFFT", "float")]
    assert details[("ApproxTopK", "float")].startswith("float32,"), details[("ApproxTopK", "float")]
    # tf.gradients differentiates the non-bool outputs: SparseFillEmptyRows is compared
    fill = [r["class"] for r in rows if r["op"] == "SparseFillEmptyRows"]
    assert "match" in fill and not any(c.startswith("PY-FAILS") for c in fill), fill
    # AvgPoolGrad rows whose grad is not AvgPool's output shape are outside the op's domain
    pool = [r for r in rows if r["op"] == "AvgPoolGrad" and "not AvgPool's output shape" in r["detail"]]
    assert pool and all(r["class"] == "invalid" for r in pool)
    both = [r for r in rows if r["class"] == "both fail"]
    assert both and all(r.get("both") for r in both), both
    assert {r["both"] for r in both} == {"by design", "a gap in both"}


def _graph(build):
    """GraphDef of Const inputs feeding node "op" (as --emit_configs writes), its op."""
    with tf.Graph().as_default() as g:
        build()
        return g.as_graph_def()


def _check(graph_def, cpp=None, scale=1.0, nondiff=()):
    """numeric_check's verdict for graph_def's op, with C++'s gradient times `scale` (or cpp)."""
    tf_ext.library()
    with tf.Graph().as_default() as g:
        tf.import_graph_def(graph_def, name="")
        op = g.get_operation_by_name("op")
        xs = list(op.inputs)
        rng = np.random.default_rng(8)
        dys = [tf.constant(rng.uniform(-1, 1, t.shape).astype(t.dtype.as_numpy_dtype))
               for t in op.outputs]
        f = attr_value_pb2.NameAttrList(name=op.type)
        for k, v in op.node_def.attr.items():
            f.attr[k].CopyFrom(v)
        grad = tf.raw_ops.SymbolicGradient(input=xs + dys, Tout=[x.dtype for x in xs], f=f)
        with tf.compat.v1.Session() as sess:
            values = sess.run(grad)
            values = [v * scale for v in values] if cpp is None else cpp(values)
            row = {"nondiff": list(nondiff), "ignore_outputs": []}
            return AUDIT.numeric_check(row, graph_def, sess, op, xs, sess.run(dys), values, 1)


def _tanh(dtype):
    def build():
        x = tf.constant(np.linspace(-1, 1, 6).reshape(2, 3).astype(dtype))
        tf.raw_ops.Tanh(x=x, name="op")
    return _graph(build)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
def test_numeric_check_accepts_the_derivative_and_rejects_others(dtype):
    verdict, detail = _check(_tanh(dtype))
    assert verdict == "C++ = numeric", detail
    assert detail.startswith("float64" if dtype != np.float32 else "float32 vs float64"), detail
    verdict, detail = _check(_tanh(dtype), scale=1.01)  # 1% off: caught in every precision
    assert verdict == "C++ != numeric", detail
    verdict, detail = _check(_tanh(dtype), cpp=lambda v: [x[:1] for x in v])  # wrong shape
    assert verdict == "C++ != numeric" and "shape" in detail, detail


def test_numeric_check_skips_kinks():
    """Abs at 0 (one-sided slopes -1, 1): that element is skipped and counted; all at 0: the row
    is unchecked, not differentiable at the sampled point."""
    def build(values):
        return _graph(lambda: tf.raw_ops.Abs(x=tf.constant(np.array(values)), name="op"))
    verdict, detail = _check(build([0.0, 0.5, -0.25]))
    assert verdict == "C++ = numeric" and "1 at a kink skipped" in detail, detail
    verdict, detail = _check(build([0.0, 0.0]))
    assert verdict == "unchecked" and "not differentiable" in detail, detail


def test_avg_pool_grad_contract_follows_avg_pool():
    """The audit's AvgPoolGrad domain check agrees with the shape AvgPool itself makes."""
    seen = set()
    for padding in ("VALID", "SAME"):
        for orig in ((1, 4, 4, 2), (2, 5, 5, 2), (2, 6, 7, 1)):
            for grad in ((1, 1, 1, 2), (2, 2, 2, 2), (2, 3, 3, 2), (1, 3, 3, 2), (2, 3, 4, 1)):
                pooled = tf.nn.avg_pool2d(tf.zeros(orig), 3, 2, padding)  # what AvgPool makes
                ok = tuple(pooled.shape) == grad
                with tf.Graph().as_default():
                    op = tf.raw_ops.AvgPoolGrad(orig_input_shape=list(orig), grad=tf.zeros(grad),
                                                ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1],
                                                padding=padding).op
                    why = AUDIT.CONTRACTS["AvgPoolGrad"](op, [np.array(orig), np.zeros(grad)])
                assert (why is None) == ok, (padding, orig, grad, why)
                seen.add(ok)
    assert seen == {True, False}


def test_both_fail_rows_need_the_listed_errors():
    row = {"op": "PreventGradient", "variant": "base", "dtype": "double",
           "detail": "py: Gradient explicitly disabled. | cpp: PreventGradient: gradient "
                     "explicitly disabled."}
    assert AUDIT.classify_both_fail(dict(row)) == "by design"
    row["detail"] = "py: Gradient explicitly disabled. | cpp: some other failure"
    assert AUDIT.classify_both_fail(dict(row)) is None
    assert AUDIT.classify_both_fail(dict(row, op="Tanh")) is None


def test_every_both_fail_class_is_in_the_docs():
    with open(os.path.join(ROOT, "docs", "registries.md"), encoding="utf-8") as f:
        doc = f.read()
    section = doc[doc.index("## Attribute-sweep audit"):]
    for op, _, _ in AUDIT.BOTH_FAIL:
        assert f"`{op}`" in section, op


# SoftmaxCrossEntropyWithLogits with features and labels broadcast against each other: C++'s
# gradient summed back to each operand's shape (it returned the broadcast shape; Python's fails).
@pytest.mark.parametrize("features_shape,labels_shape", [((2, 3), (3,)), ((2, 3), (1, 3)),
                                                         ((1, 3), (2, 3))])
def test_softmax_cross_entropy_broadcast_is_the_derivative(features_shape, labels_shape):
    rng = np.random.default_rng(9)
    features = rng.uniform(-2, 2, features_shape)
    labels = rng.uniform(0.1, 1, labels_shape)
    labels /= labels.sum(axis=-1, keepdims=True)  # distributions, as the op requires
    dys = [rng.uniform(-1, 1, (2,)), rng.uniform(-1, 1, (2, 3))]
    fn = lambda f, l: tf.raw_ops.SoftmaxCrossEntropyWithLogits(features=f, labels=l)
    tf_ext.library()
    with tf.Graph().as_default():
        node = fn(tf.constant(features), tf.constant(labels))[0].op
        f = attr_value_pb2.NameAttrList(name=node.type)
        for k, v in node.node_def.attr.items():
            f.attr[k].CopyFrom(v)
        cpp = tf.raw_ops.SymbolicGradient(input=list(node.inputs) + [tf.constant(d) for d in dys],
                                          Tout=[tf.float64, tf.float64], f=f)
        with tf.compat.v1.Session() as sess:
            cpp = sess.run(cpp)
    for k, x in enumerate((features, labels)):
        assert cpp[k].shape == x.shape
        np.testing.assert_allclose(cpp[k], _numeric(fn, [features, labels], k, dys), atol=1e-8)


# The same with the batch unknown when the graph is built, through three doors with Grappler on.
# The op's shape function merges features' and labels' shapes, so Grappler took their unknown
# batch sizes for one symbolic dimension and folded "nothing to reduce" into the gradient: fed
# [1, 3] and [2, 3], its Reshape failed (tf_ext_grad's default pipeline, the Python bridge).
@pytest.mark.parametrize("door", ["tf_ext_grad", "symbolic_gradient", "bridge"])
def test_softmax_cross_entropy_broadcast_with_an_unknown_batch(door, tmp_path):
    rng = np.random.default_rng(10)
    features, labels = rng.uniform(-2, 2, (1, 3)), rng.uniform(0.1, 1, (2, 3))
    labels /= labels.sum(axis=-1, keepdims=True)
    dys = [rng.uniform(-1, 1, (2,)), rng.uniform(-1, 1, (2, 3))]
    fn = lambda f, l: tf.raw_ops.SoftmaxCrossEntropyWithLogits(features=f, labels=l)
    tf_ext.library()
    with tf.Graph().as_default() as graph:
        f = tf.compat.v1.placeholder(tf.float64, [None, 3], name="features")
        l = tf.compat.v1.placeholder(tf.float64, [None, 3], name="labels")
        loss, backprop = fn(f, l)
        feeds = {f: features, l: labels}
        if door == "tf_ext_grad":
            tf.add(tf.reduce_sum(loss * dys[0]), tf.reduce_sum(backprop * dys[1]), name="y")
            path = tmp_path / "sce.pb"
            path.write_bytes(graph.as_graph_def().SerializeToString())
            np.save(tmp_path / "f.npy", features)
            np.save(tmp_path / "l.npy", labels)
            subprocess.run([os.path.join(BIN, "tf_ext", "tf_ext_grad"), f"--graph={path}",
                            "--y=y", "--x=features,labels", f"--feed=features=@{tmp_path}/f.npy",
                            f"--feed=labels=@{tmp_path}/l.npy", f"--save={tmp_path}/g.npz",
                            f"--library={tf_ext.library_path()}"], check=True)
            saved = np.load(tmp_path / "g.npz")
            got = [saved[k] for k in sorted(saved.files) if k != "y"]
            assert sorted(saved.files) == ["d_features", "d_labels", "y"]
        else:
            if door == "symbolic_gradient":
                attrs = attr_value_pb2.NameAttrList(name=loss.op.type)
                for k, v in loss.op.node_def.attr.items():
                    attrs.attr[k].CopyFrom(v)
                grads = tf.raw_ops.SymbolicGradient(
                    input=[f, l] + [tf.constant(d) for d in dys], Tout=[tf.float64] * 2, f=attrs)
            else:
                with tf_ext.use_cpp_gradients():
                    grads = tf.gradients([loss, backprop], [f, l],
                                         grad_ys=[tf.constant(d) for d in dys])
            with tf.compat.v1.Session() as sess:  # Grappler on, as by default
                got = sess.run(grads, feeds)
    for k, x in enumerate((features, labels)):
        assert got[k].shape == x.shape
        np.testing.assert_allclose(got[k], _numeric(fn, [features, labels], k, dys), atol=1e-8)


# ---------------------------------------------------------------------------------------------
# The doors: every row through tf_ext's other entry points. A door that gives another gradient,
# or fails where the reference runs, fails the audit; one that cannot take a row is counted so.

def _one_percent_off(results):
    """A door's results with every gradient 1% off (errors kept)."""
    return {i: (kind, [None if g is None else g * 1.01 for g in value]) if kind == "grads"
            else (kind, value) for i, (kind, value) in results.items()}


def test_a_wrong_or_failing_door_fails_the_audit(monkeypatch, capsys, tmp_path):
    """A fake door: tf_ext_grad's pipeline 1% off, TfExtAddGradients failing every row; the
    others as they are. The audit names both and exits 1; TF_AddGradients still agrees."""
    real = AUDIT.run_cpp_door

    def doctored(binary, library, door, manifest, entries):
        results = real(binary, library, door, manifest, entries)
        if door == "pipeline":
            return _one_percent_off(results)
        if door == "tf_ext_add_gradients":
            return {i: ("error", "a broken door") for i in results}
        return results

    monkeypatch.setattr(AUDIT, "run_cpp_door", doctored)
    rc, rows = _run_audit(tmp_path, "--ops=Tanh,MatMul",
                          "--doors=pipeline,tf_ext_add_gradients,tf_add_gradients")
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "door pipeline: DIFFERS: Tanh config" in out, out
    assert "door tf_ext_add_gradients: FAILS: MatMul config" in out, out
    through = [r for r in rows if r.get("doors")]
    assert len(through) > 10
    for r in through:  # 1% off is caught but on an empty gradient
        assert r["doors"]["pipeline"][0] == ("agree" if r["variant"] == "dim0=0" else "DIFFERS"), r
        assert r["doors"]["tf_ext_add_gradients"][0] == "FAILS", r
        assert r["doors"]["tf_add_gradients"][0] == "agree", r


def test_a_wrong_or_failing_new_door_fails_the_audit(monkeypatch, capsys, tmp_path):
    """The same for the SymbolicGradient node, the C API's FunctionDef and the export: the node
    1% off, TfExtGradientFunctionDef's call failing every row, the exported SavedModels'
    gradients 1% off (as run without tf_ext). The audit names each and exits 1."""
    real_door, real_exports = AUDIT.run_cpp_door, AUDIT.run_exports
    off = _one_percent_off

    def doctored(binary, library, door, manifest, entries):
        results = real_door(binary, library, door, manifest, entries)
        if door == "symbolic_gradient_node":
            return off(results)
        if door == "gradient_function_def":
            return {i: ("error", "a broken door") for i in results}
        return results

    monkeypatch.setattr(AUDIT, "run_cpp_door", doctored)
    monkeypatch.setattr(AUDIT, "run_exports", lambda *a: off(real_exports(*a)))
    rc, rows = _run_audit(tmp_path, "--ops=Tanh,MatMul",
                          "--doors=symbolic_gradient_node,gradient_function_def,export")
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "door symbolic_gradient_node: DIFFERS: Tanh config" in out, out
    assert "door gradient_function_def: FAILS: MatMul config" in out, out
    assert "door export: DIFFERS: MatMul config" in out, out
    through = [r for r in rows if r.get("doors")]
    assert len(through) > 10
    for r in through:  # 1% off is caught but on an empty gradient
        for door in ("symbolic_gradient_node", "export"):
            assert r["doors"][door][0] == ("agree" if r["variant"] == "dim0=0" else "DIFFERS"), r
        assert r["doors"]["gradient_function_def"][0] == "FAILS", r


def test_gradient_function_def_cannot_take_a_list_argument(tmp_path):
    """TfExtGradientFunctionDef refuses a gradient with list arguments (ConcatV2's N*T values):
    the door counts such a row as one it cannot take, never as a pass."""
    rc, rows = _run_audit(tmp_path, "--ops=ConcatV2", "--doors=gradient_function_def")
    through = [r for r in rows if r.get("doors")]
    assert rc == 0 and through
    for r in through:
        assert r["doors"]["gradient_function_def"][0] == "cannot take", r
        assert "specialising list argument" in r["doors"]["gradient_function_def"][1], r


def test_the_export_runner_refuses_a_process_with_tf_ext_loaded(tmp_path):
    """The export door's runner checks that its process has not loaded tf_ext's op library (as
    the audit starts it, it has not: the doors' runs above pass)."""
    rows = tmp_path / "rows.json"
    rows.write_text("[]")
    prelude = f"import tensorflow as tf; tf.load_op_library({os.environ['TF_EXT_LIBRARY']!r})\n"
    r = subprocess.run([sys.executable, "-c", prelude + AUDIT.RUN_EXPORTS, str(rows),
                        str(tmp_path / "v.npz"), str(tmp_path / "e.json")],
                       capture_output=True, text=True, check=False)
    assert r.returncode != 0 and "tf_ext's op library was loaded" in r.stderr, r.stderr[-2000:]


def test_door_classes():
    """Against the SymbolicGradient node's gradient (Python's where it fails): agree within the
    tolerance, DIFFERS beyond it or on another shape, FAILS where the reference runs, cannot
    take (TF_AddGradients without the op's gradient, the bridge's fallback to Python), no
    reference where both gradients fail."""
    row = {"op": "Tanh", "variant": "base", "dtype": "double", "config": "1"}
    want = np.linspace(-1, 1, 6).reshape(2, 3)
    entry = {"names": ["x"], "dtypes": [tf.float64], "shapes": [[2, 3]], "cpp": [want], "py": None}
    classify = lambda door, result, e=entry: AUDIT.classify_door(row, e, door, result)[0]
    assert classify("pipeline", ("grads", [want * (1 + 1e-12)])) == "agree"
    assert classify("pipeline", ("grads", [want * (1 + 1e-6)])) == "DIFFERS"
    assert classify("pipeline", ("grads", [want[:1]])) == "DIFFERS"
    assert classify("pipeline", ("grads", [None])) == "DIFFERS"  # zeros
    assert classify("pipeline", ("error", "boom")) == "FAILS"
    assert classify("tf_add_gradients", ("error", "No gradient defined for op: Tanh")) \
        == "cannot take"
    assert classify("pipeline", ("error", "No gradient defined for op: Tanh")) == "FAILS"
    assert classify("bridge", ("cannot take", "the bridge used Python's gradient of Tanh")) \
        == "cannot take"
    py_only = dict(entry, cpp=None, py=[want])
    assert classify("pipeline", ("grads", [want]), py_only) == "agree"
    assert classify("pipeline", ("grads", [want]), dict(entry, cpp=None)) == "no reference"
