"""What the wheel ships besides the Python package: the `tf_ext_train` program, the C API
headers and the C API library (docs/packaging.md, "What the wheel ships"; docs/c_api.md).

    tf_ext.get_include()       # -I for tf_ext/train/c_trainer.h, tf_ext/graph/c_api/c_gradients.h, ...
    tf_ext.get_lib()           # -L and run path for -ltf_ext_c (libtf_ext_c.so)
    tf_ext.c_library_path()    # libtf_ext_c.so inside the installed package
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
C_LIBRARY = "libtf_ext_c.so"


def get_include() -> str:
    """The directory holding tf_ext/version.h and the C API headers of the installed wheel."""
    return os.path.join(_PACKAGE_DIR, "include")


def get_lib() -> str:
    """The directory holding libtf_ext_c.so (the C API of those headers) in the installed wheel:
    a C program links it with -L<dir> -ltf_ext_c and finds it at run time through
    -Wl,-rpath,<dir> (docs/c_api.md)."""
    return _PACKAGE_DIR


def c_library_path() -> str:
    """libtf_ext_c.so shipped in this package; FileNotFoundError where there is none (a source
    tree: `bazel build //tf_ext:libtf_ext_c.so` builds it in bazel-bin/tf_ext/)."""
    path = os.path.join(_PACKAGE_DIR, C_LIBRARY)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"no {C_LIBRARY} in {_PACKAGE_DIR}: it ships in the wheel; in a source tree "
            f"run `bazel build //tf_ext:{C_LIBRARY}` and use bazel-bin/tf_ext/{C_LIBRARY}")
    return path


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
