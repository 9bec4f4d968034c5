"""Issue 10 from Python: the same calls are accepted in every mode (eager, tf.function,
tf.compat.v1 graph), errors name the op, SignSTE of a denormal is 0 like tf.sign, hostile
NodeDefs reach neither TensorFlow's gradient creators nor a crash (op and C entry point), and
a second copy of the library is refused by name."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import node_def_pb2, types_pb2

import tf_ext
from conftest import evaluate

LIB = os.environ["TF_EXT_LIBRARY"]


def _error(mode: str, f, *args) -> str:
    with pytest.raises((tf.errors.OpError, ValueError, TypeError)) as e:
        evaluate(mode, f, *args)
    return str(e.value)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sign_ste_of_a_denormal_is_zero_like_tf_sign(mode, dtype):
    tiny = np.finfo(dtype).smallest_subnormal
    x = np.array([tiny, -tiny, np.finfo(dtype).tiny, -np.finfo(dtype).tiny, 0.0, 2.0], dtype)
    y = evaluate(mode, tf_ext.sign_ste, x)
    np.testing.assert_array_equal(y, [0, 0, 1, -1, 0, 1])
    assert list(np.signbit(y)) == [False, True, False, True, False, False]
    # tf.sign gives what a kernel takes for 0 (it may hand back a denormal, which the next
    # kernel flushes): both agree once flushed.
    s = evaluate(mode, tf.sign, x)
    flushed = np.where(np.abs(s) < np.finfo(dtype).tiny, 0, s)
    np.testing.assert_array_equal(flushed, np.abs(y) * np.sign(y))


def test_sign_ste_half_denormals_match_tf_sign(mode):
    x = np.array([6e-8, -6e-8, 0.0, 1.0], np.float16)  # half denormals widen to normal floats
    np.testing.assert_array_equal(evaluate(mode, tf_ext.sign_ste, x), evaluate(mode, tf.sign, x))


def test_tiny_attrs_are_judged_alike_in_every_mode(mode):
    data = np.ones((1, 4, 4, 1), np.float32)
    rois = np.array([[0, 0, 0, 3, 3]], np.float32)
    for scale in (1e-45, -1e-45):
        msg = _error(mode, lambda d, r: tf_ext.roi_pool(d, r, 1, 1, scale), data, rois)
        assert "TfExt>RoiPool: spatial_scale must be a finite number > 0" in msg
    x = np.array([0.0, 1e-3], np.float32)
    np.testing.assert_array_equal(evaluate(mode, lambda t: tf_ext.sign_ste(t, clip=-1e-45), x),
                                  [0, 1])
    np.testing.assert_array_equal(
        evaluate(mode, lambda t: tf_ext.gradient_reversal(t, scale=1e-45), x), x)


@pytest.mark.parametrize("case", ["rank", "rois", "sampling_ratio", "pooled_overflow"])
def test_ps_roi_align_errors_name_the_op_in_every_mode(mode, case):
    features = np.ones((1, 4, 4, 4), np.float32)
    rois = np.array([[0, 0, 0, 3, 3]], np.float32)
    args = dict(pooled_height=2, pooled_width=2, spatial_scale=1.0, sampling_ratio=2)
    if case == "rank":
        features = features[0]
    elif case == "rois":
        rois = rois[:, :4]
    elif case == "sampling_ratio":
        args["sampling_ratio"] = 2**20
    else:
        args.update(pooled_height=2**32, pooled_width=2**32)  # product wraps to 0
    msg = _error(mode, lambda f, r: tf_ext.ps_roi_align(f, r, **args), features, rois)
    assert "TfExt>PsRoiAlign: " in msg, msg
    assert "Shape must be" not in msg and "Dimension must be" not in msg, msg


class Type(int):
    """A type attr value (DataType enums are plain ints in Python)."""


def _node_def(op: str, **attrs) -> bytes:
    node = node_def_pb2.NodeDef(name="n", op=op)
    for k, v in attrs.items():
        if isinstance(v, Type):
            node.attr[k].type = v
        elif isinstance(v, int):
            node.attr[k].i = v
        else:
            node.attr[k].list.type.extend(v)
    return node.SerializeToString()


def _without_tf_prefix(msg: str) -> str:
    """Eager mode may prefix a kernel's message with "{{function_node ...}} "."""
    while msg.startswith("{{"):
        msg = msg[msg.index("}}") + 2:].lstrip()
    return msg


HOSTILE = {
    "garbage": b"\xff\xff\xff\xff\x0f\x01",
    "unknown_op": _node_def("NoSuchOp"),
    "list_to_array_no_n": _node_def("_ListToArray", T=Type(types_pb2.DT_FLOAT)),
    "list_to_array_negative_n": _node_def("_ListToArray", T=Type(types_pb2.DT_FLOAT), N=-1,
                                          Tin=[types_pb2.DT_FLOAT]),
    "array_to_list_huge_n": _node_def("_ArrayToList", T=Type(types_pb2.DT_FLOAT), N=2**40,
                                      out_types=[types_pb2.DT_FLOAT]),
    "concat_v2_no_n": _node_def("ConcatV2", T=Type(types_pb2.DT_FLOAT), Tidx=Type(types_pb2.DT_INT32)),
    "concat_negative_n": _node_def("Concat", T=Type(types_pb2.DT_FLOAT), N=-3),
    "concat_v2_huge_n": _node_def("ConcatV2", T=Type(types_pb2.DT_FLOAT), N=2**31,
                                  Tidx=Type(types_pb2.DT_INT32)),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_gradient_function_def_op_rejects_hostile_node_defs(case):
    lib = tf_ext.library()
    with pytest.raises((tf.errors.InvalidArgumentError, tf.errors.NotFoundError)) as e:
        lib.tf_ext_gradient_function_def(HOSTILE[case])
    assert _without_tf_prefix(str(e.value)).startswith("TfExt>GradientFunctionDef"), str(e.value)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_c_entry_point_rejects_hostile_node_defs(case):
    c = ctypes.CDLL(LIB)
    fn = c.TfExtGradientFunctionDef
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p),
                   ctypes.POINTER(ctypes.c_size_t), ctypes.c_char_p, ctypes.c_size_t]
    out, out_len, err = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.create_string_buffer(256)
    data = HOSTILE[case]
    assert fn(data, len(data), ctypes.byref(out), ctypes.byref(out_len), err, 256) == 1
    assert err.value, case


def test_second_copy_is_refused_naming_both_paths(tmp_path):
    copy = str(tmp_path / "copy_of_tf_ext_ops.so")
    shutil.copyfile(LIB, copy)
    code = f"""
import tensorflow as tf
first = tf.load_op_library({LIB!r})
try:
    tf.load_op_library({copy!r})
except Exception as e:  # noqa: BLE001
    print("REFUSED:", e)
else:
    print("LOADED")
print("OPS_WORK:", first.tf_ext_zero_out([1., 2., 3.], preserve_index=1).numpy().tolist())
"""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "REFUSED:" in p.stdout, p.stdout
    refused = p.stdout.split("REFUSED:")[1].split("\n")[0]
    assert copy in refused and (LIB in refused or os.path.realpath(LIB) in refused), refused
    assert "OPS_WORK: [0.0, 2.0, 0.0]" in p.stdout, p.stdout
