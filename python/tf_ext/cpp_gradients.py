"""use_cpp_gradients: tf.GradientTape and tf.gradients use the C++ gradient of every op that
has one, so Python tests and Keras training run with the gradients a C++ program computes.

    with tf_ext.use_cpp_gradients() as scope:
        model.fit(x, y)
    assert not scope.counts().fallbacks()   # no op with a C++ gradient used Python's

    tf_ext.enable_cpp_gradients()       # or process-wide until disable_cpp_gradients()

While the switch is on, Python's gradient registry (the one tf.gradients, tf.function's tapes
and the eager tape look gradients up in, by op type) holds, for every registered op type (any
loaded library's, TensorFlow's own included):
  - a C++ gradient function: the bridged gradient (tf_ext._bridge): the C++ FunctionDef
    specialised to the node's attrs (list arguments through SymbolicGradient), called on the
    node's inputs and incoming gradients;
  - registered as not differentiable in C++: no gradient (None), as in C++;
  - no C++ gradient, or one registered as not implemented: Python's own, counted as a
    fallback.
Leaving the switch puts back the very registry entries it replaced (on an exception too);
entries others added meanwhile (tf.custom_gradient's) stay.

Eager tapes. TensorFlow's tape drops the forward inputs and outputs its own Python gradient
does not read (its generated gradient exclusion table: Relu's input, for one), before any gradient
function is looked up. While the switch is on, an op the thread that switched it on runs
eagerly under a tape is therefore recorded a second time, with every input and output and
the C++ gradient as its backward (an op callback, plus a hook after the tape's slow-path
record); the tape differentiates the later record. An op recorded without it (on another
thread, a variable read inside an op's fast path, or an op taped before the switch) that
lacks a tensor its C++ gradient reads gets Python's gradient, counted as a fallback.

Counts: GradientCounts.cpp is the C++ gradients called, .python the fallbacks, both by op
type: one per op per tape.gradient eagerly, one per op when a graph's gradient is built
(tf.gradients, a tf.function's trace), not per run of that graph.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import tensorflow as tf

from tf_ext import _bridge, _c_api, _tf_compat
from tf_ext._c_api import GradientKind


@dataclasses.dataclass(frozen=True)
class GradientCounts:
    """Gradient-function calls by op type while the switch was on (`cpp`: also outside it).

    cpp: through the op's C++ gradient.
    python: through Python's own: an op without a C++ gradient function (or with one
      registered as not implemented), or an eager op whose tape dropped a forward tensor its
      C++ gradient reads (see fallbacks()).
    function_ops: ops that call functions (While, If, Case, ...) through Python's gradient,
      which differentiates the functions' ops with their C++ gradients: these ops' own C++
      gradients only work once tf_ext's control-flow pass has rewritten the whole graph.
    """

    cpp: Mapping[str, int]
    python: Mapping[str, int]
    function_ops: Mapping[str, int]

    def fallbacks(self) -> dict[str, int]:
        """The `python` calls of op types that have a C++ gradient function: should be none."""
        return {op: n for op, n in self.python.items() if _kind(op) == GradientKind.FUNCTION}

    def __sub__(self, earlier: GradientCounts) -> GradientCounts:
        def minus(now: Mapping[str, int], then: Mapping[str, int]) -> dict[str, int]:
            return {op: n - then.get(op, 0) for op, n in now.items() if n != then.get(op, 0)}
        return GradientCounts(minus(self.cpp, earlier.cpp), minus(self.python, earlier.python),
                              minus(self.function_ops, earlier.function_ops))


class CppGradientScope:
    """What use_cpp_gradients yields: counts() are its block's, so far inside it, final after."""

    def __init__(self) -> None:
        self._start = gradient_counts()
        self._end: GradientCounts | None = None

    def counts(self) -> GradientCounts:
        return (self._end or gradient_counts()) - self._start

    def _close(self) -> None:
        self._end = gradient_counts()


_lock = threading.RLock()
_enabled = False
_saved: dict[str, Any] = {}  # the registry entries the switch replaced, as they were
_kinds: dict[str, GradientKind] = {}
_python_calls: Counter[str] = Counter()
_function_op_calls: Counter[str] = Counter()
_recorded: frozenset[str] = frozenset()  # op types whose eager runs the switch records
_callback_threads: set[int] = set()  # threads whose eager ops the switch records


def gradient_counts() -> GradientCounts:
    """Gradient calls since the process started (C++ gradients also outside the switch:
    tf_ext's own ops always use theirs)."""
    return GradientCounts(_bridge.cpp_gradient_calls(), dict(_python_calls),
                          dict(_function_op_calls))


def cpp_gradients_enabled() -> bool:
    """Whether the C++ gradients are switched on."""
    return _enabled


def enable_cpp_gradients() -> None:
    """Switches the C++ gradients on for the whole process until disable_cpp_gradients()
    (eager tapes: see the module docstring for threads)."""
    _set(True)


def disable_cpp_gradients() -> None:
    """Switches them off: Python's registry is as it was before enable_cpp_gradients()."""
    _set(False)


@contextlib.contextmanager
def use_cpp_gradients(enabled: bool = True) -> Iterator[CppGradientScope]:
    """C++ gradients on (or, with enabled=False, off) inside the block, and afterwards
    whatever was in force before, on an exception too; blocks nest. Yields a scope whose
    counts() are the block's gradient calls."""
    scope = CppGradientScope()
    with _lock:
        before = _enabled
        _set(enabled)
    try:
        yield scope
    finally:
        try:
            _set(before)
        finally:
            scope._close()  # pylint: disable=protected-access


def _set(enabled: bool) -> None:
    global _enabled
    with _lock:
        if enabled and not _enabled:
            _install()
        elif not enabled and _enabled:
            _uninstall()
        _enabled = enabled


def _kind(op_type: str) -> GradientKind:
    kind = _kinds.get(op_type)
    if kind is None:
        kind = _kinds[op_type] = _c_api.gradient_kind(op_type)[0]
    return kind


def _install() -> None:
    global _recorded
    # tf_ext's own gradients are bridged first, against the registry as it is without us.
    _bridge.library()
    op_types = _tf_compat.all_op_names()
    entries = _tf_compat.python_gradient_entries(op_types)
    replacements: dict[str, Callable[..., Any] | None] = {}
    for op_type, entry in entries.items():
        kind = _kind(op_type)
        python_fn = _tf_compat.python_gradient_function(entry)
        if kind == GradientKind.FUNCTION and _tf_compat.calls_functions(op_type):
            # No Python entry (PartitionedCall): tf.gradients differentiates the function.
            if python_fn is not None:
                replacements[op_type] = _Counted(op_type, python_fn, _function_op_calls)
        elif kind == GradientKind.FUNCTION:
            replacements[op_type] = _CppGradient(op_type, python_fn)
        elif kind == GradientKind.NONE:
            if python_fn is not None or not _tf_compat.has_python_gradient_entry(entry):
                replacements[op_type] = None
        elif python_fn is not None:
            replacements[op_type] = _Counted(op_type, python_fn, _python_calls)
    _saved.update({op_type: entries[op_type] for op_type in replacements})
    _recorded = frozenset(op for op, fn in replacements.items() if isinstance(fn, _CppGradient))
    try:
        _tf_compat.replace_python_gradients(replacements)
        _tf_compat.set_record_gradient_hook(_after_slow_path_record)
        _tf_compat.add_eager_op_callback(_record_eager_op)
        _callback_threads.add(threading.get_ident())
    except BaseException:
        _uninstall()
        raise


def _uninstall() -> None:
    if threading.get_ident() in _callback_threads:
        _callback_threads.discard(threading.get_ident())
        _tf_compat.remove_eager_op_callback(_record_eager_op)
    # Another thread's callback stays registered there, idle while the switch is off.
    _tf_compat.set_record_gradient_hook(None)
    _tf_compat.set_python_gradient_entries(_saved)
    _saved.clear()


class _CppGradient:
    """The Python gradient of an op type with a C++ gradient while the switch is on."""

    def __init__(self, op_type: str, python_fn: Callable[..., Any] | None) -> None:
        self.op_type, self.python_fn = op_type, python_fn

    def __call__(self, op: Any, *grads: tf.Tensor | None) -> Any:
        if _bridge.lacks_forward_tensors(op, grads) and self.python_fn is not None:
            _python_calls[self.op_type] += 1
            return self.python_fn(op, *grads)
        return _bridge._bridged_gradient(op, *grads)  # pylint: disable=protected-access


class _Counted:
    """Python's gradient of an op type, each call counted in `counter`."""

    def __init__(self, op_type: str, python_fn: Callable[..., Any],
                 counter: Counter[str]) -> None:
        self.op_type, self.python_fn, self.counter = op_type, python_fn, counter

    def __call__(self, op: Any, *grads: tf.Tensor | None) -> Any:
        self.counter[self.op_type] += 1
        return self.python_fn(op, *grads)


def _record_eager_op(op_type: Any, inputs: Any, attrs: Any, outputs: Any,
                     op_name: Any = None, graph: Any = None) -> None:
    """The op callback: re-records an eager op with a C++ gradient on the active tapes, every
    input and output kept. Graph ops (graph set) are left to the registry."""
    if graph is None and _enabled and _tf_compat.tape_could_record():
        _record(op_type, inputs, attrs, outputs)


def _after_slow_path_record(op_type: Any, inputs: Any, attrs: Any, outputs: Any) -> None:
    """After TensorFlow's own record of a wrapper's slow-path op (which came after the op
    callback's, and replaced it): records it again."""
    if _enabled:
        _record(op_type, inputs, attrs, outputs)


def _record(op_type: Any, inputs: Any, attrs: Any, outputs: Any) -> None:
    if isinstance(op_type, bytes):
        op_type = op_type.decode()
    if op_type not in _recorded or not outputs:
        return
    inputs, outputs, attrs = tuple(inputs), list(outputs), tuple(attrs or ())

    def backward(*grads: tf.Tensor | None) -> list[tf.Tensor]:
        return _bridge.eager_gradient(op_type, attrs, inputs, outputs, grads)

    _tf_compat.record_backprop(op_type, outputs, list(inputs), backward)
