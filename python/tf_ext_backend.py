"""PEP 517 build backend: `pip install .` builds tf_ext's op library, tf_ext_train and
libtf_ext_c.so with Bazel.

The op library is C++ compiled against one TensorFlow, so the build uses the TensorFlow of the
environment pip installs into: the interpreter running this backend (pip runs build hooks with
its own interpreter), or $PYTHON_BIN_PATH if set. pip's build isolation hides that
interpreter's site-packages from this process through PYTHONPATH, so Bazel (whose TensorFlow
configure rule imports tensorflow) is started without it. The wheel's Requires-Dist names the
TensorFlow distribution found there (tensorflow or tensorflow-cpu), so pip keeps it.

config_settings: `manylinux=1` also retags the wheel with auditwheel (if importable here).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TARGETS = ("//tf_ext:_tf_ext_ops.so", "//tf_ext:tf_ext_train", "//tf_ext:libtf_ext_c.so",
            "//python:build_info")
# Set by pip's build isolation; they would hide the target environment's TensorFlow.
_ISOLATION_ENV = ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONHOME", "PYTHONSAFEPATH")


class BuildError(RuntimeError):
    pass


def _build_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _ISOLATION_ENV}
    env.setdefault("PYTHON_BIN_PATH", sys.executable)
    return env


def _run(cmd: list[str], env: dict[str, str]) -> str:
    # Bazel's progress goes to stderr, which pip shows with -v; stdout is the answer.
    result = subprocess.run(cmd, cwd=_ROOT, env=env, stdout=subprocess.PIPE, text=True)
    if result.returncode != 0:
        raise BuildError(f"tf_ext: `{' '.join(cmd)}` failed (exit {result.returncode})")
    return result.stdout


def _bazel_build(env: dict[str, str]) -> tuple[str, str, str, str]:
    """Builds the op library, tf_ext_train, libtf_ext_c.so and the build info; returns their
    paths."""
    python = env["PYTHON_BIN_PATH"]
    probe = subprocess.run([python, "-c", "import tensorflow as tf; print(tf.__version__)"],
                           env=env, capture_output=True, text=True)
    if probe.returncode != 0:
        raise BuildError(
            f"tf_ext: building from source needs TensorFlow in the target environment, and "
            f"{python} cannot import it. Install it first (pip install tensorflow-cpu, or "
            f"tensorflow), or set PYTHON_BIN_PATH to an interpreter that has it.\n"
            f"{probe.stderr[-2000:]}")
    bazel = shutil.which(env.get("BAZEL", "bazel"), path=env.get("PATH"))
    if bazel is None:
        raise BuildError("tf_ext: building from source needs Bazel 4.2.3 on PATH "
                         "(Debian: apt-get install bazel-bootstrap; or `make setup`)")
    print(f"tf_ext: building the op library with Bazel against TensorFlow "
          f"{probe.stdout.strip()} ({python})", file=sys.stderr)
    _run([bazel, "build", *_TARGETS], env)
    bin_dir = _run([bazel, "info", "bazel-bin"], env).strip()
    return (os.path.join(bin_dir, "tf_ext", "_tf_ext_ops.so"),
            os.path.join(bin_dir, "python", "tf_ext", "_build_info.json"),
            os.path.join(bin_dir, "tf_ext", "tf_ext_train"),
            os.path.join(bin_dir, "tf_ext", "libtf_ext_c.so"))


def _build_wheel_module():
    sys.path.insert(0, os.path.join(_ROOT, "python"))
    try:
        import build_wheel  # pylint: disable=g-import-not-at-top
    finally:
        sys.path.pop(0)
    return build_wheel


def get_requires_for_build_wheel(config_settings=None):  # pylint: disable=unused-argument
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    del metadata_directory  # METADATA depends on the build (TensorFlow release), made here.
    env = _build_env()
    library, info, train_program, c_library = _bazel_build(env)
    with open(info, encoding="utf-8") as f:
        print(f"tf_ext: built for {json.load(f)['tensorflow_requirement']}", file=sys.stderr)
    bw = _build_wheel_module()
    path = bw.build(library, info, wheel_directory, train_program=train_program,
                    c_library=c_library)
    if (config_settings or {}).get("manylinux") == "1":
        path = bw.manylinux_repair(path, wheel_directory)
    return os.path.basename(path)
