"""Bridges C++ gradients (FunctionDefHelper functions) into Python's gradient registry.

TensorFlow keeps two gradient registries: C++ (used by SymbolicGradient and every C++ front
end) and Python (used by tf.gradients and tf.GradientTape). tf_ext's gradients live only in
C++. For each op with a C++ gradient this module registers one generic Python gradient that

  1. rebuilds the forward node's NodeDef (op type + attrs) from the Operation (graph mode,
     tf.function) or from the tape's stand-in op (eager GradientTape);
  2. asks the C++ registry, through the TfExt>GradientFunctionDef op run eagerly, for the
     gradient FunctionDef specialised to those attrs (cached per op type + attrs);
  3. wraps that FunctionDef as a ConcreteFunction - TensorFlow then registers it with the eager
     context and adds it to every graph that calls it - and calls it on the op's inputs and
     incoming gradients.

There is no gradient maths in Python. Because the call is a ConcreteFunction built from the
FunctionDef's own nodes, the gradient is itself differentiable whenever those nodes have
(Python or bridged) gradients. If one has none, calling the gradient works but differentiating
it raises a LookupError that names the op and the node type lacking a gradient. If one has a
gradient that C++ registers as not implemented (tf_ext's dedicated backward ops, such as
TfExt>RoiPoolGrad: their gradient would be a second derivative of TfExt>RoiPool), it raises
GradientNotImplementedError carrying the C++ message instead.
"""

from __future__ import annotations

import inspect
import os
import threading
import types
from collections.abc import Callable, Iterable
from typing import Any, Literal

import tensorflow as tf
from tensorflow.core.framework import function_pb2
from tensorflow.core.framework import node_def_pb2
from tensorflow.core.function.polymorphism import function_type as function_type_lib
from tensorflow.python.eager import context
from tensorflow.python.eager import record
from tensorflow.python.eager.polymorphic_function import concrete_function
from tensorflow.python.framework import function_def_to_graph
from tensorflow.python.framework import op_def_library
from tensorflow.python.framework import op_def_registry
from tensorflow.python.framework import ops

from tf_ext import _loader

# What register_cpp_gradients did with an op type:
#   "bridged"        its C++ gradient is now its Python gradient;
#   "no_gradient"    C++ registers it as not differentiable: tf.no_gradient, like C++;
#   "missing"        no C++ gradient: left alone, so TensorFlow raises LookupError on use;
#   "unimplemented"  C++ registers its gradient as not implemented: its Python gradient raises
#                    GradientNotImplementedError with the C++ message, like C++;
#   "python"         it already had a Python gradient (or no-gradient): left alone.
GradientStatus = Literal["bridged", "no_gradient", "missing", "unimplemented", "python"]

# TfExtGradientKind's answers (tf_ext/grads/registry.h, enum GradientKind).
_KINDS: dict[int, GradientStatus] = {
    0: "bridged", 1: "no_gradient", 2: "missing", 3: "unimplemented"}


class GradientNotImplementedError(tf.errors.UnimplementedError, NotImplementedError):
    """Differentiating an op whose C++ gradient is registered as not implemented, e.g. a
    second derivative of TfExt>RoiPool. The message names the op and quotes C++'s.

    Both a tf.errors.UnimplementedError (the C++ status code; tf.function keeps the type) and
    a NotImplementedError.
    """


_lock = threading.RLock()
_status: dict[str, GradientStatus] = {}
_unimplemented: dict[str, str] = {}  # op type -> the C++ registry's message
_cache: dict[bytes, "_Specialised"] = {}
_function_def_calls = 0  # how often the C++ side was asked (tests check the cache with it)


def register_cpp_gradients(
    library_or_op_names: types.ModuleType | str | os.PathLike | Iterable[str],
) -> dict[str, GradientStatus]:
    """Registers Python gradients for ops whose gradients are C++ FunctionDef gradients.

    Args:
      library_or_op_names: the module returned by tf.load_op_library, the path of an op library
        (.so; use the same spelling as for tf.load_op_library), or op type names such as
        ["TfExt>ZeroOut"].

    Returns:
      op type -> what was done (see GradientStatus). Idempotent: a second call changes nothing.
    """
    names = _op_names_of(library_or_op_names)
    _loader.library()  # load tf_ext's library (and take its lock) before ours: no lock cycle
    with _lock:
        return {name: _register(name) for name in names}


def cache_size() -> int:
    """Number of specialised gradient functions built so far (one per op type + attrs)."""
    return len(_cache)


def function_def_requests() -> int:
    """How many times the C++ registry was asked for a specialised FunctionDef."""
    return _function_def_calls


def _op_names_of(
    source: types.ModuleType | str | os.PathLike | Iterable[str]) -> list[str]:
    if isinstance(source, types.ModuleType):
        return _op_names_of_module(source)
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if os.path.isfile(path):
            return list(_loader.op_names_in(path))
        return [path]
    return [str(name) for name in source]


def _op_names_of_module(module: types.ModuleType) -> list[str]:
    op_list = getattr(module, "OP_LIST", None)  # present in older TensorFlow releases
    if op_list is not None:
        return [op.name for op in op_list.op]
    # TF 2.21's generated wrappers carry their op type as a constant ("TfExt>ZeroOut" or
    # b"TfExt>ZeroOut"); keep the constants that name registered ops.
    names: list[str] = []
    for value in vars(module).values():
        if not inspect.isfunction(value) or value.__module__ != module.__name__:
            continue
        for const in inspect.unwrap(value).__code__.co_consts:
            if isinstance(const, bytes):
                const = const.decode("utf-8", "replace")
            if (isinstance(const, str) and const not in names and
                    op_def_registry.get(const) is not None):
                names.append(const)
    if not names:
        raise ValueError(
            f"register_cpp_gradients: module {module.__name__} wraps no registered op; was "
            "its library loaded under a second path (tf.load_op_library then returns an "
            "empty module)? Pass the op type names instead")
    return names


def _has_python_gradient(op_type: str) -> bool:
    try:
        ops._gradient_registry.lookup(op_type)  # pylint: disable=protected-access
    except LookupError:
        return False
    return True  # a gradient function, or None from tf.no_gradient


def _register(op_type: str) -> GradientStatus:
    if op_type in _status:
        return _status[op_type]
    status: GradientStatus
    if _has_python_gradient(op_type):
        status = "python"
    else:
        status = _probe(op_type)
        if status == "bridged":
            ops.RegisterGradient(op_type)(_bridged_gradient)
        elif status == "no_gradient":
            ops.no_gradient(op_type)
        elif status == "unimplemented":
            ops.RegisterGradient(op_type)(_unimplemented_gradient)
    _status[op_type] = status
    return status


def _probe(op_type: str) -> GradientStatus:
    """Asks the C++ registries what kind of gradient op_type has (the library's C entry point
    TfExtGradientKind: no gradient creator runs, nothing is logged)."""
    kind, message = _loader.c_gradient_kind(op_type)
    if kind not in _KINDS:
        raise RuntimeError(f"register_cpp_gradients: TfExtGradientKind({op_type!r}) returned "
                           f"unknown kind {kind}; is the op library newer than this package?")
    if _KINDS[kind] == "unimplemented":
        _unimplemented[op_type] = message
    return _KINDS[kind]


def _unimplemented_error(op_type: str, context: str = "") -> GradientNotImplementedError:
    """The error for differentiating op_type; `context` says how op_type was reached."""
    message = _unimplemented.get(op_type) or f"the gradient of {op_type} is not implemented"
    lead = (f"{context}{op_type}, whose gradient is not implemented" if context
            else f"{op_type}: its gradient is not implemented")
    return GradientNotImplementedError(None, None, f"{lead} ({message})")


def _unimplemented_gradient(op: Any, *unused_grads: tf.Tensor | None) -> list[tf.Tensor]:
    """The Python gradient of ops whose C++ gradient is registered as not implemented."""
    raise _unimplemented_error(op.type)


def _run_gradient_function_def(node_def: node_def_pb2.NodeDef) -> function_pb2.FunctionDef:
    """Runs TfExt>GradientFunctionDef eagerly, whatever the calling context: gradient
    functions run while a graph (TF1, tf.function) is being built."""
    global _function_def_calls
    lib = _loader.library()
    with ops.init_scope(), context.eager_mode(), tf.device("/CPU:0"):
        _function_def_calls += 1
        data = lib.tf_ext_gradient_function_def(node_def.SerializeToString()).numpy()
    return function_pb2.FunctionDef.FromString(data)


def _node_def(op: Any) -> node_def_pb2.NodeDef:
    """The forward node as a NodeDef: op type + attrs (internal "_" attrs dropped)."""
    node = node_def_pb2.NodeDef(op=op.type)
    if isinstance(op, ops.Operation):  # graph mode and tf.function: the real NodeDef
        for name, value in op.node_def.attr.items():
            if not name.startswith("_"):
                node.attr[name].CopyFrom(value)
        return node
    # Eager GradientTape passes a stand-in with the attrs as a flat (name, value, ...) tuple;
    # the OpDef gives each attr's type for the AttrValue encoding.
    op_def = op_def_registry.get(op.type)
    types_by_name = {a.name: a.type for a in op_def.attr} if op_def else {}
    for name in op.attrs[::2]:
        if name in types_by_name and not name.startswith("_"):
            node.attr[name].CopyFrom(op_def_library.value_to_attr_value(
                op.get_attr(name), types_by_name[name], name))
    return node


class _Specialised:
    """One (op type, attrs)'s C++ gradient: its FunctionDef and a callable built from it."""

    def __init__(self, op_type: str, fdef: function_pb2.FunctionDef) -> None:
        self.op_type, self.fdef = op_type, fdef
        self.retired: list[Callable[..., list[tf.Tensor]]] = []
        self.fn: Callable[..., list[tf.Tensor]] | None = None
        self._build()

    def _build(self) -> None:
        if self.fn is not None:
            # Kept alive on purpose: a collected function is removed from the context, which
            # then asks remote workers that never had it to remove it too, and that error
            # poisons later remote calls.
            self.retired.append(self.fn)
        self.fn, self.function_name = _callable_gradient(self.op_type, self.fdef)
        self.server_def = context.context().get_server_def()

    def current(self) -> Callable[..., list[tf.Tensor]]:
        # Functions registered before connecting to a cluster (set_server_def) never reach
        # the remote workers, and a reset context forgets them: rebuild from the kept
        # FunctionDef then (no new C++ request). tf.function has the same limitation.
        ctx = context.context()
        if ctx.get_server_def() is not self.server_def or not ctx.has_function(
                self.function_name):
            self._build()
        return self.fn


def _specialised(node: node_def_pb2.NodeDef) -> Callable[..., list[tf.Tensor]]:
    key = node.SerializeToString(deterministic=True)
    with _lock:
        entry = _cache.get(key)
        if entry is None:
            # Errors (e.g. an int32 ZeroOut) keep the C++ status and name both ops.
            entry = _Specialised(node.op, _run_gradient_function_def(node))
            _cache[key] = entry
        return entry.current()


def _callable_gradient(
        op_type: str,
        fdef: function_pb2.FunctionDef) -> tuple[Callable[..., list[tf.Tensor]], str]:
    """The FunctionDef as a callable ConcreteFunction (and the name it has in the eager
    context), made non-differentiable with a clear error if one of its nodes has no gradient
    or one registered as not implemented."""
    lacking, unimplemented = [], []
    for node_type in sorted({n.op for n in fdef.node_def}):
        # Body ops with a C++ gradient (tf_ext's or a third party's) get bridged too.
        if not _has_python_gradient(node_type) and op_def_registry.get(node_type) is not None:
            _register(node_type)
        if _status.get(node_type) == "unimplemented":
            unimplemented.append(node_type)
        elif not _has_python_gradient(node_type):
            lacking.append(node_type)

    with ops.Graph().as_default():  # build away from any graph under construction
        graph = function_def_to_graph.function_def_to_graph(fdef)
    graph.structured_input_signature = (
        tuple(tf.TensorSpec(None, t.dtype) for t in graph.inputs), {})
    graph.structured_outputs = list(graph.outputs)
    function_type = function_type_lib.from_structured_signature(
        graph.structured_input_signature, graph.structured_outputs,
        graph.function_captures.capture_types)
    gradient = concrete_function.ConcreteFunction.from_func_graph(
        graph, function_type, attrs={})
    name = gradient.name.decode() if isinstance(gradient.name, bytes) else gradient.name
    if not lacking and not unimplemented:
        return (lambda *args: list(gradient(*args))), name

    context = (f"{op_type}: its gradient is not differentiable (no second-order gradient): "
               f"the C++ gradient {fdef.signature.name} uses ")

    def error() -> Exception:
        if unimplemented:
            return _unimplemented_error(unimplemented[0], context)
        return LookupError(f"{context}op type(s) {', '.join(lacking)} which have no gradient")

    # Wrapped even though the unimplemented ops' own Python gradients raise: under nested
    # tapes a recorded ConcreteFunction builds its backward at once, so the error would come
    # when only the first derivative is taken.
    @tf.custom_gradient
    def first_order_only(*args):
        def fail(*unused_dys):
            raise error()
        # Unrecorded: under a tape the ConcreteFunction would build its own backward (and fail
        # with TensorFlow's less specific message) even if nobody asks for it.
        with record.stop_recording():
            results = list(gradient(*args))
        return results, fail

    return (lambda *args: list(first_order_only(*args))), name


def _bridged_gradient(op: Any, *grads: tf.Tensor | None) -> list[tf.Tensor]:
    """The Python gradient of every bridged op: calls its specialised C++ gradient."""
    fn = _specialised(_node_def(op))
    # An output nobody differentiated arrives as None; the C++ gradient expects zeros.
    args: list[tf.Tensor] = list(op.inputs)
    args += [tf.zeros_like(y) if g is None else g for g, y in zip(grads, op.outputs)]
    results = fn(*args)
    if len(results) != len(op.inputs):
        raise ValueError(f"{op.type}: its C++ gradient returned {len(results)} gradients for "
                         f"{len(op.inputs)} inputs")
    if not tf.executing_eagerly():
        for result, x in zip(results, op.inputs):
            result.set_shape(x.shape)  # a gradient has its input's shape
    return results
