"""The generic machinery: library loading, op lookup errors, gradient registration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import tensorflow as tf

import tf_ext
from tf_ext import _tf_compat, ops


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter (process-wide state: eager mode, first load)."""
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **env}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env,
                          capture_output=True, text=True, timeout=300)


def test_library_path_is_canonical_and_has_ops():
    path = tf_ext.library_path()
    assert path == os.path.realpath(path)
    assert os.path.basename(path) == "_tf_ext_ops.so"
    assert set(tf_ext.op_names()) >= {"TfExt>ZeroOut", "TfExt>GradientFunctionDef"}
    assert tf_ext.library() is tf_ext.library()


def test_build_info_records_tensorflow_version():
    assert tf_ext.build_info()["tensorflow_version"] == tf.__version__


def test_missing_library_error_names_path_and_versions():
    result = run_python("""
        import tf_ext
        try:
            tf_ext.zero_out([1.0])
        except tf_ext.LibraryLoadError as e:
            print("ERROR:", e)
    """, TF_EXT_LIBRARY="/nonexistent/_tf_ext_ops.so")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "ERROR:" in out and "/nonexistent/_tf_ext_ops.so" in out, out
    assert f"this process runs TensorFlow {tf.__version__}" in out, out


def test_lookup_order_is_the_documented_one(monkeypatch):
    """docs/cpp.md "Where the op library is found", shared with tf_ext/tools/library_lookup.h:
    $TF_EXT_LIBRARY alone when set, else the package's .so, runfiles, then the build tree."""
    from tf_ext import _loader  # pylint: disable=g-import-not-at-top
    monkeypatch.setenv("TF_EXT_LIBRARY", "/explicit/_tf_ext_ops.so")
    assert _loader._candidates() == ["/explicit/_tf_ext_ops.so"]
    monkeypatch.delenv("TF_EXT_LIBRARY")
    monkeypatch.setenv("RUNFILES_DIR", "/rf")
    candidates = _loader._candidates()
    assert candidates[0] == os.path.join(_loader._PACKAGE_DIR, "_tf_ext_ops.so")
    assert candidates[1] == "/rf/tf_ext/tf_ext/_tf_ext_ops.so"
    assert candidates[-1].endswith(os.path.join("bazel-bin", "tf_ext", "_tf_ext_ops.so"))


def test_unloadable_library_error_names_path(tmp_path):
    bad = tmp_path / "_tf_ext_ops.so"
    bad.write_bytes(b"not an ELF file")
    result = run_python("""
        import tf_ext
        try:
            tf_ext.library()
        except tf_ext.LibraryLoadError as e:
            print("ERROR:", e)
    """, TF_EXT_LIBRARY=str(bad))
    assert f"could not load op library {bad}" in result.stdout, result.stdout + result.stderr


def test_op_missing_from_library_is_named():
    with pytest.raises(tf_ext.OpNotInLibraryError) as e:
        ops._wrapper("TfExt>NoSuchOp", "tf_ext_no_such_op")
    message = str(e.value)
    assert "TfExt>NoSuchOp" in message and tf_ext.library_path() in message
    assert "TfExt>ZeroOut" in message  # lists what the library does have


def test_own_library_gradients_are_registered():
    status = tf_ext.register_cpp_gradients(tf_ext.library())
    # What each declared op gets in Python follows its declaration: a gradient is bridged; a
    # dedicated backward op's gradient (a second derivative of the forward op) is not
    # implemented in C++ and so in Python; a not-differentiable op gets tf.no_gradient.
    word = {"gradient": "bridged", "backward op": "unimplemented",
            "not differentiable": "no_gradient"}
    assert status == {f["op"]: word[f["differentiability"]] for f in tf_ext.declared_ops()}
    assert {op: status[op] for op in ("TfExt>ZeroOut", "TfExt>RoiPoolGrad",
                                      "TfExt>GradientFunctionDef")} == {
        "TfExt>ZeroOut": "bridged", "TfExt>RoiPoolGrad": "unimplemented",
        "TfExt>GradientFunctionDef": "no_gradient"}
    assert tf_ext.register_cpp_gradients(["TfExt>ZeroOut"]) == {"TfExt>ZeroOut": "bridged"}
    assert tf_ext.register_cpp_gradients(tf_ext.library_path()) == status


def test_ops_with_python_gradients_are_left_alone():
    assert tf_ext.register_cpp_gradients(["MatMul"]) == {"MatMul": "python"}


def test_ops_without_cpp_gradient_stay_unregistered():
    assert tf_ext.register_cpp_gradients(["TfExt>NoSuchOp"]) == {"TfExt>NoSuchOp": "missing"}
    assert not _tf_compat.has_python_gradient("TfExt>NoSuchOp")


def test_module_without_ops_is_rejected():
    import types
    with pytest.raises(ValueError, match="wraps no registered op"):
        tf_ext.register_cpp_gradients(types.ModuleType("empty_wrappers"))


def test_tf1_graph_mode_without_eager():
    """With eager execution disabled process-wide, the bridge still asks C++ (running its
    op in a temporary eager context) and second-order tf.gradients work."""
    result = run_python("""
        import json
        import numpy as np
        import tensorflow as tf
        tf.compat.v1.disable_eager_execution()
        import tf_ext
        x = tf.compat.v1.placeholder(tf.float64, [4])
        y = tf_ext.zero_out(x, preserve_index=2)
        (g,) = tf.gradients(tf.reduce_sum(y * y), x)
        (h,) = tf.gradients(g, x, grad_ys=tf.constant([1.0, 2.0, 3.0, 4.0], tf.float64))
        with tf.compat.v1.Session() as sess:
            gv, hv = sess.run([g, h], {x: [1.0, 2.0, 3.0, 4.0]})
        print("RESULT", json.dumps([gv.tolist(), hv.tolist()]))
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(l for l in result.stdout.splitlines() if l.startswith("RESULT"))
    g, h = json.loads(line[len("RESULT"):])
    assert g == [0.0, 0.0, 6.0, 0.0]  # 2 S x
    assert h == [0.0, 0.0, 6.0, 0.0]  # 2 S v


def test_first_load_is_thread_safe():
    """Many threads hitting a fresh process's first load all see one library and working
    gradients (the loader bridges before anyone can use the ops)."""
    result = run_python("""
        import threading
        import tensorflow as tf
        import tf_ext
        results, errors = [], []
        def work(i):
            try:
                x = tf.constant([1.0, 2.0, 3.0])
                with tf.GradientTape() as t:
                    t.watch(x)
                    y = tf_ext.zero_out(x, preserve_index=i % 3)
                results.append((id(tf_ext.library()), t.gradient(y, x).numpy().tolist()))
            except Exception as e:
                errors.append(repr(e))
        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads: t.start()
        for t in threads: t.join()
        assert not errors, errors
        assert len({r[0] for r in results}) == 1
        for i in range(3):
            want = [1.0 if j == i else 0.0 for j in range(3)]
            assert want in [r[1] for r in results]
        print("OK", len(results))
    """)
    assert "OK 8" in result.stdout, result.stdout + result.stderr[-3000:]
