"""The wheel built by python/build_wheel.py is self-contained: installed into an empty
--target directory, `import tf_ext` finds its own op library and its gradients work, with
nothing from the source tree or Bazel on the path."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import zipfile

import pytest

WHEEL_SCRIPT = "python/build_wheel.py"
BUILD_INFO = "python/tf_ext/_build_info.json"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run(
        [sys.executable, WHEEL_SCRIPT, "--library", os.environ["TF_EXT_LIBRARY"],
         "--build-info", BUILD_INFO, "--out", str(out)],
        capture_output=True, text=True, check=True)
    return result.stdout.strip().splitlines()[-1]


def test_wheel_contents_and_record(wheel):
    name = os.path.basename(wheel)
    assert name.startswith("tf_ext-0.1.0-cp%d%d-" % sys.version_info[:2]) and name.endswith(".whl")
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        for required in ("tf_ext/__init__.py", "tf_ext/_bridge.py", "tf_ext/_loader.py",
                         "tf_ext/ops.py", "tf_ext/layers.py", "tf_ext/_tf_ext_ops.so",
                         "tf_ext/_build_info.json", "tf_ext-0.1.0.dist-info/RECORD",
                         "tf_ext-0.1.0.dist-info/WHEEL", "tf_ext-0.1.0.dist-info/METADATA"):
            assert required in names
        record = whl.read("tf_ext-0.1.0.dist-info/RECORD").decode().splitlines()
        for line in record:
            path, digest, size = line.rsplit(",", 2)
            if path.endswith("RECORD"):
                continue
            data = whl.read(path)
            want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={want}" and int(size) == len(data), path
        assert len(record) == len(names)


def test_installed_wheel_is_self_contained(wheel, tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                    "--no-cache-dir", "--disable-pip-version-check", "--quiet",
                    "--target", str(site), wheel], check=True)
    # Only the install dir on the path; no source tree, runfiles or library override.
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "TF_EXT_LIBRARY", "RUNFILES_DIR", "PYTHON_RUNFILES",
                        "RUNFILES_MANIFEST_FILE")}
    env["PYTHONPATH"] = str(site)
    code = textwrap.dedent("""
        import json
        import tensorflow as tf
        import tf_ext
        x = tf.constant([1.0, 2.0, 3.0, 4.0])
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf_ext.zero_out(x, preserve_index=2)
        g = tape.gradient(y, x, output_gradients=tf.constant([5.0, 6.0, 7.0, 8.0]))
        print("RESULT", json.dumps({"module": tf_ext.__file__, "library": tf_ext.library_path(),
                                    "y": y.numpy().tolist(), "g": g.numpy().tolist(),
                                    "built_for": tf_ext.build_info()["tensorflow_version"]}))
    """)
    result = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(l for l in result.stdout.splitlines() if l.startswith("RESULT"))
    got = json.loads(line[len("RESULT"):])
    assert got["module"].startswith(str(site)), got
    assert got["library"].startswith(os.path.realpath(site)), got
    assert got["y"] == [0.0, 0.0, 3.0, 0.0]
    assert got["g"] == [0.0, 0.0, 7.0, 0.0]
    assert got["built_for"]
