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

import re

from tf_ext import _c_api


def unify_cpp_gradient_registries() -> dict[str, dict[str, int]]:
    """Fills each of TensorFlow's C++ gradient registries from the other, in this process.

    Idempotent; never replaces a registration. Returns the counts of ops with a function
    gradient and a client gradient ("both"), only one ("function_only", "client_only") or
    "neither", before and after this call, e.g.
    ``{"before": {"ops": 1809, "both": 222, ...}, "after": {...}}``.

    Raises RuntimeError with the C++ message if the unification fails.
    """
    report = _c_api.unify_gradient_registries()
    counts = {}
    for line in report.splitlines():
        m = re.match(r"(before|after)\s*: (\d+) ops; both registries (\d+), function only (\d+), "
                     r"client only (\d+), neither (\d+)", line)
        if m:
            counts[m.group(1)] = dict(zip(("ops", "both", "function_only", "client_only",
                                           "neither"), map(int, m.groups()[1:])))
    return counts
