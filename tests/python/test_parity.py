"""Parity with Python: every op for which TensorFlow's Python gradient registry holds
a gradient *function* has a C++ gradient, unless it is on EXCLUSIONS (with its reason).

Imports tensorflow and nothing of the project: the op library ($TF_EXT_LIBRARY, which
tests/python/run_pytest.py sets) is loaded with tf.load_op_library (its load unifies TensorFlow's
two C++ gradient registries) and asked through its C entry point TfExtGradientKind
(tf_ext/grads/c_api.h) what the C++ registries hold for each op: a gradient function, a
no-gradient registration, nothing, or a registered refusal ("not implemented", whose creator only
returns an error). Only the first counts as a C++ gradient.

The lists (docs/registries.md, "Parity with Python", shows them):
  EXCLUSIONS        at most 30: a C++ gradient means nothing in a C++ process, or cannot be
                    checked on these machines (no CPU kernel in tensorflow-cpu);
  PENDING_TRAINING  resource-variable reads, not exclusions;
  PYTHON_DECLINES   Python's registered "function" itself gives no gradient (returns None for
                    every input, or only raises) and C++ registers the same: checked from the
                    function's source and from the C++ registries, not counted as C++ gradients;
  NOT_YET_PORTED    ops still to port. The ops lacking a C++ gradient, less the three lists
                    above, must EQUAL it: a TensorFlow release that adds Python gradients fails by
                    name, and so does an op that gained a C++ gradient but is still listed (the
                    list only shrinks).
"""

import ast
import ctypes
import inspect
import os
import textwrap

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, node_def_pb2, types_pb2
from tensorflow.python.framework import kernels, op_def_registry, ops

# TfExtGradientKind's values (tf_ext/grads/registry.h, enum class GradientKind).
FUNCTION, NONE, MISSING, UNIMPLEMENTED = 0, 1, 2, 3
KIND_NAMES = {FUNCTION: "function", NONE: "no-gradient", MISSING: "missing",
              UNIMPLEMENTED: "not implemented"}

_V1_CONTROL_FLOW = ("v1 control flow: tf_ext's control-flow pass converts lowered loops and "
                    "conditionals back to While/If and differentiates those "
                    "(docs/control_flow.md); a per-node gradient of a frame op means nothing")
_NO_CPU = "no kernel in tensorflow-cpu 2.21 (checked below), so no gradient can be checked here"

# op -> (reason, whether the reason is that the op has no CPU kernel; the test checks that).
EXCLUSIONS = {
    # A Python callback: the gradient runs Python code through a tape cache.
    "EagerPyFunc": ("runs a Python function; its gradient replays a Python tape, which a C++ "
                    "process does not have", False),
    # v1 control flow and its Ref forms.
    "Switch": (_V1_CONTROL_FLOW, False),
    "Merge": (_V1_CONTROL_FLOW, False),
    "Enter": (_V1_CONTROL_FLOW, False),
    "Exit": (_V1_CONTROL_FLOW, False),
    "NextIteration": (_V1_CONTROL_FLOW, False),
    "LoopCond": (_V1_CONTROL_FLOW, False),
    "RefSwitch": (_V1_CONTROL_FLOW + "; reference-typed", False),
    "RefMerge": (_V1_CONTROL_FLOW + "; reference-typed", False),
    "RefEnter": (_V1_CONTROL_FLOW + "; reference-typed", False),
    "RefExit": (_V1_CONTROL_FLOW + "; reference-typed", False),
    "RefNextIteration": (_V1_CONTROL_FLOW + "; reference-typed", False),
    # cuDNN: GPU only.
    "CudnnRNN": ("cuDNN RNN, GPU only: " + _NO_CPU, True),
    "CudnnRNNV2": ("cuDNN RNN, GPU only: " + _NO_CPU, True),
    "CudnnRNNV3": ("cuDNN RNN, GPU only: " + _NO_CPU, True),
    # NCCL collectives.
    "NcclAllReduce": ("NCCL collective (GPU runtime): " + _NO_CPU, True),
    "NcclBroadcast": ("NCCL collective (GPU runtime): " + _NO_CPU, True),
    "NcclReduce": ("NCCL collective (GPU runtime): " + _NO_CPU, True),
    # TPU collectives and embeddings.
    "AllToAll": ("TPU collective: " + _NO_CPU, True),
    "CollectivePermute": ("TPU collective: " + _NO_CPU, True),
    "CrossReplicaSum": ("TPU collective: " + _NO_CPU, True),
    "TPUEmbeddingActivations": ("TPU embedding: " + _NO_CPU, True),
    # DTensor layouts.
    "CopyToMesh": ("DTensor runtime: " + _NO_CPU, True),
    "CopyToMeshGrad": ("DTensor runtime: " + _NO_CPU, True),
    "Relayout": ("DTensor runtime: " + _NO_CPU, True),
    "RelayoutLike": ("DTensor runtime: " + _NO_CPU, True),
    # XLA compiler-internal ops.
    "XlaClusterOutput": ("XLA compiler-internal (the output of an XLA cluster): " + _NO_CPU, True),
    "XlaSpmdFullToShardShape": ("XLA SPMD partitioner annotation: " + _NO_CPU, True),
}

# Resource-variable reads: a SymbolicGradient cannot return a float gradient for a DT_RESOURCE
# input; the trainer differentiates with respect to the read values. Not exclusions.
PENDING_TRAINING = {"ResourceGather", "ResourceGatherNd"}

# op -> what Python's registered function does. C++ must do the same: "returns None" -> a
# no-gradient registration; "raises" -> a registered refusal, or a creator that fails.
PYTHON_DECLINES = {
    "Floor": "returns None",
    "FloorDiv": "returns None",
    "TruncateDiv": "returns None",
    "PreventGradient": "raises",
    "SparseDenseCwiseAdd": "raises",
    "SparseSparseMaximum": "raises",
    "SparseSparseMinimum": "raises",
    "SparseMatrixMul": "raises",  # `del op; del grad; raise NotImplementedError`
    "_EagerConst": "raises",
}

# Ops still to port (not exclusions). Remove an op when it gains a C++ gradient.
# SparseMatrixAdd, SparseMatrixSoftmax and XlaSpmdShardToFullShape, whose gradients cannot run
# in tensorflow-cpu, left it checked structurally against Python's gradient graph
# (tests/python/test_unrunnable_grads.py).
NOT_YET_PORTED = set()

MAX_EXCLUSIONS = 30


def _library_path():
    path = os.environ.get("TF_EXT_LIBRARY", "tf_ext/_tf_ext_ops.so")
    assert os.path.isfile(path), f"op library not found: {path} (set TF_EXT_LIBRARY)"
    return os.path.realpath(path)


def _load():
    path = _library_path()
    tf.load_op_library(path)  # registers the ops and gradients; the load unifies the registries
    lib = ctypes.CDLL(path)  # the same, already loaded library
    lib.TfExtGradientKind.restype = ctypes.c_int
    lib.TfExtGradientKind.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.TfExtGradientFunctionDef.restype = ctypes.c_int
    lib.TfExtGradientFunctionDef.argtypes = [
        ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p),
        ctypes.POINTER(ctypes.c_size_t), ctypes.c_char_p, ctypes.c_size_t]
    lib.TfExtFree.argtypes = [ctypes.c_void_p]
    lib.TfExtUnifyGradientRegistries.restype = ctypes.c_int
    lib.TfExtUnifyGradientRegistries.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    report = ctypes.create_string_buffer(1 << 16)
    assert lib.TfExtUnifyGradientRegistries(report, len(report)) == 0, report.value
    return lib


LIB = _load()


def cpp_kind(op):
    message = ctypes.create_string_buffer(4096)
    kind = LIB.TfExtGradientKind(op.encode(), message, len(message))
    assert kind in KIND_NAMES, f"TfExtGradientKind({op!r}) returned {kind}"
    return kind


def python_gradient_functions():
    """Ops whose entry in Python's gradient registry is a function (tf.no_gradient stores None)."""
    registry = ops._gradient_registry  # pylint: disable=protected-access
    return {op for op in registry.list() if registry.lookup(op) is not None}


def python_declines(op):
    """'returns None' / 'raises' when the body of op's Python gradient function (its docstring
    and `del` statements before it aside) is one `return` of None (or of a tuple or list of
    Nones) or one `raise`; else None."""
    fn = ops._gradient_registry.lookup(op)  # pylint: disable=protected-access
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return None
    body = tree.body[0].body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    while len(body) > 1 and isinstance(body[0], ast.Delete):  # `del op; del grad` (unused)
        body = body[1:]
    if len(body) != 1:
        return None
    stmt = body[0]
    if isinstance(stmt, ast.Raise):
        return "raises"
    if isinstance(stmt, ast.Return):
        values = stmt.value.elts if isinstance(stmt.value, (ast.Tuple, ast.List)) else [stmt.value]
        if all(v is None or (isinstance(v, ast.Constant) and v.value is None) for v in values):
            return "returns None"
    return None


def probe_attrs(op):
    """Attrs for a NodeDef of `op`: defaults; float (else the first allowed type) for types."""
    attrs = {}
    for a in op_def_registry.get(op).attr:
        if a.HasField("default_value"):
            attrs[a.name] = a.default_value
        elif a.type == "type":
            allowed = list(a.allowed_values.list.type)
            attrs[a.name] = attr_value_pb2.AttrValue(
                type=types_pb2.DT_FLOAT if not allowed or types_pb2.DT_FLOAT in allowed
                else allowed[0])
        elif a.type == "string":
            attrs[a.name] = attr_value_pb2.AttrValue(s=b"parity probe")
    return attrs


def creator_fails(op, attrs):
    """Whether the C++ gradient creator of `op` fails for a NodeDef with these attrs."""
    node = node_def_pb2.NodeDef(name="probe", op=op)
    for name, value in attrs.items():
        node.attr[name].CopyFrom(value)
    data = node.SerializeToString()
    out, size = ctypes.c_void_p(), ctypes.c_size_t()
    error = ctypes.create_string_buffer(4096)
    failed = LIB.TfExtGradientFunctionDef(data, len(data), ctypes.byref(out), ctypes.byref(size),
                                          error, len(error)) != 0
    if not failed:
        LIB.TfExtFree(out)
    return failed


def cpp_declines_as_python(op, how):
    kind = cpp_kind(op)
    if how == "returns None":
        return kind == NONE
    if kind == UNIMPLEMENTED:
        return True
    # A creator that refuses (PreventGradient's): it fails for a well-formed NodeDef.
    return kind == FUNCTION and creator_fails(op, probe_attrs(op))


def classify():
    """(Python-gradient ops, with a C++ gradient, declined by both, lacking a C++ gradient)."""
    python = python_gradient_functions()
    declines = {op for op in PYTHON_DECLINES if op in python}
    covered = {op for op in python - declines if cpp_kind(op) == FUNCTION}
    return python, covered, declines, python - covered - declines


PYTHON, COVERED, DECLINES, LACKING = classify()


def _names(ops_, with_kind=False):
    return "\n  ".join(f"{op} [C++: {KIND_NAMES[cpp_kind(op)]}]" if with_kind else op
                       for op in sorted(ops_))


def test_kind_values_are_the_librarys():
    """This file's copy of GradientKind's values, against one op of each kind (the ops
    test_layering.py uses)."""
    examples = ["TfExt>ZeroOut", "TfExt>GradientFunctionDef", "TfExt>NoSuchOp",
                "TfExt>RoiPoolGrad"]
    assert [cpp_kind(op) for op in examples] == [FUNCTION, NONE, MISSING, UNIMPLEMENTED]


def parity_problems(lacking):
    """The messages test_every_python_gradient_has_a_cpp_gradient fails with ([] if none)."""
    unexplained = lacking - set(EXCLUSIONS) - PENDING_TRAINING - NOT_YET_PORTED
    ported = NOT_YET_PORTED - lacking
    messages = []
    if unexplained:
        messages.append(
            f"{len(unexplained)} op(s) have a Python gradient function and no C++ gradient (nor a "
            "no-gradient or refusal matching Python's, see PYTHON_DECLINES); port them, or add "
            "them to EXCLUSIONS with a reason if a C++ gradient means nothing or cannot be "
            "checked here:\n  " + _names(unexplained, with_kind=True))
    if ported:
        messages.append(
            f"{len(ported)} op(s) on NOT_YET_PORTED no longer lack a C++ gradient (or left "
            "Python's registry): remove them from NOT_YET_PORTED and update "
            "docs/registries.md:\n  " + _names(ported))
    return messages


def test_every_python_gradient_has_a_cpp_gradient():
    messages = parity_problems(LACKING)
    assert not messages, "\n".join(messages)


def test_a_new_python_gradient_fails_by_name():
    """What a TensorFlow release adding a Python gradient does: a Python gradient function
    registered (for the duration of this test) for an op C++ knows nothing of is named."""
    registry = ops._gradient_registry  # pylint: disable=protected-access
    op = "TfExtParityProbeNewOp"
    assert op not in registry.list() and cpp_kind(op) == MISSING
    ops.RegisterGradient(op)(lambda unused_op, grad: grad)
    try:
        _, _, _, lacking = classify()
    finally:
        del registry._registry[op]  # pylint: disable=protected-access
    assert op not in python_gradient_functions()
    messages = parity_problems(lacking)
    assert len(messages) >= 1 and f"\n  {op} [C++: missing]" in messages[0], messages


def test_exclusions_are_few_and_still_needed():
    assert len(EXCLUSIONS) <= MAX_EXCLUSIONS, f"{len(EXCLUSIONS)} exclusions > {MAX_EXCLUSIONS}"
    stale = (set(EXCLUSIONS) | PENDING_TRAINING) - LACKING
    assert not stale, ("excluded or pending ops that no longer lack a C++ gradient (or left "
                       "Python's registry); remove them:\n  " + _names(stale))
    lists = [set(EXCLUSIONS), PENDING_TRAINING, set(PYTHON_DECLINES), NOT_YET_PORTED]
    for i, a in enumerate(lists):
        for b in lists[i + 1:]:
            assert not a & b, f"on two lists: {sorted(a & b)}"


def test_no_cpu_kernel_exclusions_have_no_cpu_kernel():
    wrong = sorted(op for op, (_, no_cpu) in EXCLUSIONS.items() if no_cpu and any(
        k.device_type == "CPU" for k in kernels.get_registered_kernels_for_op(op).kernel))
    assert not wrong, f"excluded for having no CPU kernel, but have one: {wrong}"


def test_python_declines_are_declined_on_both_sides():
    wrong = []
    for op, how in sorted(PYTHON_DECLINES.items()):
        if op not in PYTHON:
            wrong.append(f"{op}: no longer a Python gradient function")
        elif python_declines(op) != how:
            wrong.append(f"{op}: Python's gradient function no longer only {how}")
        elif not cpp_declines_as_python(op, how):
            wrong.append(f"{op}: C++ does not decline as Python does (Python {how}; C++ "
                         f"{KIND_NAMES[cpp_kind(op)]})")
    assert not wrong, "\n".join(wrong)


def test_counts_add_up():
    # Every Python-gradient op is in exactly one of the groups docs/registries.md counts.
    assert len(PYTHON) == (len(COVERED) + len(DECLINES) + len(EXCLUSIONS) + len(PENDING_TRAINING)
                           + len(LACKING - set(EXCLUSIONS) - PENDING_TRAINING))
    print(f"\nPython gradient functions: {len(PYTHON)}; with a C++ gradient: {len(COVERED)}; "
          f"declined as Python: {len(DECLINES)}; excluded: {len(EXCLUSIONS)}; pending training: "
          f"{len(PENDING_TRAINING & LACKING)}; not yet ported: {len(NOT_YET_PORTED & LACKING)}")
