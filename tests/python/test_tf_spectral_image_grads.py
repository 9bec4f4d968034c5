"""tf_ext's C++ gradients of TensorFlow's spectral and image ops (tf_ext/grads/tf/
spectral_grad.cc, image_grad.cc) against Python's gradients of the same op on the same inputs.

The C++ gradient runs alone: a SymbolicGradient node whose function is the op with the node's
attrs, in a tf.compat.v1 Session (`compare` of test_tf_nn_math_grads.py). Python's is
tf.gradients of the same node. Numeric Jacobian checks (complex inputs included, and input
lengths other than fft_length, where Python's own gradient fails):
tests/tf_spectral_image_grads_test.cc.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2

import tf_ext
from test_tf_nn_math_grads import cgrid, compare, grid

REAL = [(np.float32, np.complex64), (np.float64, np.complex128)]
CTOL = {np.complex64: 2e-5, np.complex128: 1e-12}
RTOL = {np.float32: 2e-5, np.float64: 1e-12}


def cpp_gradient(build, dys):
    """The C++ gradient of the node `build` returns, for incoming gradients `dys`."""
    with tf.Graph().as_default():
        tf_ext.library()
        out = build()
        op = out.op
        f = attr_value_pb2.NameAttrList(name=op.type)
        for k, v in op.node_def.attr.items():
            f.attr[k].CopyFrom(v)
        grads = tf.raw_ops.SymbolicGradient(input=list(op.inputs) + dys,
                                            Tout=[t.dtype for t in op.inputs], f=f)
        with tf.compat.v1.Session() as sess:
            return sess.run(grads)


# ------------------------------------------------------------------------------------------
# Spectral ops.

@pytest.mark.parametrize("op,shape", [("FFT", (3, 8)), ("IFFT", (2, 7)), ("FFT2D", (2, 4, 5)),
                                      ("IFFT2D", (3, 6)), ("FFT3D", (2, 3, 4)),
                                      ("IFFT3D", (1, 2, 3, 4))])
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_fft(op, shape, dtype):
    x = cgrid(shape, dtype, seed=1)
    compare(lambda: getattr(tf.raw_ops, op)(input=x), CTOL[dtype])


@pytest.mark.parametrize("op,shape,n", [("RFFT", (3, 8), [8]), ("RFFT", (2, 7), [7]),
                                        ("RFFT2D", (2, 4, 6), [4, 6]),
                                        ("RFFT2D", (3, 5), [3, 5])])
@pytest.mark.parametrize("real,cplx", REAL)
def test_real_fft(op, shape, n, real, cplx):
    x = grid(shape, real, seed=2)
    compare(lambda: getattr(tf.raw_ops, op)(input=x, fft_length=np.array(n, np.int32),
                                            Tcomplex=cplx), RTOL[real])


@pytest.mark.parametrize("op,shape,n", [("IRFFT", (3, 5), [8]), ("IRFFT", (2, 4), [7]),
                                        ("IRFFT2D", (2, 4, 4), [4, 6]),
                                        ("IRFFT2D", (3, 3), [3, 5])])
@pytest.mark.parametrize("real,cplx", REAL)
def test_inverse_real_fft(op, shape, n, real, cplx):
    y = cgrid(shape, cplx, seed=3)
    compare(lambda: getattr(tf.raw_ops, op)(input=y, fft_length=np.array(n, np.int32),
                                            Treal=real), RTOL[real])


@pytest.mark.parametrize("op", ["FFT", "IFFT2D", "RFFT", "IRFFT2D", "RFFT3D", "IRFFT3D"])
def test_spectral_empty_batch(op):
    """An empty batch: an empty gradient of the input's shape, no error."""
    rank = 1 if op in ("FFT", "RFFT") else 2 if op.endswith("2D") else 3
    inner = (4,) * rank
    if op.startswith("I") and "RFFT" in op:
        x = np.zeros((0,) + inner[:-1] + (3,), np.complex64)
        build = lambda: getattr(tf.raw_ops, op)(input=x, fft_length=np.array(inner, np.int32))
    elif "RFFT" in op:
        x = np.zeros((0,) + inner, np.float32)
        build = lambda: getattr(tf.raw_ops, op)(input=x, fft_length=np.array(inner, np.int32))
    else:
        x = np.zeros((0,) + inner, np.complex64)
        build = lambda: getattr(tf.raw_ops, op)(input=x)
    with tf.Graph().as_default():
        out_shape = build().shape
    dy_dtype = np.float32 if op.startswith("IRFFT") else np.complex64
    grads = cpp_gradient(build, [np.zeros(out_shape, dy_dtype)])
    assert grads[0].shape == x.shape and grads[0].dtype == x.dtype


# ------------------------------------------------------------------------------------------
# Image ops.

@pytest.mark.parametrize("ksizes,strides,rates,padding,shape", [
    ([1, 3, 3, 1], [1, 2, 2, 1], [1, 1, 1, 1], "SAME", (2, 5, 5, 2)),
    ([1, 2, 3, 1], [1, 1, 2, 1], [1, 2, 1, 1], "VALID", (1, 5, 6, 3)),
    ([1, 2, 2, 1], [1, 3, 3, 1], [1, 1, 1, 1], "SAME", (1, 4, 4, 1)),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_extract_image_patches(ksizes, strides, rates, padding, shape, dtype):
    x = grid(shape, dtype, seed=4)
    compare(lambda: tf.raw_ops.ExtractImagePatches(images=x, ksizes=ksizes, strides=strides,
                                                   rates=rates, padding=padding), RTOL[dtype])


@pytest.mark.parametrize("ksizes,strides,padding,shape", [
    ([1, 2, 2, 2, 1], [1, 2, 1, 2, 1], "SAME", (1, 3, 3, 4, 2)),
    ([1, 2, 3, 1, 1], [1, 1, 2, 1, 1], "VALID", (2, 3, 4, 2, 1)),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_extract_volume_patches(ksizes, strides, padding, shape, dtype):
    x = grid(shape, dtype, seed=5)
    compare(lambda: tf.raw_ops.ExtractVolumePatches(input=x, ksizes=ksizes, strides=strides,
                                                    padding=padding), RTOL[dtype])


def test_patches_empty_batch():
    """An empty batch: an empty gradient of the input's shape (Python's own gradient fails
    there: its reshape cannot infer a dimension of an empty tensor)."""
    x = np.zeros((0, 4, 4, 2), np.float32)
    build = lambda: tf.raw_ops.ExtractImagePatches(images=x, ksizes=[1, 2, 2, 1],
                                                   strides=[1, 1, 1, 1], rates=[1, 1, 1, 1],
                                                   padding="SAME")
    (dx,) = cpp_gradient(build, [np.zeros((0, 4, 4, 8), np.float32)])
    assert dx.shape == x.shape and dx.dtype == x.dtype
    v = np.zeros((2, 2, 2, 2, 0), np.float64)  # no channels
    build = lambda: tf.raw_ops.ExtractVolumePatches(input=v, ksizes=[1, 2, 2, 2, 1],
                                                    strides=[1, 1, 1, 1, 1], padding="VALID")
    (dv,) = cpp_gradient(build, [np.zeros((2, 1, 1, 1, 0), np.float64)])
    assert dv.shape == v.shape and dv.dtype == v.dtype


ROTATE = [np.cos(0.3), -np.sin(0.3), 1.0, np.sin(0.3), np.cos(0.3), -0.5, 0.01, -0.02]


@pytest.mark.parametrize("version", ["V2", "V3"])
@pytest.mark.parametrize("interpolation", ["NEAREST", "BILINEAR"])
@pytest.mark.parametrize("fill_mode", ["CONSTANT", "REFLECT", "WRAP", "NEAREST"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_image_projective_transform(version, interpolation, fill_mode, dtype):
    """A rotation with a projective part (a general warp, whose Python gradient is the inverse
    warp), per-image transforms, an output size other than the input's."""
    x = grid((2, 5, 6, 2), dtype, seed=6)
    transforms = np.array([ROTATE, [1.1, 0.2, -0.7, -0.1, 0.9, 0.4, 0.0, 0.0]], np.float32)
    kw = dict(images=x, transforms=transforms, output_shape=np.array([4, 7], np.int32),
              interpolation=interpolation, fill_mode=fill_mode)
    if version == "V3":
        kw["fill_value"] = np.float32(0.25)
    compare(lambda: getattr(tf.raw_ops, "ImageProjectiveTransform" + version)(**kw), RTOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rgb_to_hsv(dtype):
    """Random colours, plus Python's conventions: ties between channels (grey, two equal
    largest / smallest channels), zeros (black, a zero channel)."""
    rng = np.random.default_rng(7)
    colours = list(rng.uniform(0.05, 1.0, (20, 3)))
    colours += [[0.5, 0.5, 0.5], [0.7, 0.7, 0.2], [0.2, 0.7, 0.7], [0.7, 0.2, 0.7],
                [0.3, 0.3, 0.8], [0.8, 0.3, 0.3], [0.0, 0.0, 0.0], [0.0, 0.4, 0.9],
                [0.6, 0.0, 0.0], [1.0, 1.0, 0.0]]
    x = np.array(colours, dtype).reshape(5, 6, 3)
    compare(lambda: tf.raw_ops.RGBToHSV(images=x), 5e-5 if dtype == np.float32 else 1e-11)


def test_image_ops_empty_inputs():
    """No pixels / no images: empty gradients of the inputs' shapes, as Python's."""
    compare(lambda: tf.raw_ops.RGBToHSV(images=np.zeros((0, 3), np.float32)), 0, min_nonzero=0)
    compare(lambda: tf.raw_ops.ImageProjectiveTransformV3(
        images=np.zeros((0, 4, 5, 2), np.float32), transforms=np.zeros((0, 8), np.float32),
        output_shape=np.array([3, 3], np.int32), fill_value=np.float32(0.0),
        interpolation="BILINEAR", fill_mode="CONSTANT"), 0, min_nonzero=0)
