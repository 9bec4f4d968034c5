"""SavedModel -> C++ serving: a model using tf_ext ops, exported from Python with a forward and
a GradientTape signature, gives the same numbers when run by the C++ binary tf_ext_serve
(libtensorflow_cc + the op library, no Python) as in Python."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

EXPORT_SCRIPT = "serving/export_saved_model.py"
SERVE_BINARY = "serving/tf_ext_serve"


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[str, dict]:
    out = tmp_path_factory.mktemp("serving")
    model_dir, expected = str(out / "model"), str(out / "expected.json")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, EXPORT_SCRIPT, model_dir, "--expected", expected],
                   env=env, check=True, capture_output=True, timeout=300)
    with open(expected, encoding="utf-8") as f:
        return model_dir, json.load(f)


def parse_serve_output(stdout: str) -> dict[str, dict[str, dict]]:
    """'<signature>/<output> shape=[..] values=..' lines -> like the expected JSON."""
    result: dict[str, dict[str, dict]] = {}
    for line in stdout.splitlines():
        if "/" not in line or " shape=[" not in line:
            continue
        key, shape, values = line.split(" ")
        signature, output = key.split("/")
        dims = shape[len("shape=["):-1]
        result.setdefault(signature, {})[output] = {
            "shape": [int(d) for d in dims.split(",")] if dims else [],
            "values": [float(v) for v in values[len("values="):].split(",")]}
    return result


def test_cpp_serving_matches_python(exported):
    model_dir, expected = exported
    x = expected["input"]
    result = subprocess.run(
        [SERVE_BINARY, f"--library={os.environ['TF_EXT_LIBRARY']}",
         f"--saved_model={model_dir}", "--shape=" + ",".join(map(str, x["shape"])),
         "--values=" + ",".join(repr(v) for v in x["values"])],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    got = parse_serve_output(result.stdout)
    assert set(got) == {"forward", "gradient"}
    for signature, outputs in expected["outputs"].items():
        assert set(got[signature]) == set(outputs), signature
        for name, want in outputs.items():
            assert got[signature][name]["shape"] == want["shape"], (signature, name)
            np.testing.assert_allclose(got[signature][name]["values"], want["values"],
                                       rtol=1e-6, err_msg=f"{signature}/{name}")
    # The gradient is not trivially zero: the preserved element carries it.
    assert any(v != 0 for v in expected["outputs"]["gradient"]["d_x"]["values"])


def test_cpp_serving_reports_missing_signature(exported):
    model_dir, _ = exported
    result = subprocess.run(
        [SERVE_BINARY, f"--library={os.environ['TF_EXT_LIBRARY']}",
         f"--saved_model={model_dir}", "--shape=1,4", "--values=1,2,3,4",
         "--signatures=nope"], capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "no signature 'nope'" in result.stderr


@pytest.mark.parametrize("env_library", [True, False], ids=["env", "runfiles"])
def test_cpp_serving_finds_library_without_flag(exported, env_library):
    """No --library: $TF_EXT_LIBRARY when set, else the binary's runfiles (docs/cpp.md, "Where
    the op library is found")."""
    model_dir, expected = exported
    env = dict(os.environ)
    if not env_library:
        env.pop("TF_EXT_LIBRARY")
    result = subprocess.run(
        [SERVE_BINARY, f"--saved_model={model_dir}", "--shape=1,4", "--values=1,2,3,4",
         "--signatures=forward"], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert set(parse_serve_output(result.stdout)) == {"forward"}
    env["TF_EXT_LIBRARY"] = "/nonexistent/_tf_ext_ops.so"
    result = subprocess.run([SERVE_BINARY, f"--saved_model={model_dir}"], capture_output=True,
                            text=True, timeout=300, env=env)
    assert result.returncode != 0
    assert "'/nonexistent/_tf_ext_ops.so' not found (from $TF_EXT_LIBRARY)" in result.stderr


@pytest.mark.parametrize("args,message", [
    (["--saved_model=m", "--bogus=1"], "unknown argument '--bogus=1'"),
    (["--shape=1"], "missing required flag --saved_model=DIR"),
    (["--saved_model=m", "--saved_model=n"], "--saved_model given more than once"),
    (["--saved_model=m", "--shape=1,x"], "bad number 'x' in --shape"),
])
def test_cpp_serving_flag_errors(args, message):
    result = subprocess.run([SERVE_BINARY, *args], capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr
    assert message in result.stderr, result.stderr


def test_cpp_serving_help_lists_every_flag():
    result = subprocess.run([SERVE_BINARY, "--help"], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    for flag in ("--library=PATH", "--saved_model=DIR", "--shape=", "--values=",
                 "--signatures=", "--input=", "--help"):
        assert flag in result.stdout, result.stdout


def test_python_reload_matches(exported):
    import tf_ext  # pylint: disable=g-import-not-at-top
    model_dir, expected = exported
    x = expected["input"]
    # The library loads lazily: register its ops before loading a graph that uses them.
    tf_ext.library()
    loaded = tf.saved_model.load(model_dir)
    inp = tf.constant(np.array(x["values"], np.float32).reshape(x["shape"]))
    for signature, outputs in expected["outputs"].items():
        got = loaded.signatures[signature](x=inp)
        for name, want in outputs.items():
            np.testing.assert_allclose(got[name].numpy().ravel(), want["values"], rtol=1e-6)
