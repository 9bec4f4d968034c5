"""What the wheel ships besides the Python package: the `tf_ext_train` program and the C API
headers (docs/packaging.md, "What the wheel ships").

    tf_ext.get_include()      # -I for tf_ext/train/c_trainer.h, tf_ext/graph/c_gradients.h, ...
    tf_ext.tf_ext_train_path() # the C++ program inside the installed package

The wheel's console script `tf_ext_train` runs tf_ext_train(): it replaces this Python process
with the C++ program (os.execv), so training itself runs with no Python, and first puts the
directory of the running TensorFlow's libraries on LD_LIBRARY_PATH (the program's own run path
only finds them when TensorFlow is installed in the same site-packages).
"""

from __future__ import annotations

import os
import sys

import tensorflow as tf

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
TRAIN_PROGRAM = "tf_ext_train"


def get_include() -> str:
    """The directory holding tf_ext/version.h and the C API headers of the installed wheel."""
    return os.path.join(_PACKAGE_DIR, "include")


def tf_ext_train_path() -> str:
    """The tf_ext_train program shipped in this package; FileNotFoundError where there is none
    (a source tree: `bazel build //tf_ext:tf_ext_train` builds it in bazel-bin/tf_ext/)."""
    path = os.path.join(_PACKAGE_DIR, TRAIN_PROGRAM)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"no {TRAIN_PROGRAM} in {_PACKAGE_DIR}: it ships in the wheel; in a source tree "
            f"run `bazel build //tf_ext:{TRAIN_PROGRAM}` and use bazel-bin/tf_ext/{TRAIN_PROGRAM}")
    return path


def tf_ext_train() -> None:
    """Console script: exec the shipped tf_ext_train with this process's arguments."""
    try:
        program = tf_ext_train_path()
    except FileNotFoundError as e:
        sys.exit(f"tf_ext_train: {e}")
    env = dict(os.environ)
    lib = tf.sysconfig.get_lib()
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (lib, env.get("LD_LIBRARY_PATH")) if p)
    os.execve(program, [program, *sys.argv[1:]], env)
