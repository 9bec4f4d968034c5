"""Finds and loads tf_ext's op library, once per process; nothing else.

Loading registers the library's ops and C++ gradients with TensorFlow's C++ registries only.
Python's gradient registry is filled by tf_ext._bridge, which calls this module (never the
other way round: this module imports no other tf_ext module but _tf_compat).

The library is looked up in the order docs/cpp.md documents ("Where the op library is found"),
the one the C++ tools share (tf_ext/tools/library_lookup.h), first existing file wins:
  1. $TF_EXT_LIBRARY (a path to the .so), if set - then the only candidate;
  2. `_tf_ext_ops.so` inside this package (an installed wheel);
  3. `tf_ext/_tf_ext_ops.so` in Bazel runfiles ($RUNFILES_DIR, or this package's runfiles tree);
  4. `bazel-bin/tf_ext/_tf_ext_ops.so` of the source tree this package lives in.
(The C++ tools' --library flag comes before 1; they have no package, so no 2.)

`import tf_ext` first runs check_tensorflow_version(): the op library is C++ compiled against
one TensorFlow release, and TensorFlow's C++ ABI is not stable across minor releases, so under
another release it fails to load with an undefined symbol or, worse, loads and crashes. The
guard compares the running TensorFlow with what _build_info.json recorded and raises one clear
TensorFlowVersionError instead (a warning only where the ABI is known to be compatible).

The path is canonicalised (os.path.realpath) before loading: TensorFlow caches op libraries by
the path string, and loading the same file under a second path returns a module with no
wrappers (the ops were registered by the first load), so every caller must use one spelling.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import threading
import types
import warnings

import tensorflow as tf

from tf_ext import _tf_compat

LIBRARY_ENV = "TF_EXT_LIBRARY"
# Set to 1 to import tf_ext under a TensorFlow it was not built for (at your own risk).
SKIP_VERSION_CHECK_ENV = "TF_EXT_SKIP_VERSION_CHECK"
LIBRARY_NAME = "_tf_ext_ops.so"
_BUILD_INFO = "_build_info.json"
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))

_lock = threading.Lock()
_module: types.ModuleType | None = None
_path: str | None = None
_op_names: tuple[str, ...] = ()


class LibraryLoadError(ImportError):
    """The op library could not be found or loaded."""


class TensorFlowVersionError(ImportError):
    """The running TensorFlow is not the one the op library was built for (ABI mismatch)."""


class TensorFlowVersionWarning(UserWarning):
    """The running TensorFlow differs from the build's, but its C++ ABI is known compatible."""


def _candidates() -> list[str]:
    env = os.environ.get(LIBRARY_ENV)
    if env:
        # An explicit choice is never silently replaced by another copy.
        return [env]
    paths = [os.path.join(_PACKAGE_DIR, LIBRARY_NAME)]
    runfiles = os.environ.get("RUNFILES_DIR")
    if runfiles:
        paths.append(os.path.join(runfiles, "tf_ext", "tf_ext", LIBRARY_NAME))
    # python/tf_ext -> the workspace root, both in a runfiles tree and in the source tree.
    root = os.path.dirname(os.path.dirname(_PACKAGE_DIR))
    paths.append(os.path.join(root, "tf_ext", LIBRARY_NAME))
    paths.append(os.path.join(root, "bazel-bin", "tf_ext", LIBRARY_NAME))
    return paths


def build_info() -> dict[str, str]:
    """What the library was built against, from _build_info.json (written by Bazel/the wheel
    build next to this package); empty if the package runs from a plain source tree."""
    try:
        with open(os.path.join(_PACKAGE_DIR, _BUILD_INFO), encoding="utf-8") as f:
            return dict(json.load(f))
    except (OSError, ValueError):
        return {}


def tf_ext_version() -> str:
    """tf_ext's release (tf_ext/version.h's TF_EXT_VERSION_STRING, recorded in the build info
    by Bazel and the wheel build); the installed distribution's version where a package runs
    without its build info."""
    version = build_info().get("tf_ext_version")
    if version:
        return version
    try:
        return importlib.metadata.version("tf_ext")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


def _release(version: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a TensorFlow version string such as 2.21.0 or 2.22.0rc1."""
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def _cxx11_abi(flags: list[str]) -> str | None:
    for f in flags:
        if f.startswith("-D_GLIBCXX_USE_CXX11_ABI="):
            return f.split("=", 1)[1]
    return None


def version_mismatch(info: dict[str, str], version: str,
                     compile_flags: list[str]) -> tuple[str, str] | None:
    """Compares a build (build_info()) with a TensorFlow (its version and
    tf.sysconfig.get_compile_flags()). Returns None when they match, else (level, message)
    with level "error" (the library cannot work) or "warning" (known ABI-compatible).

    Known compatible: another patch release of the same minor release with the same C++ ABI
    flag (TensorFlow keeps its C++ ABI within a minor release). Everything else is an error:
    another minor/major release, or another _GLIBCXX_USE_CXX11_ABI (that flag changed across
    releases and decides std::string's layout in every signature)."""
    built = info.get("tensorflow_version")
    if not built:
        return None  # a source tree without build info: nothing to compare
    built_flags = info.get("compile_flags", [])
    if built == version and _cxx11_abi(built_flags) == _cxx11_abi(compile_flags):
        return None
    want = info.get("tensorflow_requirement") or f"tensorflow=={built}"
    head = (f"tf_ext's op library was built for TensorFlow {built} "
            f"({info.get('tensorflow_distribution') or 'unknown distribution'}, "
            f"_GLIBCXX_USE_CXX11_ABI={_cxx11_abi(built_flags)}), but this process runs "
            f"TensorFlow {version} (_GLIBCXX_USE_CXX11_ABI={_cxx11_abi(compile_flags)})")
    b, r = _release(built), _release(version)
    if (b is not None and r is not None and b[:2] == r[:2]
            and _cxx11_abi(built_flags) == _cxx11_abi(compile_flags)):
        return ("warning", f"{head}; patch releases of TensorFlow {b[0]}.{b[1]} keep its C++ "
                           f"ABI, so it should work.")
    return ("error",
            f"{head}. TensorFlow's C++ ABI differs between these builds: loading the library "
            f"would fail with undefined symbols or crash. Install a matching TensorFlow "
            f"(pip install '{want}') or rebuild tf_ext against this one (`pip install .` in a "
            f"source checkout). Set {SKIP_VERSION_CHECK_ENV}=1 to import anyway.")


def check_tensorflow_version() -> None:
    """Raises TensorFlowVersionError (or warns) if the running TensorFlow is not the one the
    op library was built for. Run by `import tf_ext`, before anything loads the library."""
    if os.environ.get(SKIP_VERSION_CHECK_ENV) == "1":
        return
    found = version_mismatch(build_info(), tf.__version__, tf.sysconfig.get_compile_flags())
    if found is None:
        return
    level, message = found
    if level == "error":
        raise TensorFlowVersionError(message)
    warnings.warn(message, TensorFlowVersionWarning, stacklevel=3)


def _version_note() -> str:
    built = build_info().get("tensorflow_version", "unknown")
    return f"the library was built for TensorFlow {built}; this process runs TensorFlow {tf.__version__}"


def op_names_in(path: str) -> tuple[str, ...]:
    """Op types registered by the op library at `path` (loading it if needed)."""
    return _tf_compat.library_op_names(path)


def _load() -> None:
    global _module, _path, _op_names
    tried = _candidates()
    found = [p for p in tried if os.path.isfile(p)]
    if not found:
        raise LibraryLoadError(
            f"tf_ext: op library {LIBRARY_NAME} not found; tried {tried}. Build it with "
            f"`bazel build //tf_ext:_tf_ext_ops.so` or set {LIBRARY_ENV} to its path "
            f"({_version_note()})")
    path = os.path.realpath(found[0])
    try:
        module = tf.load_op_library(path)
        names = op_names_in(path)
    except Exception as e:  # TF raises NotFoundError / RuntimeError with the dlerror text.
        raise LibraryLoadError(
            f"tf_ext: could not load op library {path}: {e} ({_version_note()})") from e
    if not names:
        raise LibraryLoadError(
            f"tf_ext: op library {path} registered no ops: was the same library already "
            f"loaded from another path? ({_version_note()})")
    _path, _op_names = path, names
    _module = module  # last: load()'s unlocked fast path reads _module first


def load() -> types.ModuleType:
    """The op library's module (tf.load_op_library's), loading it on the first call.

    Only loads: the ops' Python gradients are registered by tf_ext._bridge.library() (which
    tf_ext.library() and every function of tf_ext.ops go through).
    """
    if _module is not None:
        return _module
    with _lock:
        if _module is None:
            _load()
        return _module  # type: ignore[return-value]


def library_path() -> str:
    """The canonical path of the op library (loads it if needed)."""
    load()
    return _path  # type: ignore[return-value]


def op_names() -> tuple[str, ...]:
    """Op types the library registers, e.g. ("TfExt>GradientFunctionDef", ...) (loads it if
    needed)."""
    load()
    return _op_names
