"""Parity report (`make registries`): the ops TensorFlow's Python gradient registry
differentiates with a gradient function, the ops with a C++ gradient, and the difference.

  parity_report.py --library=bazel-bin/tf_ext/_tf_ext_ops.so

Imports tensorflow only. The op library is loaded with tf.load_op_library (its load unifies the
two C++ gradient registries; TfExtUnifyGradientRegistries is run once more) and asked through
TfExtGradientKind (tf_ext/grads/c_api.h) what the C++ registries hold for each registered op.
Python side: `ops._gradient_registry` entries whose value is a function (tf.no_gradient stores
None). C++ side: kind "function"; a no-gradient registration or a registered refusal (a creator
that only returns an error) is not a gradient. tests/python/test_parity.py turns the
difference into a test, with its exclusions.
"""

import argparse
import ctypes
import os
import sys
import textwrap

import tensorflow as tf
from tensorflow.core.framework import op_def_pb2
from tensorflow.python.client import pywrap_tf_session
from tensorflow.python.framework import ops

KIND_NAMES = {0: "function", 1: "no-gradient", 2: "missing", 3: "not implemented"}


def load(path):
    tf.load_op_library(path)
    lib = ctypes.CDLL(path)  # the same, already loaded library
    lib.TfExtGradientKind.restype = ctypes.c_int
    lib.TfExtGradientKind.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.TfExtUnifyGradientRegistries.restype = ctypes.c_int
    lib.TfExtUnifyGradientRegistries.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    report = ctypes.create_string_buffer(1 << 16)
    if lib.TfExtUnifyGradientRegistries(report, len(report)) != 0:
        sys.exit("parity_report: unifying the registries failed: " + report.value.decode())
    return lib


def all_ops():
    buf = pywrap_tf_session.TF_GetAllOpList()
    try:
        op_list = op_def_pb2.OpList.FromString(pywrap_tf_session.TF_GetBuffer(buf))
    finally:
        pywrap_tf_session.TF_DeleteBuffer(buf)
    return sorted(op.name for op in op_list.op)


def listing(title, names):
    body = textwrap.fill(" ".join(names), width=100, initial_indent="  ",
                         subsequent_indent="  ", break_on_hyphens=False) if names else "  (none)"
    return f"{title} ({len(names)}):\n{body}\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--library", default=os.environ.get("TF_EXT_LIBRARY"),
                        help="the op library (default: $TF_EXT_LIBRARY)")
    args = parser.parse_args()
    if not args.library or not os.path.isfile(args.library):
        parser.error(f"op library not found: {args.library!r}")
    lib = load(os.path.realpath(args.library))

    def kind(op):
        message = ctypes.create_string_buffer(4096)
        return lib.TfExtGradientKind(op.encode(), message, len(message))

    registry = ops._gradient_registry  # pylint: disable=protected-access
    python = sorted(op for op in registry.list() if registry.lookup(op) is not None)
    cpp = [op for op in all_ops() if kind(op) == 0]
    cpp_set = set(cpp)
    difference = [op for op in python if op not in cpp_set]
    print(f"\nParity with Python (TensorFlow {tf.__version__}, tests/python/test_parity.py):")
    print(listing("Python gradient functions (ops._gradient_registry, not tf.no_gradient)",
                  python))
    print(listing("C++ gradients (either registry, unified; not no-gradient or refusals)", cpp))
    print(f"Python has a gradient function, C++ none ({len(difference)}; what C++ has instead):")
    for op in difference:
        print(f"  {op:40s} {KIND_NAMES.get(kind(op), '?')}")
    print(f"\n{len(python)} Python gradient functions, {len(python) - len(difference)} with a C++ "
          f"gradient, {len(difference)} without")


if __name__ == "__main__":
    main()
