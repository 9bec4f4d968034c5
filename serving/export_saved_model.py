"""Exports a small SavedModel built from tf_ext ops, for C++ serving (tf_ext_serve).

    python serving/export_saved_model.py OUT_DIR [--expected expected.json]

The model, a tf.Module with a weight vector w, has two signatures taking x: float32 [B, 4]:
  forward:  y = zero_out(x * w, preserve_index=1)             -> {"y"}
  gradient: loss = sum(y^2) and its gradients by GradientTape -> {"loss", "d_x", "d_w"}
"gradient" is a GradientTape inside a tf.function: the exported graph holds the bridged C++
gradient as a function call, so C++ serving runs the C++ gradient with no Python at all.
--expected writes Python's outputs for EXAMPLE_INPUT, to compare C++ serving against.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import tensorflow as tf

import tf_ext

EXAMPLE_INPUT = np.array([[1.0, -2.0, 3.0, 0.5], [4.0, 5.0, -6.0, 7.0]], np.float32)


class ZeroOutModel(tf.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = tf.Variable([0.5, 2.0, -1.5, 3.0], dtype=tf.float32, name="w")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def forward(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"y": tf_ext.zero_out(x * self.w, preserve_index=1)}

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def gradient(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf_ext.zero_out(x * self.w, preserve_index=1)
            loss = tf.reduce_sum(y * y)
        d_x, d_w = tape.gradient(loss, [x, self.w])
        return {"loss": loss, "d_x": d_x, "d_w": d_w}


def export(out_dir: str) -> ZeroOutModel:
    model = ZeroOutModel()
    tf.saved_model.save(model, out_dir, signatures={
        "forward": model.forward, "gradient": model.gradient})
    return model


def expected_outputs(model: ZeroOutModel, x: np.ndarray) -> dict[str, dict[str, list]]:
    """signature -> output -> {"shape", "values"} (flat), as Python computes them."""
    result = {}
    for name in ("forward", "gradient"):
        outputs = getattr(model, name)(tf.constant(x))
        result[name] = {k: {"shape": list(v.shape), "values": v.numpy().ravel().tolist()}
                        for k, v in outputs.items()}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--expected", help="write Python's outputs for EXAMPLE_INPUT here")
    args = parser.parse_args()
    model = export(args.out_dir)
    if args.expected:
        with open(args.expected, "w", encoding="utf-8") as f:
            json.dump({"input": {"shape": list(EXAMPLE_INPUT.shape),
                                 "values": EXAMPLE_INPUT.ravel().tolist()},
                       "outputs": expected_outputs(model, EXAMPLE_INPUT)}, f, indent=1)


if __name__ == "__main__":
    main()
