"""TensorFlow's two C++ gradient registries, made one (see tf_ext/grads/unify.h).

TensorFlow keeps C++ gradients in a function registry (SymbolicGradient, Sessions, the
graph-level builder) and a client registry (TF_AddGradients, hence the Java/Go/Rust bindings),
each lacking ops the other has. Loading tf_ext's op library fills each from the other in this
process; call `unify_cpp_gradient_registries` again after loading another op library whose
ops have a C++ gradient in one registry only. Python's own gradient registry
(tf.GradientTape, tf.gradients) is separate and unaffected; `register_cpp_gradients` bridges
custom ops' C++ gradients into it.
"""

from __future__ import annotations

import ctypes
import re

from tf_ext import _loader


def unify_cpp_gradient_registries() -> dict[str, dict[str, int]]:
    """Fills each of TensorFlow's C++ gradient registries from the other, in this process.

    Idempotent; never replaces a registration. Returns the counts of ops with a function
    gradient and a client gradient ("both"), only one ("function_only", "client_only") or
    "neither", before and after this call, e.g.
    ``{"before": {"ops": 1809, "both": 222, ...}, "after": {...}}``.

    Raises RuntimeError with the C++ message if the unification fails.
    """
    c_lib = ctypes.CDLL(_loader.library_path())  # already loaded: dlopen is idempotent
    fn = c_lib.TfExtUnifyGradientRegistries
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    report = ctypes.create_string_buffer(1 << 16)
    if fn(report, len(report)) != 0:
        raise RuntimeError("unifying the C++ gradient registries failed: " +
                           report.value.decode("utf-8", "replace"))
    counts = {}
    for line in report.value.decode("utf-8").splitlines():
        m = re.match(r"(before|after)\s*: (\d+) ops; both registries (\d+), function only (\d+), "
                     r"client only (\d+), neither (\d+)", line)
        if m:
            counts[m.group(1)] = dict(zip(("ops", "both", "function_only", "client_only",
                                           "neither"), map(int, m.groups()[1:])))
    return counts
