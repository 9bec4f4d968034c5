"""tf_ext_py_test: one pytest file run under Bazel by tests/python/run_pytest.py."""

def tf_ext_py_test(name, src, data = [], deps = [], size = "medium", **kwargs):
    """A py_test running pytest on `src` (plus conftest.py and ports.py), with the tf_ext package and op
    library in its runfiles. run_pytest.py exports the library paths (TF_EXT_LIBRARY, ...)."""
    native.py_test(
        name = name,
        size = size,
        srcs = [
            "python/run_pytest.py",
            "python/conftest.py",
            "python/ports.py",
            src,
        ],
        main = "python/run_pytest.py",
        args = ["$(location %s)" % src],
        data = data + ["//tf_ext:_tf_ext_ops.so"],
        deps = deps + ["//python:tf_ext_pkg"],
        # No generated __init__.py files: they would make the workspace's tf_ext/ directory
        # (holding the .so) a package that shadows python/tf_ext.
        legacy_create_init = False,
        python_version = "PY3",
        srcs_version = "PY3",
        **kwargs
    )
