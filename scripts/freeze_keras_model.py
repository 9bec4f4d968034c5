#!/usr/bin/env python3
"""Freezes a model to a GraphDef that tf_ext_grad can differentiate, with its reference gradients.

    freeze_keras_model.py MODEL --out=DIR [--size=S] [--batch=B] [--training] [--seed=N]

MODEL is a tf.keras.applications name (e.g. MobileNetV2, ResNet50, ConvNeXtTiny) built with
weights=None (nothing is downloaded), `TransformerEncoder` (a Keras MultiHeadAttention
encoder block), `BertBaseEncoder` (12 such blocks at BERT-base size), `LSTM` (a recurrent
model: its frozen graph keeps a while loop) or `MixtralBackbone` (keras-hub's sparse mixture of
experts at a tiny size; keras-hub comes from requirements-nodeps.txt). The frozen function is

    y = sum(model(x, training) * r)          r: a fixed random [batch, classes] projection

(a random projection, because the sum of a softmax is constant). In training mode BatchNorm
uses batch statistics; the model is called through `stateless_call`, so the moving-average
updates become unused outputs instead of variable assignments that freezing cannot keep.

DIR receives:
  model.pb      the frozen GraphDef (binary): placeholder `x`, scalar output node `y`
  input.npy     the input x (random normal, seeded)
  expected.npz  TensorFlow's Python gradient of the same function: the frozen GraphDef imported
                into a wrapped function and differentiated with tf.gradients (Python's
                gradient registry): dy_dx and y. (Not an eager call of the Keras model: in
                training mode its dropout draws fresh random masks on every call, while the
                frozen graph has one seed baked in.) keras_y is the eager model's y, equal to
                y for deterministic models.
  info.json     node names, op types, sizes and timings
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

# Models up to this many parameters get their reference gradient in the freezing process.
IN_PROCESS_REFERENCE_PARAMS = 50_000_000


def GreedyDecoder(dim, vocab, steps):
    """A Keras model whose call decodes `steps` tokens greedily in a tf.while_loop: each step
    embeds the previous argmax token into a fixed buffer, runs causal self-attention over the
    buffer and cross-attention to the memory (the model's input), and adds that step's logits
    to the output. Layers are built before the loop (no variables are created inside it)."""
    import keras
    import tensorflow as tf

    class Decoder(keras.Model):
        def __init__(self):
            super().__init__()
            self.embed = keras.layers.Embedding(vocab, dim)
            self.self_att = keras.layers.MultiHeadAttention(num_heads=2, key_dim=dim // 2)
            self.cross_att = keras.layers.MultiHeadAttention(num_heads=2, key_dim=dim // 2)
            self.norm1 = keras.layers.LayerNormalization()
            self.norm2 = keras.layers.LayerNormalization()
            self.ff = keras.layers.Dense(dim, activation="gelu")
            self.head = keras.layers.Dense(vocab)

        def build(self, input_shape):
            buf = keras.ops.zeros((1, steps, dim))
            mem = keras.ops.zeros((1,) + tuple(input_shape[1:]))
            self.embed.build((None,))
            self.self_att(buf, buf)
            self.cross_att(buf, mem)
            self.norm1.build(buf.shape)
            self.norm2.build(buf.shape)
            self.ff.build(buf.shape)
            self.head.build((None, dim))

        def call(self, memory, training=False):
            batch = tf.shape(memory)[0]
            positions = tf.range(steps)

            def body(t, token, buf, total):
                put = tf.cast(tf.equal(positions, t), memory.dtype)[None, :, None]
                buf = buf * (1.0 - put) + self.embed(token)[:, None, :] * put
                causal = positions[None, :] <= tf.minimum(positions[:, None], t)
                h = self.norm1(buf + self.self_att(buf, buf, attention_mask=causal[None],
                                                   training=training))
                h = self.norm2(h + self.cross_att(h, memory, training=training))
                h = h + self.ff(h)
                logits = self.head(tf.gather(h, t, axis=1))
                token = tf.argmax(logits, axis=-1, output_type=tf.int32)
                return t + 1, token, buf, total + logits

            _, _, _, total = tf.while_loop(
                lambda t, *_: t < steps, body,
                [tf.constant(0), tf.zeros([batch], tf.int32),
                 tf.zeros([batch, steps, dim], memory.dtype), tf.zeros([batch, vocab], memory.dtype)])
            return total

    model = Decoder()
    model.build((None, 8, dim))
    return model


def build_model(name, size, classes):
    import keras
    import tensorflow as tf

    if name == "TransformerEncoder":
        # A Transformer encoder block: MHA + residual + LayerNorm + GELU MLP + residual +
        # LayerNorm, then mean-pool and a dense head. Input [batch, tokens, features].
        seq, dim = size, 32
        inp = keras.Input((seq, dim))
        att = keras.layers.MultiHeadAttention(num_heads=4, key_dim=8)(inp, inp)
        h = keras.layers.LayerNormalization()(inp + att)
        mlp = keras.layers.Dense(64, activation="gelu")(h)
        mlp = keras.layers.Dense(dim)(mlp)
        h = keras.layers.LayerNormalization()(h + mlp)
        out = keras.layers.Dense(classes)(keras.layers.GlobalAveragePooling1D()(h))
        return keras.Model(inp, out), (seq, dim)
    if name == "BertBaseEncoder":
        # BERT-base-sized (12 layers, hidden 768, 12 heads, feed-forward 3072) on float
        # embeddings of `size` tokens: make bench-models' transformer row.
        seq, dim = size, 768
        inp = keras.Input((seq, dim))
        h = inp
        for _ in range(12):
            att = keras.layers.MultiHeadAttention(num_heads=12, key_dim=64)(h, h)
            h = keras.layers.LayerNormalization()(h + att)
            mlp = keras.layers.Dense(3072, activation="gelu")(h)
            h = keras.layers.LayerNormalization()(h + keras.layers.Dense(dim)(mlp))
        out = keras.layers.Dense(classes)(keras.layers.GlobalAveragePooling1D()(h))
        return keras.Model(inp, out), (seq, dim)
    if name in ("GRU", "SimpleRNN", "BidirectionalLSTM"):
        # Recurrent models (`size` steps of 8 features): stacked GRU, SimpleRNN read backwards,
        # a masked stacked Bidirectional LSTM. Their loops are while loops in the frozen graph.
        seq, dim = size, 8
        inp = keras.Input((seq, dim))
        if name == "GRU":
            h = keras.layers.GRU(16, return_sequences=True)(inp)
            h = keras.layers.GRU(16)(h)
        elif name == "SimpleRNN":
            h = keras.layers.SimpleRNN(16, go_backwards=True)(inp)
        else:
            h = keras.layers.Masking(0.0)(inp)
            h = keras.layers.Bidirectional(keras.layers.LSTM(8, return_sequences=True))(h)
            h = keras.layers.LSTM(8)(h)
        out = keras.layers.Dense(classes)(h)
        return keras.Model(inp, out), (seq, dim)
    if name == "ConvLSTM2D":
        # 4 frames of size x size x 3 through a ConvLSTM2D (a while loop of convolutions).
        inp = keras.Input((4, size, size, 3))
        h = keras.layers.ConvLSTM2D(8, 3, padding="same")(inp)
        out = keras.layers.Dense(classes)(keras.layers.GlobalAveragePooling2D()(h))
        return keras.Model(inp, out), (4, size, size, 3)
    if name == "TransformerDecoderGreedy":
        # A Transformer decoder block that decodes `size` tokens greedily in a tf.while_loop
        # (the argmax token fed back), attending to the input as encoder memory [tokens, 32].
        return GreedyDecoder(dim=32, vocab=classes, steps=size), (8, 32)
    if name == "MixtralBackbone":
        # keras-hub's Mixtral (sparse mixture of experts: top-k routing, gathers by expert) at a
        # tiny size, on float embeddings of `size` tokens: its decoder layers and final norm.
        import keras_hub
        backbone = keras_hub.models.MixtralBackbone(
            vocabulary_size=64, num_layers=2, num_query_heads=4, num_key_value_heads=2,
            hidden_dim=32, intermediate_dim=64, num_experts=4, top_k=2)
        seq, dim = size, 32
        inp = keras.Input((seq, dim))
        h = inp
        for layer in backbone.transformer_layers:
            h = layer(h)
        h = backbone.layer_norm(h)
        out = keras.layers.Dense(classes)(keras.layers.GlobalAveragePooling1D()(h))
        return keras.Model(inp, out), (seq, dim)
    if name == "LSTM128":
        # make bench-models' recurrent rows: LSTM(128) over `size` steps of 32 features.
        seq, dim = size, 32
        inp = keras.Input((seq, dim))
        out = keras.layers.Dense(classes)(keras.layers.LSTM(128)(inp))
        return keras.Model(inp, out), (seq, dim)
    if name == "LSTM":
        # A recurrent model: its frozen graph keeps a while loop (tf_ext_grad rejects loops).
        seq, dim = size, 8
        inp = keras.Input((seq, dim))
        out = keras.layers.Dense(classes)(keras.layers.LSTM(16)(inp))
        return keras.Model(inp, out), (seq, dim)
    ctor = getattr(tf.keras.applications, name)
    kwargs = dict(weights=None, input_shape=(size, size, 3), classes=classes)
    try:
        model = ctor(classifier_activation=None, **kwargs)
    except TypeError:  # applications without the argument
        model = ctor(**kwargs)
    return model, (size, size, 3)


def inline_function_calls(graph_def):
    """graph_def with every function call (PartitionedCall, StatefulPartitionedCall, calls of
    library functions by name) replaced by the function's body, recursively. Python's
    tf.gradients would otherwise differentiate a call through SymbolicGradient, which needs
    the C++ registries this script checks tf_ext against (and fails in TF2 runtimes)."""
    from tensorflow.core.framework import graph_pb2
    from tensorflow.python.framework import function_def_to_graph

    lib = {f.signature.name: f for f in graph_def.library.function}

    def is_call(n):
        return n.op in ("PartitionedCall", "StatefulPartitionedCall") or n.op in lib

    for _ in range(100):
        if not any(is_call(n) for n in graph_def.node):
            return graph_def
        out = graph_pb2.GraphDef()
        out.versions.CopyFrom(graph_def.versions)
        out.library.CopyFrom(graph_def.library)
        rename = {}   # "caller:i" -> tensor that replaces it
        control = {}  # caller -> nodes a control dependency on it now waits for
        kept = []
        for n in graph_def.node:
            if not is_call(n):
                kept.append(out.node.add())
                kept[-1].CopyFrom(n)
                continue
            fdef = lib[n.attr["f"].func.name if n.op.endswith("PartitionedCall") else n.op]
            body, nested_to_flat = function_def_to_graph.function_def_to_graph_def(fdef)
            data_inputs = [i for i in n.input if not i.startswith("^")]
            args = {a.name: data_inputs[k] for k, a in enumerate(fdef.signature.input_arg)}
            prefix = n.name + "/"

            def mapped(t):
                node = t.split(":")[0]
                return args[node] if node in args else prefix + t

            for b in body.node:
                if b.name in args:
                    continue  # the argument placeholders: replaced by the call's inputs
                nb = out.node.add()
                nb.CopyFrom(b)
                nb.name = prefix + b.name
                nb.device = ""
                del nb.input[:]
                for i in b.input:
                    if i.startswith("^"):
                        nb.input.append("^" + mapped(i[1:]).split(":")[0].lstrip("^"))
                    else:
                        nb.input.append(mapped(i))
            outs = []
            for k, arg in enumerate(fdef.signature.output_arg):
                ret = fdef.ret[arg.name]
                t = mapped(nested_to_flat.get(ret, ret))
                rename["%s:%d" % (n.name, k)] = t
                outs.append(t.split(":")[0])
            rename[n.name] = rename.get(n.name + ":0", n.name)
            control[n.name] = outs
        for nb in out.node:
            inputs = list(nb.input)
            del nb.input[:]
            for i in inputs:
                if i.startswith("^"):
                    for dep in control.get(i[1:], [i[1:]]):
                        nb.input.append("^" + dep)
                else:
                    nb.input.append(rename.get(i, i))
        graph_def = out
    raise ValueError("function calls nested over 100 deep")


def reference_gradient(graph_def, in_name, x_val, copy=True):
    """TensorFlow's Python gradient of the frozen graph: (y, dy/dx) as numpy arrays.
    copy=False lets it modify graph_def (saves a copy of the constants)."""
    import tensorflow as tf

    # IdentityN nodes made by tf.custom_gradient (Keras' swish) name a Python gradient closure
    # of the original trace (_gradient_op_type), unusable outside it: drop it, so Python uses
    # IdentityN's stock pass-through gradient and differentiates the forward ops themselves.
    if copy:
        graph_def, original = type(graph_def)(), graph_def
        graph_def.CopyFrom(original)
    ref_graph = inline_function_calls(graph_def)
    del graph_def
    for n in ref_graph.node:
        n.attr.pop("_gradient_op_type", None)

    def reference(x):
        (y,) = tf.compat.v1.import_graph_def(ref_graph, input_map={in_name + ":0": x},
                                             return_elements=["y:0"], name="frozen")
        return y, tf.gradients(y, x)[0]

    # No grappler rewrites (remapper/oneDNN fusions): they change float32 rounding, and
    # randomly initialised models amplify it (the reference should compute what the graph
    # says, op by op, as eager execution does).
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    wrapped = tf.compat.v1.wrap_function(reference, [tf.TensorSpec(x_val.shape, tf.float32)])
    y, dy_dx = wrapped(tf.constant(x_val))
    return y.numpy(), dy_dx.numpy()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="a tf.keras.applications name, TransformerEncoder, or with "
                   "--reference_only an existing DIR")
    p.add_argument("--out", required=True)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--training", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eager_reference", action="store_true",
                   help="Python's gradient of the eager Keras call instead of the frozen graph's "
                   "(deterministic models too large for a second copy of their constants in "
                   "memory: ConvNeXtXLarge)")
    p.add_argument("--no_reference", action="store_true",
                   help="skip the Python reference (models whose gradient is not the point, "
                   "e.g. an LSTM, whose imported while loop Python cannot differentiate)")
    p.add_argument("--functional_control_flow", action="store_true",
                   help="freeze with lower_control_flow=False: loops stay functional While ops "
                   "(which Python's gradient can differentiate once imported), not v1 frames")
    p.add_argument("--reference_only", action="store_true",
                   help="recompute DIR/expected.npz from DIR/model.pb and DIR/input.npy")
    args = p.parse_args(argv)
    if args.reference_only:
        import json as _json
        from tensorflow.core.framework import graph_pb2
        graph_def = graph_pb2.GraphDef()
        graph_def.ParseFromString(open(os.path.join(args.out, "model.pb"), "rb").read())
        x_val = np.load(os.path.join(args.out, "input.npy"))
        info_path = os.path.join(args.out, "info.json")
        if os.path.exists(info_path):
            x_name = _json.load(open(info_path))["x"]
        else:  # called by the freezing process, before it writes info.json
            x_name = next(n.name for n in graph_def.node if n.op == "Placeholder")
        y, dy_dx = reference_gradient(graph_def, x_name, x_val, copy=False)
        extra = {}
        keras_y_path = os.path.join(args.out, "keras_y.npy")
        if os.path.exists(keras_y_path):
            extra["keras_y"] = np.load(keras_y_path)
            os.remove(keras_y_path)
        np.savez(os.path.join(args.out, "expected.npz"), dy_dx=dy_dx, y=np.float32(y), **extra)
        return 0

    import tensorflow as tf
    from tensorflow.python.framework import convert_to_constants

    t0 = time.time()
    tf.keras.utils.set_random_seed(args.seed)
    model, in_shape = build_model(args.model, args.size, args.classes)
    rng = np.random.default_rng(args.seed)
    x_val = rng.standard_normal((args.batch,) + tuple(in_shape)).astype(np.float32)
    r = tf.constant(rng.standard_normal((args.batch, args.classes)).astype(np.float32))
    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]

    def forward(x):
        if args.training:
            out, _ = model.stateless_call(trainable, non_trainable, x, training=True)
        else:
            out = model(x, training=False)
        return tf.reduce_sum(out * r)

    @tf.function(input_signature=[tf.TensorSpec(x_val.shape, tf.float32, name="x")])
    def fn(x):
        return {"y": forward(x)}

    concrete = fn.get_concrete_function()
    frozen = convert_to_constants.convert_variables_to_constants_v2(
        concrete, lower_control_flow=not args.functional_control_flow)
    graph_def = frozen.graph.as_graph_def()
    # Name the output node `y` (the frozen function ends in Identity nodes).
    out_name = frozen.outputs[0].name.split(":")[0]
    in_name = frozen.inputs[0].name.split(":")[0]
    for n in graph_def.node:
        if n.name == out_name:
            n.name = "y"
        for i, s in enumerate(n.input):
            if s.split(":")[0].lstrip("^") == out_name:
                n.input[i] = s.replace(out_name, "y")
    t_freeze = time.time() - t0

    keras_y = np.float32(forward(tf.constant(x_val)).numpy())

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "model.pb"), "wb") as f:
        f.write(graph_def.SerializeToString())
    np.save(os.path.join(args.out, "input.npy"), x_val)
    op_types = sorted({n.op for n in graph_def.node} |
                      {n.op for f in graph_def.library.function for n in f.node_def})
    info = dict(model=args.model, size=args.size, batch=args.batch, training=args.training,
                x=in_name, y="y", input_shape=list(x_val.shape), nodes=len(graph_def.node),
                functions=len(graph_def.library.function), op_types=op_types,
                params=int(model.count_params()), freeze_s=round(t_freeze, 2))
    # The reference of a large model runs in its own process: the model, its variables and the
    # traced and frozen graphs stay here otherwise, and the largest models (ConvNeXtXLarge, 350M
    # parameters) then do not fit in memory beside the reference's own copies of the constants.
    # A small one's runs here (the same function of the same GraphDef; one TensorFlow start-up
    # fewer).
    t1 = time.time()
    if args.no_reference:
        np.savez(os.path.join(args.out, "expected.npz"), dy_dx=np.zeros_like(x_val),
                 y=keras_y, keras_y=keras_y)
    elif args.eager_reference:
        # Python's gradient of the eager Keras call: the same function as the frozen graph for
        # deterministic models (no dropout drawn), without a second copy of the constants.
        del frozen, concrete, fn, graph_def
        x_t = tf.constant(x_val)
        with tf.GradientTape() as tape:
            tape.watch(x_t)
            y_t = forward(x_t)
        dy_dx = tape.gradient(y_t, x_t).numpy()
        np.savez(os.path.join(args.out, "expected.npz"), dy_dx=dy_dx,
                 y=np.float32(y_t.numpy()), keras_y=keras_y, eager_reference=np.bool_(True))
    elif info["params"] <= IN_PROCESS_REFERENCE_PARAMS:
        y, dy_dx = reference_gradient(graph_def, in_name, x_val, copy=False)
        np.savez(os.path.join(args.out, "expected.npz"), dy_dx=dy_dx, y=np.float32(y),
                 keras_y=keras_y)
    else:
        np.save(os.path.join(args.out, "keras_y.npy"), keras_y)
        del model, frozen, concrete, fn, graph_def, trainable, non_trainable
        import gc
        gc.collect()
        subprocess.run([sys.executable, os.path.abspath(__file__), args.out, "--out=" + args.out,
                        "--reference_only"], check=True)
    info["python_grad_s"] = round(time.time() - t1, 2)
    with open(os.path.join(args.out, "info.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps({k: v for k, v in info.items() if k != "op_types"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
