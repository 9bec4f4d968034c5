"""tf_ext's performance against stock-TensorFlow baselines, measured in the same run.

Each workload times tf_ext's op and its baselines with interleaved repetitions (one call of
every variant per round, so machine noise hits all of them alike) and reports the minimum and
median time, the baseline/tf_ext ratio of the medians (> 1: tf_ext is faster), the nominal bytes
the op must move (inputs read once, outputs written once; the same for every variant of a
workload) and the achieved GB/s. Results: a table on stdout, and under --out a JSON file, a
markdown table and a PNG chart.

    make bench                                   # every workload, 2 threads
    make bench BENCH_ARGS="--workloads sign_ste_fwd,roi_pool --reps 5"

Not part of `make test`: it takes minutes and its numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np


# Rounds of a workload whose calls are quick: enough for about this many seconds of timed calls
# (at most QUICK_WORKLOAD_MAX_FACTOR x --reps rounds), so that a ~1 ms eager step's median is
# not that of 5 samples, nor a ~30 ms fwd+bwd's that of 7 taken during one burst of another
# process on a 2-core machine (roi_pool_fwd_bwd once measured 1.50x with a 1.93x min ratio).
QUICK_WORKLOAD_SECONDS = 1.5
QUICK_WORKLOAD_MAX_FACTOR = 20


def _parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2,
                   help="intra- and inter-op parallelism (default 2)")
    p.add_argument("--reps", type=int, default=7,
                   help=f"timed rounds per workload (default 7); workloads of quick calls run "
                        f"more, about {QUICK_WORKLOAD_SECONDS} s of calls, up to "
                        f"{QUICK_WORKLOAD_MAX_FACTOR}x")
    p.add_argument("--workloads", default="",
                   help="comma-separated workload names or prefixes (default: all); "
                        "--list shows them")
    p.add_argument("--list", action="store_true", help="list the workloads and exit")
    p.add_argument("--out", default="bench_results", help="results folder")
    p.add_argument("--tag", default="", help="label stored in the JSON (e.g. before/after)")
    return p.parse_args()


ARGS = _parse_args()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402  (after the log level is set)

tf.config.threading.set_intra_op_parallelism_threads(ARGS.threads)
tf.config.threading.set_inter_op_parallelism_threads(ARGS.threads)

import tf_ext  # noqa: E402

F32 = 4  # bytes per float32


# --------------------------------------------------------------------------------------------
# Timing


class Variant:
    """One way of computing a workload: `fn()` runs it once (and returns when it is done)."""

    def __init__(self, name: str, fn: Callable[[], Any], baseline: bool = True) -> None:
        self.name, self.fn, self.baseline = name, fn, baseline
        self.times: list[float] = []


def _sync(result: Any) -> None:
    # CPU kernels finish before an eager call returns; touching one value makes sure. Through
    # np.asarray, which views the tensor's buffer: Tensor.numpy() copies the whole tensor,
    # which would add a memcpy of the result to every timed call (64 MiB for the elementwise
    # workloads, more than tf.identity's own time).
    for t in tf.nest.flatten(result):
        if isinstance(t, tf.Tensor) and t.shape.num_elements():
            np.asarray(t).flat[0]
            break


def _time(variants: list[Variant], reps: int, warmup: int = 2) -> int:
    """Times every variant in `reps` or more interleaved rounds; returns the rounds run."""
    slowest = 0.0
    for v in variants:
        elapsed = 0.0
        for _ in range(warmup):
            start = time.perf_counter()
            _sync(v.fn())
            elapsed = time.perf_counter() - start
        slowest = max(slowest, elapsed)
    per_round = slowest * len(variants)
    rounds = max(reps, min(QUICK_WORKLOAD_MAX_FACTOR * reps,
                           int(QUICK_WORKLOAD_SECONDS / max(per_round, 1e-6))))
    # No garbage collection during the timed rounds (timeit's convention; tensors are freed by
    # reference counting). A collection walks every Python object and evicts the CPU caches:
    # timed straight after one, even a [64] tf.nn.relu took 0.24 ms instead of 9 us, a cold
    # start no training loop sees, charged most to the variant that runs the most Python. For
    # the same reason each timed call follows an untimed call of the same variant (the rounds
    # stay interleaved).
    gc.collect()
    gc.disable()
    try:
        for _ in range(rounds):
            for v in variants:  # interleaved: every variant once per round
                _sync(v.fn())
                start = time.perf_counter()
                _sync(v.fn())
                v.times.append(time.perf_counter() - start)
    finally:
        gc.enable()
    return rounds


# --------------------------------------------------------------------------------------------
# Helpers for the workloads


def _fwd_bwd(f: Callable[..., Any], *args: tf.Tensor, jit: bool | None = None) -> Callable[[], Any]:
    """fn() computing f(*args) and the gradient of sum(f * dy) with respect to args[0], in one
    tf.function (dy fixed random, so no reduction kernel dominates), with jit_compile=jit."""
    first = f(*args)
    dy = tf.random.normal(tf.shape(first), seed=3)

    @tf.function(jit_compile=jit)
    def step(*a):
        with tf.GradientTape() as tape:
            tape.watch(a[0])
            y = f(*a)
        return y, tape.gradient(y, a[0], output_gradients=dy)

    return lambda: step(*args)


def _fwd(f: Callable[..., Any], *args: tf.Tensor) -> Callable[[], Any]:
    step = tf.function(f)
    return lambda: step(*args)


def _eager_fwd_bwd(f: Callable[..., Any], *args: tf.Tensor) -> Callable[[], Any]:
    first = f(*args)
    dy = tf.random.normal(tf.shape(first), seed=3)

    def step():
        with tf.GradientTape() as tape:
            tape.watch(args[0])
            y = f(*args)
        return y, tape.gradient(y, args[0], output_gradients=dy)

    return step


def _ste_trick(x: tf.Tensor, clip: float = 1.0) -> tf.Tensor:
    # The usual straight-through estimator without a custom op.
    c = tf.clip_by_value(x, -clip, clip)
    return c + tf.stop_gradient(tf.sign(x) - c)


@tf.custom_gradient
def _ste_custom_gradient(x):
    def grad(dy):
        return tf.where(tf.abs(x) <= 1.0, dy, tf.zeros_like(dy))
    return tf.sign(x), grad


def _reversal_trick(x: tf.Tensor, scale: float = 1.0) -> tf.Tensor:
    # Identity forward, -scale * dy backward, from stock ops.
    return -scale * x + tf.stop_gradient((1.0 + scale) * x)


@tf.custom_gradient
def _reversal_custom_gradient(x):
    def grad(dy):
        return -1.0 * dy
    return tf.identity(x), grad


def _median_composite(x: tf.Tensor, k: int) -> tf.Tensor:
    """k x k SAME median pooling from extract_patches + top_k (zero padding: an
    approximation of tf_ext's, which ignores the padding)."""
    n, h, w, c = x.shape
    patches = tf.image.extract_patches(x, sizes=[1, k, k, 1], strides=[1, 1, 1, 1],
                                       rates=[1, 1, 1, 1], padding="SAME")
    patches = tf.reshape(patches, [n, h, w, k * k, c])
    patches = tf.transpose(patches, [0, 1, 2, 4, 3])
    m = k * k // 2 + 1
    return tf.math.top_k(patches, k=m, sorted=True).values[..., m - 1]


def _max_pool(x: tf.Tensor, k: int) -> tf.Tensor:
    return tf.nn.max_pool2d(x, ksize=k, strides=1, padding="SAME")


def _random_rois(num: int, batch: int, height: int, width: int, seed: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    size = rng.uniform(4, min(height, width) * 0.6, size=(num, 2))
    y1 = rng.uniform(0, height - size[:, 0])
    x1 = rng.uniform(0, width - size[:, 1])
    b = rng.integers(0, batch, size=num)
    return np.stack([b, x1, y1, x1 + size[:, 1], y1 + size[:, 0]], axis=1).astype(np.float32)


def _crop_boxes(rois: np.ndarray, height: int, width: int) -> tuple[tf.Tensor, tf.Tensor]:
    """tf_ext's [b, x1, y1, x2, y2] pixel ROIs as crop_and_resize's normalised boxes."""
    boxes = np.stack([rois[:, 2] / (height - 1), rois[:, 1] / (width - 1),
                      rois[:, 4] / (height - 1), rois[:, 3] / (width - 1)], axis=1)
    return tf.constant(boxes, tf.float32), tf.constant(rois[:, 0].astype(np.int32))


def _roi_crop_pool(data, boxes, box_indices, pooled: int):
    """Faster R-CNN's usual TF approximation of RoI pooling: crop_and_resize to 2 x pooled,
    then 2x2 max pooling."""
    crops = tf.image.crop_and_resize(data, boxes, box_indices, [2 * pooled, 2 * pooled])
    return tf.nn.max_pool2d(crops, ksize=2, strides=2, padding="VALID")


def _ps_crop(features, boxes, box_indices, pooled: int, sampling: int):
    """Position-sensitive crop as TF object detection's ops.position_sensitive_crop_regions
    does it: per spatial bin, crop_and_resize its channel group over the bin's sub-box, then
    average the samples (global pool)."""
    y1, x1, y2, x2 = tf.unstack(boxes, axis=1)
    bin_h, bin_w = (y2 - y1) / pooled, (x2 - x1) / pooled
    outs = []
    p = pooled * pooled
    for i in range(pooled):
        for j in range(pooled):
            b = i * pooled + j
            sub = tf.stack([y1 + i * bin_h, x1 + j * bin_w,
                            y1 + (i + 1) * bin_h, x1 + (j + 1) * bin_w], axis=1)
            group = features[..., b::p]  # tf_ext's layout: channel d * P + bin
            crop = tf.image.crop_and_resize(group, sub, box_indices, [sampling, sampling])
            outs.append(tf.reduce_mean(crop, axis=[1, 2]))
    out = tf.stack(outs, axis=1)  # [R, P, D]
    return tf.reshape(out, [-1, pooled, pooled, out.shape[-1]])


# --------------------------------------------------------------------------------------------
# Workloads: name -> (description, nominal bytes, variants); the first variant is tf_ext's.

Workload = tuple[str, float, list[Variant]]
WORKLOADS: dict[str, Callable[[], Workload]] = {}


def workload(name: str):
    def register(fn):
        WORKLOADS[name] = fn
        return fn
    return register


N_ELEMENTWISE = 16 * 1024 * 1024


def _x16m() -> tf.Tensor:
    return tf.random.uniform([N_ELEMENTWISE], -2.0, 2.0, seed=1)


@workload("sign_ste_fwd")
def _sign_ste_fwd() -> Workload:
    x = _x16m()
    return ("sign_ste forward, 16M float32", 2 * N_ELEMENTWISE * F32, [
        Variant("tf_ext.sign_ste", _fwd(lambda a: tf_ext.sign_ste(a), x), baseline=False),
        Variant("tf.sign", _fwd(tf.sign, x)),
        # Shares x's buffer: moves no data, so it times the call alone.
        Variant("tf.identity", _fwd(tf.identity, x)),
        # A real copy (read x, write a fresh output): the memcpy-class roofline proxy.
        Variant("copy (DeepCopy)", _fwd(lambda a: tf.raw_ops.DeepCopy(x=a), x)),
    ])


@workload("sign_ste_fwd_bwd")
def _sign_ste_fwd_bwd() -> Workload:
    x = _x16m()
    # forward: read x, write y; backward: read x and dy, write dx.
    return ("sign_ste fwd+bwd, 16M float32", 5 * N_ELEMENTWISE * F32, [
        Variant("tf_ext.sign_ste", _fwd_bwd(lambda a: tf_ext.sign_ste(a), x), baseline=False),
        Variant("clip+stop_gradient trick", _fwd_bwd(_ste_trick, x)),
    ])


@workload("zero_out_fwd")
def _zero_out_fwd() -> Workload:
    x = _x16m()
    return ("zero_out forward, 16M float32", 2 * N_ELEMENTWISE * F32, [
        Variant("tf_ext.zero_out", _fwd(lambda a: tf_ext.zero_out(a, preserve_index=5), x),
                baseline=False),
        Variant("tf.identity", _fwd(tf.identity, x)),
        Variant("copy (DeepCopy)", _fwd(lambda a: tf.raw_ops.DeepCopy(x=a), x)),
    ])


@workload("gradient_reversal_fwd")
def _gradient_reversal_fwd() -> Workload:
    x = _x16m()
    return ("gradient_reversal forward, 16M float32", 2 * N_ELEMENTWISE * F32, [
        Variant("tf_ext.gradient_reversal",
                _fwd(lambda a: tf_ext.gradient_reversal(a, scale=0.5), x), baseline=False),
        Variant("tf.identity", _fwd(tf.identity, x)),
        Variant("copy (DeepCopy)", _fwd(lambda a: tf.raw_ops.DeepCopy(x=a), x)),
    ])


def _huber_composite(x: tf.Tensor, delta: float = 1.0) -> tf.Tensor:
    # Smooth L1 without a custom op: Huber's two pieces and a select (the elementwise form
    # tf.keras.losses.Huber reduces).
    a = tf.abs(x)
    return tf.where(a < delta, 0.5 * x * x / delta, a - 0.5 * delta)


@workload("smooth_l1_fwd")
def _smooth_l1_fwd() -> Workload:
    x = _x16m()
    return ("smooth_l1 forward, 16M float32", 2 * N_ELEMENTWISE * F32, [
        Variant("tf_ext.smooth_l1", _fwd(lambda a: tf_ext.smooth_l1(a, delta=1.0), x),
                baseline=False),
        Variant("abs+where composite", _fwd(_huber_composite, x)),
        Variant("copy (DeepCopy)", _fwd(lambda a: tf.raw_ops.DeepCopy(x=a), x)),
    ])


@workload("smooth_l1_fwd_bwd")
def _smooth_l1_fwd_bwd() -> Workload:
    x = _x16m()
    # forward: read x, write y; backward: read x and dy, write dx.
    return ("smooth_l1 fwd+bwd, 16M float32", 5 * N_ELEMENTWISE * F32, [
        Variant("tf_ext.smooth_l1", _fwd_bwd(lambda a: tf_ext.smooth_l1(a, delta=1.0), x),
                baseline=False),
        Variant("abs+where composite", _fwd_bwd(_huber_composite, x)),
    ])


MEDIAN_SHAPE = [8, 64, 64, 32]


def _median_workload(k: int, with_max_pool: bool) -> Workload:
    x = tf.random.normal(MEDIAN_SHAPE, seed=2)
    n = int(np.prod(MEDIAN_SHAPE))
    variants = [
        Variant(f"tf_ext.median_pool2d {k}x{k}",
                _fwd_bwd(lambda a: tf_ext.median_pool2d(a, [k, k], [1, 1], "SAME"), x),
                baseline=False),
        Variant("extract_patches+top_k", _fwd_bwd(lambda a: _median_composite(a, k), x)),
    ]
    if with_max_pool:
        variants.append(Variant(f"max_pool2d {k}x{k}", _fwd_bwd(lambda a: _max_pool(a, k), x)))
    # forward: read x, write y; backward: read x and dy, write dx.
    return (f"median_pool2d {k}x{k} SAME fwd+bwd, {MEDIAN_SHAPE}", 5 * n * F32, variants)


@workload("median_pool3_fwd_bwd")
def _median3() -> Workload:
    return _median_workload(3, with_max_pool=True)


@workload("median_pool5_fwd_bwd")
def _median5() -> Workload:
    return _median_workload(5, with_max_pool=False)


ROI_DATA = [2, 64, 64, 256]


def _roi_pool_workload(num_rois: int) -> Workload:
    n, h, w, c = ROI_DATA
    data = tf.random.normal(ROI_DATA, seed=4)
    rois_np = _random_rois(num_rois, n, h, w)
    rois = tf.constant(rois_np)
    boxes, box_indices = _crop_boxes(rois_np, h, w)
    pooled = num_rois * 7 * 7 * c
    # forward: read data once, write pooled + argmax; backward: read argmax + d(pooled),
    # write d(data).
    nbytes = (2 * n * h * w * c + 4 * pooled) * F32
    return (f"roi_pool 7x7 fwd+bwd, data {ROI_DATA}, {num_rois} ROIs", nbytes, [
        Variant("tf_ext.roi_pool", _fwd_bwd(lambda d: tf_ext.roi_pool(d, rois, 7, 7)[0], data),
                baseline=False),
        Variant("crop_and_resize 14x14+max_pool 2x2",
                _fwd_bwd(lambda d: _roi_crop_pool(d, boxes, box_indices, 7), data)),
    ])


@workload("roi_pool_fwd_bwd")
def _roi_pool_512() -> Workload:
    return _roi_pool_workload(512)


@workload("roi_pool_det_1000")
def _roi_pool_1000() -> Workload:
    return _roi_pool_workload(1000)


@workload("roi_pool_det_2000")
def _roi_pool_2000() -> Workload:
    return _roi_pool_workload(2000)


PS_DATA = [2, 32, 32, 3 * 3 * 64]  # pooled 3x3 (TF object detection's default), D = 64


@workload("ps_roi_align_fwd_bwd")
def _ps_roi_align() -> Workload:
    n, h, w, c = PS_DATA
    features = tf.random.normal(PS_DATA, seed=5)
    rois_np = _random_rois(256, n, h, w)
    rois = tf.constant(rois_np)
    boxes, box_indices = _crop_boxes(rois_np, h, w)
    out = 256 * 3 * 3 * (c // 9)
    nbytes = (2 * n * h * w * c + 2 * out) * F32
    return (f"ps_roi_align 3x3 sampling 2 fwd+bwd, features {PS_DATA}, 256 ROIs", nbytes, [
        Variant("tf_ext.ps_roi_align",
                _fwd_bwd(lambda f: tf_ext.ps_roi_align(f, rois, 3, 3, sampling_ratio=2), features),
                baseline=False),
        Variant("crop_and_resize position-sensitive crop",
                _fwd_bwd(lambda f: _ps_crop(f, boxes, box_indices, 3, 2), features)),
    ])


def _eager_vs_function(name: str, f: Callable[..., Any], stock: tuple[str, Callable[..., Any]],
                       *args: tf.Tensor, nbytes: float) -> Workload:
    # TensorFlow's own eager overhead on the same input: a comparable stock computation (one
    # forward op and its one gradient op) eagerly under a tape and in a tf.function. The
    # target allows tf_ext's eager time 1.15x its tf.function time plus that difference.
    stock_name, stock_fn = stock
    return (f"{name}: eager GradientTape vs tf.function (fwd+bwd); stock op {stock_name}",
            nbytes, [
        Variant("eager tape", _eager_fwd_bwd(f, *args), baseline=False),
        Variant("tf.function", _fwd_bwd(f, *args)),
        Variant(STOCK_EAGER, _eager_fwd_bwd(stock_fn, *args)),
        Variant(STOCK_FUNCTION, _fwd_bwd(stock_fn, *args)),
    ])


STOCK_EAGER = "stock op eager tape"
STOCK_FUNCTION = "stock op tf.function"

_SMALL_ROIS = tf.constant(_random_rois(64, 2, 32, 32))
_SMALL_BOXES, _SMALL_BOX_INDICES = _crop_boxes(_SMALL_ROIS.numpy(), 32, 32)


def _stock_crop(size: int) -> Callable[..., Any]:
    return lambda a: tf.image.crop_and_resize(a, _SMALL_BOXES, _SMALL_BOX_INDICES, [size, size])


# op -> (tf_ext call, input shape, (name, a comparable stock op: one forward op, one gradient op))
_RELU = ("tf.nn.relu", tf.nn.relu)
EAGER_CASES: dict[str, tuple[Callable[..., Any], list[int], tuple[str, Callable[..., Any]]]] = {
    "sign_ste": (lambda a: tf_ext.sign_ste(a), [1 << 20], _RELU),
    "zero_out": (lambda a: tf_ext.zero_out(a, preserve_index=3), [1 << 20], _RELU),
    "gradient_reversal": (lambda a: tf_ext.gradient_reversal(a, 0.5), [1 << 20], _RELU),
    "smooth_l1": (lambda a: tf_ext.smooth_l1(a, delta=1.0), [1 << 20], _RELU),
    "median_pool2d": (lambda a: tf_ext.median_pool2d(a, [3, 3], [1, 1], "SAME"),
                      [2, 32, 32, 16],
                      ("max_pool2d 3x3", lambda a: tf.nn.max_pool2d(a, 3, 1, "SAME"))),
    "roi_pool": (lambda a: tf_ext.roi_pool(a, _SMALL_ROIS, 7, 7)[0], [2, 32, 32, 64],
                 ("crop_and_resize 7x7", _stock_crop(7))),
    "ps_roi_align": (lambda a: tf_ext.ps_roi_align(a, _SMALL_ROIS, 3, 3), [2, 32, 32, 9 * 8],
                     ("crop_and_resize 3x3", _stock_crop(3))),
}

for _op, (_f, _shape, _stock) in EAGER_CASES.items():
    def _make(op=_op, f=_f, shape=_shape, stock=_stock) -> Workload:
        x = tf.random.normal(shape, seed=6)
        return _eager_vs_function(op, f, stock, x, nbytes=float(np.prod(shape)) * 4 * F32)
    WORKLOADS[f"eager_{_op}"] = _make


def _small_tape(f: Callable[..., Any], steps: int = 100) -> Callable[[], Any]:
    x = tf.random.normal([64], seed=8)

    def run():
        g = None
        for _ in range(steps):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = f(x)
            g = tape.gradient(y, x)
        return g

    return run


@workload("small_tape_sign_ste")
def _small_sign_ste() -> Workload:
    return ("sign_ste [64], eager tape, 100 steps", 100 * 4 * 64 * F32, [
        Variant("tf_ext.sign_ste", _small_tape(lambda a: tf_ext.sign_ste(a)), baseline=False),
        Variant("clip+stop_gradient trick", _small_tape(_ste_trick)),
        Variant("tf.custom_gradient", _small_tape(_ste_custom_gradient)),
    ])


@workload("small_tape_gradient_reversal")
def _small_reversal() -> Workload:
    return ("gradient_reversal [64], eager tape, 100 steps", 100 * 4 * 64 * F32, [
        Variant("tf_ext.gradient_reversal",
                _small_tape(lambda a: tf_ext.gradient_reversal(a, 1.0)), baseline=False),
        Variant("-x+stop_gradient trick", _small_tape(_reversal_trick)),
        Variant("tf.custom_gradient", _small_tape(_reversal_custom_gradient)),
    ])


# --------------------------------------------------------------------------------------------
# XLA: each op's forward + backward compiled (tf.function(jit_compile=True)) against the same
# function run by the kernels, and a Keras fit step with and without jit_compile.

XLA_VARIANT, KERNELS_VARIANT = "XLA (jit_compile)", "kernels (tf.function)"
N_XLA_ELEMENTWISE = 4 * 1024 * 1024


def _xla_workload(desc: str, f: Callable[..., Any], *args: tf.Tensor, nbytes: float) -> Workload:
    return (f"{desc} fwd+bwd, XLA against the kernels", nbytes, [
        Variant(XLA_VARIANT, _fwd_bwd(f, *args, jit=True), baseline=False),
        Variant(KERNELS_VARIANT, _fwd_bwd(f, *args, jit=False)),
    ])


# Elementwise ops with their neighbours, which XLA fuses into one loop.
XLA_ELEMENTWISE: dict[str, tuple[str, Callable[..., Any]]] = {
    "xla_sign_ste": ("relu(sign_ste(1.5 x)) * x", lambda a: tf.nn.relu(tf_ext.sign_ste(1.5 * a)) * a),
    "xla_gradient_reversal": ("gradient_reversal(x) * x + 1",
                              lambda a: tf_ext.gradient_reversal(a, 0.5) * a + 1.0),
    "xla_smooth_l1": ("smooth_l1(x - 0.5) * 3", lambda a: tf_ext.smooth_l1(a - 0.5, 1.0) * 3.0),
}

for _name, (_desc, _fn) in XLA_ELEMENTWISE.items():
    def _make_xla(desc=_desc, fn=_fn) -> Workload:
        x = tf.random.uniform([N_XLA_ELEMENTWISE], -2.0, 2.0, seed=1)
        return _xla_workload(f"{desc}, 4M float32", fn, x, nbytes=5 * N_XLA_ELEMENTWISE * F32)
    WORKLOADS[_name] = _make_xla


@workload("xla_median_pool3")
def _xla_median3() -> Workload:
    x = tf.random.normal(MEDIAN_SHAPE, seed=2)
    n = int(np.prod(MEDIAN_SHAPE))
    return _xla_workload(f"median_pool2d 3x3 SAME, {MEDIAN_SHAPE}",
                         lambda a: tf_ext.median_pool2d(a, [3, 3], [1, 1], "SAME"), x,
                         nbytes=5 * n * F32)


@workload("xla_roi_pool")
def _xla_roi_pool() -> Workload:
    n, h, w, c = ROI_DATA
    rois = tf.constant(_random_rois(512, n, h, w))
    data = tf.random.normal(ROI_DATA, seed=4)
    pooled = 512 * 7 * 7 * c
    return _xla_workload(f"roi_pool 7x7, data {ROI_DATA}, 512 ROIs",
                         lambda d: tf_ext.roi_pool(d, rois, 7, 7)[0], data,
                         nbytes=(2 * n * h * w * c + 3 * pooled) * F32)


@workload("xla_ps_roi_align")
def _xla_ps_roi_align() -> Workload:
    n, h, w, c = PS_DATA
    rois = tf.constant(_random_rois(256, n, h, w))
    features = tf.random.normal(PS_DATA, seed=5)
    out = 256 * 9 * (c // 9)
    return _xla_workload(f"ps_roi_align 3x3 sampling 2, features {PS_DATA}, 256 ROIs",
                         lambda f: tf_ext.ps_roi_align(f, rois, 3, 3, sampling_ratio=2), features,
                         nbytes=(2 * n * h * w * c + 2 * out) * F32)


def _keras_step(jit: bool) -> Callable[[], Any]:
    import keras  # noqa: E402  (only this workload needs it)
    import tf_ext.layers  # noqa: E402,F401
    keras.utils.set_random_seed(4)
    inp = keras.Input((32, 32, 8))
    y = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(inp)
    y = tf_ext.layers.GradientReversal(0.5)(y)
    y = tf_ext.layers.MedianPool2D(3, strides=2, padding="same")(y)
    y = keras.layers.GlobalAveragePooling2D()(y)
    out = keras.layers.Dense(10)(y)
    model = keras.Model(inp, out)
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=jit)
    x = np.random.default_rng(4).normal(size=(32, 32, 32, 8)).astype(np.float32)
    t = np.random.default_rng(5).integers(0, 10, 32)
    return lambda: model.train_on_batch(x, t)


@workload("xla_keras_fit_step")
def _xla_keras() -> Workload:
    return ("Keras train step (Conv2D, GradientReversal, MedianPool2D 3x3, Dense), batch 32 of "
            "[32, 32, 8]", 32 * 32 * 32 * 8 * F32, [
        Variant("jit_compile=True", _keras_step(True), baseline=False),
        Variant("jit_compile=False", _keras_step(False)),
    ])


# --------------------------------------------------------------------------------------------
# Tape memory: what an eager GradientTape keeps alive over a realistic chain.

CHAIN_SHAPE = [4, 64, 64, 64]


def _chain(x: tf.Tensor, rois: tf.Tensor) -> tf.Tensor:
    # A detection-style head: gradient reversal (domain-adversarial branch), a binarised
    # activation, median denoising, RoI pooling, with ReLUs between (TensorFlow's tape keeps
    # only a ReLU's output). Intermediates die with this frame, so only the tape holds them.
    y = tf_ext.gradient_reversal(x, 0.1)
    y = tf.nn.relu(tf_ext.sign_ste(y * 1.5))
    y = tf.nn.relu(tf_ext.median_pool2d(y, [3, 3], [1, 1], "SAME"))
    pooled, _ = tf_ext.roi_pool(y, rois, 7, 7, spatial_scale=1.0)
    return tf.reduce_sum(tf.nn.relu(pooled))


def tape_memory() -> dict[str, Any]:
    x = tf.random.normal(CHAIN_SHAPE, seed=9)
    rois = tf.constant(_random_rois(256, CHAIN_SHAPE[0], CHAIN_SHAPE[1], CHAIN_SHAPE[2]))
    _chain(x, rois)  # warm up (kernels, gradient functions)
    results = []
    for _ in range(3):
        gc.collect()
        tf.config.experimental.reset_memory_stats("CPU:0")
        base = tf.config.experimental.get_memory_info("CPU:0")["current"]
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = _chain(x, rois)
        held = tf.config.experimental.get_memory_info("CPU:0")["current"] - base
        dx = tape.gradient(loss, x)
        peak = tf.config.experimental.get_memory_info("CPU:0")["peak"] - base
        del tape, dx, loss
        results.append((held, peak))
    held, peak = min(results)
    n = int(np.prod(CHAIN_SHAPE)) * F32
    return {"chain": "gradient_reversal -> *1.5 -> sign_ste -> relu -> median_pool2d 3x3 -> "
                     f"relu -> roi_pool 7x7 (256 ROIs) -> relu -> sum, x {CHAIN_SHAPE} float32",
            "x_mib": n / 2**20, "held_by_tape_mib": held / 2**20,
            "peak_fwd_bwd_mib": peak / 2**20}


# --------------------------------------------------------------------------------------------
# Report


def _selected() -> list[str]:
    if not ARGS.workloads:
        return list(WORKLOADS)
    wanted = [w.strip() for w in ARGS.workloads.split(",") if w.strip()]
    names = [n for n in WORKLOADS if any(n == w or n.startswith(w) for w in wanted)]
    unknown = [w for w in wanted if not any(n == w or n.startswith(w) for n in WORKLOADS)
               and w != "tape_memory"]
    if unknown:
        sys.exit(f"unknown workload(s): {', '.join(unknown)}; --list shows them")
    return names


def _ms(s: float) -> str:
    return f"{s * 1e3:.3f}" if s < 0.01 else f"{s * 1e3:.2f}"


def _simd_level() -> str:
    """The SIMD level tf_ext's CPU kernels dispatch to here (kernels/cpu_simd.h): the CPU's
    widest, capped by TF_EXT_CPU_ISA."""
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    levels = ["baseline"]
    if "avx2" in flags:
        levels.append("avx2")
        if {"avx512f", "avx512dq", "avx512bw", "avx512vl"} <= flags:
            levels.append("avx512")
    cap = os.environ.get("TF_EXT_CPU_ISA", "")
    if cap == "sse2":
        cap = "baseline"
    if cap in levels:
        levels = levels[:levels.index(cap) + 1]
    return levels[-1]


def main() -> int:
    if ARGS.list:
        print("\n".join(list(WORKLOADS) + ["tape_memory"]))
        return 0
    os.makedirs(ARGS.out, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for name in _selected():
        desc, nbytes, variants = WORKLOADS[name]()
        rounds = _time(variants, ARGS.reps)
        ours = variants[0]
        ours_med = statistics.median(ours.times)
        for v in variants:
            med, mn = statistics.median(v.times), min(v.times)
            rows.append({
                "workload": name, "description": desc, "variant": v.name,
                "is_tf_ext": not v.baseline, "min_ms": mn * 1e3, "median_ms": med * 1e3,
                # > 1: tf_ext is that many times faster than this baseline (medians).
                "speedup_vs_this": (med / ours_med) if v.baseline else 1.0,
                "bytes": nbytes, "gb_per_s": nbytes / med / 1e9, "rounds": rounds,
            })
            print(f"{name:30s} {v.name:42s} min {_ms(mn):>9s} ms  median {_ms(med):>9s} ms  "
                  f"{rows[-1]['gb_per_s']:7.2f} GB/s"
                  + (f"  tf_ext x{rows[-1]['speedup_vs_this']:.2f}" if v.baseline else ""),
                  flush=True)
        del variants
        gc.collect()
    memory = None
    if not ARGS.workloads or "tape_memory" in ARGS.workloads.split(","):
        memory = tape_memory()
        print(f"tape_memory: {memory['chain']}: held by the tape after the forward "
              f"{memory['held_by_tape_mib']:.1f} MiB, peak fwd+bwd {memory['peak_fwd_bwd_mib']:.1f} "
              f"MiB (x is {memory['x_mib']:.1f} MiB)", flush=True)

    meta = {"tag": ARGS.tag, "threads": ARGS.threads, "reps": ARGS.reps,
            "tensorflow": tf.__version__, "machine": platform.machine(),
            "cpus": os.cpu_count(), "time": time.strftime("%Y-%m-%d %H:%M:%S"),
            "library": tf_ext.library_path(), "simd": _simd_level()}
    checks = targets(rows)
    for c in checks:
        print(f"target {'PASS' if c['met'] else 'MISS'} {c['workload']:30s} {c['target']}: "
              f"need {c['need']}, got {c['got']}")
    with open(os.path.join(ARGS.out, "bench.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows, "targets": checks, "tape_memory": memory}, f,
                  indent=1)
    with open(os.path.join(ARGS.out, "bench.md"), "w") as f:
        f.write(markdown(rows, memory, meta))
    chart(rows, os.path.join(ARGS.out, "bench.png"), meta)
    print(f"wrote {ARGS.out}/bench.json, bench.md, bench.png")
    return 0


# Eager workloads of ops added after the targets were set (SmoothL1, docs/adding_an_op.md's worked
# example): in the tables, not judged against the eager target, which targets() otherwise applies
# to every eager_* workload (the README says where they stand). Their other workloads are in
# no target list.
UNJUDGED_EAGER = {"eager_smooth_l1"}


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The performance targets, judged on this run's medians (only workloads that ran)."""
    med: dict[tuple[str, str], float] = {(r["workload"], r["variant"]): r["median_ms"]
                                         for r in rows}
    ours = {r["workload"]: r["median_ms"] for r in rows if r["is_tf_ext"]}
    out: list[dict[str, Any]] = []

    def speedup(workload: str, variant: str, need: float, what: str) -> None:
        if workload in ours and (workload, variant) in med:
            got = med[(workload, variant)] / ours[workload]
            out.append({"target": what, "workload": workload, "baseline": variant,
                        "need": f">= {need:.2f}x", "got": f"{got:.2f}x", "met": got >= need})

    # The roofline proxy is the stock op that moves the same bytes: sign_ste and zero_out read x
    # and write a fresh output, as a copy does; gradient_reversal's forward shares x's buffer,
    # as tf.identity does (which in a graph moves no data at all).
    for w, proxy in (("sign_ste_fwd", "copy (DeepCopy)"), ("zero_out_fwd", "copy (DeepCopy)"),
                     ("gradient_reversal_fwd", "tf.identity")):
        speedup(w, proxy, 1 / 1.3, "elementwise forward within 1.3x of the roofline proxy")
    speedup("sign_ste_fwd_bwd", "clip+stop_gradient trick", 1.25, "sign_ste fwd+bwd vs the trick")
    speedup("median_pool3_fwd_bwd", "extract_patches+top_k", 20, "median 3x3 vs its composite")
    speedup("median_pool3_fwd_bwd", "max_pool2d 3x3", 0.2, "median 3x3 within 5x of max_pool2d")
    speedup("median_pool5_fwd_bwd", "extract_patches+top_k", 20, "median 5x5 vs its composite")
    for w in ("roi_pool_fwd_bwd", "roi_pool_det_1000", "roi_pool_det_2000"):
        speedup(w, "crop_and_resize 14x14+max_pool 2x2", 1.5, "roi_pool vs crop_and_resize")
    speedup("ps_roi_align_fwd_bwd", "crop_and_resize position-sensitive crop", 3,
            "ps_roi_align vs the crop-based formulation")
    for w in ("small_tape_sign_ste", "small_tape_gradient_reversal"):
        speedup(w, "tf.custom_gradient", 1.0, "small-tensor tape no slower than tf.custom_gradient")
    # XLA: compiled at most 1.0x the kernels' time for the elementwise ops fused with their
    # neighbours, 2x for pooling and ROI ops; a target met within the machine's 3% spread is
    # not met.
    for w in XLA_ELEMENTWISE:
        speedup(w, KERNELS_VARIANT, 1.03, "XLA at most 1.0x the kernels (beyond the 3% spread)")
    for w in ("xla_median_pool3", "xla_roi_pool", "xla_ps_roi_align"):
        speedup(w, KERNELS_VARIANT, 1.03 / 2, "XLA at most 2x the kernels (beyond the 3% spread)")
    speedup("xla_keras_fit_step", "jit_compile=False", 1.03 / 2,
            "fit step with jit_compile at most 2x without (median pooling)")
    for w in sorted(ours):
        if not w.startswith("eager_") or (w, STOCK_EAGER) not in med or w in UNJUDGED_EAGER:
            continue
        overhead = med[(w, STOCK_EAGER)] - med[(w, STOCK_FUNCTION)]
        allowed = 1.15 * med[(w, "tf.function")] + max(overhead, 0.0)
        out.append({"target": "eager tape within 1.15x of tf.function + TF's eager overhead "
                              "(a comparable stock op's eager - tf.function time)",
                    "workload": w, "baseline": "tf.function",
                    "need": f"<= {allowed:.2f} ms (1.15 x {med[(w, 'tf.function')]:.2f} + "
                            f"{max(overhead, 0.0):.2f})",
                    "got": f"{ours[w]:.2f} ms", "met": ours[w] <= allowed})
    return out


def markdown(rows: list[dict[str, Any]], memory: dict[str, Any] | None,
             meta: dict[str, Any]) -> str:
    out = [f"{meta['threads']} threads, {meta['reps']} or more interleaved reps (quick workloads: "
           f"about {QUICK_WORKLOAD_SECONDS} s of calls), TensorFlow "
           f"{meta['tensorflow']}, CPU kernels at SIMD level {meta.get('simd', '?')}; speedup = baseline median / tf_ext median (> 1: tf_ext "
           "faster).", "",
           "| workload | variant | min ms | median ms | GB/s | tf_ext speedup |",
           "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        speed = "" if r["is_tf_ext"] else f"{r['speedup_vs_this']:.2f}x"
        name = f"**{r['variant']}**" if r["is_tf_ext"] else r["variant"]
        out.append(f"| {r['workload']} | {name} | {_ms(r['min_ms'] / 1e3)} | "
                   f"{_ms(r['median_ms'] / 1e3)} | {r['gb_per_s']:.2f} | {speed} |")
    checks = targets(rows)
    if checks:
        out += ["", "Targets, on this run's medians:", "",
                "| target | workload | baseline | need | got | verdict |", "|---|---|---|---|---|---|"]
        out += [f"| {c['target']} | {c['workload']} | {c['baseline']} | {c['need']} | "
                f"{c['got']} | {'PASS' if c['met'] else '**MISS**'} |" for c in checks]
    if memory:
        out += ["", f"Tape memory ({memory['chain']}): held by the tape after the forward "
                f"{memory['held_by_tape_mib']:.1f} MiB, peak during fwd+bwd "
                f"{memory['peak_fwd_bwd_mib']:.1f} MiB (x alone: {memory['x_mib']:.1f} MiB)."]
    return "\n".join(out) + "\n"


def chart(rows: list[dict[str, Any]], path: str, meta: dict[str, Any]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = [r for r in rows if not r["is_tf_ext"]]
    if not bars:
        return
    labels = [f"{r['workload']}\nvs {r['variant']}" for r in bars]
    values = [r["speedup_vs_this"] for r in bars]
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(bars) + 1.2))
    y = np.arange(len(bars))
    ax.barh(y, values, color=["tab:green" if v >= 1 else "tab:red" for v in values])
    ax.set_yticks(y, labels, fontsize=6)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("tf_ext speedup over baseline (median time ratio, log scale; > 1 = faster)")
    ax.set_title(f"tf_ext vs stock TensorFlow, {meta['threads']} threads, "
                 f"TF {meta['tensorflow']}", fontsize=9)
    for yi, v in zip(y, values):
        ax.text(v, yi, f" {v:.2f}x", va="center", fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
