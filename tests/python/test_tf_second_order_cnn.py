"""Second derivatives computed in C++ (tf_ext_grad, no Python gradient involved) for a small CNN
with Conv2D, BiasAdd, FusedBatchNormV3 in training mode, Relu and MaxPool, against Python's
nested GradientTape:

- a Hessian-vector product: tf_ext_grad differentiates the loss (--dump_backward keeps the
  forward + backward graph it ran), the objective <d loss / d params, v> is added to that graph
  as two plain ops, and tf_ext_grad differentiates it again with respect to the params;
- a gradient penalty: tf_ext_grad differentiates D with respect to the input x, ||dD/dx||^2 is
  added, and tf_ext_grad differentiates that with respect to D's weights.

The second pass differentiates the first pass's gradient ops (Conv2DBackpropFilter,
Conv2DBackpropInput, BiasAddGrad, FusedBatchNormGradV3, ReluGrad, MaxPoolGrad, ...): the
gradients tf_ext adds in tf_ext/grads/tf/nn_grad.cc and math_grad.cc.
"""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import text_format

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.path.join(RUNFILES, "tf_ext") if RUNFILES else os.getcwd()
# Outside Bazel: TF_EXT_GRAD=bazel-bin/tf_ext/tf_ext_grad.
TOOL = os.environ.get("TF_EXT_GRAD", os.path.join(WORKSPACE, "tf_ext", "tf_ext_grad"))
LIBRARY = os.environ.get("TF_EXT_LIBRARY", os.path.join(WORKSPACE, "tf_ext", "_tf_ext_ops.so"))

PARAMS = ("w1", "b1", "scale", "offset", "w2")


def model(x, w1, b1, scale, offset, w2):
    """Conv2D 3x3 SAME + BiasAdd -> FusedBatchNormV3 (batch statistics) -> Relu -> MaxPool 2x2
    -> MatMul: [2, 4, 4, 2] -> [2, 1]."""
    h = tf.nn.conv2d(x, w1, strides=1, padding="SAME")
    h = tf.nn.bias_add(h, b1)
    empty = tf.constant([], tf.float32)
    h = tf.raw_ops.FusedBatchNormV3(x=h, scale=scale, offset=offset, mean=empty, variance=empty,
                                    epsilon=1e-3, is_training=True)[0]
    h = tf.nn.relu(h)
    h = tf.nn.max_pool2d(h, 2, 2, "VALID")
    h = tf.reshape(h, [2, -1])
    return tf.matmul(h, w2)


def values(seed: int):
    rng = np.random.default_rng(seed)
    params = {
        "w1": rng.normal(size=(3, 3, 2, 4)) * 0.5,
        "b1": rng.normal(size=4) * 0.1,
        "scale": rng.uniform(0.5, 1.5, size=4),
        "offset": rng.normal(size=4) * 0.1,
        "w2": rng.normal(size=(16, 1)) * 0.5,
    }
    params = {k: v.astype(np.float32) for k, v in params.items()}
    x = rng.normal(size=(2, 4, 4, 2)).astype(np.float32)
    vs = {k: rng.normal(size=v.shape).astype(np.float32) for k, v in params.items()}
    return params, x, vs


def tf_ext_grad(*args) -> None:
    r = subprocess.run([TOOL, "--library=" + LIBRARY] + list(args), capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]


def first_pass(tmp, graph_def, y: str, xs: list[str]):
    """tf_ext_grad's d sum(y) / d xs; returns its forward + backward graph and the names of the
    gradient tensors in it (one per x, in order)."""
    fwd = os.path.join(tmp, "fwd.pb")
    bwd = os.path.join(tmp, "bwd.pbtxt")
    with open(fwd, "wb") as f:
        f.write(graph_def.SerializeToString())
    tf_ext_grad("--graph=" + fwd, "--y=" + y, "--x=" + ",".join(xs), "--dump_backward=" + bwd)
    backward = text_format.Parse(open(bwd).read(), tf.compat.v1.GraphDef())
    dxs = [n.name + ":0" for n in backward.node if n.name.startswith("tf_ext_grad/dx")]
    assert len(dxs) == len(xs), dxs
    return backward, dxs


def second_pass(tmp, graph_def, y: str, xs: list[str]) -> dict[str, np.ndarray]:
    """tf_ext_grad's d sum(y) / d xs on graph_def, keyed by x without its scope."""
    path = os.path.join(tmp, "second.pb")
    out = os.path.join(tmp, "second.npz")
    with open(path, "wb") as f:
        f.write(graph_def.SerializeToString())
    tf_ext_grad("--graph=" + path, "--y=" + y, "--x=" + ",".join(xs), "--save=" + out)
    saved = np.load(out)
    return {x.split("/")[-1]: saved["d_" + x.replace("/", "_")] for x in xs}


def forward_graph(params, x, output: str):
    """The model as a GraphDef of constants named after the params; `output`: "loss"
    (sum(out^2)) or "d" (sum(out))."""
    with tf.Graph().as_default() as g:
        ps = {k: tf.constant(v, name=k) for k, v in params.items()}
        out = model(tf.constant(x, name="x"), **ps)
        if output == "loss":
            tf.reduce_sum(tf.square(out), name="loss")
        else:
            tf.reduce_sum(out, name="d")
    return g.as_graph_def()


def assert_close(got: dict, want: dict) -> None:
    """float32: |got - want| <= 2e-4 max|want| over the whole vector (every param). The bias
    before the batch norm has a zero exact gradient (and HVP): both sides give rounding noise."""
    scale = max(float(np.max(np.abs(w))) for w in want.values())
    assert scale > 0.1
    for k in want:
        w = np.asarray(want[k], np.float64)
        g = np.asarray(got[k], np.float64).reshape(w.shape)
        np.testing.assert_allclose(g, w, rtol=0, atol=2e-4 * scale, err_msg=k)


@pytest.mark.parametrize("seed", [0, 1])
def test_hessian_vector_product(tmp_path, seed):
    params, x, vs = values(seed)
    backward, dxs = first_pass(str(tmp_path), forward_graph(params, x, "loss"), "loss",
                               list(PARAMS))
    # The second pass differentiates these backward ops.
    ops = {n.op for n in backward.node}
    assert {"Conv2DBackpropFilter", "BiasAddGrad", "FusedBatchNormGradV3", "ReluGrad",
            "MaxPoolGrad"} <= ops, ops
    with tf.Graph().as_default() as g:
        # Under a scope: the second pass adds its own tf_ext_grad/... nodes.
        tf.import_graph_def(backward, name="first")
        grads = [g.get_tensor_by_name("first/" + t) for t in dxs]
        for p, dp in zip(PARAMS, grads):
            assert dp.shape.as_list() == list(params[p].shape), (p, dp.shape)
        # <d loss / d params, v>
        tf.add_n([tf.reduce_sum(dp * tf.constant(vs[p])) for p, dp in zip(PARAMS, grads)],
                 name="hvp_objective")
    got = second_pass(str(tmp_path), g.as_graph_def(), "hvp_objective",
                      ["first/" + p for p in PARAMS])

    ps = {k: tf.Variable(v) for k, v in params.items()}
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            loss = tf.reduce_sum(tf.square(model(tf.constant(x), **ps)))
        grads = inner.gradient(loss, [ps[p] for p in PARAMS])
        objective = tf.add_n([tf.reduce_sum(gp * vs[p]) for p, gp in zip(PARAMS, grads)])
    want = dict(zip(PARAMS, [h.numpy() for h in outer.gradient(objective,
                                                               [ps[p] for p in PARAMS])]))
    assert_close(got, want)


@pytest.mark.parametrize("seed", [0, 1])
def test_gradient_penalty(tmp_path, seed):
    """d ||dD/dx||^2 / d params, D = sum(model(x))."""
    params, x, _ = values(seed)
    backward, (dx,) = first_pass(str(tmp_path), forward_graph(params, x, "d"), "d", ["x"])
    with tf.Graph().as_default() as g:
        tf.import_graph_def(backward, name="first")
        tf.reduce_sum(tf.square(g.get_tensor_by_name("first/" + dx)), name="penalty")
    got = second_pass(str(tmp_path), g.as_graph_def(), "penalty", ["first/" + p for p in PARAMS])

    ps = {k: tf.Variable(v) for k, v in params.items()}
    xt = tf.constant(x)
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            inner.watch(xt)
            d = tf.reduce_sum(model(xt, **ps))
        penalty = tf.reduce_sum(tf.square(inner.gradient(d, xt)))
    want = dict(zip(PARAMS, [h.numpy() for h in outer.gradient(penalty,
                                                               [ps[p] for p in PARAMS])]))
    assert_close(got, want)
