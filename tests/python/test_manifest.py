"""Generic Python tests over the op library's manifest (tf_ext/grads/manifest.h): every
declared op with a Python function has one, exported and documented with its declared doc
line, and the C++ registries' answer for it matches its declared differentiability. A new op
gets these without writing them."""
import inspect

import numpy as np
import pytest
import tensorflow as tf

import tf_ext
from tf_ext import _c_api

MANIFEST = tf_ext.declared_ops()
WITH_PYTHON = [f for f in MANIFEST if f["python"]]


def test_manifest_lists_every_library_op_once():
    ops = [f["op"] for f in MANIFEST]
    assert len(ops) == len(set(ops))
    assert sorted(ops) == sorted(tf_ext.op_names())
    assert {f["differentiability"] for f in MANIFEST} == {
        "gradient", "not differentiable", "backward op"}


def test_every_differentiable_op_has_a_python_function():
    for f in MANIFEST:
        if f["differentiability"] == "gradient":
            assert f["python"], f["op"]


@pytest.mark.parametrize("facts", WITH_PYTHON, ids=[f["python"] for f in WITH_PYTHON])
def test_python_function_exported_and_documented(facts):
    name = facts["python"]
    fn = getattr(tf_ext, name)
    assert callable(fn)
    assert name in tf_ext.__all__
    assert name in dir(tf_ext)
    doc = " ".join(inspect.getdoc(fn).split())
    assert doc.startswith(" ".join(facts["doc"].split())), (name, doc[:200])


@pytest.mark.parametrize("facts", MANIFEST, ids=[f["op"] for f in MANIFEST])
def test_registry_agrees_with_declaration(facts):
    kind, message = _c_api.gradient_kind(facts["op"])
    want = {"gradient": _c_api.GradientKind.FUNCTION,
            "not differentiable": _c_api.GradientKind.NONE,
            "backward op": _c_api.GradientKind.UNIMPLEMENTED}[facts["differentiability"]]
    assert kind == want
    if facts["differentiability"] == "backward op":
        assert message == (f"{facts['op']} is the backward op of {facts['backward_of']}; "
                           f"second-order gradients of {facts['backward_of']} are not "
                           "implemented")


def test_generated_function_name_mapping():
    from tf_ext import ops
    assert ops._python_name_to_generated("TfExt>SmoothL1") == "tf_ext_smooth_l1"
    assert ops._python_name_to_generated("TfExt>MedianPool2D") == "tf_ext_median_pool2d"
    assert ops._python_name_to_generated("TfExt>PsRoiAlign") == "tf_ext_ps_roi_align"
    assert ops._python_name_to_generated("TfExt>SignSTE") == "tf_ext_sign_ste"
    for f in MANIFEST:  # every declared op's generated wrapper exists under that name
        assert hasattr(tf_ext.library(), ops._python_name_to_generated(f["op"])), f["op"]


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError):
        tf_ext.no_such_function  # pylint: disable=pointless-statement


def test_readme_op_table_is_generated_from_the_manifest():
    import importlib.util
    import os
    root = os.path.join(os.environ["TEST_SRCDIR"], "tf_ext") if "TEST_SRCDIR" in os.environ \
        else os.getcwd()
    spec = importlib.util.spec_from_file_location(
        "op_table", os.path.join(root, "scripts", "op_table.py"))
    op_table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(op_table)
    readme = open(os.path.join(root, "README.md")).read()
    generated = op_table.table(MANIFEST)
    assert op_table.replace_table(readme, generated) == readme, \
        "README.md's op table is stale: run `make docs`"
    for f in MANIFEST:
        assert f"`{f['op']}`" in generated
