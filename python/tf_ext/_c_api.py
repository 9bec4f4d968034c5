"""ctypes bindings of the op library's C entry points, and the one Python copy of their enums.

The library does not export its enums' names, so GradientKind mirrors
`enum class GradientKind` of tf_ext/grads/registry.h here and nowhere else;
tests/python/test_layering.py checks it against that header and against the library.
"""

from __future__ import annotations

import ctypes
import enum
import json
from typing import Any

from tf_ext import _loader


class GradientKind(enum.IntEnum):
    """What the C++ registries hold for an op type (tf_ext/grads/registry.h, GradientKind)."""

    FUNCTION = 0  # a gradient function (FunctionDefHelper creator)
    NONE = 1  # registered as not differentiable
    MISSING = 2  # nothing registered
    UNIMPLEMENTED = 3  # registered as not implemented, with a message


def _library() -> ctypes.CDLL:
    # The already loaded library: dlopen of the same path is idempotent.
    return ctypes.CDLL(_loader.library_path())


def gradient_kind(op_type: str) -> tuple[GradientKind, str]:
    """TfExtGradientKind: what kind of gradient the C++ registries hold for op_type (any
    library's op, not only tf_ext's), and for UNIMPLEMENTED the registered message (else "").

    Raises RuntimeError for a value outside GradientKind (a library newer than this package).
    """
    fn = _library().TfExtGradientKind
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    message = ctypes.create_string_buffer(4096)
    kind = fn(op_type.encode("utf-8"), message, len(message))
    text = message.value.decode("utf-8", "replace")
    try:
        return GradientKind(kind), text
    except ValueError:
        raise RuntimeError(f"TfExtGradientKind({op_type!r}) returned unknown kind {kind} "
                           f"({text!r}); is the op library newer than this package?") from None


def register_xla_kernels() -> str:
    """TfExtRegisterXlaKernels: registers the library's XLA kernels with TensorFlow's XLA
    registry, for every backend (tf_ext/xla/xla_registration.h); idempotent. Returns "" on
    success, else the C++ message (the kernels are then unavailable)."""
    fn = _library().TfExtRegisterXlaKernels
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    message = ctypes.create_string_buffer(4096)
    if fn(message, len(message)) == 0:
        return ""
    return message.value.decode("utf-8", "replace") or "TfExtRegisterXlaKernels failed"


def unify_gradient_registries() -> str:
    """TfExtUnifyGradientRegistries: fills each C++ gradient registry from the other; returns
    the library's report. Raises RuntimeError with the C++ message if it fails."""
    fn = _library().TfExtUnifyGradientRegistries
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    report = ctypes.create_string_buffer(1 << 16)
    if fn(report, len(report)) != 0:
        raise RuntimeError("unifying the C++ gradient registries failed: " +
                           report.value.decode("utf-8", "replace"))
    return report.value.decode("utf-8")


def _json_from(name: str) -> Any:
    fn = getattr(_library(), name)
    fn.restype = ctypes.c_size_t
    fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    size = fn(None, 0)
    buffer = ctypes.create_string_buffer(size + 1)
    fn(buffer, len(buffer))
    return json.loads(buffer.value.decode("utf-8"))


def gradient_overrides() -> list[dict[str, str]]:
    """TfExtGradientOverridesJson: the TensorFlow ops whose defective gradient the library
    replaces in every C++ registry (tf_ext/grads/manifest.h Overrides), one dict each: op,
    defect, rule."""
    return _json_from("TfExtGradientOverridesJson")


def manifest() -> list[dict[str, Any]]:
    """TfExtManifestJson: every op the library declares (tf_ext/grads/manifest.h), one dict
    each: op, doc, python, differentiability ("gradient", "not differentiable", "backward
    op"), rule, type_attr, types, not_differentiable, reads, ignored_output_grads,
    backward_of, gradcheck, has_surrogate."""
    return _json_from("TfExtManifestJson")
