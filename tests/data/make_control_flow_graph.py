"""Writes tests/data/control_flow_graph.pb (binary GraphDef), the graph c_gradients_test.c differentiates:
a functional StatelessWhile and a StatelessIf (frozen with lower_control_flow=False), float64.

    x: [3] float64 placeholder
    h = x; repeat 3 times: h = h * x * 0.5 + sin(h)            (StatelessWhile)
    z = sum(h * h) if sum(h) > 0 else sum(exp(h))                (StatelessIf)
    y = z (output node "y"); also "h" (the loop's output, read by the If)

    .venv/bin/python tests/data/make_control_flow_graph.py
"""
import os

import tensorflow as tf
from tensorflow.python.framework import convert_to_constants


@tf.function(input_signature=[tf.TensorSpec([3], tf.float64, name="x")])
def f(x):
    (h,) = tf.while_loop(lambda h: tf.constant(True), lambda h: [h * x * 0.5 + tf.sin(h)], [x],
                         maximum_iterations=3)
    h = tf.identity(h, name="h")
    z = tf.cond(tf.reduce_sum(h) > 0, lambda: tf.reduce_sum(h * h),
                lambda: tf.reduce_sum(tf.exp(h)))
    return {"y": z}


def main():
    frozen = convert_to_constants.convert_variables_to_constants_v2(f.get_concrete_function(),
                                                                     lower_control_flow=False)
    graph_def = frozen.graph.as_graph_def()
    out = frozen.outputs[0].name.split(":")[0]
    for n in graph_def.node:
        if n.name == out:
            n.name = "y"
    ops = {n.op for n in graph_def.node}
    assert {"StatelessWhile", "StatelessIf"} <= ops, ops
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "control_flow_graph.pb")
    with open(path, "wb") as fh:
        fh.write(graph_def.SerializeToString())


if __name__ == "__main__":
    main()
