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

Eager GradientTape memory: TensorFlow's tape keeps every input and output of a recorded op alive
until the gradient is taken (its exclusion tables cover only TensorFlow's own ops). tf_ext's
functions therefore run eagerly under a tape through call_recorded(): the op runs unrecorded and
is recorded with a backward function that keeps only the forward tensors its declaration says
the gradient reads (Reads(...) in tf_ext/grads/*_grad.cc): nothing for gradient_reversal, x for
sign_ste, x for median_pool2d, data, rois and argmax for roi_pool. A gradient that reads forward
outputs (RoiPool's argmax) gets them from the forward op, in graphs and on tapes alike; only
SymbolicGradient, which has no outputs to give, recomputes them.

library() is the op library with its gradients bridged and its XLA kernels registered with
TensorFlow's XLA registry (tf_ext/xla/xla_registration.h; xla_status() says how that went):
tf_ext.library() and every function of tf_ext.ops go through it. Layering: this module calls tf_ext._loader (which only loads) and
_c_api; neither imports this module. Private TensorFlow APIs are reached through _tf_compat.
"""

from __future__ import annotations

import hashlib
import os
import threading
import types
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, Literal

import tensorflow as tf

from tf_ext import _c_api, _loader, _tf_compat
from tf_ext._c_api import GradientKind

# What register_cpp_gradients did with an op type:
#   "bridged"        its C++ gradient is now its Python gradient;
#   "no_gradient"    C++ registers it as not differentiable: tf.no_gradient, like C++;
#   "missing"        no C++ gradient: left alone, so TensorFlow raises LookupError on use;
#   "unimplemented"  C++ registers its gradient as not implemented: its Python gradient raises
#                    GradientNotImplementedError with the C++ message, like C++;
#   "python"         it already had a Python gradient (or no-gradient): left alone.
GradientStatus = Literal["bridged", "no_gradient", "missing", "unimplemented", "python"]

_STATUS_OF_KIND: dict[GradientKind, GradientStatus] = {
    GradientKind.FUNCTION: "bridged", GradientKind.NONE: "no_gradient",
    GradientKind.MISSING: "missing", GradientKind.UNIMPLEMENTED: "unimplemented"}


class GradientNotImplementedError(tf.errors.UnimplementedError, NotImplementedError):
    """Differentiating an op whose C++ gradient is registered as not implemented, e.g. a
    second derivative of TfExt>RoiPool. The message names the op and quotes C++'s.

    Both a tf.errors.UnimplementedError (the C++ status code; tf.function keeps the type) and
    a NotImplementedError.
    """


# Guards the state below; taken before _loader's lock, never after (_loader never calls here).
_lock = threading.RLock()
_ready = False  # tf_ext's own library is loaded and its gradients bridged
_status: dict[str, GradientStatus] = {}
_unimplemented: dict[str, str] = {}  # op type -> the C++ registry's message
_cache: dict[bytes, "_Specialised"] = {}
_function_def_calls = 0  # how often the C++ side was asked (tests check the cache with it)
_xla_error: str | None = None  # None until loaded; "" once the XLA kernels are registered
_cpp_gradient_calls: Counter[str] = Counter()  # op type -> calls of its C++ gradient


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
    library()  # the bridge itself needs tf_ext's library (its ops and C entry points)
    with _lock:
        return {name: _register(name) for name in names}


def library() -> types.ModuleType:
    """tf_ext's op library module (tf.load_op_library's), loaded and with its C++ gradients
    bridged into Python's registry on the first call; other threads wait until that is done.
    """
    global _ready, _xla_error
    if _ready:
        return _loader.load()
    with _lock:
        module = _loader.load()
        if not _ready:
            for name in _loader.op_names():
                _register(name)
            _xla_error = _c_api.register_xla_kernels()
            _ready = True
        return module


def xla_status() -> str:
    """"" when tf_ext's ops compile under XLA (tf.function(jit_compile=True)), else why not
    (loads the library if needed). tf_ext's Keras layers report supports_jit accordingly."""
    library()
    return _xla_error or ""


def library_path() -> str:
    """The canonical path of tf_ext's op library (loaded and bridged, as by library())."""
    library()
    return _loader.library_path()


def op_names() -> tuple[str, ...]:
    """Op types tf_ext's library registers (loaded and bridged, as by library())."""
    library()
    return _loader.op_names()


def cache_size() -> int:
    """Number of specialised gradient functions built so far (one per op type + attrs)."""
    return len(_cache)


def function_def_requests() -> int:
    """How many times the C++ registry was asked for a specialised FunctionDef."""
    return _function_def_calls


def cpp_gradient_calls() -> dict[str, int]:
    """Op type -> how many times its C++ gradient was called (each call: one op's gradient,
    eagerly on a tape, or built into a graph by tf.gradients / a tf.function's tape)."""
    return dict(_cpp_gradient_calls)


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
    names = _tf_compat.module_op_names(module)
    if not names:
        raise ValueError(
            f"register_cpp_gradients: module {module.__name__} wraps no registered op; was "
            "its library loaded under a second path (tf.load_op_library then returns an "
            "empty module)? Pass the op type names instead")
    return names


def _register(op_type: str) -> GradientStatus:
    if op_type in _status:
        return _status[op_type]
    status: GradientStatus
    if _tf_compat.has_python_gradient(op_type):
        status = "python"
    else:
        status = _probe(op_type)
        if status == "bridged":
            tf.RegisterGradient(op_type)(_bridged_gradient)
        elif status == "no_gradient":
            tf.no_gradient(op_type)
        elif status == "unimplemented":
            tf.RegisterGradient(op_type)(_unimplemented_gradient)
    _status[op_type] = status
    return status


def _probe(op_type: str) -> GradientStatus:
    """Asks the C++ registries what kind of gradient op_type has (the library's C entry point
    TfExtGradientKind: no gradient creator runs, nothing is logged)."""
    kind, message = _c_api.gradient_kind(op_type)
    if kind == GradientKind.UNIMPLEMENTED:
        _unimplemented[op_type] = message
    return _STATUS_OF_KIND[kind]


def _unimplemented_error(op_type: str, context: str = "") -> GradientNotImplementedError:
    """The error for differentiating op_type; `context` says how op_type was reached."""
    message = _unimplemented.get(op_type) or f"the gradient of {op_type} is not implemented"
    lead = (f"{context}{op_type}, whose gradient is not implemented" if context
            else f"{op_type}: its gradient is not implemented")
    return GradientNotImplementedError(None, None, f"{lead} ({message})")


def _unimplemented_gradient(op: Any, *unused_grads: tf.Tensor | None) -> list[tf.Tensor]:
    """The Python gradient of ops whose C++ gradient is registered as not implemented."""
    raise _unimplemented_error(op.type)


def _run_gradient_function_def(node_def: _tf_compat.NodeDef) -> _tf_compat.FunctionDef:
    """Runs TfExt>GradientFunctionDef eagerly, whatever the calling context: gradient
    functions run while a graph (TF1, tf.function) is being built."""
    global _function_def_calls
    lib = _loader.load()
    with _tf_compat.eager_scope(), tf.device("/CPU:0"):
        _function_def_calls += 1
        data = lib.tf_ext_gradient_function_def(node_def.SerializeToString()).numpy()
    return _tf_compat.FunctionDef.FromString(data)


class _Specialised:
    """One (op type, attrs)'s C++ gradient: its FunctionDef and a callable built from it."""

    def __init__(self, op_type: str, fdef: _tf_compat.FunctionDef,
                 forward: _tf_compat.FunctionDef | None = None) -> None:
        # forward: the function a SymbolicGradient fdef differentiates (list arguments).
        self.op_type, self.fdef, self.forward = op_type, fdef, forward
        self.retired: list[Callable[..., list[tf.Tensor]]] = []
        self.num_outputs = len(fdef.signature.output_arg)
        self.nodes = _EagerNodes.of(fdef)
        # The callables built, by the arguments' static shapes (None: shape-generic), each
        # with its name in the eager context and the cluster it was built for.
        self._built: dict[Any, tuple[Callable[..., list[tf.Tensor]], str, Any]] = {}
        # Whether the FunctionDef imports only with its arguments' shapes known: a node whose
        # shape function needs them (SpaceToBatchND, BatchToSpaceND: the size of block_shape)
        # fails shape-generically. Such an op's gradient is then built per static shapes of
        # the arguments, as tf.function traces per input shapes.
        self.per_shapes = False
        try:
            self._build(None)
        except ValueError:
            if forward is not None:
                raise
            self.per_shapes = True

    @property
    def function_name(self) -> str | None:
        """The shape-generic function's name in the eager context (None: built per shapes)."""
        built = self._built.get(None)
        return None if built is None else built[1]

    def _build(self, shapes: list[tf.TensorShape | None] | None) -> None:
        key = None if shapes is None else _shapes_key(shapes)
        if key in self._built:
            # Kept alive on purpose: a collected function is removed from the context, which
            # then asks remote workers that never had it to remove it too, and that error
            # poisons later remote calls.
            self.retired.append(self._built[key][0])
        fn, name = _callable_gradient(self.op_type, self.fdef, self.forward, shapes)
        self._built[key] = (fn, name, _tf_compat.server_def())

    def current(self, args: list[tf.Tensor]) -> tuple[Callable[..., list[tf.Tensor]], str]:
        """The callable for args (and its name in the eager context)."""
        shapes = None
        if self.per_shapes:
            # A resource's or variant's static shape is its handle's: left unknown.
            shapes = [None if a.dtype in (tf.resource, tf.variant) else a.shape for a in args]
        key = None if shapes is None else _shapes_key(shapes)
        built = self._built.get(key)
        # Functions registered before connecting to a cluster (set_server_def) never reach
        # the remote workers, and a reset context forgets them: rebuild from the kept
        # FunctionDef then (no new C++ request). tf.function has the same limitation.
        if (built is None or _tf_compat.server_def() is not built[2] or
                not _tf_compat.context_has_function(built[1])):
            self._build(shapes)
            built = self._built[key]
        return built[0], built[1]

    def __call__(self, *args: tf.Tensor) -> list[tf.Tensor]:
        """The gradient on args. Eagerly with no tape that could record it (a first-order
        gradient), its nodes run as eager ops (or, if it has a node that cannot, the function
        runs as a single op): a ConcreteFunction call costs several times more in argument
        processing and function-runtime set-up, and only a recording tape needs what it adds
        (the call's own gradient, for higher orders)."""
        _cpp_gradient_calls[self.op_type] += 1
        if tf.executing_eagerly() and not _tf_compat.tape_could_record():
            if self.nodes is not None:
                return self.nodes(args)  # plain eager ops: no function in the context needed
            _, name = self.current(list(args))
            return _tf_compat.call_function(name, list(args), self.num_outputs)
        fn, _ = self.current(list(args))
        return fn(*args)


class _EagerNodes:
    """A gradient FunctionDef's nodes run one by one as eager ops: the first-order eager
    path. Only for FunctionDefs of plain ops (no function-valued attrs, no list-valued
    function inputs); its Const nodes become tensors once per eager context."""

    class Unsupported(Exception):
        pass

    @classmethod
    def of(cls, fdef: _tf_compat.FunctionDef) -> "_EagerNodes | None":
        try:
            return cls(fdef)
        except (cls.Unsupported, KeyError, ValueError, TypeError):
            return None

    def __init__(self, fdef: _tf_compat.FunctionDef) -> None:
        self.arg_index = {a.name: i for i, a in enumerate(fdef.signature.input_arg)}
        if any(a.number_attr or a.type_list_attr for a in fdef.signature.input_arg):
            raise self.Unsupported("list-valued function input")
        nodes = {n.name: n for n in fdef.node_def}
        self.steps: list[tuple[str, str, Any, list[tuple[str, int]], int]] = []
        self.consts: dict[str, Any] = {}
        self.folded: set[str] = set()  # nodes computed from constants only
        self.offsets: dict[str, dict[str, int]] = {}
        done: set[str] = set()

        def visit(name: str, path: tuple[str, ...] = ()) -> None:
            if name in done:
                return
            if name in path:
                raise self.Unsupported("cycle")
            node = nodes[name]
            for ref in node.input:
                src = ref.lstrip("^").split(":")[0]
                if src in nodes:
                    visit(src, path + (name,))
            self._add(node)
            done.add(name)

        for name in nodes:
            visit(name)
        self.outputs = [self._ref(fdef.ret[a.name]) for a in fdef.signature.output_arg]
        self._const_cache: dict[Any, list[Any]] = {}
        self._compile()

    def _add(self, node: Any) -> None:
        op_def = _tf_compat.op_def(node.op)
        if op_def is None:
            raise self.Unsupported(node.op)  # e.g. a function call
        offsets, total = {}, 0
        for arg in op_def.output_arg:
            offsets[arg.name] = total
            if arg.number_attr:
                total += node.attr[arg.number_attr].i
            elif arg.type_list_attr:
                total += len(node.attr[arg.type_list_attr].list.type)
            else:
                total += 1
        self.offsets[node.name] = offsets
        # A stateless op of constants only is evaluated once per context, like a Const.
        data_inputs = [ref.split(":")[0] for ref in node.input if not ref.startswith("^")]
        foldable = (node.op == "Const" or
                    (not op_def.is_stateful and bool(data_inputs) and
                     all(src in self.folded for src in data_inputs)))
        if foldable:
            self.folded.add(node.name)
        if node.op == "Const":
            self.consts[node.name] = (_tf_compat.make_ndarray(node.attr["value"].tensor),
                                      tf.as_dtype(node.attr["dtype"].type))
            self.steps.append(("const", node.name, None, [], 1))
            return
        # A FunctionDef's nodes leave attrs at their defaults unset (instantiating it fills
        # them in); an eager op needs every one (Shape's out_type, ...).
        values = {key: value for key, value in node.attr.items() if not key.startswith("_")}
        for attr in op_def.attr:
            if attr.name not in values and attr.HasField("default_value"):
                values[attr.name] = attr.default_value
        attrs: list[Any] = []
        for key in sorted(values):
            attrs += [key, self._attr_value(values[key])]
        inputs = [self._ref(ref) for ref in node.input if not ref.startswith("^")]
        kind = "identity" if node.op == "Identity" else "op"
        self.steps.append((kind, node.name, (node.op, tuple(attrs)), inputs, total))

    def _attr_value(self, value: Any) -> Any:
        which = value.WhichOneof("value")
        if which in ("type", "i", "f", "b", "s"):
            return getattr(value, which)
        if which == "shape":
            return None if value.shape.unknown_rank else [d.size for d in value.shape.dim]
        if which == "list":
            lst = value.list
            if lst.func or lst.tensor:
                raise self.Unsupported("list attr")
            for field in ("type", "i", "f", "b", "s"):
                if getattr(lst, field):
                    return list(getattr(lst, field))
            if lst.shape:
                return [None if sh.unknown_rank else [d.size for d in sh.dim] for sh in lst.shape]
            return []
        raise self.Unsupported(f"attr {which}")

    def _ref(self, ref: str) -> tuple[str, int]:
        """A node input or function return ("x", "node:arg:i") as (producer, output index);
        producer "" names a function argument (index: its position)."""
        parts = ref.split(":")
        if len(parts) == 1:
            return "", self.arg_index[parts[0]]
        node, arg, i = parts[0], parts[1], int(parts[2]) if len(parts) > 2 else 0
        return node, self.offsets[node][arg] + i

    def _compile(self) -> None:
        """Numbers every value (function arguments first, then each step's outputs) and turns
        the steps into two programs over those slots: the constant-only steps, run once per
        eager context, and the rest, run on every call. An Identity is an alias, not a step."""
        slot_of: dict[tuple[str, int], int] = {}
        self.num_args = len(self.arg_index)
        for i in range(self.num_args):
            slot_of[("", i)] = i
        size = self.num_args
        self.folded_program: list[tuple[Any, ...]] = []
        self.program: list[tuple[Any, ...]] = []
        for kind, name, op, inputs, count in self.steps:
            ins = tuple(slot_of[ref] for ref in inputs)
            if kind == "identity":
                slot_of[(name, 0)] = ins[0]
                continue
            for i in range(count):
                slot_of[(name, i)] = size + i
            if kind == "const":
                step: tuple[Any, ...] = ("const", self.consts[name], (), size, count)
            else:
                step = (op[0], op[1], ins, size, count)
            (self.folded_program if name in self.folded else self.program).append(step)
            size += count
        self.size = size
        self.output_slots = [slot_of[ref] for ref in self.outputs]

    @staticmethod
    def _run(program: list[tuple[Any, ...]], values: list[Any]) -> None:
        for op, attrs, ins, start, count in program:
            if op == "const":
                value, dtype = attrs
                values[start] = tf.constant(value, dtype)
            else:
                values[start:start + count] = _tf_compat.execute_op(
                    op, [values[i] for i in ins], attrs, count)

    def __call__(self, args: Iterable[tf.Tensor]) -> list[tf.Tensor]:
        key = _tf_compat.context_key()
        base = self._const_cache.get(key)
        if base is None:
            base = [None] * self.size
            self._run(self.folded_program, base)
            self._const_cache[key] = base
        values = base.copy()
        values[:self.num_args] = args
        if len(values) != self.size:
            given = len(values) - self.size + self.num_args
            raise ValueError(f"gradient function called with {given} arguments, expected "
                             f"{self.num_args}")
        self._run(self.program, values)
        return [values[i] for i in self.output_slots]


def _specialised(node: _tf_compat.NodeDef, key: bytes | None = None) -> _Specialised:
    """The specialised gradient of `node`; `key`: its deterministic serialisation, when the
    caller has it already."""
    if key is None:
        key = node.SerializeToString(deterministic=True)
    entry = _cache.get(key)
    if entry is not None:
        return entry
    with _lock:
        entry = _cache.get(key)
        if entry is None:
            # Errors (e.g. an int32 ZeroOut) keep the C++ status and name both ops.
            try:
                entry = _Specialised(node.op, _run_gradient_function_def(node))
            except tf.errors.UnimplementedError:
                # A gradient whose signature has list arguments (TensorFlow's Pack, ConcatV2,
                # Unpack, ...: x: N*T), which TfExt>GradientFunctionDef cannot specialise.
                if not _tf_compat.has_list_args(node.op):
                    raise
                entry = _Specialised(node.op, *_symbolic_gradient_defs(node))
            _cache[key] = entry
        return entry


def _symbolic_gradient_defs(
        node: _tf_compat.NodeDef) -> tuple[_tf_compat.FunctionDef, _tf_compat.FunctionDef]:
    """`node`'s C++ gradient as TensorFlow's runtime instantiates it: a gradient FunctionDef
    of one SymbolicGradient node differentiating a forward FunctionDef whose one node is
    `node` (SymbolicGradient of a bare op loses its attrs eagerly and is not found inside
    functions; of a function it works in both). Both have list arguments flattened, one
    argument per element, the convention of the bridge's callers: the gradient takes the
    inputs then the outputs' gradients and returns the inputs' gradients. The runtime
    instantiates the op's gradient from the C++ registry TfExt>GradientFunctionDef reads.
    Not differentiable (SymbolicGradient has no gradient)."""
    op_def = _tf_compat.op_def(node.op)
    full = _with_defaults(node, op_def)
    in_types = _flat_types(op_def.input_arg, full)
    out_types = _flat_types(op_def.output_arg, full)
    digest = hashlib.sha256(full.SerializeToString(deterministic=True)).hexdigest()[:16]
    base = "".join(c if c.isalnum() else "_" for c in node.op)

    forward = _tf_compat.FunctionDef()
    forward.signature.name = f"{base}_forward_{digest}"
    op_node = forward.node_def.add(name="op", op=node.op)
    for i, dtype in enumerate(in_types):
        forward.signature.input_arg.add(name=f"x_{i}", type=dtype)
        op_node.input.append(f"x_{i}")
    for name, value in full.attr.items():
        if not name.startswith("_"):
            op_node.attr[name].CopyFrom(value)
    i = 0
    for arg in op_def.output_arg:
        for k in range(len(_flat_types([arg], full))):
            forward.signature.output_arg.add(name=f"y_{i}", type=out_types[i])
            forward.ret[f"y_{i}"] = f"op:{arg.name}:{k}"
            i += 1

    fdef = _tf_compat.FunctionDef()
    fdef.signature.name = f"{base}_symbolic_grad_{digest}"
    args = []
    for prefix, types in (("x", in_types), ("dy", out_types)):
        for i, dtype in enumerate(types):
            args.append(fdef.signature.input_arg.add(name=f"{prefix}_{i}", type=dtype).name)
    call = fdef.node_def.add(name="grad", op="SymbolicGradient", input=args)
    call.attr["Tin"].list.type.extend(in_types + out_types)
    call.attr["Tout"].list.type.extend(in_types)
    call.attr["f"].func.name = forward.signature.name
    for i, dtype in enumerate(in_types):
        fdef.signature.output_arg.add(name=f"dx_{i}", type=dtype)
        fdef.ret[f"dx_{i}"] = f"grad:output:{i}"
    return fdef, forward


def _with_defaults(node: _tf_compat.NodeDef, op_def: Any) -> _tf_compat.NodeDef:
    """A copy of `node` with every attr it leaves out set to op_def's default."""
    full = _tf_compat.NodeDef()
    full.CopyFrom(node)
    for attr in op_def.attr:
        if attr.name not in full.attr and attr.HasField("default_value"):
            full.attr[attr.name].CopyFrom(attr.default_value)
    return full


def _flat_types(args: Iterable[Any], node: _tf_compat.NodeDef) -> list[int]:
    """The dtypes of an OpDef's input or output arguments for `node`'s attrs, list arguments
    flattened (N*T: N times T; a type list: its types)."""
    types: list[int] = []
    for arg in args:
        if arg.type_list_attr:
            types += list(node.attr[arg.type_list_attr].list.type)
            continue
        dtype = node.attr[arg.type_attr].type if arg.type_attr else arg.type
        types += [dtype] * (node.attr[arg.number_attr].i if arg.number_attr else 1)
    return types


def _shapes_key(shapes: Iterable[tf.TensorShape | None]) -> tuple[Any, ...]:
    """A hashable key for static shapes (None, or a shape of unknown rank: unknown)."""
    return tuple(None if s is None or s.rank is None else tuple(s.as_list()) for s in shapes)


# Dtypes a gradient flows through (gradients_util._IsBackpropagatable's): a node whose every
# output is of another dtype (ints, bool, strings) is never differentiated, so it needs no
# gradient of its own (Prod's gradient computes its permutation with ListDiff and Mod on int32).
_BACKPROPAGATED_DTYPES = frozenset(
    t.as_datatype_enum for t in (tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.complex64,
                                 tf.complex128, tf.resource, tf.variant))


def _backpropagates(node: _tf_compat.NodeDef) -> bool:
    """Whether a gradient can flow out of one of `node`'s outputs (True where its output
    types are unknown: a function call, an attr missing)."""
    op_def = _tf_compat.op_def(node.op)
    if op_def is None:
        return True
    full = _with_defaults(node, op_def)
    try:
        types = _flat_types(op_def.output_arg, full)
    except (KeyError, ValueError):
        return True
    # (DT_INVALID: an attr still a placeholder)
    return any(t in _BACKPROPAGATED_DTYPES or t == 0 for t in types)


def _callable_gradient(
        op_type: str, fdef: _tf_compat.FunctionDef,
        forward: _tf_compat.FunctionDef | None = None,
        shapes: list[tf.TensorShape | None] | None = None,
) -> tuple[Callable[..., list[tf.Tensor]], str]:
    """The FunctionDef as a callable ConcreteFunction (and the name it has in the eager
    context), made non-differentiable with a clear error if one of its nodes has no gradient
    or one registered as not implemented. shapes: the arguments' static shapes, which the
    callable then requires (default: any shapes)."""
    lacking, unimplemented = [], []
    for node_type in sorted({n.op for n in fdef.node_def if _backpropagates(n)}):
        # Body ops with a C++ gradient (tf_ext's or a third party's) get bridged too.
        if (not _tf_compat.has_python_gradient(node_type) and
                _tf_compat.is_registered_op(node_type)):
            _register(node_type)
        if _status.get(node_type) == "unimplemented":
            unimplemented.append(node_type)
        elif not _tf_compat.has_python_gradient(node_type):
            lacking.append(node_type)

    if forward is not None:
        gradient, name = _tf_compat.symbolic_gradient_function(fdef, forward)
    else:
        gradient, name = _tf_compat.function_from_def(fdef, shapes)
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
        with _tf_compat.stop_recording():
            results = list(gradient(*args))
        return results, fail

    return (lambda *args: list(first_order_only(*args))), name


# The forward-node attr asking the C++ registry for the gradient function that takes the
# forward outputs too (tf_ext/grads/grad_builder.h, "Forward outputs"): inputs, outputs, then
# the incoming gradients.
_FORWARD_OUTPUTS_ATTR = "_tf_ext_forward_outputs"


def _reads_outputs(op_type: str) -> bool:
    """Whether op_type's declared gradient reads one of its forward outputs (RoiPool: argmax);
    False for ops without a tf_ext declaration."""
    facts = _facts(op_type)
    return bool(facts) and bool(set(facts["reads"]) & set(_tf_compat.output_names(op_type)))


def _bridged_gradient(op: Any, *grads: tf.Tensor | None) -> list[tf.Tensor]:
    """The Python gradient of every bridged op: calls its specialised C++ gradient, with the
    forward outputs when it reads them (never a recomputed forward)."""
    node = _tf_compat.node_def_of(op)
    args: list[tf.Tensor] = list(op.inputs)
    if _reads_outputs(op.type):
        node.attr[_FORWARD_OUTPUTS_ATTR].b = True
        args += list(op.outputs)
    fn = _specialised(node)
    # An output nobody differentiated arrives as None; the C++ gradient expects zeros.
    args += [tf.zeros_like(y) if g is None else g for g, y in zip(grads, op.outputs)]
    results = fn(*args)
    if len(results) != len(op.inputs):
        raise ValueError(f"{op.type}: its C++ gradient returned {len(results)} gradients for "
                         f"{len(op.inputs)} inputs")
    if not tf.executing_eagerly():
        for result, x in zip(results, op.inputs):
            # A gradient has its input's shape; a resource's (a variable read's) is the
            # variable value's, a variant's (a TensorList's) its own.
            if x.dtype not in (tf.resource, tf.variant):
                result.set_shape(x.shape)
    return results


def lacks_forward_tensors(op: Any, grads: tuple[tf.Tensor | None, ...]) -> bool:
    """Whether an eager tape's stand-in `op` lacks a forward tensor _bridged_gradient needs: an
    input (the C++ gradient reads its inputs), or an output when the gradient reads outputs
    or an output's gradient is missing. TensorFlow's tape drops what its own Python gradient
    does not read (its generated gradient exclusion table)."""
    if isinstance(op, tf.Operation):
        return False
    if op.inputs is None or any(x is None for x in op.inputs):
        return True
    if _reads_outputs(op.type) or any(g is None for g in grads):
        return op.outputs is None or any(y is None for y in op.outputs)
    return False


def eager_gradient(op_type: str, attrs: tuple[Any, ...], inputs: tuple[tf.Tensor, ...],
                   outputs: list[tf.Tensor], grads: tuple[tf.Tensor | None, ...]
                   ) -> list[tf.Tensor]:
    """The C++ gradient of an op run eagerly (type, attrs as its wrapper passed them, every
    input and output), as _bridged_gradient gives it."""
    return _bridged_gradient(_tf_compat.eager_op(op_type, attrs, inputs, outputs), *grads)


_facts_cache: dict[str, dict[str, Any]] = {}


def _facts(op_type: str) -> dict[str, Any] | None:
    if not _facts_cache:
        with _lock:
            if not _facts_cache:
                _facts_cache.update({f["op"]: f for f in _c_api.manifest()})
    return _facts_cache.get(op_type)


class _Plan:
    """How call_recorded records one (op type, input dtypes, attrs): the forward NodeDef and its
    cache key, which of inputs (+ outputs) backward keeps, and whether the gradient takes the
    outputs. Built on the first recorded call, from that call's tensors."""

    def __init__(self, op_type: str, facts: dict[str, Any], inputs: list[tf.Tensor],
                 outputs: list[tf.Tensor], attrs: dict[str, Any]) -> None:
        self.op_type = op_type
        self.node = _tf_compat.node_def_for(op_type, inputs, attrs)
        read = set(facts["reads"]) | set(facts["not_differentiable"])
        names = _tf_compat.input_names(op_type)
        tensors = inputs
        self.with_outputs = _reads_outputs(op_type)
        if self.with_outputs:
            self.node.attr[_FORWARD_OUTPUTS_ATTR].b = True
            names = names + _tf_compat.output_names(op_type)
            tensors = inputs + outputs
        self.key = self.node.SerializeToString(deterministic=True)
        self.keep = [name in read for name in names]
        # What stands in for each tensor the gradient does not read: any tensor of its dtype.
        self.dropped = [(i, t.dtype) for i, (t, k) in enumerate(zip(tensors, self.keep))
                        if not k]
        self.num_inputs = len(inputs)

    def backward(self, kept: list[tf.Tensor | None],
                 output_specs: list[tuple[Any, Any]] | None,
                 grads: tuple[tf.Tensor | None, ...]) -> list[tf.Tensor]:
        gradient = _specialised(self.node, self.key)
        call = list(kept)
        for i, dtype in self.dropped:
            call[i] = _stand_in(dtype)
        if output_specs is None:
            call += grads
        else:
            call += [tf.zeros(shape, dtype) if g is None else g
                     for g, (shape, dtype) in zip(grads, output_specs)]
        results = gradient(*call)
        if len(results) != self.num_inputs:
            raise ValueError(f"{self.op_type}: its C++ gradient returned {len(results)} "
                             f"gradients for {self.num_inputs} inputs")
        return results


class _Recorder:
    """call_recorded's facts about one op type, looked up on its first recorded call: whether
    its eager calls are recorded here (a bridged gradient with a tf_ext declaration), its
    input count, and its plans by (input dtypes, attrs)."""

    def __init__(self, op_type: str) -> None:
        self.facts = _facts(op_type)
        self.num_inputs = len(_tf_compat.input_names(op_type))
        self.records = self.facts is not None and _status.get(op_type) == "bridged"
        self.plans: dict[Any, _Plan] = {}


_recorders: dict[str, _Recorder] = {}


def _recorder(op_type: str) -> _Recorder:
    recorder = _recorders.get(op_type)
    if recorder is None:
        library()  # its facts are final only once the library's gradients are bridged
        recorder = _recorders[op_type] = _Recorder(op_type)
    return recorder


_stand_ins: dict[tuple[Any, Any], tf.Tensor] = {}


def _stand_in(dtype: tf.DType) -> tf.Tensor:
    """An empty tensor of dtype, made once per eager context: what a gradient gets for a
    forward tensor it does not read."""
    key = (_tf_compat.context_key(), dtype)
    t = _stand_ins.get(key)
    if t is None:
        t = _stand_ins[key] = tf.zeros([0], dtype)
    return t


def call_recorded(op_type: str, fn: Callable[..., Any], args: tuple[Any, ...],
                  attrs: dict[str, Any], name: str | None = None) -> Any:
    """fn(*args, name=name, **attrs), the generated wrapper of op_type called with its inputs
    as `args` and its attrs as keywords; under an eager GradientTape it is recorded so that the
    tape keeps alive only the inputs the op's gradient reads (see the module docstring).
    Anywhere else (graphs, tf.function, no tape, ops without a bridged gradient, inputs that
    are not yet tensors) it is a plain call.

    This runs on every eager op call under a tape, so it is kept lean: per-op-type and
    per-attrs facts are looked up once (_Recorder, _Plan). Python time spent here is not only
    added to the step: during long gaps between kernels the intra-op threads stop spinning and
    sleep, and the next kernel pays to wake them."""
    if not _tf_compat.tape_could_record() or not tf.executing_eagerly():
        return fn(*args, name=name, **attrs)
    recorder = _recorders.get(op_type) or _recorder(op_type)
    if not recorder.records or len(args) != recorder.num_inputs:
        return fn(*args, name=name, **attrs)
    inputs = []
    for x in args:
        if isinstance(x, tf.Tensor):
            inputs.append(x)
        elif isinstance(x, tf.Variable):
            inputs.append(tf.convert_to_tensor(x))  # read here, recorded: its gradient flows
        else:
            return fn(*args, name=name, **attrs)
    attrs["name"] = name
    result = _tf_compat.call_unrecorded(fn, inputs, attrs)
    del attrs["name"]
    outputs = [result] if isinstance(result, tf.Tensor) else list(result)
    key = (tuple([x.dtype for x in inputs]), tuple(attrs.items()))
    try:
        plan = recorder.plans.get(key)
    except TypeError:  # a list-valued attr (ksize, strides)
        key = repr(key)
        plan = recorder.plans.get(key)
    if plan is None:
        plan = recorder.plans[key] = _Plan(op_type, recorder.facts, inputs, outputs, attrs)
    tensors = inputs + outputs if plan.with_outputs else inputs
    kept = [t if k else None for t, k in zip(tensors, plan.keep)]
    # The tape passes zeros for an output without a gradient (and calls no backward when none
    # has one), so a one-output op never sees None; more outputs keep their specs just in case.
    output_specs = [(y.shape, y.dtype) for y in outputs] if len(outputs) > 1 else None

    def backward(*grads: tf.Tensor | None) -> list[tf.Tensor]:
        return plan.backward(kept, output_specs, grads)

    # backward closes over `kept` only: unread inputs and outputs do not stay alive.
    _tf_compat.record_operation(op_type, outputs, inputs, backward)
    return result
