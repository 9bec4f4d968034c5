"""The Python package's layering: _loader only loads, the bridge registers gradients, no import
cycle, every private TensorFlow API behind _tf_compat, one copy of the C enums."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap

import pytest

import tf_ext
from tf_ext import _c_api
from tf_ext._c_api import GradientKind

PACKAGE_DIR = os.path.dirname(os.path.abspath(tf_ext.__file__))
MODULES = sorted(f[:-3] for f in os.listdir(PACKAGE_DIR) if f.endswith(".py"))

# Imports of TensorFlow's private modules, and private attributes reached through tf.
PRIVATE_TF = re.compile(
    r"tensorflow\.(python|core)\b"
    r"|from\s+tensorflow\s+import\s+(python|core)\b"
    r"|\bpywrap_"
    r"|\btf(\.\w+)*\.(?!__version__\b)_\w")


def source(module: str) -> str:
    with open(os.path.join(PACKAGE_DIR, module + ".py"), encoding="utf-8") as f:
        return f.read()


def private_tf_uses(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if PRIVATE_TF.search(line)]


def test_the_pattern_finds_private_apis():
    """The check below would catch what it is meant to catch."""
    assert {"_loader", "_bridge", "_tf_compat", "layers", "ops"} <= set(MODULES)
    assert private_tf_uses(source("_tf_compat"))  # the one module that may
    for line in ("from tensorflow.python.eager import context",
                 "import tensorflow.core.framework.node_def_pb2",
                 "from tensorflow import python as tfp",
                 "ops = tf.__internal__.ops", "x = tf.compat.v1._private"):
        assert private_tf_uses(line), line
    assert not private_tf_uses("tf.compat.v1.placeholder(tf.float32)\nv = tf.__version__")


@pytest.mark.parametrize("module", [m for m in MODULES if m != "_tf_compat"])
def test_private_tensorflow_only_through_tf_compat(module):
    assert private_tf_uses(source(module)) == [], (
        f"tf_ext/{module}.py uses private TensorFlow APIs; move them to _tf_compat.py")


def package_imports(module: str) -> set[str]:
    """tf_ext modules that `module` imports, at module level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(source(module))):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "tf_ext":
                found.update(alias.name for alias in node.names)
            elif node.module.startswith("tf_ext."):
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names
                         if a.name.startswith("tf_ext."))
    return found & set(MODULES)


def test_no_import_cycle():
    graph = {m: package_imports(m) for m in MODULES}
    assert graph["_loader"] <= {"_tf_compat"}, graph["_loader"]
    assert graph["_tf_compat"] == set()
    assert "_bridge" in graph["ops"] and "_loader" in graph["_bridge"]  # the graph is read
    done: set[str] = set()

    def visit(m: str, path: tuple[str, ...]) -> None:
        assert m not in path, f"import cycle: {' -> '.join(path + (m,))}"
        if m not in done:
            for dep in graph[m]:
                visit(dep, path + (m,))
            done.add(m)

    for m in MODULES:
        visit(m, ())


def test_loader_alone_loads_without_the_bridge():
    """tf_ext._loader imported and run without the package's __init__ (which imports the
    bridge): loading does not import tf_ext._bridge and registers no Python gradient."""
    code = textwrap.dedent(f"""
        import sys, types
        package = types.ModuleType("tf_ext")
        package.__path__ = [{PACKAGE_DIR!r}]
        sys.modules["tf_ext"] = package
        import tf_ext._loader as loader
        assert "tf_ext._bridge" not in sys.modules, "import"
        loader.load()
        assert "TfExt>ZeroOut" in loader.op_names()
        assert "tf_ext._bridge" not in sys.modules, "load"
        from tf_ext import _tf_compat
        assert not _tf_compat.has_python_gradient("TfExt>ZeroOut")
        print("OK", sorted(m for m in sys.modules if m.startswith("tf_ext")))
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OK ['tf_ext', 'tf_ext._loader', 'tf_ext._tf_compat']" in result.stdout


def registry_header() -> str:
    # Bazel runs tests from the workspace root of the runfiles tree; a source checkout has
    # the header two levels above tests/python.
    here = os.path.dirname(os.path.abspath(__file__))
    for root in (os.getcwd(), os.path.dirname(os.path.dirname(here))):
        path = os.path.join(root, "tf_ext", "grads", "registry.h")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                return f.read()
    pytest.fail("tf_ext/grads/registry.h not found (data dependency of this test)")


def test_gradient_kind_matches_the_c_header():
    m = re.search(r"enum class GradientKind\s*\{([^}]*)\}", registry_header())
    assert m, "enum class GradientKind not found in registry.h"
    in_header = {}
    for name, value in re.findall(r"k(\w+)\s*=\s*(\d+)", m.group(1)):
        in_header[re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()] = int(value)
    assert in_header == {k.name: k.value for k in GradientKind}


def test_gradient_kind_matches_the_library():
    """One op of every kind, as the library's TfExtGradientKind reports it."""
    examples = {"TfExt>ZeroOut": GradientKind.FUNCTION,
                "TfExt>GradientFunctionDef": GradientKind.NONE,
                "TfExt>NoSuchOp": GradientKind.MISSING,
                "TfExt>RoiPoolGrad": GradientKind.UNIMPLEMENTED}
    assert set(examples.values()) == set(GradientKind)
    for op_type, kind in examples.items():
        got, _ = _c_api.gradient_kind(op_type)
        assert type(got) is GradientKind and got is kind, op_type
