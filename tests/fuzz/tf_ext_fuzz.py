"""Seeded random and hostile calls of every tf_ext op, run in child processes.

    python tests/fuzz/tf_ext_fuzz.py --library bazel-bin/tf_ext/_tf_ext_ops.so --calls-per-op 200

Every op (forward and backward ops, and TfExt>GradientFunctionDef with the C entry point
behind it) is called with random and hostile inputs: empty and huge dims (huge only where
the tensor stays empty), NaN/inf/denormal values and attrs, bad ROI rows, wrong ranks and
wrong dtypes, in eager mode, in tf.function (static and unknown shapes) and through
GradientTape. Calls run in batches in child processes, so a crash (signal) or a hang
(no progress for --case-timeout seconds) kills only the child: the parent knows the call in
flight, confirms it alone, shrinks it while it still fails, and reports it.

Findings (exit status 1):
  crash / hang                 the child died or stalled on the call
  unnamed-error                an error whose message does not name the op type
  wrong-error-class            a tf_ext error that is not InvalidArgument
  mode-disagreement            eager and tf.function disagree (one accepts, one rejects, or
                               different results)
  wrong-result                 an accepted call whose result differs from the numpy
                               reference (tests/python/numpy_refs.py) or the op's contract
Counted separately, not findings: `signature-rejected` (TensorFlow's Python layer refused a
dtype outside the op's signature before any tf_ext code ran), `tensorflow-op-error` (a
TensorFlow op around the call failed, e.g. GradientTape's Fill of the default output
gradient on a 2^31 dim) and `resource-exhausted` (TensorFlow's allocator refused an output
too large for memory; the message names the op).
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from typing import Any

# Ops with a hand-written generator below (hostile cases chosen for their semantics). Every
# other op the library declares is fuzzed by generate_generic() from its OpDef and its
# declaration's input spec, so a new op is fuzzed without editing this file.
HAND_WRITTEN = (
    "TfExt>ZeroOut", "TfExt>RoiPool", "TfExt>RoiPoolGrad", "TfExt>PsRoiAlign",
    "TfExt>PsRoiAlignGrad", "TfExt>MedianPool2D", "TfExt>MedianPool2DGrad", "TfExt>SignSTE",
    "TfExt>GradientReversal", "TfExt>GradientFunctionDef",
)
# Elementwise ops with one float attr: the attr's name.
ELEMENTWISE_FLOAT_ATTR = {"TfExt>SignSTE": "clip", "TfExt>GradientReversal": "scale"}
MODES = ("eager", "function", "function_unknown", "tape")
HUGE = (2**31 - 1, 2**31, 2**32, 2**40, 2**62)
FLOAT_VALUES = (1.0, 0.0625, 0.0, -0.0, -1.0, 1e-45, -1e-45, 1e-39, float("nan"),
                float("inf"), -float("inf"), 3e38, 1e-300)
MAX_ELEMENTS = 4096  # per real (non-empty) input tensor

# ----------------------------------------------------------------------------- generation


def _pick(rng: random.Random, common: list[Any], hostile: list[Any], p_hostile: float = 0.3):
    return rng.choice(hostile) if rng.random() < p_hostile else rng.choice(common)


def _dims(rng: random.Random, rank: int, small: tuple[int, ...] = (0, 1, 1, 2, 3, 4, 5, 7)):
    dims = [rng.choice(small) for _ in range(rank)]
    # A huge dim only with another dim 0: the tensor stays empty, the shape arithmetic doesn't.
    if rank >= 2 and rng.random() < 0.08:
        z = rng.randrange(rank)
        h = rng.choice([i for i in range(rank) if i != z])
        dims[z], dims[h] = 0, rng.choice(HUGE)
    return dims


def _fit(dims: list[int]) -> list[int]:
    """Shrinks dims until the tensor holds at most MAX_ELEMENTS (empty tensors stay as they are)."""
    dims = list(dims)
    while 0 not in dims and math.prod(dims) > MAX_ELEMENTS:
        i = max(range(len(dims)), key=lambda k: dims[k])
        dims[i] = max(1, dims[i] // 2)
    return dims


def _tensor(rng: random.Random, dims: list[int], dtype: str, hostile: bool = True) -> dict:
    fill = "normal"
    if hostile and rng.random() < 0.3:
        fill = rng.choice(["nan", "inf", "denormal", "huge", "zeros", "mixed"])
    return {"shape": _fit(dims), "dtype": dtype, "fill": fill, "seed": rng.randrange(2**31)}


def _rois(rng: random.Random, num_images: int, height: int, width: int) -> dict:
    r = rng.choice([0, 1, 2, 3, 5, 8])
    cols = 5 if rng.random() > 0.05 else rng.choice([4, 6])
    spec = {"shape": [r, cols], "dtype": "float32", "fill": "rois", "seed": rng.randrange(2**31),
            "num_images": num_images, "height": max(height, 1), "width": max(width, 1)}
    if rng.random() < 0.25:
        spec["bad"] = rng.choice(["batch_neg", "batch_big", "batch_frac", "batch_nan", "coord_nan",
                                  "coord_inf", "coord_huge", "inverted"])
    if rng.random() < 0.03:
        spec["shape"] = _dims(rng, rng.choice([1, 3]))
        spec["fill"] = "normal"
    if rng.random() < 0.03:
        spec["dtype"] = "float64"
    return spec


def _float_dtype(rng: random.Random, allowed: list[str]) -> str:
    return _pick(rng, allowed, ["int32", "int64", "float16", "bool", "bfloat16"], 0.04)


def _pooled(rng: random.Random) -> int:
    return _pick(rng, [1, 1, 2, 3, 7], [0, -1, 1024, 1025, *HUGE], 0.12)


def _scale(rng: random.Random) -> float:
    return _pick(rng, [1.0, 0.5, 0.0625, 2.0], list(FLOAT_VALUES), 0.15)


def _image(rng: random.Random, dtype: str, channels: int | None = None) -> dict:
    rank = 4 if rng.random() > 0.06 else rng.choice([0, 1, 2, 3, 5])
    dims = _dims(rng, rank)
    if rank == 4 and channels is not None and rng.random() > 0.1:
        dims[3] = channels
    return _tensor(rng, dims, dtype)


def generate(op: str, rng: random.Random, described: dict | None = None,
             generic: bool = False) -> dict:
    """One random call of `op` as a JSON-able spec (arrays are rebuilt from it). `described`:
    what the library says of its ops (describe_library()), for ops without a hand-written
    generator (or every op but GradientFunctionDef, with `generic`)."""
    if op not in HAND_WRITTEN or (generic and op != "TfExt>GradientFunctionDef"):
        if not described or op not in described:
            raise ValueError(f"{op}: not declared by the library")
        return generate_generic(described[op], described, rng)
    mode = rng.choice(MODES)
    attrs: dict[str, Any] = {}
    inputs: list[dict] = []
    if op == "TfExt>ZeroOut":
        dt = _float_dtype(rng, ["float32", "float64", "int32"])
        x = _tensor(rng, _dims(rng, rng.choice([0, 1, 1, 2, 3])), dt)
        n = math.prod(x["shape"])
        attrs["preserve_index"] = _pick(rng, [0, max(n - 1, 0), n // 2], [n, -1, *HUGE], 0.15)
        inputs = [x]
    elif op in ("TfExt>RoiPool", "TfExt>RoiPoolGrad", "TfExt>PsRoiAlign", "TfExt>PsRoiAlignGrad"):
        dt = _float_dtype(rng, ["float16", "float32", "float64"])
        ph, pw = _pooled(rng), _pooled(rng)
        attrs.update(pooled_height=ph, pooled_width=pw, spatial_scale=_scale(rng))
        ps = "PsRoiAlign" in op
        channels = None
        if ps:
            attrs["sampling_ratio"] = _pick(rng, [0, 1, 2, 2, 4], [-1, 64, 65, 2**20, *HUGE], 0.12)
            if 0 < ph <= 7 and 0 < pw <= 7:
                channels = ph * pw * rng.choice([1, 1, 2, 3]) if rng.random() > 0.1 else 5
        else:
            channels = rng.choice([1, 2, 3])
        image = _image(rng, dt, channels)
        shape = image["shape"]
        n, h, w = (shape[0], shape[1], shape[2]) if len(shape) == 4 else (1, 1, 1)
        rois = _rois(rng, n, h, w)
        inputs = [image, rois]
        if op.endswith("Grad"):
            r = rois["shape"][0] if rois["shape"] else 0
            c = shape[3] if len(shape) == 4 else 1
            if ps and 0 < ph and 0 < pw:
                c = c // (ph * pw) if ph * pw <= max(c, 1) else c
            out = [r, ph if 0 < ph <= 7 else 1, pw if 0 < pw <= 7 else 1, c]
            if rng.random() < 0.1:
                out = _dims(rng, rng.choice([2, 4]))
            if not ps:
                inputs.append({"shape": _fit(out), "dtype": "int32", "fill": "argmax",
                               "seed": rng.randrange(2**31),
                               "hw": max(h, 0) * max(w, 0) if len(shape) == 4 else 1,
                               "bad": rng.random() < 0.1})
            inputs.append(_tensor(rng, out, dt))
    elif op in ("TfExt>MedianPool2D", "TfExt>MedianPool2DGrad"):
        dt = _float_dtype(rng, ["float16", "float32", "float64"])

        def window() -> list[int]:
            if rng.random() < 0.1:
                return rng.choice([[], [1], [1, 1, 1], [0, 1], [-1, 2], [1, 2**31], [2**40, 1]])
            return [_pick(rng, [1, 2, 3, 3, 5], [7, 64, 2**31 - 1], 0.1) for _ in range(2)]
        attrs.update(ksize=window(), strides=window(),
                     padding=_pick(rng, ["SAME", "VALID"], ["same", "FULL", ""], 0.03))
        x = _image(rng, dt)
        inputs = [x]
        if op.endswith("Grad"):
            s = x["shape"]
            out = list(s) if len(s) == 4 else [1, 1, 1, 1]
            try:
                if len(s) == 4 and len(attrs["ksize"]) == 2 and len(attrs["strides"]) == 2:
                    for i in (1, 2):
                        k, st = attrs["ksize"][i - 1], attrs["strides"][i - 1]
                        if k >= 1 and st >= 1:
                            out[i] = ((s[i] - 1) // st + 1 if s[i] else 0) if attrs["padding"] == "SAME" \
                                else ((s[i] - k) // st + 1 if s[i] >= k else 0)
            except (TypeError, ValueError):
                pass
            if rng.random() < 0.1:
                out = _dims(rng, 4)
            inputs.append(_tensor(rng, out, dt))
    elif op in ELEMENTWISE_FLOAT_ATTR:
        dt = _float_dtype(rng, ["float16", "float32", "float64"])
        name = ELEMENTWISE_FLOAT_ATTR[op]
        attrs[name] = _pick(rng, [1.0, 0.5, 2.0, 0.0], list(FLOAT_VALUES) + [-2.0], 0.3)
        inputs = [_tensor(rng, _dims(rng, rng.choice([0, 1, 2, 3])), dt)]
    elif op == "TfExt>GradientFunctionDef":
        mode = rng.choice(["eager", "eager", "function", "c_api"])
        inputs = [{"node_def": _node_def_spec(rng, sorted(described or HAND_WRITTEN))}]
    return {"op": op, "mode": mode, "attrs": attrs, "inputs": inputs}


# --------------------------------------------------------------- generic (from the declaration)

def _parse_spec(text: str) -> tuple[dict, dict]:
    """A declaration's input spec (tf_ext/tools/gradcheck_spec.h) as (inputs, attrs): input
    name -> {"shape", "lo", "hi"} | {"values", "scalar"} | {"rois": R}; attr name -> text."""
    inputs: dict[str, dict] = {}
    attrs: dict[str, str] = {}
    for token in text.split():
        key, _, value = token.partition("=")
        if key.startswith("attr."):
            attrs[key[5:]] = value
        elif key in ("nondiff", "dtypes"):
            continue
        elif value.startswith("rois:"):
            inputs[key] = {"rois": int(value[5:])}
        elif value.startswith(("values:", "scalar:")):
            kind, _, vals = value.partition(":")
            inputs[key] = {"values": [float(v) for v in vals.split(",")], "scalar": kind == "scalar"}
        else:
            dims, _, rng_text = value.partition("@")
            shape = [] if dims == "scalar" else [int(d) for d in dims.split("x")]
            lo, _, hi = rng_text.partition(":")
            inputs[key] = {"shape": shape, "lo": float(lo or 0.1), "hi": float(hi or 0.9)}
    return inputs, attrs


def _attr_value(attr: dict, text: str):
    kind = attr["type"]
    if kind == "int":
        return int(text)
    if kind == "float":
        return float(text)
    if kind == "bool":
        return text.lower() in ("1", "true")
    if kind == "list(int)":
        return [int(v) for v in text.strip("[]").split(",") if v.strip()]
    return text


def _hostile_attr(rng: random.Random, attr: dict, value):
    """A hostile value of the attr's type, near or far from its valid `value`."""
    kind = attr["type"]
    if kind == "int":
        v = value if isinstance(value, int) else 1
        return rng.choice([0, -1, v + 1, v - 1, 2 * v, 1024, 1025, *HUGE, -2**62])
    if kind == "float":
        v = value if isinstance(value, float) else 1.0
        return rng.choice([*FLOAT_VALUES, -v, -2.0, 1e30])
    if kind == "list(int)":
        n = len(value) if isinstance(value, list) else 2
        return rng.choice([[], [1] * (n + 1), [0] * n, [-1] * n, [2**31] * n, [1] * max(n - 1, 0)])
    if kind == "bool":
        return not value if isinstance(value, bool) else True
    if kind == "string":
        return rng.choice(["", "x", str(value).lower(), str(value) + " ", "\u00e9"])
    return value


def generate_generic(desc: dict, described: dict, rng: random.Random) -> dict:
    """A random call of a declared op from its OpDef and its declaration's input spec: valid
    calls (the spec's shapes, attrs and value ranges, other dims and values), mutated into
    hostile ones (wrong ranks and dtypes, empty and huge dims, NaN/inf/denormal values, bad ROI
    rows, hostile attrs). A backward op borrows its forward op's spec for the attrs they share."""
    op = desc["op"]
    spec_text = desc.get("gradcheck") or described.get(desc.get("backward_of"), {}).get("gradcheck", "")
    in_specs, attr_texts = _parse_spec(spec_text)
    types = desc.get("types") or ["float32", "float64"]
    dt = _float_dtype(rng, types)
    attrs: dict[str, Any] = {}
    for attr in desc["attrs"]:
        if attr["type"] == "type":
            continue  # inferred from the inputs
        if attr["name"] in attr_texts:
            value = _attr_value(attr, attr_texts[attr["name"]])
        elif "default" in attr:
            value = attr["default"]
        else:
            value = _hostile_attr(rng, attr, None)
        if rng.random() < 0.2:
            value = _hostile_attr(rng, attr, value)
        if attr["name"] in attr_texts or "default" not in attr or value != attr.get("default"):
            attrs[attr["name"]] = value
    inputs: list[dict] = []
    image = None
    for arg in desc["inputs"]:
        arg_dt = dt if arg.get("type_attr") else arg["type"]
        spec = in_specs.get(arg["name"])
        if spec is None and image is not None and rng.random() < 0.6:
            spec = {"shape": list(image), "lo": -1.0, "hi": 1.0}  # e.g. an incoming gradient
        if spec is not None and "rois" in spec:
            n, h, w = (image[0], image[1], image[2]) if image and len(image) == 4 else (1, 1, 1)
            inputs.append(_rois(rng, n, h, w))
            continue
        if spec is not None and "values" in spec:
            shape = [] if spec["scalar"] else [len(spec["values"])]
            if rng.random() < 0.2:
                inputs.append(_tensor(rng, _dims(rng, rng.choice([0, 1, 2])), arg_dt))
            else:
                inputs.append({"shape": shape, "dtype": arg_dt, "fill": "values",
                               "values": spec["values"], "seed": rng.randrange(2**31)})
            continue
        if spec is not None:
            dims = list(spec["shape"])
            for k in range(len(dims)):  # other sizes, empty and (with an empty dim) huge ones
                if rng.random() < 0.3:
                    dims[k] = rng.choice([0, 1, 2, 3, 5, 7, dims[k]])
            if rng.random() < 0.08:
                dims = _dims(rng, rng.choice([0, 1, 2, 3, 4, 5]))
            elif len(dims) >= 2 and rng.random() < 0.05:
                dims[rng.randrange(len(dims))] = 0
                dims[rng.randrange(len(dims))] = rng.choice(HUGE)
        else:
            dims = _dims(rng, rng.choice([0, 1, 2, 3, 4]))
        t = _tensor(rng, dims, arg_dt)
        if image is None and len(t["shape"]) == 4:
            image = t["shape"]
        inputs.append(t)
    return {"op": op, "mode": rng.choice(MODES), "attrs": attrs, "inputs": inputs}


def describe_library(library: str) -> dict:
    """What the library declares of each of its ops (its manifest) and its OpDef's inputs and
    attrs, read in a child process (TensorFlow is imported only in children)."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child-describe",
                          "--library", library], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"describing {library} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _describe_main(args: argparse.Namespace) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ["TF_EXT_LIBRARY"] = args.library  # the package loads this copy, no other
    import tf_ext  # loads TF_EXT_LIBRARY
    from tf_ext import _tf_compat
    import tensorflow as tf
    described = {}
    for facts in tf_ext.declared_ops():
        op_def = _tf_compat.op_def(facts["op"])
        d = dict(facts)
        d["types"] = [tf.as_dtype(t).name for t in d.get("types", [])]  # "float" -> "float32"
        d["inputs"] = [{"name": a.name, "type_attr": a.type_attr,
                        "type": tf.dtypes.as_dtype(a.type).name if a.type else ""}
                       for a in op_def.input_arg]
        d["attrs"] = []
        for a in op_def.attr:
            attr = {"name": a.name, "type": a.type}
            if a.HasField("default_value"):
                v = a.default_value
                kind = v.WhichOneof("value")
                if kind == "list":
                    attr["default"] = list(v.list.i)
                elif kind in ("i", "f", "b"):
                    attr["default"] = getattr(v, kind)
                elif kind == "s":
                    attr["default"] = v.s.decode()
            d["attrs"].append(attr)
        described[op_def.name] = d
    print(json.dumps(described))
    return 0


def _node_def_spec(rng: random.Random, ops: list[str]) -> dict:
    if rng.random() < 0.1:
        return {"garbage": rng.randrange(2**31), "len": rng.choice([0, 1, 3, 16, 200])}
    op = rng.choice([*ops, "_ListToArray", "_ArrayToList", "Concat",
                     "ConcatV2", "AddN", "MatMul", "Tanh", "Pack", "NoSuchOp", ""])
    attrs: dict[str, Any] = {}
    for name in ("T", "N", "Tin", "preserve_index", "pooled_height", "pooled_width",
                 "spatial_scale", "sampling_ratio", "ksize", "strides", "padding", "clip",
                 "scale", "transpose_a", "Tidx", "axis", "bogus"):
        if rng.random() < 0.35:
            attrs[name] = rng.choice([
                {"type": rng.choice(["float32", "float64", "int32", "string"])},
                {"i": rng.choice([-5, -1, 0, 1, 2, 3, 4096, 4097, 2**20, 2**40])},
                {"f": rng.choice(list(FLOAT_VALUES))},
                {"list_i": [rng.choice([0, 1, 2, 3]) for _ in range(rng.choice([0, 2, 3]))]},
                {"list_type": ["float32"] * rng.choice([0, 1, 2, 5000])},
                {"s": rng.choice(["SAME", "VALID", "x"])},
                {"b": True},
            ])
    if rng.random() < 0.6 and op:
        attrs.setdefault("T", {"type": rng.choice(["float32", "float64"])})
    return {"op": op, "attrs": attrs}


# ----------------------------------------------------------------------------- execution

def _child_main(args: argparse.Namespace) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ["TF_EXT_LIBRARY"] = args.library  # the package loads this copy, no other
    import numpy as np
    import tensorflow as tf
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
    import numpy_refs  # noqa: F401  (reference implementations)
    tf.get_logger().setLevel("ERROR")  # retracing warnings: every call is a new function
    lib = tf.load_op_library(args.library)
    import tf_ext  # noqa: F401  (registers the gradient bridge)
    runner = _Runner(tf, np, lib, args.library)
    with open(args.cases) as f:
        cases = [json.loads(line) for line in f]
    # Test hook: proves the parent catches what it is for ("crash:OP" / "hang:OP").
    inject_kind, _, inject_op = os.environ.get("TF_EXT_FUZZ_INJECT", "").partition(":")
    with open(args.results, "a", buffering=1) as out:
        for i, case in enumerate(cases):
            out.write(json.dumps({"start": i}) + "\n")
            if case["op"] == inject_op:
                if inject_kind == "crash":
                    os.abort()
                if inject_kind == "hang":
                    time.sleep(10**6)
            try:
                res = runner.run(case)
            except Exception as e:  # noqa: BLE001  (a bug of this harness: reported, not hidden)
                import traceback
                res = {"outcome": "harness-error", "finding": "harness-error",
                       "detail": f"{type(e).__name__}: {e}\n{traceback.format_exc()}"[-1500:]}
            res["i"] = i
            out.write(json.dumps(res) + "\n")
    return 0


class _Runner:
    def __init__(self, tf, np, lib, library_path: str):
        self.tf, self.np, self.lib = tf, np, lib
        self.c_lib = ctypes.CDLL(library_path)
        fn = self.c_lib.TfExtGradientFunctionDef
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p),
                       ctypes.POINTER(ctypes.c_size_t), ctypes.c_char_p, ctypes.c_size_t]
        fn.restype = ctypes.c_int
        self.c_free = self.c_lib.TfExtFree
        self.c_free.argtypes = [ctypes.c_void_p]

    # -- arrays
    def array(self, spec: dict):
        np = self.np
        rng = np.random.default_rng(spec["seed"])
        shape = spec["shape"]
        dtype = spec["dtype"]
        npdt = {"bfloat16": np.float32}.get(dtype, dtype)
        if 0 in shape:
            return self.tf.zeros(shape, dtype=dtype)  # may be huge-but-empty
        fill = spec["fill"]
        if fill == "values":
            return self.tf.constant(np.asarray(spec["values"]).reshape(shape).astype(npdt), dtype=dtype)
        if fill == "rois":
            return self._rois(spec, rng)
        if fill == "argmax":
            hw = max(spec["hw"], 1)
            a = rng.integers(-1, hw, size=shape)
            if spec.get("bad"):
                a.flat[rng.integers(a.size)] = rng.choice([-2, hw, 2**31 - 1])
            return self.tf.constant(a.astype(np.int32))
        if dtype == "bool":
            return self.tf.constant(rng.random(shape) > 0.5)
        if dtype in ("int32", "int64"):
            return self.tf.constant(rng.integers(-5, 5, size=shape).astype(dtype))
        v = rng.standard_normal(shape)
        special = {"nan": np.nan, "inf": np.inf, "denormal": 1e-45 if dtype != "float64" else 5e-324,
                   "huge": 3e38, "zeros": 0.0}
        if fill in special:
            mask = rng.random(shape) < 0.5
            v = np.where(mask, special[fill] * np.sign(rng.standard_normal(shape)), v)
        elif fill == "mixed":
            choices = np.array([np.nan, np.inf, -np.inf, 1e-45, -0.0, 0.0, 1.0])
            mask = rng.random(shape) < 0.5
            v = np.where(mask, rng.choice(choices, size=shape), v)
        if dtype == "float32" and fill == "denormal":
            v = v.astype(np.float32)
        return self.tf.constant(np.asarray(v).astype(npdt), dtype=dtype)

    def _rois(self, spec: dict, rng):
        np = self.np
        r = spec["shape"][0]
        n, h, w = spec["num_images"], spec["height"], spec["width"]
        out = np.zeros(spec["shape"], np.float64)
        for i in range(r):
            x1, x2 = sorted(rng.uniform(-2, w + 2, 2))
            y1, y2 = sorted(rng.uniform(-2, h + 2, 2))
            row = [rng.integers(0, max(n, 1)), x1, y1, x2, y2]
            out[i, :min(5, out.shape[1])] = row[:out.shape[1]]
        bad = spec.get("bad")
        if bad and r > 0 and out.shape[1] >= 5:
            k = rng.integers(r)
            val = {"batch_neg": (0, -1), "batch_big": (0, n), "batch_frac": (0, 0.5),
                   "batch_nan": (0, np.nan), "coord_nan": (2, np.nan), "coord_inf": (3, np.inf),
                   "coord_huge": (4, 3e38), "inverted": (1, 1e6)}[bad]
            out[k, val[0]] = val[1]
        return self.tf.constant(out.astype(spec["dtype"]))

    # -- calls
    def _fn(self, op: str):
        from tf_ext import ops as tf_ext_ops
        return getattr(self.lib, tf_ext_ops._python_name_to_generated(op))  # noqa: SLF001

    def _call(self, op: str, mode: str, inputs: list, attrs: dict):
        tf = self.tf
        fn = self._fn(op)
        if mode == "eager":
            return fn(*inputs, **attrs)
        if mode in ("function", "function_unknown"):
            if mode == "function":
                sig = [tf.TensorSpec(t.shape, t.dtype) for t in inputs]
            else:
                sig = [tf.TensorSpec(None, t.dtype) for t in inputs]
            return tf.function(lambda *xs: fn(*xs, **attrs), input_signature=sig)(*inputs)
        if mode == "tape":
            x = inputs[0]
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = fn(*inputs, **attrs)
                first = y[0] if isinstance(y, (list, tuple)) else y
            g = tape.gradient(first, x)
            return (y, g)
        raise ValueError(mode)

    def run(self, case: dict) -> dict:
        op, mode = case["op"], case["mode"]
        if op == "TfExt>GradientFunctionDef":
            return self._run_gfd(case)
        try:
            inputs = [self.array(s) for s in case["inputs"]]
        except Exception as e:  # noqa: BLE001  (inputs TF itself cannot build: not a finding)
            return {"outcome": "skipped", "why": f"input: {type(e).__name__}: {e}"[:300]}
        res = self._outcome(op, lambda: self._call(op, mode, inputs, case["attrs"]))
        if res["outcome"] == "ok" and mode != "tape":
            # Same call in another mode must agree (graph and eager accept the same calls).
            other = "function" if mode == "eager" else "eager"
            res2 = self._outcome(op, lambda: self._call(op, other, inputs, case["attrs"]))
            res["calls"] = 2
            if res2["outcome"] != "ok" or not self._same(res["value"], res2["value"]):
                res["finding"] = "mode-disagreement"
                res["detail"] = f"{mode}: ok; {other}: {res2.get('outcome')} {res2.get('msg', '')}"[:500]
            elif (why := self._check(op, case, inputs, res["value"])) is not None:
                res["finding"] = "wrong-result"
                res["detail"] = why[:500]
        elif res["outcome"] == "error" and mode in ("eager", "function"):
            other = "function" if mode == "eager" else "eager"
            res2 = self._outcome(op, lambda: self._call(op, other, inputs, case["attrs"]))
            res["calls"] = 2
            if res2["outcome"] == "ok":
                res["finding"] = "mode-disagreement"
                res["detail"] = f"{mode}: {res['msg']}; {other}: ok"[:500]
            elif res2["outcome"] == "error" and "finding" in res2 and "finding" not in res:
                res.update(finding=res2["finding"], detail=res2.get("detail"))
        res.pop("value", None)
        return res

    def _outcome(self, op: str, call) -> dict:
        tf = self.tf
        try:
            value = call()
            value = tf.nest.map_structure(self._numpy, value)
            return {"outcome": "ok", "value": value}
        except Exception as e:  # noqa: BLE001  (any error must name the op; judged below)
            msg = str(e)
            cls = type(e).__name__
            res = {"outcome": "error", "cls": cls, "msg": msg[:400]}
            if _signature_rejection(msg):
                res["outcome"] = "signature-rejected"
                return res
            other_op = re.search(r"\[Op:([^\]]+)\]", msg)
            if other_op and not other_op.group(1).startswith(("TfExt>", "__inference")):
                # A TensorFlow op failed, not a tf_ext one (e.g. GradientTape's Fill of the
                # default output gradient, whose int32 shape overflows on a 2^31 dim).
                res["outcome"] = "tensorflow-op-error"
                return res
            if isinstance(e, tf.errors.ResourceExhaustedError) and op in msg:
                # The output does not fit in memory: TensorFlow's allocator refuses it.
                res["outcome"] = "resource-exhausted"
                return res
            if op not in msg:
                res["finding"] = "unnamed-error"
                res["detail"] = f"{cls}: {msg}"[:500]
            elif isinstance(e, tf.errors.OpError) and not isinstance(e, tf.errors.InvalidArgumentError) \
                    and not isinstance(e, tf.errors.UnimplementedError):
                res["finding"] = "wrong-error-class"
                res["detail"] = f"{cls}: {msg}"[:500]
            return res

    def _numpy(self, t):
        """t as numpy; an empty tensor whose shape numpy cannot hold (huge dims) as a 0-d
        object array of (shape, dtype), still comparable between modes."""
        if t is None:
            return None
        if t.shape.num_elements() == 0:
            try:
                return t.numpy()
            except Exception:  # noqa: BLE001  (numpy cannot represent the shape)
                return self.np.array((tuple(t.shape.as_list()), t.dtype.name), dtype=object)
        return t.numpy()

    def _same(self, a, b) -> bool:
        np = self.np
        fa, fb = self.tf.nest.flatten(a), self.tf.nest.flatten(b)
        if len(fa) != len(fb):
            return False
        for x, y in zip(fa, fb):
            if x is None or y is None:
                if x is not y:
                    return False
                continue
            x, y = np.asarray(x), np.asarray(y)
            if x.shape != y.shape or x.dtype != y.dtype:
                return False
            if x.dtype == object:
                if x.tolist() != y.tolist():
                    return False
            elif x.dtype.kind in "fc":
                if not np.array_equal(x, y, equal_nan=True):
                    return False
            elif not np.array_equal(x, y):
                return False
        return True

    def _check(self, op: str, case: dict, inputs: list, value) -> str | None:
        """The op's contract on an accepted call; None when it holds."""
        np = self.np
        attrs = case["attrs"]
        if any(t.shape.num_elements() == 0 for t in inputs):
            return None  # empty inputs: the modes' outputs were compared (shape, dtype)
        xs = [t.numpy() for t in inputs]
        finite = all(s.get("fill") in ("normal", "rois", "argmax", "zeros", "values") and not s.get("bad")
                     for s in case["inputs"])
        if op == "TfExt>ZeroOut":
            want = np.zeros_like(xs[0]).reshape(-1)
            want[attrs["preserve_index"]] = xs[0].reshape(-1)[attrs["preserve_index"]]
            return None if np.array_equal(value.reshape(-1), want, equal_nan=True) else "zero_out mismatch"
        if op == "TfExt>GradientReversal":
            return None if np.array_equal(value, xs[0], equal_nan=True) else "identity mismatch"
        if op == "TfExt>SignSTE":
            x = xs[0]
            if x.dtype in (np.float32, np.float64):  # what a kernel sees: denormals flushed
                x = np.where(np.abs(x) < np.finfo(x.dtype).tiny, np.copysign(0, x), x).astype(x.dtype)
            want = np.where(x > 0, 1, np.where(x < 0, -1, x)).astype(x.dtype)
            ok = np.array_equal(value, want, equal_nan=True) and \
                np.array_equal(np.signbit(value), np.signbit(want))
            return None if ok else f"sign mismatch: x={xs[0].ravel()[:6]} y={value.ravel()[:6]}"
        if op == "TfExt>SmoothL1":
            x, d = xs[0].astype(np.float64), float(np.float32(attrs["delta"]))
            with np.errstate(all="ignore"):
                want = np.where(np.abs(x) < d, 0.5 * x * x / d, np.abs(x) - 0.5 * d)
            tol = 2e-3 if xs[0].dtype == np.float16 else (2e-6 if xs[0].dtype == np.float32 else 1e-12)
            with np.errstate(all="ignore"):
                ok = np.allclose(value.astype(np.float64), want.astype(xs[0].dtype).astype(np.float64),
                                 rtol=tol, atol=tol, equal_nan=True)
            return None if ok else f"smooth_l1 mismatch: x={xs[0].ravel()[:6]} y={value.ravel()[:6]}"
        if not finite or sum(x.size for x in xs) > 3000 or min(np.size(v) for v in
                                                               self.tf.nest.flatten(value)) == 0:
            return None  # references are Python loops; empty outputs were compared by shape
        try:
            return self._check_reference(op, attrs, xs, value)
        except (OverflowError, MemoryError, ValueError, FloatingPointError):
            return None  # e.g. coordinates * scale beyond float range: the reference gives up

    def _check_reference(self, op: str, attrs: dict, xs: list, value) -> str | None:
        np = self.np
        import numpy_refs as ref
        if xs[0].dtype == np.float16:
            # Half kernels widen to float32, compute, and round once: so do the references
            # (ps_roi_align's sample positions, in half, would land elsewhere).
            xs = [x.astype(np.float32) if x.dtype == np.float16 else x for x in xs]
            tol = 2e-3
        else:
            tol = 1e-4 if xs[0].dtype == np.float32 else 1e-9
        if op == "TfExt>RoiPool":
            want, arg = ref.roi_pool(xs[0], xs[1], attrs["pooled_height"], attrs["pooled_width"],
                                     attrs["spatial_scale"])
            if not np.array_equal(value[1], arg):
                return "roi_pool argmax mismatch"
            return None if np.allclose(value[0], want, rtol=tol, atol=tol) else "roi_pool mismatch"
        if op == "TfExt>RoiPoolGrad":
            want = ref.roi_pool_backward(xs[0].shape, xs[1], xs[2], xs[3])
        elif op == "TfExt>PsRoiAlign":
            if value.size > 400 or attrs["sampling_ratio"] > 8 or attrs["sampling_ratio"] == 0:
                return None
            want = ref.ps_roi_align(xs[0], xs[1], attrs["pooled_height"], attrs["pooled_width"],
                                    attrs["spatial_scale"], attrs["sampling_ratio"])
        elif op == "TfExt>PsRoiAlignGrad":
            if attrs["sampling_ratio"] > 8 or attrs["sampling_ratio"] == 0:
                return None
            want = ref.ps_roi_align_backward(xs[0], xs[1], xs[2], attrs["pooled_height"],
                                             attrs["pooled_width"], attrs["spatial_scale"],
                                             attrs["sampling_ratio"])
        elif op.startswith("TfExt>MedianPool2D") and xs[0].size > 300:
            return None  # the reference is a Python loop per window element
        elif op == "TfExt>MedianPool2D":
            want, _ = ref.median_pool2d(xs[0], tuple(attrs["ksize"]), tuple(attrs["strides"]),
                                        attrs["padding"])
            return None if np.array_equal(value, want) else "median mismatch"
        elif op == "TfExt>MedianPool2DGrad":
            _, arg = ref.median_pool2d(xs[0], tuple(attrs["ksize"]), tuple(attrs["strides"]),
                                       attrs["padding"])
            want = ref.median_pool2d_backward(xs[0].shape, arg, xs[1])
        else:
            return None
        scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
        return None if np.allclose(value, want, rtol=tol, atol=tol * scale) else f"{op} mismatch"

    def _run_gfd(self, case: dict) -> dict:
        data = _node_def_bytes(case["inputs"][0]["node_def"])
        op = "TfExt>GradientFunctionDef"
        if case["mode"] == "c_api":
            out = ctypes.c_void_p()
            out_len = ctypes.c_size_t()
            err = ctypes.create_string_buffer(512)
            rc = self.c_lib.TfExtGradientFunctionDef(data, len(data), ctypes.byref(out),
                                                     ctypes.byref(out_len), err, 512)
            if rc == 0:
                self.c_free(out)
                return {"outcome": "ok"}
            if rc != 1 or not err.value:
                return {"outcome": "error", "finding": "unnamed-error",
                        "detail": f"C entry point returned {rc} with message {err.value!r}"}
            return {"outcome": "error", "cls": "c_api", "msg": err.value.decode(errors="replace")[:300]}
        tf = self.tf
        t = tf.constant(data)
        res = self._outcome(op, lambda: self._call(op, "eager" if case["mode"] != "function"
                                                   else "function", [t], {}))
        if res.get("outcome") == "error" and res.get("cls") == "NotFoundError":
            res.pop("finding", None)  # "no gradient registered" is the documented NotFound
        res.pop("value", None)
        return res


def _signature_rejection(msg: str) -> bool:
    """TensorFlow's Python op wrapper rejected the call before any tf_ext code ran."""
    return ("not in list of allowed values" in msg or "Could not convert" in msg
            or "Expected int for argument" in msg or "Expected float for argument" in msg
            or "Expected list for" in msg or "Expected string for argument" in msg
            or "Cannot convert" in msg)


def _node_def_bytes(spec: dict) -> bytes:
    if "garbage" in spec:
        return random.Random(spec["garbage"]).randbytes(spec["len"])
    from tensorflow.core.framework import node_def_pb2, types_pb2
    node = node_def_pb2.NodeDef(name="n", op=spec["op"])
    for name, v in spec["attrs"].items():
        a = node.attr[name]
        if "type" in v:
            a.type = {"float32": types_pb2.DT_FLOAT, "float64": types_pb2.DT_DOUBLE,
                      "int32": types_pb2.DT_INT32, "string": types_pb2.DT_STRING}[v["type"]]
        elif "i" in v:
            a.i = v["i"]
        elif "f" in v:
            a.f = v["f"]
        elif "list_i" in v:
            a.list.i.extend(v["list_i"])
        elif "list_type" in v:
            a.list.type.extend([types_pb2.DT_FLOAT] * len(v["list_type"]))
        elif "s" in v:
            a.s = v["s"].encode()
        elif "b" in v:
            a.b = v["b"]
    return node.SerializeToString()


# ----------------------------------------------------------------------------- parent

def _run_batch(args, cases: list[dict], workdir: str) -> tuple[list[dict], dict | None]:
    """Runs cases in one child; returns (results, failure) with failure = {kind, i} if the
    child crashed or stalled on case i."""
    cases_path = os.path.join(workdir, "cases.jsonl")
    results_path = os.path.join(workdir, "results.jsonl")
    with open(cases_path, "w") as f:
        for c in cases:
            f.write(json.dumps(c) + "\n")
    open(results_path, "w").close()
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--library", args.library,
           "--cases", cases_path, "--results", results_path]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    last_size, last_change, killed = -1, time.monotonic(), False
    stall = args.startup_timeout  # until the first case starts (importing TensorFlow)
    while proc.poll() is None:
        time.sleep(0.2)
        size = os.path.getsize(results_path)
        if size != last_size:
            if last_size >= 0:
                stall = args.case_timeout
            last_size, last_change = size, time.monotonic()
        elif time.monotonic() - last_change > stall:
            proc.kill()
            proc.wait()
            killed = True
            break
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    results, started = [], None
    with open(results_path) as f:
        for line in f:
            r = json.loads(line)
            if "start" in r:
                started = r["start"]
            else:
                results.append(r)
                started = None
    if proc.returncode == 0 and started is None:
        return results, None
    kind = "hang" if killed else f"crash (exit {proc.returncode})"
    return results, {"kind": kind, "i": started, "stderr": stderr[-1500:]}


def _fails(args, case: dict, workdir: str) -> dict | None:
    _, failure = _run_batch(args, [case], workdir)
    return failure


def _shrink(args, case: dict, workdir: str) -> dict:
    """Smaller versions of a crashing/hanging case, kept while they still fail (at most
    --shrink-budget child runs)."""
    best = json.loads(json.dumps(case))
    budget = [args.shrink_budget]

    def _fails(args, trial, workdir):  # noqa: F811  (counts the budget)
        if budget[0] <= 0:
            return None
        budget[0] -= 1
        return globals()["_fails"](args, trial, workdir)
    for _ in range(12):
        improved = False
        for inp in best["inputs"]:
            shape = inp.get("shape")
            if not shape:
                continue
            for k, d in enumerate(shape):
                if d > 1:
                    trial = json.loads(json.dumps(best))
                    trial_inp = trial["inputs"][best["inputs"].index(inp)]
                    trial_inp["shape"][k] = d // 2
                    if _fails(args, trial, workdir):
                        best, improved = trial, True
                        break
            if improved:
                break
        if not improved:
            break
    return best


def _write_report(args, ops, cases_done, calls, counts, findings, t0) -> dict:
    per_op = {op: {"calls": calls[op], **{k[1]: v for k, v in counts.items() if k[0] == op}}
              for op in ops}
    report = {"seed": args.seed, "calls_per_op_requested": args.calls_per_op,
              "cases_done": len(cases_done), "calls": sum(calls.values()),
              "seconds": round(time.monotonic() - t0, 1), "per_op": per_op,
              "findings": findings}
    if args.report:
        with open(args.report + ".tmp", "w") as f:
            json.dump(report, f, indent=1)
        os.replace(args.report + ".tmp", args.report)
    return report


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--library", default=os.environ.get("TF_EXT_LIBRARY",
                                                       "bazel-bin/tf_ext/_tf_ext_ops.so"))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--calls-per-op", type=int, default=100)
    p.add_argument("--batch", type=int, default=400, help="calls per child process")
    p.add_argument("--case-timeout", type=float, default=30.0,
                   help="seconds without progress that make a call a hang")
    p.add_argument("--startup-timeout", type=float, default=90.0,
                   help="seconds a child may take to import TensorFlow and load the library")
    p.add_argument("--shrink-budget", type=int, default=4,
                   help="child runs spent shrinking each crash or hang")
    p.add_argument("--ops", default="", help="comma-separated op types (default: every op the "
                   "library declares)")
    p.add_argument("--report", default="", help="write the JSON report here")
    p.add_argument("--generic", action="store_true",
                   help="generate every op's calls from its declaration, even ops with a "
                   "hand-written generator (checks the generic generator)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--child-describe", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--cases", help=argparse.SUPPRESS)
    p.add_argument("--results", help=argparse.SUPPRESS)
    args = p.parse_args()
    # One path for every load (the package's loader resolves links; TensorFlow keys loaded
    # libraries by the path string, and a second path would be a second copy).
    args.library = os.path.realpath(args.library)
    if args.child:
        return _child_main(args)
    if args.child_describe:
        return _describe_main(args)

    described = describe_library(args.library)
    ops = [o for o in args.ops.split(",") if o] or sorted(described)
    rng = random.Random(args.seed)
    cases = [generate(op, rng, described, args.generic)
             for _ in range(args.calls_per_op) for op in ops]
    generic = [o for o in ops if o not in HAND_WRITTEN or (args.generic and
                                                           o != "TfExt>GradientFunctionDef")]
    print(f"fuzz: {len(ops)} ops ({', '.join(generic) or 'none'} "
          f"from their declarations)", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    counts = collections.Counter()
    calls = collections.Counter()
    findings: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="tf_ext_fuzz_") as workdir:
        pos = 0
        while pos < len(cases):
            batch = cases[pos:pos + args.batch]
            results, failure = _run_batch(args, batch, workdir)
            for r in results:
                c = batch[r["i"]]
                counts[(c["op"], r["outcome"])] += 1
                calls[c["op"]] += r.get("calls", 1)
                if "finding" in r:
                    findings.append({"kind": r["finding"], "case": c, "detail": r.get("detail")})
            done = len(results)
            if failure is not None:
                i = failure["i"] if failure["i"] is not None else done
                bad = batch[i]
                calls[bad["op"]] += 1
                confirmed = _fails(args, bad, workdir)
                small = _shrink(args, bad, workdir) if confirmed else bad
                findings.append({"kind": failure["kind"] if confirmed else "flaky-" + failure["kind"],
                                 "case": bad, "minimised": small, "detail": failure["stderr"]})
                counts[(bad["op"], failure["kind"])] += 1
                done = i + 1
            pos += max(done, 1)
            if args.report:  # kept current, so a long run interrupted still has its numbers
                _write_report(args, ops, cases[:pos], calls, counts, findings, t0)
            print(f"fuzz: {pos}/{len(cases)} cases, {len(findings)} findings, "
                  f"{time.monotonic() - t0:.0f}s", file=sys.stderr, flush=True)
    elapsed = time.monotonic() - t0
    report = _write_report(args, ops, cases, calls, counts, findings, t0)
    per_op = report["per_op"]
    print(f"fuzz: seed {args.seed}: {len(cases)} cases, {sum(calls.values())} op calls in "
          f"{elapsed:.0f}s")
    for op in ops:
        print(f"  {op:28s} " + ", ".join(f"{k}={v}" for k, v in per_op[op].items()))
    by_kind = collections.Counter(f["kind"] for f in findings)
    print(f"fuzz: {len(findings)} findings " + json.dumps(dict(by_kind)))
    for f in findings[:20]:
        print(json.dumps({k: f[k] for k in ("kind", "detail")} | {"case": f.get("minimised", f["case"])})[:1500])
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
