"""tf_ext's ops under XLA (tf.function(jit_compile=True)) against their CPU kernels.

Every op and dtype on seeded configurations (ties, NaN, infinities, signed zeros, denormals,
empty tensors, ROIs outside the image): selections and elementwise results bitwise equal to
the kernels, sums (the ROI gradients, PsRoiAlign) within the GPU kernels' tolerance of them;
gradients (GradientTape and tf.gradients inside the compiled function, second order where the
kernels have one); what a compiled kernel does with the values the kernels reject; static
errors at compile time with the kernels' messages; the optimized HLO free of dots,
convolutions and floating-point scatters; the kernels registered for every XLA backend, also
when the library loads after XLA's registry has run; Keras's fit with jit_compile.

TF_EXT_XLA_SWEEP sets the seeded configurations per op and dtype (2 in `make test`;
`make xla-sweep` runs 30, and every PsRoiAlign sampling ratio up to 3).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import kernels as tf_kernels  # the registry's kernel list

import tf_ext

SWEEP = int(os.environ.get("TF_EXT_XLA_SWEEP", "2"))
FLOATS = [np.float16, np.float32, np.float64]
LIB = tf_ext.library()
# The GPU kernels' tolerance of the CPU ones for sums (tests/gpu/gpu_harness.cu).
TOLERANCE = {np.float16: (2e-3, 2e-3), np.float32: (1e-4, 1e-5), np.float64: (1e-10, 1e-12)}


def jit(f):
    return tf.function(f, jit_compile=True, autograph=False)


def run_both(f, *args):
    """f(*args) by the kernels (eagerly) and compiled by XLA, as lists of numpy arrays."""
    tensors = [tf.constant(a) for a in args]
    want = [t.numpy() for t in tf.nest.flatten(f(*tensors))]
    got = [t.numpy() for t in tf.nest.flatten(jit(f)(*tensors))]
    return want, got


def assert_same_bits(got, want, what=""):
    assert got.dtype == want.dtype and got.shape == want.shape, what
    g, w = got.view(np.uint8), want.view(np.uint8)
    if not np.array_equal(g, w):
        diff = np.flatnonzero((got.reshape(-1).view(np.uint8).reshape(got.size, -1) !=
                               want.reshape(-1).view(np.uint8).reshape(want.size, -1)).any(1))
        k = diff[0]
        pytest.fail(f"{what}: {diff.size} of {got.size} elements differ in their bits; first at "
                    f"{np.unravel_index(k, got.shape)}: XLA {got.reshape(-1)[k]!r}, kernel "
                    f"{want.reshape(-1)[k]!r}")


def assert_close(got, want, dtype, what=""):
    rtol, atol = TOLERANCE[np.dtype(dtype).type]
    assert got.shape == want.shape, what
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol,
                               atol=atol, err_msg=what)


def special_values(rng, shape, dtype, spread=2.0):
    """Random values with ties, +-0, NaN, +-inf and (float, double) denormals mixed in."""
    x = (rng.integers(-4, 5, size=shape) * 0.25 * spread).astype(np.float64)
    x = np.where(rng.random(shape) < 0.5, rng.uniform(-spread, spread, shape), x)
    specials = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1e-310 if dtype == np.float64
                         else 1e-40, -1e-40 if dtype != np.float64 else -1e-310], np.float64)
    pick = rng.random(shape) < 0.12
    x[pick] = specials[rng.integers(0, specials.size, size=int(pick.sum()))]
    with np.errstate(over="ignore"):
        return x.astype(dtype)


def seeds(name):
    return [(name, s) for s in range(SWEEP)]


# --- elementwise ops -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", seeds("elementwise"))
def test_elementwise_ops_match_their_kernels_bitwise(dtype, case):
    rng = np.random.default_rng(case[1])
    shape = tuple(rng.integers(1, 9, size=rng.integers(1, 4)))
    x = special_values(rng, shape, dtype)
    dy = special_values(rng, shape, dtype)
    delta = float(rng.choice([1.0, 0.7, 3e-3, 5.5]))
    clip = float(rng.choice([1.0, 0.3, 0.0, 1e5]))
    cases = {
        "smooth_l1": (lambda a: tf_ext.smooth_l1(a, delta=delta), [x]),
        "sign_ste": (lambda a: tf_ext.sign_ste(a, clip=clip), [x]),
        "sign_ste_grad": (lambda g, a: tf_ext.sign_ste_grad(g, a, clip=clip), [dy, x]),
        "gradient_reversal": (lambda a: tf_ext.gradient_reversal(a, scale=0.5), [x]),
    }
    for name, (f, args) in cases.items():
        want, got = run_both(f, *args)
        assert_same_bits(got[0], want[0], f"{name} delta={delta} clip={clip} {shape}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("case", seeds("zero_out"))
def test_zero_out_matches_its_kernel_bitwise(dtype, case):
    rng = np.random.default_rng(case[1])
    shape = tuple(rng.integers(1, 7, size=rng.integers(1, 4)))
    x = (special_values(rng, shape, np.float64) if dtype != np.int32
         else rng.integers(-9, 9, size=shape)).astype(dtype)
    index = int(rng.integers(0, x.size))
    want, got = run_both(lambda a: tf_ext.zero_out(a, preserve_index=index), x)
    assert_same_bits(got[0], want[0], f"zero_out {shape} index {index}")


# --- MedianPool2D --------------------------------------------------------------------------

MEDIAN_CONFIGS = [
    # (ksize, strides, padding): the common windows, borders, even windows, windows larger
    # than the image (clipped), and one beyond the comparator network (sorted instead).
    ([3, 3], [1, 1], "SAME"), ([3, 3], [2, 2], "VALID"), ([2, 2], [1, 1], "SAME"),
    ([5, 5], [1, 1], "SAME"), ([1, 3], [1, 2], "SAME"), ([3, 2], [2, 1], "VALID"),
    ([9, 4], [3, 2], "SAME"), ([8, 8], [1, 1], "SAME"),
]


def median_case(rng, dtype):
    ksize, strides, padding = MEDIAN_CONFIGS[rng.integers(0, len(MEDIAN_CONFIGS))]
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 10)), int(rng.integers(1, 10)),
             int(rng.integers(1, 4)))
    return special_values(rng, shape, dtype), ksize, strides, padding


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("config", range(len(MEDIAN_CONFIGS)))
def test_median_pool_and_its_gradient_match_the_kernels_bitwise(dtype, config):
    rng = np.random.default_rng(100 + config)
    ksize, strides, padding = MEDIAN_CONFIGS[config]
    for _ in range(max(1, SWEEP // 2)):
        shape = (2, int(rng.integers(1, 10)), int(rng.integers(1, 10)), int(rng.integers(1, 4)))
        x = special_values(rng, shape, dtype)
        f = lambda a: tf_ext.median_pool2d(a, ksize, strides, padding)  # noqa: E731
        want, got = run_both(f, x)
        what = f"median_pool2d {ksize} {strides} {padding} {shape}"
        assert_same_bits(got[0], want[0], what)
        dy = special_values(rng, want[0].shape, dtype)
        dy[~np.isfinite(dy)] = 1  # finite terms: the sums are compared bit for bit
        g = lambda a, d: LIB.tf_ext_median_pool2d_grad(a, d, ksize, strides, padding)  # noqa
        want, got = run_both(g, x, dy)
        assert_same_bits(got[0], want[0], what + " grad")


def test_median_pool_of_empty_tensors_compiles():
    for shape, ksize, padding in [((0, 4, 4, 2), [3, 3], "SAME"), ((1, 2, 2, 0), [3, 3], "SAME"),
                                  ((1, 2, 2, 1), [3, 3], "VALID")]:
        x = np.zeros(shape, np.float32)
        want, got = run_both(lambda a: tf_ext.median_pool2d(a, ksize, [1, 1], padding), x)
        assert_same_bits(got[0], want[0], f"{shape} {padding}")


# --- RoiPool and PsRoiAlign ------------------------------------------------------------------


def random_rois(rng, num_rois, num_images, height, width):
    """Mostly inside, some partly or wholly outside, some reversed (degenerate)."""
    rois = np.zeros((num_rois, 5), np.float32)
    rois[:, 0] = rng.integers(0, num_images, num_rois)
    rois[:, [1, 3]] = rng.uniform(-0.4, 1.4, (num_rois, 2)) * width
    rois[:, [2, 4]] = rng.uniform(-0.4, 1.4, (num_rois, 2)) * height
    return rois


def roi_case(rng, dtype, channel_groups=1):
    n, h, w = int(rng.integers(1, 3)), int(rng.integers(1, 9)), int(rng.integers(1, 9))
    ph, pw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    c = channel_groups * ph * pw if channel_groups > 1 else int(rng.integers(1, 4))
    data = special_values(rng, (n, h, w, c), dtype)
    rois = random_rois(rng, int(rng.integers(0, 7)), n, h, w)
    scale = float(rng.choice([1.0, 0.5, 0.8]))
    return data, rois, ph, pw, scale


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", seeds("roi_pool"))
def test_roi_pool_matches_its_kernel_bitwise_and_its_gradient_closely(dtype, case):
    rng = np.random.default_rng(200 + case[1])
    for _ in range(3):
        data, rois, ph, pw, scale = roi_case(rng, dtype)
        f = lambda d, r: tf_ext.roi_pool(d, r, ph, pw, scale)  # noqa: E731
        want, got = run_both(f, data, rois)
        what = f"roi_pool {data.shape} {rois.shape[0]} ROIs {ph}x{pw} scale {scale}"
        assert_same_bits(got[0], want[0], what + " pooled")
        assert_same_bits(got[1], want[1], what + " argmax")
        dp = special_values(rng, want[0].shape, dtype)
        dp[~np.isfinite(dp)] = 0.5
        g = lambda d, r, a, p: LIB.tf_ext_roi_pool_grad(d, r, a, p, ph, pw, scale)  # noqa
        want_g, got_g = run_both(g, data, rois, want[1], dp)
        assert_close(got_g[0], want_g[0], dtype, what + " grad")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", seeds("ps_roi_align"))
def test_ps_roi_align_and_its_gradient_match_the_kernels_closely(dtype, case):
    rng = np.random.default_rng(300 + case[1])
    for sampling_ratio in ((0, 2) if SWEEP <= 2 else (0, 1, 2, 3)):
        data, rois, ph, pw, scale = roi_case(rng, dtype, channel_groups=2)
        data[~np.isfinite(data)] = 0.25  # sums: finite inputs
        f = lambda d, r: tf_ext.ps_roi_align(d, r, ph, pw, scale, sampling_ratio)  # noqa: E731
        want, got = run_both(f, data, rois)
        what = f"ps_roi_align {data.shape} {rois.shape[0]} ROIs {ph}x{pw} sr {sampling_ratio}"
        assert_close(got[0], want[0], dtype, what)
        do = rng.uniform(-1, 1, want[0].shape).astype(dtype)
        g = lambda d, r, o: LIB.tf_ext_ps_roi_align_grad(d, r, o, ph, pw, scale, sampling_ratio)
        want_g, got_g = run_both(g, data, rois, do)
        assert_close(got_g[0], want_g[0], dtype, what + " grad")


def test_roi_ops_on_empty_inputs_compile():
    data = np.ones((2, 4, 4, 4), np.float32)
    for rois in (np.zeros((0, 5), np.float32), np.array([[0, 0, 0, 3, 3]], np.float32)):
        for d in (data, np.ones((2, 4, 0, 4), np.float32)):
            want, got = run_both(lambda a, r: tf_ext.roi_pool(a, r, 2, 2), d, rois)
            assert_same_bits(got[0], want[0])
            assert_same_bits(got[1], want[1])
            want, got = run_both(lambda a, r: tf_ext.ps_roi_align(a, r, 2, 2), d, rois)
            assert_close(got[0], want[0], np.float32)


# --- what a compiled kernel cannot check ------------------------------------------------------

BAD_ROWS = np.array([[2, 0, 0, 3, 3],        # batch index N
                     [-1, 0, 0, 3, 3],       # negative
                     [0.5, 0, 0, 3, 3],      # not an integer
                     [np.nan, 0, 0, 3, 3],
                     [0, np.nan, 0, 3, 3],   # a coordinate not finite
                     [1, 0, np.inf, 3, 3]], np.float32)


def mixed_rois(rng):
    good = random_rois(rng, 5, 2, 6, 7)
    rows = np.concatenate([good, BAD_ROWS])
    order = rng.permutation(rows.shape[0])
    return rows[order], order < good.shape[0]  # rows, which are good


def test_rows_the_kernels_reject_give_empty_bins_and_add_nothing():
    rng = np.random.default_rng(7)
    data = rng.normal(size=(2, 6, 7, 3)).astype(np.float32)
    rois, good = mixed_rois(rng)
    with pytest.raises(tf.errors.InvalidArgumentError, match="TfExt>RoiPool"):
        tf_ext.roi_pool(data, rois, 2, 3)  # the kernel rejects them
    pooled, argmax = jit(lambda d, r: tf_ext.roi_pool(d, r, 2, 3))(data, rois)
    want_pooled, want_argmax = tf_ext.roi_pool(data, rois[good], 2, 3)
    assert_same_bits(pooled.numpy()[good], want_pooled.numpy())
    assert_same_bits(argmax.numpy()[good], want_argmax.numpy())
    assert np.all(pooled.numpy()[~good] == 0) and np.all(argmax.numpy()[~good] == -1)
    dp = rng.normal(size=pooled.shape).astype(np.float32)
    bad_argmax = argmax.numpy().copy()
    bad_argmax[np.flatnonzero(good)[0], :, :, 0] = 6 * 7 + 5  # outside [0, H * W): nothing
    got = jit(lambda *a: LIB.tf_ext_roi_pool_grad(*a, 2, 3, 1.0))(data, rois, bad_argmax, dp)
    sanitized = np.where((bad_argmax >= 0) & (bad_argmax < 42), bad_argmax, -1)[good]
    want = LIB.tf_ext_roi_pool_grad(data, rois[good], sanitized, dp[good], 2, 3, 1.0)
    assert_close(got.numpy(), want.numpy(), np.float32)
    features = rng.normal(size=(2, 6, 7, 8)).astype(np.float32)
    out = jit(lambda f, r: tf_ext.ps_roi_align(f, r, 2, 2))(features, rois).numpy()
    assert_close(out[good], tf_ext.ps_roi_align(features, rois[good], 2, 2).numpy(), np.float32)
    assert np.all(out[~good] == 0)
    do = rng.normal(size=out.shape).astype(np.float32)
    got = jit(lambda *a: LIB.tf_ext_ps_roi_align_grad(*a, 2, 2, 1.0, 2))(features, rois, do)
    want = LIB.tf_ext_ps_roi_align_grad(features, rois[good], do[good], 2, 2, 1.0, 2)
    assert_close(got.numpy(), want.numpy(), np.float32)


def test_static_errors_fail_the_compile_with_the_kernels_message():
    # Shapes unknown when traced, known when compiled: the XLA kernel's own check fires.
    spec = tf.TensorSpec([None, None], tf.float32)
    f = tf.function(lambda a: tf_ext.zero_out(a, preserve_index=10), jit_compile=True,
                    input_signature=[spec])
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"TfExt>ZeroOut: preserve_index 10 must be < the number of elem"):
        f(tf.zeros([2, 3]))
    g = tf.function(lambda a: tf_ext.median_pool2d(a, [3, 3], [1, 1], "SAME"), jit_compile=True,
                    input_signature=[tf.TensorSpec(None, tf.float32)])
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"TfExt>MedianPool2D: x must have rank 4 \(NHWC\)"):
        g(tf.zeros([4, 4, 1]))
    h = tf.function(lambda d, r: tf_ext.roi_pool(d, r, 2, 2)[0], jit_compile=True,
                    input_signature=[tf.TensorSpec([1, 4, 4, 1]), tf.TensorSpec([None, None])])
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"TfExt>RoiPool: rois must have shape \[num_rois, 5\]"):
        h(tf.zeros([1, 4, 4, 1]), tf.zeros([2, 4]))
    with pytest.raises(ValueError, match="TfExt>SmoothL1: delta must be finite and > 0"):
        jit(lambda a: tf_ext.smooth_l1(a, delta=-1.0))(tf.zeros([2]))


# --- gradients compiled with their forward ----------------------------------------------------


def grad_cases(rng, dtype):
    """(name, f(x) -> y, x): one per differentiable op; x away from kinks and ties."""
    x4 = rng.permutation(2 * 6 * 7 * 4).reshape(2, 6, 7, 4).astype(dtype) * 0.01 - 1.6
    rois = random_rois(rng, 4, 2, 6, 7)
    zero_out = [] if dtype == np.float16 else [  # ZeroOut takes float, double and int32
        ("zero_out", lambda a: tf_ext.zero_out(a, preserve_index=5) * 3.0, x4)]
    return zero_out + [
        ("smooth_l1", lambda a: tf_ext.smooth_l1(a, delta=0.7), x4),
        ("sign_ste", lambda a: tf_ext.sign_ste(a, clip=1.0) * a, x4),
        ("gradient_reversal", lambda a: tf_ext.gradient_reversal(a, scale=0.5) * a, x4),
        ("median_pool2d", lambda a: tf_ext.median_pool2d(a, [3, 3], [1, 1], "SAME"), x4),
        ("roi_pool", lambda a: tf_ext.roi_pool(a, rois, 2, 2)[0], x4),
        ("ps_roi_align", lambda a: tf_ext.ps_roi_align(a, rois, 2, 2, 1.0, 2), x4),
    ]


def tape_gradient(f):
    def tape(a, d):
        with tf.GradientTape() as t:
            t.watch(a)
            y = f(a)
        return t.gradient(y, a, output_gradients=d)
    return tape


def graph_gradient(f):
    def graph(a, d):
        return tf.gradients(f(a), a, grad_ys=d)[0]
    return graph


BACKWARD_OPS = {
    "sign_ste": ["TfExt>SignSTE", "TfExt>SignSTEGrad"],
    "median_pool2d": ["TfExt>MedianPool2D", "TfExt>MedianPool2DGrad"],
    "roi_pool": ["TfExt>RoiPool", "TfExt>RoiPoolGrad"],
    "ps_roi_align": ["TfExt>PsRoiAlign", "TfExt>PsRoiAlignGrad"],
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gradients_compile_in_one_cluster_with_their_forward(dtype):
    rng = np.random.default_rng(11)
    for name, f, x in grad_cases(rng, dtype):
        dy = rng.uniform(-1, 1, f(tf.constant(x)).shape).astype(dtype)
        tape, graph = tape_gradient(f), graph_gradient(f)
        want = tape(tf.constant(x), tf.constant(dy)).numpy()
        for how in (tape, graph):
            got = jit(how)(tf.constant(x), tf.constant(dy)).numpy()
            if name in ("roi_pool", "ps_roi_align"):
                assert_close(got, want, dtype, f"{name} {how.__name__}")
            else:
                assert_same_bits(got, want, f"{name} {how.__name__}")
        # One module holds the forward and its dedicated backward op.
        hlo = jit(tape).experimental_get_compiler_ir(tf.constant(x), tf.constant(dy))()
        for op in BACKWARD_OPS.get(name, ()):
            assert f'op_type="{op}"' in hlo, (name, op)


@pytest.mark.parametrize("name", ["zero_out", "smooth_l1", "sign_ste", "gradient_reversal"])
def test_second_order_gradients_compile(name):
    rng = np.random.default_rng(12)
    f, x = {n: (g, a) for n, g, a in grad_cases(rng, np.float64)}[name]
    v = rng.uniform(-1, 1, x.shape)

    def hvp(a, w):
        with tf.GradientTape() as outer:
            outer.watch(a)
            with tf.GradientTape() as inner:
                inner.watch(a)
                s = tf.reduce_sum(f(a) * f(a))
            g = inner.gradient(s, a)
        return outer.gradient(g, a, output_gradients=w)

    want = hvp(tf.constant(x), tf.constant(v)).numpy()
    got = jit(hvp)(tf.constant(x), tf.constant(v)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


# --- the HLO -----------------------------------------------------------------------------------

SCATTER = re.compile(r"= \(?(\w+)\[[^\n=]*? scatter\(")


def forbidden_instructions(hlo: str, integer_scatters: bool = False) -> list[str]:
    """dot, convolution and scatter instructions of an optimized HLO module; with
    integer_scatters, scatters of integers are allowed (exact sums and maxima, whatever order a
    backend applies them in), not those of floating-point values."""
    found = [line.strip()[:120] for line in hlo.splitlines()
             if re.search(r" (dot|convolution)\(", line)]
    for line in hlo.splitlines():
        m = SCATTER.search(line)
        if m and (not integer_scatters or m.group(1) in ("f16", "bf16", "f32", "f64")):
            found.append(line.strip()[:120])
    return found


def test_the_hlo_check_finds_what_it_is_meant_to():
    a = tf.ones([4, 4])
    assert forbidden_instructions(jit(lambda x: x @ x).experimental_get_compiler_ir(a)(
        stage="optimized_hlo"))
    upd = jit(lambda x: tf.tensor_scatter_nd_add(x, [[0], [0]], [[1.0] * 4, [2.0] * 4]))
    assert forbidden_instructions(upd.experimental_get_compiler_ir(a)(stage="optimized_hlo"),
                                  integer_scatters=True)
    ints = jit(lambda x: tf.tensor_scatter_nd_max(x, [[0], [0]], [[1] * 4, [2] * 4]))
    hlo = ints.experimental_get_compiler_ir(tf.ones([4, 4], tf.int32))(stage="optimized_hlo")
    assert forbidden_instructions(hlo) and not forbidden_instructions(hlo, integer_scatters=True)
    assert not forbidden_instructions(jit(lambda x: x + 1).experimental_get_compiler_ir(a)(
        stage="optimized_hlo"))


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_no_dot_convolution_or_float_scatter_in_any_kernel(dtype):
    """The design: no dot or convolution anywhere; scatters only in the ROI gradients
    (ExactScatterSum's integer maxima and sums)."""
    rng = np.random.default_rng(13)
    for name, f, x in grad_cases(rng, dtype):
        dy = tf.ones_like(f(tf.constant(x)))
        hlo = jit(tape_gradient(f)).experimental_get_compiler_ir(tf.constant(x), dy)(
            stage="optimized_hlo")
        roi = name in ("roi_pool", "ps_roi_align")
        assert forbidden_instructions(hlo, integer_scatters=roi) == [], name
        assert (" scatter(" in hlo) == roi, name


# --- registration -------------------------------------------------------------------------------


def jit_backends() -> dict[str, set[int]]:
    """XLA's backends (their compilation devices) and the types each takes, from the kernels of
    Identity, which XLA registers for every type."""
    out: dict[str, set[int]] = {}
    for k in tf_kernels.get_registered_kernels_for_op("Identity").kernel:
        if k.device_type.endswith("_JIT"):
            out[k.device_type] = {t for c in k.constraint for t in c.allowed_values.list.type}
    return out


def test_every_op_declares_its_xla_kernel_and_has_it_on_every_backend():
    assert tf_ext.xla_status() == ""
    backends = jit_backends()
    assert "XLA_CPU_JIT" in backends
    lines = []
    for facts in tf_ext.declared_ops():
        op = facts["op"]
        registered = {}
        for k in tf_kernels.get_registered_kernels_for_op(op).kernel:
            if k.device_type.endswith("_JIT"):
                registered[k.device_type] = {t for c in k.constraint
                                             for t in c.allowed_values.list.type}
        if not facts["xla"]:
            assert facts["xla_note"], f"{op} declares neither .Xla() nor .NoXla(why)"
            assert registered == {}, op
            continue
        assert set(registered) == set(backends), op
        allowed = set(op_def_types(op))
        for backend, types in registered.items():
            assert types == allowed & backends[backend], (op, backend)
            lines.append(f"{op} {backend}: {sorted(tf.dtypes.as_dtype(t).name for t in types)}")
    assert [f["op"] for f in tf_ext.declared_ops() if not f["xla"]] == ["TfExt>GradientFunctionDef"]
    print("\n".join(lines))


def op_def_types(op: str) -> list[int]:
    from tensorflow.python.framework import op_def_registry  # the OpDef's type list
    op_def = op_def_registry.get(op)
    return [t for a in op_def.attr if a.type == "type" for t in a.allowed_values.list.type]


def run_python(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=300)


def test_a_library_loaded_after_xla_registered_its_kernels_still_compiles():
    # TensorFlow registers every XLA backend's kernels once, at the first function it
    # instantiates: here before tf_ext loads.
    r = run_python("""
        import numpy as np, tensorflow as tf
        from tensorflow.python.framework import kernels
        tf.function(lambda x: x * 2, jit_compile=True)(tf.constant(1.0))
        assert any(k.device_type == "XLA_CPU_JIT"
                   for k in kernels.get_registered_kernels_for_op("Identity").kernel)
        import tf_ext
        x = tf.constant(np.linspace(-2, 2, 24, dtype=np.float32).reshape(1, 4, 6, 1))
        f = lambda a: tf_ext.median_pool2d(a, [3, 3], [1, 1], "SAME")
        got = tf.function(f, jit_compile=True)(x).numpy()
        assert np.array_equal(got, f(x).numpy())
        devices = {k.device_type for k in kernels.get_registered_kernels_for_op(
            "TfExt>MedianPool2D").kernel}
        assert "XLA_CPU_JIT" in devices, devices
        print("late load: ok")
        """)
    assert r.returncode == 0 and "late load: ok" in r.stdout, r.stderr[-3000:]


def test_loading_from_two_threads_and_twice_never_aborts(tmp_path):
    second = tmp_path / "second_copy.so"
    r = run_python(f"""
        import ctypes, shutil, threading, tensorflow as tf, tf_ext
        errors, go = [], threading.Barrier(4)
        def first_use():
            try:
                go.wait()
                tf_ext.library()  # the first load, and its registrations, race here
                lib = ctypes.CDLL(tf_ext.library_path())
                m = ctypes.create_string_buffer(1000)
                assert lib.TfExtRegisterXlaKernels(m, 1000) == 0, m.value
            except Exception as e:  # noqa: BLE001
                errors.append(e)
        threads = [threading.Thread(target=first_use) for _ in range(4)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert not errors, errors
        assert tf_ext.xla_status() == ""
        shutil.copy(tf_ext.library_path(), "{second}")
        try:
            tf.load_op_library("{second}")
            raise AssertionError("a second copy loaded")
        except tf.errors.OpError as e:
            assert "second" in str(e) or "copy" in str(e), e
        y = tf.function(lambda a: tf_ext.sign_ste(a), jit_compile=True)(tf.constant([-1.0]))
        assert y.numpy()[0] == -1.0
        print("threads: ok")
        """)
    assert r.returncode == 0 and "threads: ok" in r.stdout, r.stderr[-3000:]


# --- Keras ---------------------------------------------------------------------------------------


def keras_history(jit_compile, gpu_listed=False):
    import keras
    keras.utils.set_random_seed(3)
    rng = np.random.default_rng(3)
    images = rng.normal(size=(32, 8, 8, 2)).astype(np.float32)
    rois = np.stack([np.arange(32) % 8, np.zeros(32), np.zeros(32), rng.integers(3, 8, 32),
                     rng.integers(3, 8, 32)], 1).astype(np.float32)
    labels = rng.integers(0, 3, 32)
    image_in = keras.Input((8, 8, 2))
    roi_in = keras.Input((5,))
    y = tf_ext.layers.MedianPool2D(3, strides=1, padding="same")(image_in)
    y = tf_ext.layers.GradientReversal(0.5)(y)
    y = tf_ext.layers.RoiPool(2)([y, roi_in])
    y = keras.layers.Flatten()(y)
    out = keras.layers.Dense(3, activation="softmax")(y)
    model = keras.Model([image_in, roi_in], out)
    original = tf.config.list_physical_devices
    if gpu_listed:  # what Keras reads to resolve "auto": as on a machine with a GPU
        fake = tf.config.PhysicalDevice(name="/physical_device:GPU:0", device_type="GPU")
        tf.config.list_physical_devices = lambda *a: original(*a) + [fake]
    try:
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy",
                      jit_compile=jit_compile)
    finally:
        tf.config.list_physical_devices = original
    history = model.fit([images, rois], labels, batch_size=8, epochs=3, shuffle=False, verbose=0)
    return model.jit_compile, history.history["loss"]


def test_keras_fit_with_xla_trains_as_without():
    import tf_ext.layers  # noqa: F401
    jit_off, plain = keras_history(False)
    jit_on, compiled = keras_history(True)
    auto, resolved = keras_history("auto", gpu_listed=True)
    assert (jit_off, jit_on, auto) == (False, True, True)
    np.testing.assert_allclose(compiled, plain, rtol=1e-5)
    np.testing.assert_allclose(resolved, plain, rtol=1e-5)
    assert plain[-1] < plain[0]


def test_layers_report_supports_jit_from_the_registration(monkeypatch):
    import tf_ext.layers
    assert tf_ext.layers.MedianPool2D(3).supports_jit
    monkeypatch.setattr(tf_ext._bridge, "_xla_error", "registration failed")
    layer = tf_ext.layers.MedianPool2D(3)
    assert not layer.supports_jit and tf_ext.xla_status() == "registration failed"
