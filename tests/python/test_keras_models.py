"""Real models through the C++ gradient path: Keras models built with weights=None at small
sizes, frozen to GraphDefs, differentiated by tf_ext_grad (a C++ process with no Python) and
compared with TensorFlow's Python gradient of the same frozen function.

The models cover what breaks C++ gradients in practice: padding and depthwise convolutions
(client-only gradients in TensorFlow), BatchNorm in training mode with dropout and
tf.custom_gradient (IdentityN), StatefulPartitionedCall nodes, grouped convolutions and
negative reduction axes (ConvNeXt), Einsum/Erfc attention (a Transformer encoder block), a
while loop (LSTM, lowered to v1 frames by the default freeze), and keras-hub's Mixtral (sparse
mixture-of-experts routing: TopKV2, OneHot, gathers by expert; keras-hub is installed without
its dependencies, requirements-nodeps.txt). `make models` runs every image model in
tf.keras.applications.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.path.join(RUNFILES, "tf_ext") if RUNFILES else os.getcwd()
FREEZE = os.path.join(WORKSPACE, "scripts", "freeze_keras_model.py")
TOOL = os.path.join(WORKSPACE, "tf_ext", "tf_ext_grad")
LIBRARY = os.path.join(WORKSPACE, "tf_ext", "_tf_ext_ops.so")

# (model, size, training): small inputs so CI stays fast.
MODELS = [
    ("MobileNetV2", 32, False),       # Pad, DepthwiseConv2dNative, Relu6
    ("EfficientNetB0", 32, True),     # + BatchNorm batch statistics, dropout, IdentityN (swish)
    ("DenseNet121", 32, True),        # ConcatV2, AvgPool, Pad, BatchNorm training
    ("ConvNeXtTiny", 32, False),      # StatefulPartitionedCall, grouped Conv2D, Erfc, axis=-1
    ("TransformerEncoder", 16, True),  # Einsum, Softmax, LayerNorm, gelu (Erfc)
]


@pytest.fixture(scope="module")
def freeze(tmp_path_factory):
    """freeze(model, size, training, *extra) -> (directory, info): each model frozen once per
    test process; the tests that use the same one share it and write only to their tmp_path."""
    frozen = {}

    def run(model, size, training, *extra):
        key = (model, size, training) + extra
        if key not in frozen:
            out = str(tmp_path_factory.mktemp(model))
            cmd = [sys.executable, FREEZE, model, "--out=" + out, "--size=%d" % size]
            cmd += list(extra) + (["--training"] if training else [])
            r = subprocess.run(cmd, capture_output=True, text=True)
            assert r.returncode == 0, r.stderr[-3000:]
            frozen[key] = out, json.load(open(os.path.join(out, "info.json")))
        return frozen[key]
    return run


def tf_ext_grad(*args):
    return subprocess.run([TOOL, "--library=" + LIBRARY] + list(args), capture_output=True,
                          text=True)


@pytest.mark.parametrize("model,size,training", MODELS,
                         ids=["%s-%s" % (m, "training" if t else "inference") for m, _, t in MODELS])
def test_frozen_model_gradient_matches_python(freeze, tmp_path, model, size, training):
    out, info = freeze(model, size, training)
    grad = str(tmp_path / "grad.npz")
    r = tf_ext_grad("--graph=" + os.path.join(out, "model.pb"), "--y=y", "--x=x",
                    "--feed=x=@" + os.path.join(out, "input.npy"), "--save=" + grad)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Error parsing text-format" not in r.stderr
    got = np.load(grad)
    ref = np.load(os.path.join(out, "expected.npz"))
    assert got["d_x"].shape == ref["dy_dx"].shape == tuple(info["input_shape"])
    assert got["d_x"].dtype == np.float32
    np.testing.assert_allclose(got["y"], ref["y"], rtol=1e-4)
    scale = np.abs(ref["dy_dx"]).max()
    assert scale > 0
    rel = np.abs(got["d_x"] - ref["dy_dx"]).max() / scale
    assert rel <= 1e-3, "%s: max relative error %.3g" % (model, rel)
    if model == "ConvNeXtTiny":
        # The workarounds this model needs actually ran.
        assert "function calls inlined" in r.stdout, r.stdout
        assert "grouped Conv2D as DepthwiseConv2dNative" in r.stdout, r.stdout
        # Its LayerNormalization's Mean over axis -1 is differentiated by tf_ext's override of
        # Mean's gradient (docs/registries.md): no rewrite of the forward graph.
        assert "negative reduction axes" not in r.stdout, r.stdout


def test_frozen_model_random_projection_check_and_optimize_flag(freeze, tmp_path):
    # --check stays bounded on a model with 6144 inputs: random projections, PASS.
    out, _ = freeze("MobileNetV2", 32, False)
    r = tf_ext_grad("--graph=" + os.path.join(out, "model.pb"), "--y=y", "--x=x", "--check",
                    "--seed=3")
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert "feeding 'x' random values (--seed=3" in r.stdout
    assert "16 random projections per x over 256 elements" in r.stdout
    assert ": PASS" in r.stdout
    # Without TensorFlow's graph optimizations (--optimize=false; on by default) the gradient is
    # the same function's, and the tool reports its peak memory either way.
    ref = np.load(os.path.join(out, "expected.npz"))["dy_dx"]
    for flags in ([], ["--optimize=false"]):
        grad = str(tmp_path / ("grad_%d.npz" % len(flags)))
        r = tf_ext_grad("--graph=" + os.path.join(out, "model.pb"), "--y=y", "--x=x",
                        "--feed=x=@" + os.path.join(out, "input.npy"), "--save=" + grad, *flags)
        assert r.returncode == 0, r.stderr[-3000:]
        assert "peak resident memory: " in r.stdout, r.stdout
        rel = np.abs(np.load(grad)["d_x"] - ref).max() / np.abs(ref).max()
        assert rel <= 1e-3, (flags, rel)


def test_lstm_while_loop_gradient_matches_python(freeze, tmp_path):
    # The default freeze lowers the loop to v1 frames (Enter/Exit/Switch/Merge/NextIteration),
    # which tf_ext converts back to a While and differentiates (docs/control_flow.md). Python
    # cannot differentiate the imported loop: the reference is its gradient of the eager call.
    out, info = freeze("LSTM", 6, False, "--eager_reference")
    assert {"Enter", "Exit", "NextIteration"} <= set(info["op_types"]), info["op_types"]
    grad = str(tmp_path / "grad.npz")
    r = tf_ext_grad("--graph=" + os.path.join(out, "model.pb"), "--y=y", "--x=x",
                    "--feed=x=@" + os.path.join(out, "input.npy"), "--save=" + grad)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "1 loop " in r.stdout, r.stdout
    got = np.load(grad)
    ref = np.load(os.path.join(out, "expected.npz"))
    np.testing.assert_allclose(got["y"], ref["y"], rtol=1e-4)
    rel = np.abs(got["d_x"] - ref["dy_dx"]).max() / np.abs(ref["dy_dx"]).max()
    assert rel <= 1e-4, rel


def test_mixtral_backbone_gradient_every_pipeline_matches_python(freeze, tmp_path):
    # keras-hub's MixtralBackbone (two decoder layers of four experts, top-2 routing) on float
    # embeddings. Its router's TopKV2 gradient reads Size(Shape(input)): the default pipeline
    # (each op's gradient inlined, static shapes made constants) once failed at run time there
    # ("indices = -1 is not in [0, 2)") while --symbolic_gradients ran. Every pipeline now gives
    # Python's gradient of the same frozen function.
    out, info = freeze("MixtralBackbone", 8, False)
    assert "TopKV2" in info["op_types"], info["op_types"]
    ref = np.load(os.path.join(out, "expected.npz"))
    scale = np.abs(ref["dy_dx"]).max()
    assert scale > 0
    for flags in ([], ["--symbolic_gradients"], ["--optimize=false"]):
        grad = str(tmp_path / ("grad_%s.npz" % "".join(flags).strip("-")))
        r = tf_ext_grad("--graph=" + os.path.join(out, "model.pb"), "--y=y", "--x=x",
                        "--feed=x=@" + os.path.join(out, "input.npy"), "--save=" + grad, *flags)
        assert r.returncode == 0, (flags, r.stderr[-3000:])
        got = np.load(grad)
        np.testing.assert_allclose(got["y"], ref["y"], rtol=1e-5)
        rel = np.abs(got["d_x"] - ref["dy_dx"]).max() / scale
        assert rel <= 1e-4, "%s: max relative error %.3g" % (flags, rel)
