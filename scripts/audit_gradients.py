"""Attribute-sweep audit (`make audit`): every op with both a C++ gradient and a Python
gradient function, on configurations generated from its OpDef, C++'s gradient against Python's
on the same inputs and the same incoming gradient, and through every entry point (the doors).

  audit_gradients.py --gradcheck=bazel-bin/tf_ext/tf_ext_gradcheck \
      --library=bazel-bin/tf_ext/_tf_ext_ops.so --spec=tf_ext/tools/tf_core_gradcheck_spec.txt \
      [--subset=N --seed=S] [--ops=A,B] [--json=FILE]

The configurations are not declared here: `tf_ext_gradcheck --emit_configs=DIR` builds them
from the input specs (tf_core_gradcheck_spec.txt and the library's own GradCheck specs) and
each op's OpDef (SweepVariants, tf_ext/tools/gradcheck_spec.h: every allowed value of string
enum attrs, bools flipped, strides/dilations of 2, negative axes, size-1 and empty first
dimensions, broadcasting; float32/float64/complex64/complex128 where allowed) and writes one
GraphDef per row (Const inputs feeding node "op"). Each row is replayed in a TF1 graph: the
forward op, then Python's gradient (`tf.gradients`) and C++'s (a `SymbolicGradient` node,
TensorFlow's function registry with tf_ext's library loaded) of the same seeded random
incoming gradient, run by one Session.

Classes: match (max|cpp - py| <= tol * max|py|; tol 1e-9 for float64/complex128, 1e-4 for
float32/complex64), MISMATCH, CPP-FAILS (Python's runs), PY-FAILS (C++'s runs), both fail,
invalid (the forward op fails, or its inputs break a CONTRACTS rule: a variant the op does not
accept; skipped, counted). A PY-FAILS row's C++ gradient is checked against central differences
(numeric_check: C++ = numeric, C++ != numeric, empty (shape checked), unchecked); a both-fail
row is classified by BOTH_FAIL. Exit status 1 on a MISMATCH or CPP-FAILS row that EXPLAINED
does not name, a PY-FAILS row whose C++ gradient is not the derivative, or an unclassified
both-fail row.

The doors (--doors, all by default): each row whose forward runs is differentiated again
through tf_ext's other entry points, with the same inputs and incoming gradient, and compared
with the SymbolicGradient node's gradient (Python's where that node fails): tf_ext_grad's
pipeline by default (each op's gradient inlined), --symbolic_gradients, --optimize=false,
--hoist_constants, TfExtAddGradients, TensorFlow's TF_AddGradients, a SymbolicGradient node of a
FunctionDef holding the op (run by a C++ Session, Grappler on), the C API's
TfExtGradientFunctionDef called by a graph node, and tf_ext_grad --export's SavedModel
(tests/audit_doors.cc: one process per door over every row, a crash costing only its row; the
SavedModels then run by tf.saved_model.load in one fresh interpreter that never loads tf_ext,
RUN_EXPORTS), and the Python bridge (tf.gradients under tf_ext.use_cpp_gradients(), in this
process). A door's row: agrees (within the tolerance above), DIFFERS, FAILS (the reference
runs), cannot take it (TF_AddGradients: no gradient of the op in TensorFlow's C++ registry;
TfExtGradientFunctionDef: a gradient with list arguments; the bridge: Python's gradient used),
or has no reference (both gradients fail). DOOR_EXPLAINED names the door rows whose difference is
TensorFlow's, DOOR_KNOWN the open defects (reported as KNOWN); any other DIFFERS or FAILS row
fails the audit. The doors take a row's float and complex outputs but the ignored ones (zero
incoming gradients) and those whose run-time shape is not their shape function's.
"""

import argparse
import concurrent.futures
import contextlib
import fnmatch
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

if os.path.isdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "tf_ext")):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # the per-row kernel errors are classified

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import ops as tf_ops

# (op, variant glob, dtype glob) -> why the C++ gradient is right where it differs from
# Python's, or why the row cannot be compared. Listed in docs/registries.md ("Attribute-sweep
# audit"); each reason names the test that shows it.
_LINALG = "tests/python/test_tf_linalg_grads.py"
_NOT_DERIVATIVE = ("Python's complex gradient is not the derivative; C++'s is, against central "
                   f"differences: {_LINALG}::test_complex_derivative_where_python_is_not")
EXPLAINED = {
    ("MatrixDeterminant", "*", "complex*"): _NOT_DERIVATIVE,
    ("LogMatrixDeterminant", "*", "complex*"): _NOT_DERIVATIVE,
    ("TridiagonalSolve", "*", "complex*"): _NOT_DERIVATIVE,
    ("MatrixSquareRoot", "*", "complex*"): _NOT_DERIVATIVE,
    ("MatrixSolveLs", "*", "complex*"): _NOT_DERIVATIVE,
    ("Svd", "*", "complex*"): (
        "the singular values are real: C++ drops the imaginary part of their incoming gradient "
        "(the derivative), Python's does not; with a real incoming gradient on s they agree: "
        f"{_LINALG}::test_svd_imaginary_singular_value_gradient_is_ignored, test_svd"),
    ("MulNoNan", "*", "complex*"): (
        "Python's gradient does not conjugate (mul_no_nan(d(z), y), where Mul's has conj(y)); "
        "C++'s does, the derivative: tests/python/test_audit_gradients.py"
        "::test_mul_no_nan_complex_python_does_not_conjugate (central differences)"),
    ("SoftmaxCrossEntropyWithLogits", "*", "*"): (
        "Python's d(labels) leaves out the backprop output's term -d(backprop); C++'s has it "
        "(they agree when only the loss is differentiated): tests/python/"
        "test_audit_gradients.py::test_softmax_cross_entropy_python_drops_the_backprop_term_of_"
        "labels (central differences)"),
    ("MaxPool3D", "data_format=NCDHW", "*"): (
        "C++'s gradient passes data_format (MaxPool3DGrad with NCDHW), but a SymbolicGradient "
        "node is run by the function runtime, which does not apply oneDNN's rewrite, and "
        "TensorFlow's default CPU MaxPool3DGrad kernel takes NDHWC only; inlined, as every "
        "tf_ext front end runs gradients, oneDNN's kernel runs it (as the dilated Conv2D in "
        "\"Overrides\")"),
    ("BlockLSTMV2", "*", "*"): (
        "Python's gradient calls BlockLSTMGrad, whose gate layout is BlockLSTM's, so it is not "
        "the derivative; C++ calls BlockLSTMGradV2: tests/python/test_tf_misc_parity_grads.py"
        "::test_block_lstm_v2_is_the_derivative (central differences)"),
}

# Rows whose C++ gradient is known to be wrong (or to fail) and not yet fixed: open defects,
# listed in docs/registries.md. The audit reports them as KNOWN and does not fail on them.
KNOWN = {
}

# "both fail" rows: (op, variant glob, dtype glob) -> (kind, text Python's error must hold, text
# C++'s must hold, why). A both-fail row not listed, or failing otherwise, is unexplained.
_DISABLED = "by design"
_GAP = "a gap in both"
_KERNEL = "a kernel lacks the variant"
BOTH_FAIL = {
    ("PreventGradient", "*", "*"): (
        _DISABLED, "explicitly disabled", "explicitly disabled",
        "the op exists to make differentiating through it an error"),
    ("MatrixSolveLs", "fast=false", "*"): (
        _GAP, "fast=False", "fast=False",
        "no gradient of the complete orthogonal factorisation path (fast=False), in either"),
    ("Qr", "full_matrices=true", "*"): (
        _GAP, "full_matrices", "full_matrices",
        "no gradient of a full Q of a matrix with more rows than columns, in either"),
    ("MatrixDeterminant", "dim0=1", "*"): (
        _GAP, "not invertible", "not invertible",
        "the sampled matrix is singular: det's derivative (the adjugate) exists there, but both "
        "gradients compute det(A) inv(A)^H"),
    ("ClipByValue", "*", "complex*"): (
        _GAP, "not in list of allowed values", "is not in the list of allowed values",
        "complex numbers have no order (the CPU kernel clips real parts); both gradients select "
        "with comparison ops that take real types only"),
    ("Conv2D", "dilations=*", "*"): (
        _KERNEL, "do not yet support dilation", "do not yet support dilation",
        "TensorFlow's default CPU Conv2DBackprop* kernels take no dilation (a Session without "
        "oneDNN's rewrite); inlined, oneDNN's kernels run it (\"Overrides\" above)"),
}
for _op in ("DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter"):
    BOTH_FAIL[(_op, "dilations=*", "*")] = (
        _KERNEL, "", "does not support dilations",
        "TensorFlow's CPU depthwise kernels take no dilation (the forward op's shape function "
        "accepts it); Python's gradient fails first where it builds a wrongly shaped gradient")

# Rows not replayed because a TensorFlow kernel aborts the process on them (a CHECK failure,
# not an error status): (op, variant glob, dtype glob) -> what aborts. Counted as "invalid".
ABORTS = {
    ("MaxPool3D", "dim0=0", "*"): "TensorFlow 2.21's oneDNN MaxPool3DGrad kernel (the gradient "
                                   "of both) aborts on an empty batch: 'Check failed: dtype() == "
                                   "expected_dtype'",
}



def _pool_grad_contract(op, values):
    """AvgPoolGrad's `grad` must have AvgPool's output shape for orig_input_shape: the sweep's
    size-1/empty first dimension and padding flips change one input alone, and the kernel does
    not check (it reads what it indexes), so those rows are outside the op's domain."""
    orig, grad = [int(v) for v in values[0]], list(np.shape(values[1]))
    nchw = op.get_attr("data_format") == b"NCHW"
    ksize, strides = op.get_attr("ksize"), op.get_attr("strides")
    want = []
    for d, (n, k, st) in enumerate(zip(orig, ksize, strides)):
        if op.get_attr("padding") == b"VALID":
            want.append(max(0, -(-(n - k + 1) // st)))
        else:
            want.append(-(-n // st))
    if nchw:
        want[0], want[1] = orig[0], orig[1]
    else:
        want[0], want[3] = orig[0], orig[3]
    if grad != want:
        return (f"grad's shape {grad} is not AvgPool's output shape {want} for orig_input_shape "
                f"{orig} (the kernel does not check)")
    return None


# op -> f(op, input values) -> why the row's inputs are outside the op's domain (or None):
# checked on every row whose forward runs; such a row is "invalid".
CONTRACTS = {"AvgPoolGrad": _pool_grad_contract}

TOLERANCE = {tf.float64: 1e-9, tf.complex128: 1e-9, tf.float32: 1e-4, tf.complex64: 1e-4}


# No Grappler: its constant folding and remapper would replace the forward op (fed by
# constants) by Const or Add nodes, whose second output (FusedBatchNorm's) cannot be fetched.
_SESSION_CONFIG = tf.compat.v1.ConfigProto()
_SESSION_CONFIG.graph_options.rewrite_options.disable_meta_optimizer = True


def lookup(table, row):
    for (op, variant, dtype), why in table.items():
        if (row["op"] == op and fnmatch.fnmatchcase(row["variant"], variant)
                and fnmatch.fnmatchcase(row["dtype"], dtype)):
            return why
    return None


def python_gradient_ops():
    """Ops whose entry in Python's gradient registry is a function (not tf.no_gradient)."""
    return {op for op, entry in tf_ops._gradient_registry._registry.items()
            if entry.get("type") is not None}


def emit(args, directory):
    cmd = [args.gradcheck, f"--library={args.library}", f"--spec={args.spec}",
           f"--emit_configs={directory}", f"--seed={args.seed}"]
    if args.ops:
        cmd.append(f"--ops={args.ops}")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(directory, "configs.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _random(shape, dtype, rng):
    x = rng.uniform(-1, 1, shape)
    if dtype.is_complex:
        x = x + 1j * rng.uniform(-1, 1, shape)
    return x.astype(dtype.as_numpy_dtype)


def _error(got, want):
    """max|got - want| / max|want| (NaNs at the same places equal; inf on a shape change)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return float("inf")
    if got.size == 0:
        return 0.0
    same_nan = np.isnan(got) & np.isnan(want)
    diff = np.where(same_nan, 0, np.abs(got - want))
    if np.isnan(diff).any():
        return float("inf")
    scale = np.max(np.where(np.isnan(want), 0, np.abs(want)))
    worst = float(np.max(diff))
    return worst / scale if scale > 0 else (0.0 if worst == 0 else float("inf"))


def replay(row, directory, seed, door_inputs=None):
    """(class, detail) of one row. With door_inputs (a dict), the row's forward graph with its
    incoming gradients as Const nodes is written for the doors, and what they need (the tensors,
    the two reference gradients) is put there."""
    graph_def = tf.compat.v1.GraphDef()
    with open(os.path.join(directory, row["graph"]), "rb") as f:
        graph_def.ParseFromString(f.read())
    with tf.Graph().as_default() as g:
        try:
            tf.import_graph_def(graph_def, name="")
        except Exception as e:  # noqa: BLE001 - a variant the op's OpDef/shape fn refuses
            return "invalid", _first_line(e)
        op = g.get_operation_by_name("op")
        with tf.compat.v1.Session(config=_SESSION_CONFIG) as sess:
            try:
                outputs = sess.run(list(op.outputs))
            except Exception as e:  # noqa: BLE001
                return "invalid", _first_line(e)
            if op.type in CONTRACTS:
                why = CONTRACTS[op.type](op, sess.run(list(op.inputs)))
                if why:
                    return "invalid", why
            rng = np.random.default_rng(seed)
            dys = []
            for t, name, value in zip(op.outputs, _output_names(op), outputs):
                value = np.asarray(value)
                if (t.dtype.is_floating or t.dtype.is_complex) and \
                        name not in row["ignore_outputs"]:
                    dys.append(tf.constant(_random(value.shape, t.dtype, rng)))
                else:
                    dys.append(tf.constant(np.zeros(value.shape, t.dtype.as_numpy_dtype)))
            xs = list(op.inputs)
            py_error = cpp_error = None
            # tf.gradients refuses a bool output even with an incoming gradient (SparseFillEmptyRows'
            # empty_row_indicator): Python differentiates the others; SymbolicGradient takes all.
            ys = [(t, dy) for t, dy in zip(op.outputs, dys) if t.dtype != tf.bool]
            try:
                py = tf.gradients([t for t, _ in ys], xs, grad_ys=[dy for _, dy in ys])
                py_values = sess.run([tf.zeros_like(x) if p is None else tf.convert_to_tensor(p)
                                      for p, x in zip(py, xs)])  # IndexedSlices densified
            except Exception as e:  # noqa: BLE001
                py_error = _first_line(e)
            try:
                f = tf.compat.v1.NameAttrList(name=op.type)
                for k, v in op.node_def.attr.items():
                    f.attr[k].CopyFrom(v)
                cpp = tf.raw_ops.SymbolicGradient(input=xs + dys, Tout=[x.dtype for x in xs], f=f)
                cpp_values = sess.run(cpp)
            except Exception as e:  # noqa: BLE001
                cpp_error = _first_line(e)
            if py_error and not cpp_error:
                row["numeric"], row["numeric_detail"] = numeric_check(
                    row, graph_def, sess, op, xs, sess.run(dys), cpp_values, seed)
            if door_inputs is not None:
                door_inputs.update(_door_inputs(
                    row, directory, graph_def, op, xs, sess.run(dys),
                    None if cpp_error else cpp_values, None if py_error else py_values))
    if py_error and cpp_error:
        return "both fail", f"py: {py_error} | cpp: {cpp_error}"
    if cpp_error:
        return "CPP-FAILS", cpp_error
    if py_error:
        return "PY-FAILS", py_error
    nondiff = set(row["nondiff"])
    worst, where = 0.0, ""
    names = [a.name for a in op.op_def.input_arg]
    for arg_index, (x, got, want) in enumerate(zip(xs, cpp_values, py_values)):
        name = names[arg_index] if len(names) == len(xs) else str(arg_index)
        if not (x.dtype.is_floating or x.dtype.is_complex) or name in nondiff:
            continue
        err = _error(got, want)
        if err / TOLERANCE.get(x.dtype, 1e-4) > worst:
            worst = err / TOLERANCE.get(x.dtype, 1e-4)
            where = f"d({name}) {x.dtype.name}{list(x.shape)}: error {err:.2e}"
    return ("MISMATCH", where) if worst > 1 else ("match", "")


def _compared_inputs(row, op, xs):
    """(index, name) of the inputs whose gradients are compared: float or complex, not one the
    op declares non-differentiable."""
    names = [a.name for a in op.op_def.input_arg]
    names = names if len(names) == len(xs) else [str(i) for i in range(len(xs))]
    return [(k, names[k]) for k, x in enumerate(xs)
            if (x.dtype.is_floating or x.dtype.is_complex) and names[k] not in row["nondiff"]]


def _door_inputs(row, directory, graph_def, op, xs, dy_values, cpp_values, py_values):
    """The row's graph for the doors (its incoming gradients the Const nodes audit_dy_K, one
    per float or complex output), and what comparing them needs."""
    compared = _compared_inputs(row, op, xs)
    if not compared:
        return {}
    augmented = tf.compat.v1.GraphDef()
    augmented.CopyFrom(graph_def)
    ys, dys = [], []
    out_names = _output_names(op)
    for i, (t, dy) in enumerate(zip(op.outputs, dy_values)):
        if not (t.dtype.is_floating or t.dtype.is_complex) or out_names[i] in row["ignore_outputs"]:
            continue  # an ignored output's incoming gradient is zeros: it adds nothing
        if t.shape.is_fully_defined() and t.shape.as_list() != list(np.shape(dy)):
            # A placeholder output whose run-time shape the kernel picks against its shape
            # function (Svd's u, v without compute_uv: [0] declared, [] run; FusedBatchNorm's
            # reserve spaces), which may differ between Sessions: the doors check an incoming
            # gradient's shape against the output's in their own run.
            continue
        node = augmented.node.add(name=f"audit_dy_{i}", op="Const")
        node.attr["dtype"].type = t.dtype.as_datatype_enum
        node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(np.asarray(dy)))
        ys.append(t.name)
        dys.append(f"audit_dy_{i}:0")
    if not ys:
        return {}
    path = os.path.join(directory, "doors", row["graph"].replace("/", "_"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(augmented.SerializeToString())
    pick = lambda values: None if values is None else [np.asarray(values[k]) for k, _ in compared]
    return {"graph": path, "ys": ys, "dys": dys, "xs": [xs[k].name for k, _ in compared],
            "names": [n for _, n in compared], "dtypes": [xs[k].dtype for k, _ in compared],
            "shapes": [xs[k].shape.as_list() for k, _ in compared],
            "cpp": pick(cpp_values), "py": pick(py_values)}


# The central-difference check of C++'s gradient where Python's fails (PY-FAILS rows):
# L(x) = sum Re(conj(dy) * y) over the differentiable outputs, its derivative along each
# element of each differentiable input (d/dRe and d/dIm of a complex one: TensorFlow's gradient
# is dL/dRe + i dL/dIm), against the C++ gradient's element. Float64 (a float32 row is replayed
# widened, the float32 C++ gradient compared with its float64 differences), else float32 with
# a larger step. An element whose one-sided differences disagree (a kink or a jump at the
# sampled point) is not compared, and counted.
NUMERIC_STEP = {"float64": 1e-6, "float32": 1e-3}
NUMERIC_TOLERANCE = {"float64": 1e-6, "float32 vs float64": 1e-3, "float32": 1e-2}
NUMERIC_KINK = {"float64": 1e-3, "float32": 1e-2}  # |right - left| / max|gradient|
NUMERIC_MAX_ELEMENTS = 48  # per input, a seeded sample beyond that
NUMERIC_VERDICTS = ["C++ = numeric", "C++ != numeric", "empty, shape checked", "unchecked"]
_WIDEN = {tf.float32.as_datatype_enum: tf.float64.as_datatype_enum,
          tf.complex64.as_datatype_enum: tf.complex128.as_datatype_enum}


def _widened(graph_def):
    """graph_def with float32/complex64 attrs and constants made float64/complex128."""
    wide = tf.compat.v1.GraphDef()
    wide.CopyFrom(graph_def)
    for node in wide.node:
        for attr in node.attr.values():
            kind = attr.WhichOneof("value")
            if kind == "type" and attr.type in _WIDEN:
                attr.type = _WIDEN[attr.type]
            elif kind == "list":
                for i, t in enumerate(attr.list.type):
                    attr.list.type[i] = _WIDEN.get(t, t)
            elif kind == "tensor" and attr.tensor.dtype in _WIDEN:
                value = tf.make_ndarray(attr.tensor)
                attr.tensor.CopyFrom(tf.make_tensor_proto(
                    value.astype(np.complex128 if np.iscomplexobj(value) else np.float64)))
    return wide


def numeric_check(row, graph_def, sess, op, xs, dys, cpp_values, seed):
    """(verdict, detail): C++'s gradient of a row against central differences (above)."""
    names = [a.name for a in op.op_def.input_arg]
    names = names if len(names) == len(xs) else [str(i) for i in range(len(xs))]
    checked = [k for k, x in enumerate(xs) if (x.dtype.is_floating or x.dtype.is_complex)
               and names[k] not in row["nondiff"]]
    if not checked:
        return "unchecked", "no differentiable input"
    x_values = [np.asarray(v) for v in sess.run(xs)]
    for k in checked:
        if np.shape(cpp_values[k]) != np.shape(x_values[k]):
            return "C++ != numeric", (f"d({names[k]}) has shape {list(np.shape(cpp_values[k]))}, "
                                      f"the input {list(np.shape(x_values[k]))}")
    if all(np.size(x_values[k]) == 0 for k in checked):
        return "empty, shape checked", "every differentiable input is empty"
    out_names = _output_names(op)
    used = [i for i, t in enumerate(op.outputs) if (t.dtype.is_floating or t.dtype.is_complex)
            and out_names[i] not in row["ignore_outputs"]]
    # A graph of its own: tf.gradients may have marked the constants unfeedable (constant_value).
    narrow = any(xs[k].dtype in (tf.float32, tf.complex64) for k in checked)
    precision = "float32 vs float64" if narrow else "float64"
    for attempt in ([precision, "float32"] if narrow else [precision]):
        graph = tf.Graph()
        eval_sess = tf.compat.v1.Session(graph=graph, config=_SESSION_CONFIG)
        try:
            with graph.as_default():
                tf.import_graph_def(_widened(graph_def) if attempt == "float32 vs float64"
                                    else graph_def, name="")
                eval_op = graph.get_operation_by_name("op")
            eval_sess.run(eval_op.outputs)
            precision = attempt
            break
        except Exception:  # noqa: BLE001 - the op has no float64 kernel: float32 steps
            eval_sess.close()
    if precision == "float32 vs float64":
        x_values = [v.astype(np.complex128 if np.iscomplexobj(v) else np.float64)
                    if v.dtype in (np.float32, np.complex64) else v for v in x_values]
        dys = [np.asarray(d).astype(np.complex128 if np.iscomplexobj(d) else np.float64)
               if np.asarray(d).dtype in (np.float32, np.complex64) else d for d in dys]
    step = NUMERIC_STEP["float32" if precision == "float32" else "float64"]
    inputs = list(eval_op.inputs)

    def loss(values):
        ys = eval_sess.run([eval_op.outputs[i] for i in used], feed_dict=dict(zip(inputs, values)))
        return sum(float(np.real(np.sum(np.conj(dys[i]).astype(np.complex128)
                                        * np.asarray(y).astype(np.complex128))))
                   for i, y in zip(used, ys))

    try:
        rng = np.random.default_rng(seed)
        base = loss(x_values)
        samples = []  # (input, index, direction, central difference, |right - left| slope)
        for k in checked:
            x = x_values[k]
            where = list(np.ndindex(x.shape))
            if len(where) > NUMERIC_MAX_ELEMENTS:
                where = [where[i] for i in sorted(rng.choice(len(where), NUMERIC_MAX_ELEMENTS,
                                                             replace=False))]
            for idx in where:
                for d in ((1, 1j) if np.iscomplexobj(x) else (1,)):
                    f = []
                    for sign in (1, -1):
                        values = list(x_values)
                        values[k] = x.copy()
                        values[k][idx] += sign * step * d
                        f.append(loss(values))
                    samples.append((k, idx, d, (f[0] - f[1]) / (2 * step),
                                    abs((f[0] - base) - (base - f[1])) / step))
    finally:
        eval_sess.close()
    scale = max([abs(s[3]) for s in samples]
                + [float(np.max(np.abs(cpp_values[k]), initial=0)) for k in checked])
    scale = scale if scale > 0 else 1.0
    kink = NUMERIC_KINK["float32" if precision == "float32" else "float64"] * scale
    smooth = [s for s in samples if s[4] <= kink]
    if not smooth:
        return "unchecked", (f"not differentiable at the sampled point: all {len(samples)} "
                             "differences one-sided-inconsistent")
    worst, where = 0.0, ""
    for k, idx, d, num, _ in smooth:
        got = complex(np.asarray(cpp_values[k])[idx])
        got = got.real if d == 1 else got.imag
        if abs(got - num) / scale >= worst:
            worst = abs(got - num) / scale
            where = (f"d({names[k]}){list(idx)}{'' if d == 1 else ' imag'}: C++ {got:.6g}, "
                     f"numeric {num:.6g}")
    tol = NUMERIC_TOLERANCE[precision]
    detail = (f"{precision}, {len(smooth)} elements, max error {worst:.1e} of max|gradient| "
              f"{scale:.3g} (tolerance {tol:g})"
              + (f", {len(samples) - len(smooth)} at a kink skipped" if len(smooth) < len(samples)
                 else ""))
    if worst > tol:
        return "C++ != numeric", f"{detail}; worst {where}"
    return "C++ = numeric", detail


# The doors (module docstring): tests/audit_doors.cc's, then the Python bridge.
CPP_DOORS = ["pipeline", "symbolic_gradients", "no_optimize", "hoist_constants",
             "tf_ext_add_gradients", "tf_add_gradients", "symbolic_gradient_node",
             "gradient_function_def", "export"]
DOORS = CPP_DOORS + ["bridge"]
DOOR_CLASSES = ["agree", "DIFFERS", "FAILS", "cannot take", "no reference"]

# (door, op, variant glob, dtype glob) -> (text the door's error must hold, why): a door that
# fails where the reference runs, for a reason that is TensorFlow's, not the door's. Listed in
# docs/registries.md ("Attribute-sweep audit"), each with the test that shows it.
DOOR_EXPLAINED = {
    ("symbolic_gradients", "MaxPool3D", "data_format=NCDHW", "*"): (
        "only supports NDHWC",
        "as the SymbolicGradient node (EXPLAINED above): the function runtime, which resolves "
        "each gradient by itself, runs TensorFlow's default CPU MaxPool3DGrad, NDHWC only"),
    ("pipeline", "BiasAddGrad", "*", "*"): (
        "Incompatible shapes",
        "TensorFlow's gradient of an NCHW BiasAddGrad is BiasAdd(zeros_like(x), d(bias)), which "
        "Grappler (TensorFlow's, on in these Sessions; a tf.function fails the same) rewrites "
        "into an Add that broadcasts the bias as NHWC: tests/python/test_audit_gradients.py"
        "::test_grappler_breaks_an_nchw_bias_add_of_zeros"),
}
DOOR_EXPLAINED[("hoist_constants", "BiasAddGrad", "*", "*")] = \
    DOOR_EXPLAINED[("pipeline", "BiasAddGrad", "*", "*")]
DOOR_EXPLAINED[("symbolic_gradient_node", "MaxPool3D", "data_format=NCDHW", "*")] = \
    DOOR_EXPLAINED[("symbolic_gradients", "MaxPool3D", "data_format=NCDHW", "*")]

# Door rows known to differ or fail and not yet fixed: open defects, listed in
# docs/registries.md. Reported as KNOWN; the audit does not fail on them.
DOOR_KNOWN: dict = {}

# A door that cannot take a row (counted as such, never as a pass): the text its error holds.
CANNOT_TAKE = {
    "tf_add_gradients": "No gradient defined for op",  # TensorFlow's C++ registry lacks it
    # A gradient whose signature has list arguments (ConcatV2's values: N*T), which
    # TfExtGradientFunctionDef cannot specialise (the bridge then builds a SymbolicGradient).
    "gradient_function_def": "specialising list argument",
}


def _read_gradients(path, count):
    """The gradients audit_doors wrote (its header): None for a missing one."""
    with open(path, "rb") as f:
        data = f.read()
    out, at = [], 0
    for _ in range(count):
        dtype, rank = np.frombuffer(data, np.int32, 2, at)
        at += 8
        dims = np.frombuffer(data, np.int64, rank, at).tolist() if rank else []
        at += 8 * int(rank)
        size = int(np.frombuffer(data, np.int64, 1, at)[0])
        at += 8
        if dtype == 0:
            out.append(None)
        else:
            out.append(np.frombuffer(data[at:at + size], tf.as_dtype(int(dtype)).as_numpy_dtype)
                       .reshape(dims))
        at += size
    return out


def run_cpp_door(binary, library, door, manifest, entries):
    """{row index: ("grads", list) | ("error", text)} of one door over every manifest row, in
    one process; a crash (a TensorFlow CHECK) is its row's error and the next row goes on."""
    results, crashed, first = {}, {}, 0
    env = dict(os.environ, TF_EXT_LIBRARY=library, TF_CPP_MIN_LOG_LEVEL="3")
    if door == "export":  # ExportGradientSavedModel writes only into a new directory
        for index, _ in entries:
            shutil.rmtree(os.path.join(os.path.dirname(manifest), f"r{index}.export"),
                          ignore_errors=True)
    while first < len(entries):
        r = subprocess.run([binary, door, manifest, str(first)], capture_output=True, text=True,
                           env=env, check=False)
        started = [int(line.split()[1]) for line in r.stdout.splitlines() if line.startswith("row ")]
        if r.returncode == 0:
            break
        if r.returncode != 3 and started:  # killed by a signal (or aborted) in that row
            crashed[started[-1]] = ("error", f"{door} crashed (exit status {r.returncode}): "
                                              + _first_line(r.stderr.strip()[-400:] or "no output"))
            first = started[-1] + 1
            continue
        raise RuntimeError(f"audit_doors {door} failed (exit status {r.returncode}): "
                           + r.stderr[-2000:])
    for n, (index, entry) in enumerate(entries):
        if n in crashed:
            results[index] = crashed[n]
            continue
        prefix = os.path.join(os.path.dirname(manifest), f"r{index}.{door}")
        if os.path.exists(prefix + ".err"):
            with open(prefix + ".err", encoding="utf-8", errors="replace") as f:
                results[index] = ("error", _first_line(f.read()))
        elif door == "export":
            results[index] = ("export", (prefix, entry["xs"]))  # run_exports runs it
        else:
            results[index] = ("grads", _read_gradients(prefix + ".grad", len(entry["xs"])))
    return results


# The export door's runner: a fresh interpreter that never loads tf_ext (neither its Python
# package nor its op library) loads each SavedModel with tf.saved_model.load and runs its
# signature "gradients" (no inputs: the row's tensors are constants and variables).
RUN_EXPORTS = """
import json, sys
import numpy as np, tensorflow as tf
with open(sys.argv[1], encoding="utf-8") as f:
    rows = json.load(f)
values, errors = {}, {}
for row in rows:
    try:
        got = tf.saved_model.load(row["dir"]).signatures["gradients"]()
        for k, key in enumerate(row["keys"]):
            values[f"{row['index']}/{k}"] = got[key].numpy()
    except Exception as e:  # noqa: BLE001 - the row's failure
        errors[row["index"]] = str(e)
assert not any("tf_ext" in m for m in sys.modules), "tf_ext was imported"
with open("/proc/self/maps", encoding="utf-8") as f:
    assert "_tf_ext_ops" not in f.read(), "tf_ext's op library was loaded"
np.savez(sys.argv[2], **values)
with open(sys.argv[3], "w", encoding="utf-8") as f:
    json.dump(errors, f)
"""


def run_exports(results, directory):
    """The export door's results: each ("export", prefix) of run_cpp_door replaced by the
    gradients its SavedModel gives when run without tf_ext (RUN_EXPORTS), or its error."""
    def key(x):  # the signature's output key of x's gradient (ExportGradientSavedModel)
        node, _, index = x.partition(":")
        return "".join(c if c.isalnum() or c == "_" else "_" for c in
                       "d_" + node + ("" if index in ("", "0") else "_" + index))

    rows = [{"index": index, "dir": value[0], "keys": [key(x) for x in value[1]]}
            for index, (kind, value) in results.items() if kind == "export"]
    if not rows:
        return results
    request = os.path.join(directory, "exports.json")
    with open(request, "w", encoding="utf-8") as f:
        json.dump(rows, f)
    values, errors = os.path.join(directory, "exports.npz"), os.path.join(directory, "exports.err")
    env = {k: v for k, v in os.environ.items() if k not in ("TF_EXT_LIBRARY", "PYTHONPATH")}
    r = subprocess.run([sys.executable, "-c", RUN_EXPORTS, request, values, errors],
                       capture_output=True, text=True, env=env, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"running the exports failed (exit status {r.returncode}): "
                           + r.stderr[-2000:])
    with open(errors, encoding="utf-8") as f:
        failed = json.load(f)
    got = dict(np.load(values))
    results = dict(results)
    for row in rows:
        index = row["index"]
        results[index] = (("error", _first_line(failed[str(index)])) if str(index) in failed else
                          ("grads", [got[f"{index}/{k}"] for k in range(len(row["keys"]))]))
    return results


def run_export_door(binary, library, door, manifest, entries):
    """The export door: audit_doors writes each row's SavedModel, run_exports runs them."""
    return run_exports(run_cpp_door(binary, library, door, manifest, entries),
                       os.path.dirname(manifest))


def run_bridge(entries):
    """{row index: result} of the Python bridge: tf.gradients under use_cpp_gradients (each
    op's C++ gradient as TfExt>GradientFunctionDef); ("cannot take", ...) where it used
    Python's gradient (a fallback)."""
    import tf_ext  # noqa: PLC0415 - after the op library is loaded, by the same path
    results = {}
    tf_ext.enable_cpp_gradients()
    try:
        for index, entry in entries:
            graph_def = tf.compat.v1.GraphDef()
            with open(entry["graph"], "rb") as f:
                graph_def.ParseFromString(f.read())
            with tf.Graph().as_default() as g:
                tf.import_graph_def(graph_def, name="")
                before = tf_ext.gradient_counts()
                try:
                    grads = tf.gradients([g.get_tensor_by_name(n) for n in entry["ys"]],
                                         [g.get_tensor_by_name(n) for n in entry["xs"]],
                                         grad_ys=[g.get_tensor_by_name(n) for n in entry["dys"]])
                    counts = tf_ext.gradient_counts() - before
                    if counts.python:
                        results[index] = ("cannot take", "the bridge used Python's gradient of "
                                          + ", ".join(sorted(counts.python)))
                        continue
                    with tf.compat.v1.Session(config=_SESSION_CONFIG) as sess:
                        values = sess.run([tf.convert_to_tensor(d) for d in grads if d is not None])
                    values = iter(values)
                    results[index] = ("grads", [None if d is None else next(values) for d in grads])
                except Exception as e:  # noqa: BLE001
                    results[index] = ("error", _first_line(e))
    finally:
        tf_ext.disable_cpp_gradients()
    return results


def _write_manifest(path, entries):
    """audit_doors' manifest: one row a line (tests/audit_doors.cc)."""
    with open(path, "w", encoding="utf-8") as f:
        for index, e in entries:
            f.write("\t".join([e["graph"], os.path.join(os.path.dirname(path), f"r{index}"),
                               ",".join(e["ys"]), ",".join(e["dys"]), ",".join(e["xs"])]) + "\n")


def run_doors(args, directory, door_inputs, doors):
    """{(row index, door): result} of every door over every row with door inputs (the export
    door: over a seeded sample of them with --export_rows)."""
    entries = sorted((i, e) for i, e in door_inputs.items() if e)
    manifest = os.path.join(directory, "doors", "manifest.tsv")
    os.makedirs(os.path.dirname(manifest), exist_ok=True)
    _write_manifest(manifest, entries)
    # The export door's per-row cost is mostly tf.saved_model.load (about 60 ms a row).
    export_entries, export_manifest = entries, manifest
    if args.export_rows and args.export_rows < len(entries):
        export_entries = sorted(random.Random(args.seed).sample(entries, args.export_rows))
        export_manifest = os.path.join(directory, "doors", "manifest_export.tsv")
        _write_manifest(export_manifest, export_entries)
    results = {}
    cpp = sorted((d for d in doors if d in CPP_DOORS), key=lambda d: d != "export")  # longest
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(2, len(cpp)))) as pool:
        futures = {pool.submit(run_export_door, args.doors_binary, args.library, d,
                               export_manifest, export_entries) if d == "export" else
                   pool.submit(run_cpp_door, args.doors_binary, args.library, d, manifest,
                               entries): d for d in cpp}
        if "bridge" in doors:
            for index, r in run_bridge(entries).items():
                results[(index, "bridge")] = r
        for future, door in futures.items():
            for index, r in future.result().items():
                results[(index, door)] = r
    return results


def classify_door(row, entry, door, result):
    """(class, detail) of one row through one door, against the SymbolicGradient node's
    gradient (Python's where that node fails)."""
    reference = entry["cpp"] if entry["cpp"] is not None else entry["py"]
    kind, value = result
    if reference is None:
        return "no reference", value if kind == "error" else "both gradients fail; the door runs"
    if kind == "cannot take":
        return "cannot take", value
    if kind == "error":
        if door in CANNOT_TAKE and CANNOT_TAKE[door] in value:
            return "cannot take", value
        why = _door_explained(row, door, value)
        return (f"FAILS ({why[0]})", f"{value} -- {why[1]}") if why else ("FAILS", value)
    worst, where = 0.0, ""
    for name, dtype, shape, got, want in zip(entry["names"], entry["dtypes"], entry["shapes"],
                                             value, reference):
        if got is None:  # no path from x, as Python's None
            got = np.zeros(np.shape(want), dtype.as_numpy_dtype)
        err = _error(got, want) / TOLERANCE.get(dtype, 1e-4)
        if err > worst:
            worst, where = err, (f"d({name}) {dtype.name}{shape}: error "
                                 f"{err * TOLERANCE.get(dtype, 1e-4):.2e}")
    if worst > 1:
        why = _door_explained(row, door, where)
        return (f"DIFFERS ({why[0]})", f"{where} -- {why[1]}") if why else ("DIFFERS", where)
    return "agree", ""


def _door_explained(row, door, text):
    """(suffix, why) of a door row that DOOR_EXPLAINED or DOOR_KNOWN names, else None."""
    for suffix, table in (("explained", DOOR_EXPLAINED), ("KNOWN", DOOR_KNOWN)):
        for (d, op, variant, dtype), (holds, why) in table.items():
            if (d == door and row["op"] == op and fnmatch.fnmatchcase(row["variant"], variant)
                    and fnmatch.fnmatchcase(row["dtype"], dtype) and holds in text):
                return suffix, why
    return None


def _output_names(op):
    """The OpDef output arg name of each of op's outputs."""
    names = []
    for arg in op.op_def.output_arg:
        n = 1
        if arg.number_attr:
            n = op.get_attr(arg.number_attr)
        elif arg.type_list_attr:
            n = len(op.get_attr(arg.type_list_attr))
        names += [arg.name] * n
    return names


def _first_line(e):
    """The informative line of an error (not TensorFlow's "Graph execution error:" header)."""
    lines = [ln.strip() for ln in str(getattr(e, "message", e)).splitlines()]
    for i, ln in enumerate(lines[:-1]):  # after a traceback: "Node: 'X'", then the message
        if ln.startswith("Node: '"):
            lines = lines[i + 1:]
            break
    lines = [ln for ln in lines if ln and not ln.startswith(("Graph execution error",
                                                             "Detected at node"))]
    return (lines[0] if lines else type(e).__name__)[:200]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gradcheck", required=True, help="tf_ext_gradcheck binary")
    parser.add_argument("--library", required=True, help="the op library (_tf_ext_ops.so)")
    parser.add_argument("--spec", required=True, help="tf_core_gradcheck_spec.txt")
    parser.add_argument("--ops", default="", help="only these ops (A,B)")
    parser.add_argument("--subset", type=int, default=0, help="a seeded sample of N rows")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", default="", help="write every row here")
    parser.add_argument("--quiet", action="store_true", help="the summary and defects only")
    parser.add_argument("--trace", action="store_true",
                        help="print each row before replaying it (to find one that crashes)")
    parser.add_argument("--doors", default=",".join(DOORS),
                        help="the entry points each row also goes through (A,B; 'none')")
    parser.add_argument("--export_rows", type=int, default=0,
                        help="a seeded sample of N rows through the export door (0: all)")
    parser.add_argument("--doors_binary", default="",
                        help="tests/audit_doors (default: bazel-bin/tests/audit_doors beside "
                             "--gradcheck's bazel-bin)")
    parser.add_argument("--workdir", default="",
                        help="keep the rows' graphs and the doors' results here (a temporary "
                             "directory otherwise)")
    args = parser.parse_args(argv)
    doors = [] if args.doors == "none" else [d for d in args.doors.split(",") if d]
    unknown = sorted(set(doors) - set(DOORS))
    if unknown:
        parser.error(f"unknown doors {unknown}: the doors are {DOORS}")
    if not args.doors_binary:
        args.doors_binary = os.path.join(os.path.dirname(os.path.dirname(
            os.path.abspath(args.gradcheck))), "tests", "audit_doors")
    start = time.time()
    # Unifies the C++ registries and installs the overrides. By its real path, as tf_ext's
    # loader does: one library under two paths would be two libraries.
    args.library = os.path.realpath(args.library)
    os.environ["TF_EXT_LIBRARY"] = args.library  # the bridge's tf_ext loads this one
    tf.load_op_library(args.library)
    python_ops = python_gradient_ops()
    with contextlib.ExitStack() as stack:
        directory = args.workdir or stack.enter_context(tempfile.TemporaryDirectory())
        os.makedirs(directory, exist_ok=True)
        rows = emit(args, directory)
        skipped_ops = {r["op"] for r in rows if "skip" in r or r["op"] not in python_ops}
        rows = [r for r in rows if "skip" not in r and r["op"] in python_ops]
        if args.subset:
            rows = sorted(random.Random(args.seed).sample(rows, min(args.subset, len(rows))),
                          key=lambda r: r["graph"] or "")
        door_inputs = {}
        for i, row in enumerate(rows):
            if args.trace:
                print(f"replaying {row['op']} config {row['config']} [{row['variant']}] "
                      f"{row['dtype']}", flush=True)
            if row["problem"] or lookup(ABORTS, row):
                row["class"], row["detail"] = "invalid", row["problem"] or lookup(ABORTS, row)
            else:
                door_inputs[i] = {} if doors else None
                row["class"], row["detail"] = replay(row, directory, args.seed + i,
                                                     door_inputs[i])
            known = lookup(EXPLAINED, row) or lookup(KNOWN, row)
            if row["class"] == "PY-FAILS" and row["numeric"] == "C++ != numeric":
                row["class"] = "PY-FAILS, C++ != numeric"
            if row["class"] in ("MISMATCH", "CPP-FAILS", "PY-FAILS, C++ != numeric") \
                    and known is not None:
                row["class"] += " (explained)" if lookup(EXPLAINED, row) else " (KNOWN)"
                row["why"] = known
            if row["class"] == "both fail":
                row["both"] = classify_both_fail(row)
        door_results = run_doors(args, directory, door_inputs, doors) if doors else {}
        for (i, door), result in door_results.items():
            rows[i].setdefault("doors", {})[door] = classify_door(
                rows[i], door_inputs[i], door, result)
    return report(rows, skipped_ops, args, time.time() - start, doors)


def classify_both_fail(row):
    """The BOTH_FAIL kind of a both-fail row whose errors hold the listed texts, else None."""
    entry = lookup(BOTH_FAIL, row)
    if entry is None:
        return None
    kind, py_text, cpp_text, why = entry
    py_error, _, cpp_error = row["detail"].partition(" | cpp: ")
    if py_text not in py_error or cpp_text not in cpp_error:
        return None
    row["why"] = why
    return kind


def _column(row):
    """The table column of a row: its class, a PY-FAILS row by its central-difference verdict."""
    cls = row["class"].split(" (")[0]
    if cls == "PY-FAILS":
        return "PY-FAILS, " + row["numeric"]
    return cls


COLUMNS = ["match", "MISMATCH", "CPP-FAILS"] + [f"PY-FAILS, {v}" for v in NUMERIC_VERDICTS] \
    + ["both fail", "invalid"]


def _door_cell(results):
    """A door's cell of the per-op table: rows that agree, then any other class counted."""
    counts = {c: sum(r[0].split(" (")[0] == c for r in results) for c in DOOR_CLASSES}
    explained = sum("(explained)" in r[0] for r in results)
    known = sum("(KNOWN)" in r[0] for r in results)
    rest = [f"{n} {c}" for c, n in counts.items() if n and c != "agree"]
    notes = [f"{n} {w}" for n, w in ((explained, "explained"), (known, "KNOWN")) if n]
    return ", ".join([str(counts["agree"])] + rest) + (f" ({', '.join(notes)})" if notes else "")


def report_doors(rows, doors, quiet):
    """The doors' table per op and summary per door; the rows that fail the audit."""
    through = [r for r in rows if r.get("doors")]
    if not doors:
        return []
    if not quiet:
        print()
        print("| op | rows through the doors | " + " | ".join(doors) + " |")
        print("|---|---|" + "---|" * len(doors))
        by_op = {}
        for r in through:
            by_op.setdefault(r["op"], []).append(r)
        for op, rs in sorted(by_op.items()):
            print(f"| {op} | {len(rs)} | " + " | ".join(
                _door_cell([r["doors"][d] for r in rs if d in r["doors"]]) for d in doors) + " |")
    defects = []
    for r in through:
        for door in doors:
            cls, detail = r["doors"].get(door, ("", ""))
            if cls in ("DIFFERS", "FAILS"):
                defects.append(r)
            if cls in ("DIFFERS", "FAILS") or "(" in cls or (not quiet and cls == "cannot take"):
                print(f"door {door}: {cls}: {r['op']} config {r['config']} [{r['variant']}] "
                      f"{r['dtype']}: {detail}")
    untaken = [r for r in rows if r["class"] != "invalid" and not r.get("doors")]
    print(f"doors: {len(through)} rows through every door; {len(untaken)} rows whose forward runs "
          "give the doors nothing to differentiate (no float or complex input, or no output "
          "they take)"
          + (" (" + ", ".join(sorted({r["op"] for r in untaken})) + ")" if untaken else ""))
    for door in doors:
        results = [r["doors"][door] for r in through if door in r["doors"]]
        counts = {c: sum(x[0].split(" (")[0] == c for x in results) for c in DOOR_CLASSES}
        noted = {(c, w): sum(x[0] == f"{c} ({w})" for x in results)
                 for c in ("DIFFERS", "FAILS") for w in ("explained", "KNOWN")}
        print(f"door {door}: {len(results)} rows, {counts['agree']} agree, "
              f"{counts['DIFFERS']} DIFFERS ({noted['DIFFERS', 'explained']} explained, "
              f"{noted['DIFFERS', 'KNOWN']} KNOWN), "
              f"{counts['FAILS']} FAILS ({noted['FAILS', 'explained']} explained, "
              f"{noted['FAILS', 'KNOWN']} KNOWN), "
              f"{counts['cannot take']} cannot take, {counts['no reference']} no reference")
    return defects


def report(rows, skipped_ops, args, seconds, doors=()):
    by_op = {}
    for r in rows:
        by_op.setdefault(r["op"], []).append(r)
    if not args.quiet:
        print("| op | rows | " + " | ".join(COLUMNS) + " |")
        print("|---|---|" + "---|" * len(COLUMNS))
        for op, rs in sorted(by_op.items()):
            counts = [sum(_column(r) == c for r in rs) for c in COLUMNS]
            print(f"| {op} | {len(rs)} | " + " | ".join(str(c) for c in counts) + " |")
    total = {c: sum(_column(r) == c for r in rows) for c in COLUMNS}
    defects = [r for r in rows if r["class"] in ("MISMATCH", "CPP-FAILS", "PY-FAILS, C++ != numeric")
               or (r["class"] == "both fail" and r.get("both") is None)]
    known = [r for r in rows if "(" in r["class"]]
    for r in known + defects:
        print(f"{r['class']}: {r['op']} config {r['config']} [{r['variant']}] {r['dtype']}: "
              f"{r['detail']}" + (f" -- {r.get('numeric_detail')}" if r.get("numeric") else "")
              + (f" -- {r['why']}" if "why" in r else ""))
    if not args.quiet:
        for r in rows:
            if r["class"] == "PY-FAILS":
                print(f"PY-FAILS, {r['numeric']}: {r['op']} config {r['config']} [{r['variant']}] "
                      f"{r['dtype']}: Python: {r['detail']} -- {r['numeric_detail']}")
            elif r["class"] == "both fail" and r.get("both"):
                print(f"both fail, {r['both']}: {r['op']} config {r['config']} [{r['variant']}] "
                      f"{r['dtype']}: {r['why']}")
    door_defects = report_doors(rows, list(doors), args.quiet)
    py_fails = sum(total[c] for c in COLUMNS if c.startswith("PY-FAILS"))
    both = [r for r in rows if r["class"] == "both fail"]
    kinds = {}
    for r in both:
        kinds[r.get("both") or "UNEXPLAINED"] = kinds.get(r.get("both") or "UNEXPLAINED", 0) + 1
    print(f"audit: {len(by_op)} ops, {len(rows)} configurations"
          + (f" (seeded subset {args.subset}, seed {args.seed})" if args.subset else "")
          + f": {total['match']} match, {total['MISMATCH']} MISMATCH, {total['CPP-FAILS']} CPP-FAILS, "
          f"{py_fails} PY-FAILS ("
          + ", ".join(f"{total['PY-FAILS, ' + v]} {v}" for v in NUMERIC_VERDICTS) + "), "
          f"{len(both)} both fail ("
          + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) + f"), {total['invalid']} invalid"
          + (f"; through {len(doors)} doors, {len(door_defects)} door rows differing or "
             "failing unexplained" if doors else "")
          + f"; {len(known)} explained or known; {len(defects) + len(door_defects)} unexplained; "
          f"{len(skipped_ops)} ops without both gradients skipped; {seconds:.0f} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 1 if defects or door_defects else 0


if __name__ == "__main__":
    sys.exit(main())
