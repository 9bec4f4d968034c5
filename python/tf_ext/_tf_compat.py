"""Every private TensorFlow API tf_ext uses, in one place (tested against TensorFlow 2.21).

TensorFlow's public API has no way to list a library's ops, to build a callable from a
FunctionDef, or to read Python's gradient registry; tf_ext needs all three and a few more.
Those uses live here and nowhere else (tests/python/test_layering.py fails if another module
of the package imports tensorflow.python or tensorflow.core), so a TensorFlow upgrade that
moves or changes them touches this file only. Each function states what it relies on.
"""

from __future__ import annotations

import contextlib
import inspect
import traceback
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import tensorflow as tf
from tensorflow.core.framework import function_pb2
from tensorflow.core.framework import node_def_pb2
from tensorflow.core.framework import op_def_pb2
from tensorflow.core.function.polymorphism import function_type as function_type_lib
from tensorflow.python import pywrap_tfe
from tensorflow.python.client import pywrap_tf_session
from tensorflow.python.eager import backprop
from tensorflow.python.eager import context
from tensorflow.python.eager import execute as eager_execute
from tensorflow.python.eager import record
from tensorflow.python.eager.polymorphic_function import concrete_function
from tensorflow.python.framework import function_def_to_graph
from tensorflow.python.framework import op_callbacks
from tensorflow.python.framework import op_def_library
from tensorflow.python.framework import op_def_registry
from tensorflow.python.framework import ops
from tensorflow.python.framework import tensor_util

# Protocol buffer classes (tensorflow.core.framework; NodeDef is also tf.compat.v1.NodeDef,
# FunctionDef has no public alias).
NodeDef = node_def_pb2.NodeDef
FunctionDef = function_pb2.FunctionDef


def library_op_names(path: str) -> tuple[str, ...]:
    """Op types registered by the op library at `path` (loading it if needed).

    TF 2.21's tf.load_op_library module has no OP_LIST; this asks TensorFlow's loader
    (pywrap_tf_session.TF_LoadLibrary / TF_GetOpList), which caches the list per path, the
    same way tf.load_op_library builds its wrappers.
    """
    handle = pywrap_tf_session.TF_LoadLibrary(path)
    try:
        op_list = op_def_pb2.OpList.FromString(pywrap_tf_session.TF_GetOpList(handle))
    finally:
        pywrap_tf_session.TF_DeleteLibraryHandle(handle)
    return tuple(op.name for op in op_list.op)


def module_op_names(module: types.ModuleType) -> list[str]:
    """Op types wrapped by a tf.load_op_library module ([] if none is registered).

    Older releases give the module an OP_LIST; TF 2.21's generated wrappers carry their op
    type as a code constant ("TfExt>ZeroOut" or b"TfExt>ZeroOut"): keep the constants that
    name registered ops.
    """
    op_list = getattr(module, "OP_LIST", None)
    if op_list is not None:
        return [op.name for op in op_list.op]
    names: list[str] = []
    for value in vars(module).values():
        if not inspect.isfunction(value) or value.__module__ != module.__name__:
            continue
        for const in inspect.unwrap(value).__code__.co_consts:
            if isinstance(const, bytes):
                const = const.decode("utf-8", "replace")
            if isinstance(const, str) and const not in names and is_registered_op(const):
                names.append(const)
    return names


def op_def(op_type: str) -> op_def_pb2.OpDef | None:
    """op_type's OpDef from TensorFlow's op registry (op_def_registry.get); None if unknown."""
    return op_def_registry.get(op_type)


def is_registered_op(op_type: str) -> bool:
    """Whether op_type is in TensorFlow's op registry (op_def_registry.get)."""
    return op_def_registry.get(op_type) is not None


def has_python_gradient(op_type: str) -> bool:
    """Whether Python's gradient registry has op_type: a gradient function, or None from
    tf.no_gradient (ops._gradient_registry; the public API only registers)."""
    try:
        ops._gradient_registry.lookup(op_type)  # pylint: disable=protected-access
    except LookupError:
        return False
    return True


def node_def_of(op: Any) -> NodeDef:
    """The forward node of a Python gradient function's `op` as a NodeDef: op type + attrs
    (internal "_" attrs dropped; absent attrs get the OpDef's defaults, as the runtime gives
    them).

    In graph mode and tf.function `op` is a tf.Operation with its real NodeDef. Eager
    GradientTape passes a stand-in whose `attrs` is a flat (name, value, ...) tuple holding
    what the op's Python wrapper passed: an attr left to its default is absent or None there
    (and ReadVariableOp's is None altogether). The OpDef gives each attr's type for the
    AttrValue encoding (op_def_library).
    """
    node = NodeDef(op=op.type)
    if isinstance(op, tf.Operation):
        for name, value in op.node_def.attr.items():
            if not name.startswith("_"):
                node.attr[name].CopyFrom(value)
        return node
    op_def = op_def_registry.get(op.type)
    types_by_name = {a.name: a.type for a in op_def.attr} if op_def else {}
    attrs = op.attrs or ()
    for name, value in zip(attrs[::2], attrs[1::2]):
        if name in types_by_name and not name.startswith("_") and value is not None:
            node.attr[name].CopyFrom(op_def_library.value_to_attr_value(
                op.get_attr(name), types_by_name[name], name))
    for attr in op_def.attr if op_def else ():
        if attr.name not in node.attr and attr.HasField("default_value"):
            node.attr[attr.name].CopyFrom(attr.default_value)
    return node


def eager_op(op_type: str, attrs: tuple[Any, ...], inputs: tuple[tf.Tensor, ...],
             outputs: list[tf.Tensor]) -> Any:
    """The stand-in op an eager GradientTape gives a Python gradient function
    (backprop._MockOp), here with every input and output kept."""
    return backprop._MockOp(attrs, inputs, outputs, op_type, None)  # pylint: disable=protected-access


def node_def_for(op_type: str, inputs: list[tf.Tensor], attrs: dict[str, Any]) -> NodeDef:
    """The NodeDef (op type + attrs) of an eager call of op_type with `inputs` and keyword
    `attrs`, as the eager runtime completes it: type attrs from the inputs' dtypes, absent
    attrs from the OpDef's defaults (op_def_registry, op_def_library.value_to_attr_value)."""
    op_def = op_def_registry.get(op_type)
    node = NodeDef(op=op_type)
    for arg, x in zip(op_def.input_arg, inputs):
        if arg.type_attr:
            node.attr[arg.type_attr].type = x.dtype.as_datatype_enum
    for attr in op_def.attr:
        if attr.name in attrs:
            node.attr[attr.name].CopyFrom(op_def_library.value_to_attr_value(
                attrs[attr.name], attr.type, attr.name))
        elif attr.name not in node.attr and attr.HasField("default_value"):
            node.attr[attr.name].CopyFrom(attr.default_value)
    return node


def all_op_names() -> tuple[str, ...]:
    """Every op type in TensorFlow's op registry, those of loaded libraries included
    (TF_GetAllOpList, as c_api_util.ApiDefMap reads it)."""
    buffer = pywrap_tf_session.TF_GetAllOpList()
    try:
        data = pywrap_tf_session.TF_GetBuffer(buffer)
    finally:
        pywrap_tf_session.TF_DeleteBuffer(buffer)
    return tuple(op.name for op in op_def_pb2.OpList.FromString(data).op)


def has_list_args(op_type: str) -> bool:
    """Whether op_type has an input or output that is a list of tensors (N*T or a type list:
    Pack, ConcatV2, AddN, IdentityN, Unpack, ...; op_def_registry)."""
    op_def = op_def_registry.get(op_type)
    return op_def is not None and any(
        arg.number_attr or arg.type_list_attr
        for arg in list(op_def.input_arg) + list(op_def.output_arg))


def calls_functions(op_type: str) -> bool:
    """Whether op_type has a function-valued attr (While, If, Case, PartitionedCall, ...;
    op_def_registry)."""
    op_def = op_def_registry.get(op_type)
    return op_def is not None and any(a.type in ("func", "list(func)") for a in op_def.attr)


# Python's gradient registry: ops._gradient_registry, a registry.Registry whose `_registry`
# dict maps each op type (or gradient_override_map name) to {"type": function or None,
# "location": where it was registered}. The public API only adds entries.
_ABSENT = object()  # what python_gradient_entries returns for an op type without an entry


def python_gradient_entries(op_types: Iterable[str]) -> dict[str, Any]:
    """The registry entries of op_types as they are now (opaque values; _ABSENT for none),
    for set_python_gradient_entries to put back."""
    entries = ops._gradient_registry._registry  # pylint: disable=protected-access
    return {op_type: entries.get(op_type, _ABSENT) for op_type in op_types}


def python_gradient_function(entry: Any) -> Callable[..., Any] | None:
    """The gradient function of an entry from python_gradient_entries (None for an op
    registered as not differentiable or without an entry)."""
    return None if entry is _ABSENT else entry["type"]


def has_python_gradient_entry(entry: Any) -> bool:
    """Whether an entry from python_gradient_entries exists (a function or tf.no_gradient)."""
    return entry is not _ABSENT


def replace_python_gradients(functions: dict[str, Callable[..., Any] | None]) -> None:
    """Makes each op type's Python gradient the given function (None: not differentiable),
    replacing what was registered; Registry.register refuses a second registration."""
    entries = ops._gradient_registry._registry  # pylint: disable=protected-access
    for op_type, fn in functions.items():
        entries[op_type] = {"type": fn, "location": _REPLACED_LOCATION}


def set_python_gradient_entries(saved: dict[str, Any]) -> None:
    """Puts back entries from python_gradient_entries (the very objects; _ABSENT removes)."""
    entries = ops._gradient_registry._registry  # pylint: disable=protected-access
    for op_type, entry in saved.items():
        if entry is _ABSENT:
            entries.pop(op_type, None)
        else:
            entries[op_type] = entry


_REPLACED_LOCATION = traceback.FrameSummary(__file__, 0, "replace_python_gradients")


def add_eager_op_callback(callback: Callable[..., Any]) -> None:
    """Calls callback(op_type, inputs, attrs, outputs, op_name=None, graph=None) after every
    op this thread runs eagerly (and every graph op it creates: graph is then set);
    op_callbacks.add_op_callback, which makes op wrappers' fast path call it after recording
    the op on the tapes, and their slow path (execute.execute) before."""
    op_callbacks.add_op_callback(callback)


def remove_eager_op_callback(callback: Callable[..., Any]) -> None:
    """Undoes add_eager_op_callback on this thread (op_callbacks.remove_op_callback)."""
    op_callbacks.remove_op_callback(callback)


def set_record_gradient_hook(hook: Callable[..., None] | None) -> None:
    """Calls hook(op_type, inputs, attrs, outputs) after TensorFlow records an op that a
    generated op wrapper ran on its slow path under a tape (execute.record_gradient, which
    backprop sets and the wrappers look up on each call); None restores TensorFlow's."""
    global _record_gradient
    if hook is None:
        if _record_gradient is not None:
            eager_execute.record_gradient = _record_gradient
            _record_gradient = None
        return
    if _record_gradient is None:
        _record_gradient = eager_execute.record_gradient
    original = _record_gradient

    def record_gradient(op_type: Any, inputs: Any, attrs: Any, outputs: Any) -> None:
        original(op_type, inputs, attrs, outputs)
        hook(op_type, inputs, attrs, outputs)

    eager_execute.record_gradient = record_gradient


_record_gradient: Callable[..., None] | None = None


def record_backprop(op_type: str, outputs: list[tf.Tensor], inputs: list[tf.Tensor],
                    backward: Callable[..., list[tf.Tensor]]) -> None:
    """Records `outputs` = op(`inputs`) on every active GradientTape (not on forward
    accumulators) with `backward` as its gradient (record.record_operation_backprop_only).
    Recording outputs a tape already has makes this record the one the tape differentiates
    (the tape maps each output to its latest producer)."""
    record.record_operation_backprop_only(op_type, outputs, inputs, backward)


def input_names(op_type: str) -> list[str]:
    """op_type's input argument names, in order (op_def_registry)."""
    return [arg.name for arg in op_def_registry.get(op_type).input_arg]


def output_names(op_type: str) -> list[str]:
    """op_type's output argument names, in order (op_def_registry)."""
    return [arg.name for arg in op_def_registry.get(op_type).output_arg]


def tape_could_record() -> bool:
    """Whether any GradientTape (or forward accumulator) is active on this thread
    (record.could_possibly_record's one C call, made directly: this runs on every eager op
    call): without one, nothing needs recording."""
    return not pywrap_tfe.TFE_Py_TapeSetIsEmpty()


def record_operation(op_type: str, outputs: list[tf.Tensor], inputs: list[tf.Tensor],
                     backward: Callable[..., list[tf.Tensor]]) -> None:
    """Records `outputs` = op(`inputs`) on every active tape with `backward` (d(outputs) ->
    d(inputs)) as its gradient, the way tf.custom_gradient records in eager mode
    (record.record_operation). The tape then holds only tensor ids of inputs and outputs, and
    what `backward` closes over: the caller decides what stays alive."""
    record.record_operation(op_type, outputs, inputs, backward)


@contextlib.contextmanager
def eager_scope() -> Iterator[None]:
    """Runs eagerly whatever the caller builds (a TF1 graph, a tf.function): tf.init_scope
    plus context.eager_mode (the latter for processes that disabled eager execution)."""
    with tf.init_scope(), context.eager_mode():
        yield


def call_unrecorded(fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> Any:
    """fn(*args, **kwargs) with no GradientTape recording it: stop_recording() without the
    context manager's cost, for call sites that run on every eager op."""
    stopped = pywrap_tfe.TFE_Py_TapeSetIsStopped()
    if not stopped:
        pywrap_tfe.TFE_Py_TapeSetStopOnThread()
    try:
        return fn(*args, **kwargs)
    finally:
        if not stopped:
            pywrap_tfe.TFE_Py_TapeSetRestartOnThread()


def stop_recording() -> contextlib.AbstractContextManager:
    """Ops run inside are not recorded on any GradientTape (record.stop_recording)."""
    return record.stop_recording()


def function_from_def(
        fdef: FunctionDef, input_shapes: list[tf.TensorShape | None] | None = None,
) -> tuple[Callable[..., Any], str]:
    """A FunctionDef as a callable ConcreteFunction (positional tensors in, a list of tensors
    out) and the name it is registered under in the eager context. TensorFlow registers it
    with the eager context on first call and adds it to every graph that calls it.

    input_shapes: the arguments' static shapes (None: unknown), which the function then
    requires; by default every shape is unknown. Raises ValueError when a node's shape
    function rejects its inputs' shapes: importing runs shape inference, and a few shape
    functions need what a shape-generic argument lacks (SpaceToBatchND's and
    BatchToSpaceND's: a block_shape of known size).

    Relies on function_def_to_graph, function_type.from_structured_signature and
    ConcreteFunction.from_func_graph (the way tf.function builds its own functions).
    """
    with tf.Graph().as_default():  # build away from any graph under construction
        graph = function_def_to_graph.function_def_to_graph(fdef, input_shapes=input_shapes)
    graph.structured_input_signature = (
        tuple(tf.TensorSpec(None if input_shapes is None else t.shape, t.dtype)
              for t in graph.inputs), {})
    graph.structured_outputs = list(graph.outputs)
    function_type = function_type_lib.from_structured_signature(
        graph.structured_input_signature, graph.structured_outputs,
        graph.function_captures.capture_types)
    fn = concrete_function.ConcreteFunction.from_func_graph(graph, function_type, attrs={})
    name = fn.name.decode() if isinstance(fn.name, bytes) else fn.name
    return fn, name


def symbolic_gradient_function(
        fdef: FunctionDef, forward: FunctionDef) -> tuple[Callable[..., Any], str]:
    """function_from_def for a FunctionDef whose one node is a SymbolicGradient of the function
    `forward` (which function_def_to_graph cannot import: it does not know `forward`):
    `forward` is registered as a function, and the gradient traced as a tf.function that
    carries it in its library (ConcreteFunction.add_to_graph), so graphs that call the
    gradient get both. TensorFlow's function optimizer inlines the SymbolicGradient."""
    forward_fn, forward_name = function_from_def(forward)  # registered under a new name
    (node,) = fdef.node_def
    f = type(node.attr["f"].func)(name=forward_name)  # a NameAttrList
    signature = [tf.TensorSpec(None, tf.as_dtype(arg.type)) for arg in fdef.signature.input_arg]
    out_types = [tf.as_dtype(t) for t in node.attr["Tout"].list.type]

    def call(*args: tf.Tensor) -> list[tf.Tensor]:
        forward_fn.add_to_graph()
        return tf.raw_ops.SymbolicGradient(input=list(args), Tout=out_types, f=f)

    fn = tf.function(call, input_signature=signature, autograph=False).get_concrete_function()
    fn._tf_ext_forward = forward_fn  # pylint: disable=protected-access  # kept alive with it
    name = fn.name.decode() if isinstance(fn.name, bytes) else fn.name
    return fn, name


def call_function(name: str, inputs: list[tf.Tensor], num_outputs: int) -> list[tf.Tensor]:
    """Runs the eager context's function `name` on `inputs` as one op (the way a
    ConcreteFunction finally runs it: context.call_function), without a ConcreteFunction's
    argument processing and without recording on any tape. Eager only."""
    outputs = context.context().call_function(name.encode(), inputs, num_outputs)
    return list(outputs or [])


def execute_op(op_type: str, inputs: list[tf.Tensor], attrs: tuple[Any, ...],
               num_outputs: int) -> list[tf.Tensor]:
    """Runs one op eagerly (execute.execute: what a generated wrapper's slow path does), attrs
    as a flat (name, value, ...) tuple of plain Python values. Eager only."""
    return list(eager_execute.execute(op_type, num_outputs, inputs, attrs, context.context()))


def make_ndarray(tensor: Any) -> Any:
    """A TensorProto's value as a numpy array."""
    return tensor_util.MakeNdarray(tensor)


def context_key() -> Any:
    """Identifies the current eager context (a reset makes a new one): tensors cached for one
    context are not reused in another. The context object itself, held by the caches, so its
    identity is never reused by a later context."""
    return context.context()


def server_def() -> Any:
    """The eager context's cluster definition (None outside a cluster); a new object after
    each tf.config.experimental_connect_to_cluster."""
    return context.context().get_server_def()


def context_has_function(name: str) -> bool:
    """Whether the eager context still holds the function `name` (a reset forgets them)."""
    return context.context().has_function(name)
