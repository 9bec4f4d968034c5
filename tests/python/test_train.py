"""tf_ext_train (tf_ext/train/, no Python in the process) against Keras 3's model.fit: the same
model (exported by model.export before training, so both start from the same weights), the same
batches in file order, 5 epochs; per-epoch losses and trained weights must agree to a relative
1e-4. Each Keras optimizer (SGD with momentum and Nesterov, Adam, AdamW, RMSprop plain, with
momentum and centered, Adagrad), each loss (mse, mae, the cross-entropies from probabilities and
from logits, per-example weights), the learning-rate schedules, clipnorm and global_clipnorm,
and the validation loss; --shuffle reproducible by seed. Then bad input: missing keys,
a batch larger than the data, a NaN loss, an unknown optimizer; --export read back by
tf.saved_model.load; and what the trainer cannot train yet refused by name. An Embedding
classifier (repeated ids) with every optimizer and clipping, its gradient sparse as Keras's
tf.IndexedSlices (no [vocab, dim] gradient in the traced step); a tf.gather of a variable
(ResourceGather); a table also read whole (dense gradient); an LSTM; common Keras architectures
in training mode (separable, depthwise and transposed convolutions, pooling and upsampling,
GroupNormalization, attention with LayerNormalization, masked Embedding -> GRU, a bidirectional
LSTM, ConvLSTM2D, MobileNetV2); tf.cond and tf.switch_case reading variables in their branches;
the optimizer's iteration count across --resume. The option table: --help's flags and C keys
against docs/training.md, initial_accumulator_value from the CLI and from C. The defaults: the
"train" signature trained unless --signature says otherwise, the signature and mode printed, a
warning for BatchNormalization in inference mode, one input fed by any key, several by name or
KEY:INPUT, and errors listing the inputs."""
import csv
import os
import re
import subprocess
import sys

import numpy as np
import pytest

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.path.join(RUNFILES, "tf_ext") if RUNFILES else os.getcwd()
TOOL = os.path.join(WORKSPACE, "tf_ext", "tf_ext_train")
LIBRARY = os.path.join(WORKSPACE, "tf_ext", "_tf_ext_ops.so")
N, BATCH, EPOCHS = 48, 16, 5


def read_history(path):
    """The --history CSV's rows, and each epoch's mean step loss (Keras's epoch loss)."""
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return rows, [np.mean([float(r["loss"]) for r in rows if int(r["epoch"]) == e])
                  for e in range(EPOCHS)]


def assert_weights(trained, variables, atol=1e-6):
    for v in variables:
        np.testing.assert_allclose(trained[v.path], v.numpy(), rtol=1e-4, atol=atol, err_msg=v.path)


def test_keras_is_the_pinned_release():
    """The comparisons below are with the Keras release requirements.txt pins (its optimizers'
    formulas and model.fit's loop are what tf_ext_train reproduces)."""
    import keras
    with open(os.path.join(WORKSPACE, "requirements.txt")) as f:
        pins = [line.split("==", 1)[1].strip() for line in f
                if line.strip().startswith("keras==")]
    assert len(pins) == 1, "requirements.txt pins no Keras release"
    assert keras.__version__ == pins[0], (keras.__version__, pins[0])


def mlp(outputs, activation=None, seed=0):
    import keras
    keras.utils.set_random_seed(seed)
    x = keras.Input(shape=(5,), name="x")
    h = keras.layers.Dense(8, activation="tanh")(x)
    return keras.Model(x, keras.layers.Dense(outputs, activation=activation)(h))


def keras_optimizer(name, **kw):
    import keras
    schedule = kw.pop("schedule", None)
    lr = kw.pop("learning_rate")
    if schedule == "exponential":
        lr = keras.optimizers.schedules.ExponentialDecay(lr, decay_steps=4, decay_rate=0.5)
    elif schedule == "cosine":
        lr = keras.optimizers.schedules.CosineDecay(lr, decay_steps=7)
    cls = {"sgd": keras.optimizers.SGD, "adam": keras.optimizers.Adam,
           "adamw": keras.optimizers.AdamW, "rmsprop": keras.optimizers.RMSprop,
           "adagrad": keras.optimizers.Adagrad}[name]
    return cls(learning_rate=lr, **kw)


def cli_flags(name, **kw):
    flags = [f"--optimizer={name}"]
    schedule = kw.pop("schedule", None)
    if schedule == "exponential":
        flags.append("--lr_schedule=exponential:0.5:4")
    elif schedule == "cosine":
        flags.append("--lr_schedule=cosine:7")
    for k, v in kw.items():
        flags.append(f"--{k}" if v is True else f"--{k}={v}")
    return flags


def train_both(tmp_path, model, loss, keras_loss, targets, opt, weights=None):
    import keras
    export = str(tmp_path / "model")
    model.export(export, verbose=False)
    rng = np.random.default_rng(5)
    x = rng.normal(size=(N, 5)).astype(np.float32)
    arrays = {"x": x, "t": targets}
    if weights is not None:
        arrays["w"] = weights
    np.savez(tmp_path / "data.npz", **arrays)
    args = [TOOL, f"--saved_model={export}", f"--data={tmp_path / 'data.npz'}", "--inputs=x",
            "--targets=t", f"--loss={loss}", f"--batch_size={BATCH}", f"--epochs={EPOCHS}",
            f"--history={tmp_path / 'history.csv'}", f"--save_weights={tmp_path / 'w.npz'}",
            f"--library={LIBRARY}"] + cli_flags(opt[0], **dict(opt[1]))
    if weights is not None:
        args.append("--sample_weights=w")
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    model.compile(optimizer=keras_optimizer(opt[0], **dict(opt[1])), loss=keras_loss,
                  jit_compile=False)
    fit = model.fit(x, targets, sample_weight=weights, batch_size=BATCH, epochs=EPOCHS,
                    shuffle=False, verbose=0)
    rows, ours = read_history(tmp_path / "history.csv")
    assert len(rows) == EPOCHS * (N // BATCH)
    np.testing.assert_allclose(ours, fit.history["loss"], rtol=1e-4)
    assert fit.history["loss"][-1] < fit.history["loss"][0]  # it trained
    trained = dict(np.load(tmp_path / "w.npz"))
    assert sorted(trained) == sorted(v.path for v in model.trainable_variables)
    assert_weights(trained, model.trainable_variables)


OPTIMIZERS = [
    ("sgd", {"learning_rate": 0.1}),
    ("sgd", {"learning_rate": 0.05, "momentum": 0.9}),
    ("sgd", {"learning_rate": 0.05, "momentum": 0.8, "nesterov": True}),
    ("adam", {"learning_rate": 0.01}),
    ("adam", {"learning_rate": 0.02, "beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-5}),
    ("adamw", {"learning_rate": 0.01, "weight_decay": 0.1}),
    ("rmsprop", {"learning_rate": 0.01}),
    ("rmsprop", {"learning_rate": 0.005, "momentum": 0.5, "centered": True}),
    ("adagrad", {"learning_rate": 0.1}),
    ("adagrad", {"learning_rate": 0.1, "initial_accumulator_value": 0.5}),
    ("sgd", {"learning_rate": 0.1, "schedule": "exponential"}),
    ("adam", {"learning_rate": 0.02, "schedule": "cosine"}),
    ("sgd", {"learning_rate": 0.2, "momentum": 0.5, "clipnorm": 0.05}),
    ("adam", {"learning_rate": 0.01, "global_clipnorm": 0.05}),
]


@pytest.mark.parametrize("opt", OPTIMIZERS, ids=lambda o: f"{o[0]}-{'-'.join(map(str, o[1].values()))}")
def test_mse_regression_matches_model_fit(opt, tmp_path):
    t = np.random.default_rng(6).normal(size=(N, 2)).astype(np.float32)
    train_both(tmp_path, mlp(2), "mse", "mse", t, opt)


@pytest.mark.parametrize("loss,activation,keras_loss", [
    ("mae", None, "mae"),
    ("sparse_categorical_crossentropy", "softmax", "sparse_categorical_crossentropy"),
    ("sparse_categorical_crossentropy:from_logits", None, "sparse_categorical_crossentropy_logits"),
    ("categorical_crossentropy", "softmax", "categorical_crossentropy"),
    ("categorical_crossentropy:from_logits", None, "categorical_crossentropy_logits"),
    ("binary_crossentropy", "sigmoid", "binary_crossentropy"),
    ("binary_crossentropy:from_logits", None, "binary_crossentropy_logits"),
])
def test_losses_match_model_fit(loss, activation, keras_loss, tmp_path):
    import keras
    rng = np.random.default_rng(8)
    labels = rng.integers(0, 3, size=(N,))
    if loss.startswith("sparse"):
        t = labels.astype(np.int32)
    elif loss.startswith("categorical"):
        t = np.eye(3, dtype=np.float32)[labels]
    elif loss.startswith("binary"):
        t = (rng.random(size=(N, 3)) > 0.5).astype(np.float32)
    else:
        t = rng.normal(size=(N, 3)).astype(np.float32)
    kl = {"sparse_categorical_crossentropy_logits":
              keras.losses.SparseCategoricalCrossentropy(from_logits=True),
          "categorical_crossentropy_logits": keras.losses.CategoricalCrossentropy(from_logits=True),
          "binary_crossentropy_logits": keras.losses.BinaryCrossentropy(from_logits=True)}.get(
              keras_loss, keras_loss)
    train_both(tmp_path, mlp(3, activation), loss, kl, t, ("adam", {"learning_rate": 0.01}))


def test_sample_weights_match_model_fit(tmp_path):
    rng = np.random.default_rng(9)
    t = rng.normal(size=(N, 2)).astype(np.float32)
    w = rng.uniform(0.1, 2.0, size=(N,)).astype(np.float32)
    train_both(tmp_path, mlp(2), "mse", "mse", t, ("sgd", {"learning_rate": 0.05, "momentum": 0.9}),
               weights=w)


def run_tool(tmp_path, *flags):
    return subprocess.run([TOOL, f"--library={LIBRARY}"] + list(flags), capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("loss,targets_shape", [
    ("binary_crossentropy", (N,)), ("mse", (N,)), ("mae", (N,)),
    ("sparse_categorical_crossentropy", (N, 1)),
])
def test_targets_of_another_rank_are_brought_to_the_outputs_as_keras_does(loss, targets_shape,
                                                                          tmp_path):
    """Keras's losses bring targets and predictions to the same rank first: targets [N] against
    an output [N, 1] (a sigmoid unit) are expanded, never broadcast to [N, N]; class ids [N, 1]
    against softmax [N, C] are squeezed. The losses per epoch equal model.fit's."""
    import keras
    keras.utils.set_random_seed(41)
    sparse = loss.startswith("sparse")
    x_in = keras.Input(shape=(5,), name="x")
    h = keras.layers.Dense(8, activation="tanh")(x_in)
    out = keras.layers.Dense(3 if sparse else 1, activation="softmax" if sparse else "sigmoid")(h)
    model = keras.Model(x_in, out)
    export = str(tmp_path / "model")
    model.export(export, verbose=False)
    rng = np.random.default_rng(42)
    x = rng.normal(size=(N, 5)).astype(np.float32)
    t = rng.integers(0, 3 if sparse else 2, size=targets_shape)
    t = t.astype(np.int32 if sparse else np.float32)
    np.savez(tmp_path / "d.npz", x=x, t=t)
    r = run_tool(tmp_path, f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}", "--inputs=x",
                 "--targets=t", f"--loss={loss}", "--optimizer=sgd", "--learning_rate=0.1",
                 f"--batch_size={BATCH}", f"--epochs={EPOCHS}", f"--history={tmp_path / 'h.csv'}")
    assert r.returncode == 0, r.stderr
    _, ours = read_history(tmp_path / "h.csv")
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss, jit_compile=False)
    fit = model.fit(x, t, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    np.testing.assert_allclose(ours, fit.history["loss"], rtol=1e-4)


def test_bad_input_gets_one_clear_error(tmp_path):
    export = str(tmp_path / "model")
    mlp(2).export(export, verbose=False)
    x = np.ones((8, 5), np.float32)
    np.savez(tmp_path / "d.npz", x=x, t=np.ones((8, 2), np.float32), bad=np.ones((7, 2), np.float32),
             nan=np.full((8, 2), np.nan, np.float32))
    base = [f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}", "--inputs=x"]
    cases = [
        (["--targets=nope"], "has no array 'nope'"),
        (["--targets=bad"], "array 'bad' has 7 examples; the first has 8"),
        (["--targets=t", "--batch_size=9"], "batch_size=9 is larger than the data (8 examples)"),
        (["--targets=nan"], "the loss is nan; stopping"),
        (["--targets=t", "--optimizer=lion"], "lion"),
        (["--targets=t", "--lr_schedule=cosine"], "bad --lr_schedule: 'cosine': expected"),
        (["--targets=t", "--loss=hinge"], "unknown loss 'hinge'"),
        (["--targets=t", "--batch_size=0"], "batch_size=0 is not positive"),
        (["--targets=t", "--epochs=0"], "epochs=0 is not positive"),
    ]
    for extra, message in cases:
        if not any(e.startswith("--batch_size") for e in extra):
            extra = extra + ["--batch_size=4"]
        if not any(e.startswith("--loss") for e in extra):
            extra = extra + ["--loss=mse"]
        r = run_tool(tmp_path, *(base + extra))
        assert r.returncode != 0 and message in r.stderr, (extra, r.stderr)
        assert "Traceback" not in r.stderr and "Check failed" not in r.stderr


VOCAB = 37  # distinct from every other dimension of the models below


def embedding_model(seed=1, vocab=VOCAB):
    import keras
    keras.utils.set_random_seed(seed)
    ids = keras.Input(shape=(4,), dtype="int32", name="ids")
    e = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(vocab, 3)(ids))
    return keras.Model(ids, keras.layers.Dense(3, activation="softmax")(e))


def embedding_data(tmp_path):
    """Ids with repeats within examples and within batches (and ids never seen), classes."""
    rng = np.random.default_rng(2)
    x = rng.integers(0, VOCAB - 7, size=(N, 4)).astype(np.int32)
    x[::3, 1] = x[::3, 0]
    x[::5, 3] = x[::5, 2] = 4
    t = rng.integers(0, 3, size=(N,)).astype(np.int32)
    np.savez(tmp_path / "d.npz", ids=x, t=t)
    return x, t


EMBEDDING_OPTIMIZERS = [
    ("sgd", {"learning_rate": 0.5}),
    ("sgd", {"learning_rate": 0.5, "momentum": 0.9}),
    ("sgd", {"learning_rate": 0.3, "momentum": 0.8, "nesterov": True}),
    ("adam", {"learning_rate": 0.05}),
    ("adamw", {"learning_rate": 0.05, "weight_decay": 0.1}),
    ("rmsprop", {"learning_rate": 0.02}),
    ("rmsprop", {"learning_rate": 0.01, "momentum": 0.5}),
    ("adagrad", {"learning_rate": 0.3}),
    ("adam", {"learning_rate": 0.05, "clipnorm": 0.1}),
    ("adam", {"learning_rate": 0.05, "global_clipnorm": 0.1}),
]


def train_ids_against_fit(tmp_path, model, export, x, t, opt):
    """Trains `export` on ids x / targets t (tmp_path/d.npz) with optimizer opt = (name, kwargs)
    through the tool and `model` with model.fit: equal per-epoch losses (1e-4) and weights."""
    r = run_tool(tmp_path, f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}", "--inputs=ids",
                 "--targets=t", "--loss=sparse_categorical_crossentropy", f"--batch_size={BATCH}",
                 f"--epochs={EPOCHS}", f"--history={tmp_path / 'h.csv'}",
                 f"--save_weights={tmp_path / 'w.npz'}", *cli_flags(opt[0], **dict(opt[1])))
    assert r.returncode == 0, r.stderr
    model.compile(optimizer=keras_optimizer(opt[0], **dict(opt[1])),
                  loss="sparse_categorical_crossentropy", jit_compile=False)
    fit = model.fit(x, t, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    _, ours = read_history(tmp_path / "h.csv")
    np.testing.assert_allclose(ours, fit.history["loss"], rtol=1e-4)
    assert_weights(dict(np.load(tmp_path / "w.npz")), model.trainable_variables)
    return fit


@pytest.mark.parametrize("opt", EMBEDDING_OPTIMIZERS,
                         ids=lambda o: "-".join([o[0]] + [f"{k}={v}" for k, v in o[1].items()]))
def test_embedding_classifier_matches_model_fit(opt, tmp_path):
    """Keras 3's Embedding reads its table and gathers rows (GatherV2); model.fit's gradient is
    then a tf.IndexedSlices and each optimizer applies it its own way (Adam, RMSprop and Adagrad
    square each row before summing repeated ids). The trainer's sparse gradient (the gathered
    rows at their ids) matches it for every optimizer and for clipping, repeated ids included.
    (Not centered RMSprop: with repeated ids its denominator velocity - average^2 goes negative
    and Keras 3.15's own sparse division then fails with InvalidArgument.)"""
    model = embedding_model()
    export = str(tmp_path / "model")
    model.export(export, verbose=False)
    x, t = embedding_data(tmp_path)
    fit = train_ids_against_fit(tmp_path, model, export, x, t, opt)
    assert fit.history["loss"][-1] < fit.history["loss"][0]


def test_embedding_centered_rmsprop_matches_model_fit_on_distinct_ids(tmp_path):
    """Centered RMSprop's sparse update (velocity and average gradient scaled, rows scattered
    in, the denominator gathered at the rows), on batches whose ids are all distinct: there
    Keras's sparse division works, and the trainer matches model.fit."""
    model = embedding_model(vocab=70)
    export = str(tmp_path / "model")
    model.export(export, verbose=False)
    rng = np.random.default_rng(4)
    x = np.concatenate([rng.choice(70, size=BATCH * 4, replace=False).reshape(BATCH, 4)
                        for _ in range(N // BATCH)]).astype(np.int32)
    t = rng.integers(0, 3, size=(N,)).astype(np.int32)
    np.savez(tmp_path / "d.npz", ids=x, t=t)
    opt = ("rmsprop", {"learning_rate": 0.01, "momentum": 0.5, "centered": True})
    train_ids_against_fit(tmp_path, model, export, x, t, opt)


def test_shared_embedding_two_inputs_matches_model_fit(tmp_path):
    """One Embedding called on two inputs (int32 and int64 ids): two gathers of the table, whose
    rows and ids are joined into one sparse gradient (as tf.GradientTape concatenates two
    IndexedSlices), against model.fit with Adam."""
    import keras
    keras.utils.set_random_seed(5)
    a = keras.Input(shape=(4,), dtype="int32", name="a")
    b = keras.Input(shape=(2,), dtype="int64", name="b")
    embed = keras.layers.Embedding(VOCAB, 3)
    pooled = keras.layers.Concatenate()([keras.layers.GlobalAveragePooling1D()(embed(a)),
                                         keras.layers.GlobalAveragePooling1D()(embed(b))])
    model = keras.Model([a, b], keras.layers.Dense(3, activation="softmax")(pooled))
    export = str(tmp_path / "model")
    model.export(export, verbose=False)
    x, t = embedding_data(tmp_path)
    xb = x[:, :2][::-1].astype(np.int64)  # ids shared with `a` within and across batches
    np.savez(tmp_path / "d.npz", a=x, b=xb, t=t)
    r = run_tool(tmp_path, f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}", "--inputs=a,b",
                 "--targets=t", "--loss=sparse_categorical_crossentropy", f"--batch_size={BATCH}",
                 f"--epochs={EPOCHS}", "--optimizer=adam", "--learning_rate=0.05",
                 f"--history={tmp_path / 'h.csv'}", f"--save_weights={tmp_path / 'w.npz'}",
                 f"--step_stats={tmp_path / 'step.pb'}")
    assert r.returncode == 0, r.stderr
    assert dense_table_gradients(step_stats_outputs(tmp_path / "step.pb"), 3) == []
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.05),
                  loss="sparse_categorical_crossentropy", jit_compile=False)
    fit = model.fit([x, xb], t, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    _, ours = read_history(tmp_path / "h.csv")
    np.testing.assert_allclose(ours, fit.history["loss"], rtol=1e-4)
    assert_weights(dict(np.load(tmp_path / "w.npz")), model.trainable_variables)


def test_embedding_id_out_of_range_gets_one_clear_error(tmp_path):
    """An id past the table is refused by the forward's gather (InvalidArgument naming the
    index and the range), before any update; nothing crashes."""
    export = str(tmp_path / "model")
    embedding_model().export(export, verbose=False)
    x, t = embedding_data(tmp_path)
    x[3, 2] = VOCAB + 5
    np.savez(tmp_path / "d.npz", ids=x, t=t)
    r = run_tool(tmp_path, f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}", "--inputs=ids",
                 "--targets=t", "--loss=sparse_categorical_crossentropy", f"--batch_size={BATCH}",
                 "--epochs=1", "--optimizer=adam")
    assert r.returncode == 1, r.stderr
    assert "step 0:" in r.stderr and f"{VOCAB + 5} is not in [0, {VOCAB})" in r.stderr, r.stderr
    assert "Check failed" not in r.stderr


def step_stats_outputs(path):
    """(node name, op, shape) of every output the traced step computed (--step_stats); a node
    without outputs (a variable update) as (name, op, None)."""
    from tensorflow.core.protobuf import config_pb2
    meta = config_pb2.RunMetadata()
    with open(path, "rb") as f:
        meta.ParseFromString(f.read())
    out = []
    for dev in meta.step_stats.dev_stats:
        for n in dev.node_stats:
            op = n.timeline_label.split(" = ")[1].split("(")[0] if " = " in n.timeline_label else ""
            for o in n.output:
                out.append((n.node_name, op, tuple(d.size for d in o.tensor_description.shape.dim)))
            if not n.output:
                out.append((n.node_name, op, None))
    return out


def dense_table_gradients(outputs, dim):
    """The step's [VOCAB, dim] tensors that are gradients: computed under the backprop's name
    prefix, or by the ops that densify rows (UnsortedSegmentSum, ScatterNd) or sum gradients."""
    return [(name, op) for name, op, shape in outputs if shape == (VOCAB, dim) and (
        "/gradients/" in name or op in ("UnsortedSegmentSum", "ScatterNd", "AddN"))]


@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_embedding_gradient_has_no_vocab_sized_tensor(opt, tmp_path):
    """The traced first step (--step_stats: every node's output shapes, as the executor ran it):
    no [vocab, dim] gradient of the table. With plain SGD, no [vocab, dim] tensor at all but the
    table's own reads (the update is a scatter of the rows); with Adam the dense slots are
    updated in place (as Keras's). The same check finds the dense gradient of a table that is
    also read whole (tied input and output embeddings, below), so it can fail."""
    model = embedding_model()
    export = str(tmp_path / "model")
    model.export(export, verbose=False)
    embedding_data(tmp_path)
    stats = tmp_path / "step.pb"
    r = run_tool(tmp_path, f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}", "--inputs=ids",
                 "--targets=t", "--loss=sparse_categorical_crossentropy", f"--batch_size={BATCH}",
                 "--epochs=1", f"--optimizer={opt}", f"--step_stats={stats}")
    assert r.returncode == 0, r.stderr
    outputs = step_stats_outputs(stats)
    assert any(op == "GatherV2" for _, op, _ in outputs)  # the trace has the forward's ops
    assert dense_table_gradients(outputs, 3) == []
    vocab_sized = sorted({op for _, op, shape in outputs if shape == (VOCAB, 3)})
    if opt == "sgd":
        assert vocab_sized == ["ReadVariableOp"], vocab_sized
    assert any(op == "ResourceScatterSub" if opt == "sgd" else op == "ResourceScatterAdd"
               for _, op, _ in outputs)


@pytest.mark.parametrize("flags,fused", [
    (["--optimizer=adam"], "ResourceApplyAdam"),
    (["--optimizer=adamw", "--weight_decay=0.1"], "ResourceApplyAdam"),
    (["--optimizer=sgd", "--momentum=0.9"], "ResourceApplyKerasMomentum"),
    (["--optimizer=sgd", "--momentum=0.8", "--nesterov"], "ResourceApplyKerasMomentum"),
])
def test_dense_updates_are_one_fused_kernel_per_variable(flags, fused, tmp_path):
    """Dense Adam/AdamW and SGD with momentum update each variable with the TensorFlow kernel
    that computes Keras's formula (test_mse_regression_matches_model_fit checks the numbers), one
    pass over the variable: the traced step runs that kernel once per variable, and no
    elementwise op of the optimizer (outside the gradients) computes a tensor of a kernel's shape
    but AdamW's decoupled decay (var - var wd lr)."""
    export = str(tmp_path / "model")
    mlp(2).export(export, verbose=False)
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x=rng.normal(size=(N, 5)).astype(np.float32),
             t=rng.normal(size=(N, 2)).astype(np.float32))
    stats = tmp_path / "step.pb"
    r = run_tool(tmp_path, f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}", "--inputs=x",
                 "--targets=t", "--loss=mse", f"--batch_size={BATCH}", "--epochs=1",
                 f"--step_stats={stats}", *flags)
    assert r.returncode == 0, r.stderr
    outputs = step_stats_outputs(stats)
    assert sum(op == fused for _, op, _ in outputs) == 4  # two kernels, two biases
    optimizer_ops = sorted({op for name, op, shape in outputs
                            if shape in ((5, 8), (8, 2)) and "/gradients/" not in name
                            and op not in ("ReadVariableOp", "Identity")})
    expected = ["Mul", "Sub"] if "--optimizer=adamw" in flags else []
    assert optimizer_ops == expected, optimizer_ops


def gather_module(tied, table, kernel, bias):
    """A tf.Module whose __call__ gathers rows with tf.gather on the variable (ResourceGather,
    not a read and GatherV2); `tied` also multiplies by the whole table (a dense use)."""
    import tensorflow as tf

    class Gather(tf.Module):
        def __init__(self):
            super().__init__()
            self.table = tf.Variable(table, name="table")
            self.kernel = tf.Variable(kernel, name="kernel")
            self.bias = tf.Variable(bias, name="bias")

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.int32, name="ids")])
        def __call__(self, ids):
            e = tf.reduce_mean(tf.gather(self.table, ids), axis=1)
            if tied:
                return tf.matmul(e, self.table, transpose_b=True)  # logits over the vocabulary
            return tf.nn.softmax(tf.matmul(e, self.kernel) + self.bias)

    return Gather()


def saved_ops(export):
    from tensorflow.core.protobuf import saved_model_pb2
    sm = saved_model_pb2.SavedModel()
    with open(os.path.join(export, "saved_model.pb"), "rb") as f:
        sm.ParseFromString(f.read())
    return {n.op for f in sm.meta_graphs[0].graph_def.library.function for n in f.node_def}


def test_resource_gather_trains_sparse_like_model_fit(tmp_path):
    """tf.gather on a tf.Variable in a tf.function is a ResourceGather of the variable itself:
    the trainer differentiates the gathered rows (a sparse gradient), and the module trains as
    model.fit trains the same Keras model from the same weights (Adam: losses and weights)."""
    import keras
    import tensorflow as tf
    model = embedding_model()
    table, kernel, bias = (v.numpy() for v in model.trainable_variables)
    module = gather_module(False, table, kernel, bias)
    export = str(tmp_path / "module")
    tf.saved_model.save(module, export, signatures={"serving_default": module.__call__})
    assert "ResourceGather" in saved_ops(export) and "GatherV2" not in saved_ops(export)
    x, t = embedding_data(tmp_path)
    stats = tmp_path / "step.pb"
    r = run_tool(tmp_path, f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}", "--inputs=ids",
                 "--targets=t", "--loss=sparse_categorical_crossentropy", f"--batch_size={BATCH}",
                 f"--epochs={EPOCHS}", "--optimizer=adam", "--learning_rate=0.05",
                 f"--history={tmp_path / 'h.csv'}", f"--save_weights={tmp_path / 'w.npz'}",
                 f"--step_stats={stats}")
    assert r.returncode == 0, r.stderr
    assert dense_table_gradients(step_stats_outputs(stats), 3) == []
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.05),
                  loss="sparse_categorical_crossentropy", jit_compile=False)
    fit = model.fit(x, t, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    _, ours = read_history(tmp_path / "h.csv")
    np.testing.assert_allclose(ours, fit.history["loss"], rtol=1e-4)
    trained = dict(np.load(tmp_path / "w.npz"))
    assert sorted(trained) == ["bias", "kernel", "table"]
    for name, v in zip(["table", "kernel", "bias"], model.trainable_variables):
        np.testing.assert_allclose(trained[name], v.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)


def test_table_also_read_whole_gets_the_summed_dense_gradient(tmp_path):
    """A table both gathered (ResourceGather) and read whole (tied embeddings: logits =
    mean(rows) table^T) has a dense gradient, the gathered rows summed into it as
    tf.GradientTape sums them: plain SGD matches a GradientTape loop, and the step's trace shows
    the [vocab, dim] gradient the Embedding tests above check is absent."""
    import tensorflow as tf
    rng = np.random.default_rng(3)
    table = rng.normal(size=(VOCAB, 3)).astype(np.float32)
    module = gather_module(True, table, np.zeros((3, 3), np.float32), np.zeros(3, np.float32))
    export = str(tmp_path / "module")
    tf.saved_model.save(module, export, signatures={"serving_default": module.__call__})
    x, _ = embedding_data(tmp_path)
    t = rng.integers(0, VOCAB, size=(N,)).astype(np.int32)
    np.savez(tmp_path / "d.npz", ids=x, t=t)
    stats = tmp_path / "step.pb"
    r = run_tool(tmp_path, f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}", "--inputs=ids",
                 "--targets=t", "--loss=sparse_categorical_crossentropy:from_logits",
                 f"--batch_size={BATCH}", "--epochs=2", "--optimizer=sgd", "--learning_rate=0.5",
                 f"--history={tmp_path / 'h.csv'}", f"--save_weights={tmp_path / 'w.npz'}",
                 f"--step_stats={stats}")
    assert r.returncode == 0, r.stderr
    assert dense_table_gradients(step_stats_outputs(stats), 3) != []
    var = tf.Variable(table)
    losses = []
    for _ in range(2):
        for b in range(0, N, BATCH):
            with tf.GradientTape() as tape:
                e = tf.reduce_mean(tf.gather(var, x[b:b + BATCH]), axis=1)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                    t[b:b + BATCH], tf.matmul(e, var, transpose_b=True)))
            var.assign_sub(0.5 * tf.convert_to_tensor(tape.gradient(loss, var)))
            losses.append(float(loss))
    with open(tmp_path / "h.csv") as f:
        ours = [float(row["loss"]) for row in csv.DictReader(f)]
    np.testing.assert_allclose(ours, losses, rtol=1e-4)
    np.testing.assert_allclose(dict(np.load(tmp_path / "w.npz"))["table"], var.numpy(), rtol=1e-4,
                               atol=1e-6)


ADAM = ("adam", {"learning_rate": 0.02})


def model_matches_model_fit(tmp_path, model, x=None, training=False, opt=ADAM):
    """tf_ext_train (mse, by default Adam) on a one-input model with 2 outputs matches model.fit:
    per-epoch losses and the trained weights (and, in training mode, the updated non-trainable
    variables such as moving statistics). x: the N inputs, by default normal draws of the
    input's shape. training: export with tf_ext.export_for_training and train the "train"
    signature, in which BatchNormalization uses batch statistics (as model.fit does) instead of
    the inference one."""
    import keras
    export = str(tmp_path / "model")
    flags = []
    if training:
        import tf_ext
        tf_ext.export_for_training(model, export)
        flags.append("--signature=train")
    else:
        model.export(export, verbose=False)
    rng = np.random.default_rng(2)
    if x is None:
        x = rng.normal(size=(N,) + tuple(model.inputs[0].shape[1:])).astype(np.float32)
    t = rng.normal(size=(N, 2)).astype(np.float32)
    name = model.inputs[0].name
    np.savez(tmp_path / "d.npz", **{name: x}, t=t)
    r = run_tool(tmp_path, f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}",
                 f"--inputs={name}", "--targets=t", "--loss=mse", f"--batch_size={BATCH}",
                 f"--epochs={EPOCHS}", f"--history={tmp_path / 'h.csv'}",
                 f"--save_weights={tmp_path / 'w.npz'}", *flags, *cli_flags(opt[0], **opt[1]))
    assert r.returncode == 0, r.stderr
    model.compile(optimizer=keras_optimizer(opt[0], **opt[1]), loss="mse", jit_compile=False)
    fit = model.fit(x, t, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    _, ours = read_history(tmp_path / "h.csv")
    np.testing.assert_allclose(ours, fit.history["loss"], rtol=1e-4)
    assert fit.history["loss"][-1] < fit.history["loss"][0]
    trained = dict(np.load(tmp_path / "w.npz"))
    # what a step writes: the trainable variables and moving statistics, not the seed of a
    # recurrent layer's dropout, which dropout=0 never draws from
    written = [v for v in model.variables if "seed_generator" not in v.path]
    assert sorted(trained) == sorted(v.path for v in written)
    assert_weights(trained, written)


def test_lstm_matches_model_fit(tmp_path):
    """A Keras LSTM's While reads its weights inside the loop body: the trainer reads them once
    before the loop (tf_ext/graph/passes/loop_variables.h), the control-flow pass differentiates the
    loop, and training matches model.fit (losses and weights)."""
    import keras
    keras.utils.set_random_seed(1)
    x = keras.Input(shape=(5, 3), name="seq")
    model = keras.Model(x, keras.layers.Dense(2)(keras.layers.LSTM(4)(x)))
    model_matches_model_fit(tmp_path, model)


def test_dilated_causal_conv1d_matches_model_fit(tmp_path):
    """Keras freezes a dilated Conv1D (padding="causal", as in WaveNet and TCN) to SpaceToBatchND
    -> Conv2D -> BatchToSpaceND whose block shapes are computed tensors: their client gradients,
    converted to function gradients without static shapes (tf_ext/grads/unify.h), train it as
    model.fit does (losses and weights)."""
    import keras
    keras.utils.set_random_seed(1)
    x = keras.Input(shape=(8, 3), name="seq")
    h = keras.layers.Conv1D(4, 3, dilation_rate=2, padding="causal", activation="tanh")(x)
    model = keras.Model(x, keras.layers.Dense(2)(keras.layers.Flatten()(h)))
    model_matches_model_fit(tmp_path, model)


def stacked(shape, *layers):
    """Input(shape) -> layers -> Flatten -> Dense(2)."""
    import keras
    x = keras.Input(shape=shape, name="x")
    h = x
    for layer in layers:
        h = layer(h)
    return keras.Model(x, keras.layers.Dense(2)(keras.layers.Flatten()(h)))


def attention_block(layers):
    """A transformer encoder block in small: self-attention, residual, LayerNormalization."""
    import keras
    x = keras.Input(shape=(5, 4), name="x")
    h = layers.LayerNormalization()(x + layers.MultiHeadAttention(2, 2)(x, x))
    return keras.Model(x, layers.Dense(2)(layers.GlobalAveragePooling1D()(h)))


def mobilenet_v2(_layers):
    import keras
    return keras.applications.MobileNetV2(input_shape=(32, 32, 3), alpha=0.35, weights=None,
                                          classes=2, classifier_activation=None)


# SGD with momentum, not Adam: some gradients are round-off where the maths gives zero
# (attention's key bias, softmax being shift invariant; the beta of a BatchNormalization feeding
# only a convolution and another BatchNormalization), which Adam's m / sqrt(v) makes full steps.
SGD_MOMENTUM = ("sgd", {"learning_rate": 0.05, "momentum": 0.9})

# Common Keras architectures: a builder of the model from keras.layers (called once the seed is
# set) and the optimizer.
ARCHITECTURES = {
    "separable_conv2d": (lambda L: stacked((6, 6, 3), L.SeparableConv2D(
        4, 3, depth_multiplier=2, activation="tanh")), SGD_MOMENTUM),
    "depthwise_conv2d": (lambda L: stacked((6, 6, 3), L.DepthwiseConv2D(
        3, strides=2, padding="same", depth_multiplier=2, activation="tanh")), SGD_MOMENTUM),
    "strided_conv2d_transpose": (lambda L: stacked((4, 4, 3), L.Conv2DTranspose(
        3, 3, strides=2, padding="same", activation="tanh")), SGD_MOMENTUM),
    "pooling_upsampling": (lambda L: stacked(
        (8, 8, 3), L.Conv2D(4, 3, padding="same", activation="relu"), L.MaxPooling2D(2),
        L.UpSampling2D(2), L.AveragePooling2D(3, strides=2),
        L.UpSampling2D(2, interpolation="bilinear")), SGD_MOMENTUM),
    "group_normalization": (lambda L: stacked((6, 6, 4), L.Conv2D(4, 3, use_bias=False),
                                              L.GroupNormalization(2), L.ReLU()), SGD_MOMENTUM),
    "attention_layer_normalization": (attention_block, SGD_MOMENTUM),
    "bidirectional_lstm": (lambda L: stacked((5, 3), L.Bidirectional(L.LSTM(3))), SGD_MOMENTUM),
    "conv_lstm2d": (lambda L: stacked((3, 5, 5, 2), L.ConvLSTM2D(2, 3)), SGD_MOMENTUM),
    # a small learning rate: 17 blocks of BatchNormalization over batches of 16 make larger
    # steps chaotic, the two trainings' round-off growing apart within 2 epochs
    "mobilenet_v2": (mobilenet_v2, ("sgd", {"learning_rate": 0.001})),
}


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_architecture_trains_in_training_mode_like_model_fit(name, tmp_path):
    """Common Keras architectures exported with tf_ext.export_for_training: the gradients of
    separable, depthwise and strided transposed convolutions, pooling and resizing, recurrent
    loops run both ways, attention's einsums and softmax, and the normalizations' moments train
    the "train" signature as model.fit does: losses, weights and MobileNetV2's moving
    statistics."""
    import keras
    keras.utils.set_random_seed(3)
    build, opt = ARCHITECTURES[name]
    model_matches_model_fit(tmp_path, build(keras.layers), training=True, opt=opt)


def test_masked_embedding_gru_trains_like_model_fit(tmp_path):
    """Embedding(mask_zero=True) -> GRU: padded steps (id 0) keep the GRU's state, a select on the
    mask inside the loop; trained in training mode as model.fit does."""
    import keras
    keras.utils.set_random_seed(4)
    ids = keras.Input(shape=(6,), dtype="int32", name="ids")
    h = keras.layers.GRU(4)(keras.layers.Embedding(8, 3, mask_zero=True)(ids))
    model = keras.Model(ids, keras.layers.Dense(2)(h))
    rng = np.random.default_rng(7)
    x = rng.integers(1, 8, size=(N, 6)).astype(np.int32)
    x[np.arange(6) >= rng.integers(1, 7, size=(N, 1))] = 0  # post-padded, 1 to 6 real ids
    model_matches_model_fit(tmp_path, model, x, training=True, opt=SGD_MOMENTUM)


def cond_module(w, u, v, assign=False, switch=False):
    """A tf.Module whose __call__ takes one of two branches by the batch's mean: each branch
    reads variables (tf.cond passes their handles to If), one variable read in both, one only
    in each; `switch`: tf.switch_case (Case) with a third branch never taken; `assign` also
    updates a variable in a branch (not trainable)."""
    import tensorflow as tf

    class Cond(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(w, name="w")
            self.u = tf.Variable(u, name="u")
            self.v = tf.Variable(v, name="v")

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def __call__(self, x):
            def then():
                if assign:
                    self.v.assign_add(tf.ones_like(self.v))
                return tf.matmul(x, self.w) * self.v
            other = lambda: tf.matmul(x, self.u) - self.v  # noqa: E731
            if switch:
                index = tf.cast(tf.reduce_mean(x) > 0, tf.int32)
                return tf.switch_case(index, [other, then, lambda: self.v * x[:, :1]])
            return tf.cond(tf.reduce_mean(x) > 0, then, other)

    return Cond()


def cond_data(tmp_path, batches=4):
    rng = np.random.default_rng(3)
    # Batches of 4 whose means alternate in sign: both branches are taken every epoch.
    x = np.concatenate([rng.normal(size=(4, 3)) + (2 if b % 2 == 0 else -2)
                        for b in range(batches)]).astype(np.float32)
    y = rng.normal(size=(4 * batches, 1)).astype(np.float32)
    np.savez(tmp_path / "d.npz", x=x, y=y)
    return x, y


@pytest.mark.parametrize("optimizer,switch", [("sgd", False), ("adam", False), ("sgd", True)])
def test_variables_read_in_conditional_branches_train_like_gradient_tape(optimizer, switch,
                                                                         tmp_path):
    """tf.cond reading variables in its branches: the trainer reads them once before the If
    (tf_ext/graph/passes/loop_variables.h), the control-flow pass differentiates the taken branch, and
    training matches GradientTape + Keras's optimizer on the same module (losses, weights)."""
    import keras
    import tensorflow as tf
    rng = np.random.default_rng(4)
    w0, u0 = (rng.normal(size=(3, 1)).astype(np.float32) for _ in range(2))
    v0 = np.array([0.5], np.float32)
    module = cond_module(w0, u0, v0, switch=switch)
    export = str(tmp_path / "module")
    tf.saved_model.save(module, export, signatures={"serving_default": module.__call__})
    assert ({"Case", "StatelessCase"} if switch else {"If", "StatelessIf"}) & saved_ops(export)
    x, y = cond_data(tmp_path)
    epochs = 3
    r = run_tool(tmp_path, f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}",
                 "--inputs=x", "--targets=y", "--loss=mse", "--batch_size=4", f"--epochs={epochs}",
                 f"--optimizer={optimizer}", "--learning_rate=0.05",
                 f"--history={tmp_path / 'h.csv'}", f"--save_weights={tmp_path / 'w.npz'}")
    assert r.returncode == 0, r.stderr
    reference = cond_module(w0, u0, v0, switch=switch)
    variables = [reference.w, reference.u, reference.v]
    opt = (keras.optimizers.SGD(0.05) if optimizer == "sgd" else keras.optimizers.Adam(0.05))
    losses = []
    for _ in range(epochs):
        for i in range(0, len(x), 4):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(reference(x[i:i + 4]) - y[i:i + 4]))
            grads = tape.gradient(loss, variables)
            assert all(g is not None for g in grads)
            opt.apply_gradients(zip(grads, variables))
            losses.append(float(loss))
    with open(tmp_path / "h.csv") as f:
        ours = [float(row["loss"]) for row in csv.DictReader(f)]
    np.testing.assert_allclose(ours, losses, rtol=1e-5)
    trained = dict(np.load(tmp_path / "w.npz"))
    assert sorted(trained) == ["u", "v", "w"]
    for name, var in zip("wuv", variables):
        np.testing.assert_allclose(trained[name], var.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
    assert not np.allclose(trained["v"], v0)


def test_variable_assigned_in_a_conditional_branch_is_refused_by_name(tmp_path):
    import tensorflow as tf
    module = cond_module(np.ones((3, 1), np.float32), np.ones((3, 1), np.float32),
                         np.array([0.5], np.float32), assign=True)
    export = str(tmp_path / "module")
    tf.saved_model.save(module, export, signatures={"serving_default": module.__call__})
    cond_data(tmp_path)
    r = run_tool(tmp_path, f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}",
                 "--inputs=x", "--targets=y", "--loss=mse", "--batch_size=4")
    assert r.returncode != 0
    assert "trainable variable 'v'" in r.stderr and "If" in r.stderr, r.stderr


def test_export_is_the_trained_saved_model(tmp_path):
    """--export: the SavedModel as loaded with the trained variables; tf.saved_model.load gives
    model.fit's trained model's answers. A failed run (a NaN loss) leaves no export, and an
    existing non-empty directory is refused before training."""
    import keras
    import tensorflow as tf
    model = mlp(2, seed=3)
    export = str(tmp_path / "model")
    model.export(export, verbose=False)
    rng = np.random.default_rng(4)
    x = rng.normal(size=(N, 5)).astype(np.float32)
    t = rng.normal(size=(N, 2)).astype(np.float32)
    np.savez(tmp_path / "d.npz", x=x, t=t, nan=np.full((N, 2), np.nan, np.float32))
    flags = [f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}", "--inputs=x", "--loss=mse",
             f"--batch_size={BATCH}", f"--epochs={EPOCHS}", "--optimizer=adam", "--learning_rate=0.01"]
    trained_dir = str(tmp_path / "out" / "trained")
    r = run_tool(tmp_path, *flags, "--targets=t", f"--export={trained_dir}")
    assert r.returncode == 0, r.stderr
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", jit_compile=False)
    model.fit(x, t, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    loaded = tf.saved_model.load(trained_dir)
    got = loaded.signatures["serving_default"](x=tf.constant(x))
    got = list(got.values())[0].numpy()
    np.testing.assert_allclose(got, model.predict(x, verbose=0), rtol=1e-4, atol=1e-5)
    untrained = tf.saved_model.load(export).signatures["serving_default"](x=tf.constant(x))
    assert np.abs(list(untrained.values())[0].numpy() - got).max() > 1e-3  # it changed
    assert hasattr(loaded, "serve")  # Keras's endpoint too
    # a NaN loss stops training and writes nothing
    nan_dir = str(tmp_path / "nan_export")
    r = run_tool(tmp_path, *flags, "--targets=nan", f"--export={nan_dir}")
    assert r.returncode != 0 and "the loss is nan" in r.stderr
    assert not os.path.exists(nan_dir)
    assert not [p for p in os.listdir(tmp_path) if "tf_ext_export" in p]
    # an existing export is not overwritten
    r = run_tool(tmp_path, *flags, "--targets=t", f"--export={trained_dir}")
    assert r.returncode != 0 and "epoch" not in r.stdout


@pytest.mark.parametrize("options,keras_optimizer_of", [
    ([], lambda keras: keras.optimizers.Adam(0.01)),
    (["optimizer=adagrad", "learning_rate=0.1", "initial_accumulator_value=0.5"],
     lambda keras: keras.optimizers.Adagrad(0.1, initial_accumulator_value=0.5)),
], ids=["adam", "adagrad-initial-accumulator"])
def test_c_api_trains_like_model_fit(options, keras_optimizer_of, tmp_path):
    """TfExtTrainer from a C program: per-step losses on an MLP match model.fit's (Adam; Adagrad
    with the C key initial_accumulator_value), the exported SavedModel answers as the trained
    Keras model, the signature and mode are reported, and hostile calls fail cleanly."""
    import keras
    import tensorflow as tf
    model = mlp(2, seed=11)
    export = str(tmp_path / "model")
    model.export(export, verbose=False)
    rng = np.random.default_rng(12)
    x = rng.normal(size=(N, 5)).astype(np.float32)
    t = rng.normal(size=(N, 2)).astype(np.float32)
    x.tofile(tmp_path / "x.raw")
    t.tofile(tmp_path / "t.raw")
    trained = str(tmp_path / "trained")
    runner = os.path.join(WORKSPACE, "tests", "train_c_test")
    r = subprocess.run([runner, export, str(tmp_path / "x.raw"), str(tmp_path / "t.raw"), str(N),
                        "5", "2", str(BATCH), str(EPOCHS), trained] + options,
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, TF_EXT_LIBRARY=LIBRARY))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "hostile calls ok" in r.stdout
    assert "signature serving_default mode inference\n" in r.stdout and "warning" not in r.stdout
    losses = [float(line.split()[3]) for line in r.stdout.splitlines() if line.startswith("step ")]
    assert len(losses) == EPOCHS * (N // BATCH)
    per_epoch = np.asarray(losses).reshape(EPOCHS, -1).mean(axis=1)
    model.compile(optimizer=keras_optimizer_of(keras), loss="mse", jit_compile=False)
    fit = model.fit(x, t, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    np.testing.assert_allclose(per_epoch, fit.history["loss"], rtol=1e-4)
    out = tf.saved_model.load(trained).signatures["serving_default"](x=tf.constant(x))
    np.testing.assert_allclose(list(out.values())[0].numpy(), model.predict(x, verbose=0),
                               rtol=1e-4, atol=1e-5)


def test_validation_loss_matches_model_fit_and_shuffle_is_seeded(tmp_path):
    import keras
    model = mlp(2, seed=13)
    export = str(tmp_path / "model")
    model.export(export, verbose=False)
    rng = np.random.default_rng(14)
    x, t = rng.normal(size=(N, 5)).astype(np.float32), rng.normal(size=(N, 2)).astype(np.float32)
    xv, tv = rng.normal(size=(20, 5)).astype(np.float32), rng.normal(size=(20, 2)).astype(np.float32)
    np.savez(tmp_path / "d.npz", x=x, t=t)
    np.savez(tmp_path / "v.npz", x=xv, t=tv)
    flags = [f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}", "--inputs=x", "--targets=t",
             "--loss=mse", f"--batch_size={BATCH}", f"--epochs={EPOCHS}", "--optimizer=adam",
             "--learning_rate=0.01"]
    r = run_tool(tmp_path, *flags, f"--validation={tmp_path / 'v.npz'}",
                 f"--history={tmp_path / 'h.csv'}")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("val_loss") == EPOCHS
    with open(tmp_path / "h.epochs.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["epoch", "loss", "val_loss"]
    assert [int(row["epoch"]) for row in rows] == list(range(EPOCHS))
    ours = [float(row["val_loss"]) for row in rows]
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", jit_compile=False)
    fit = model.fit(x, t, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0,
                    validation_data=(xv, tv))
    np.testing.assert_allclose(ours, fit.history["val_loss"], rtol=1e-4)
    np.testing.assert_allclose([float(row["loss"]) for row in rows], fit.history["loss"], rtol=1e-4)
    # --shuffle: the same seed, the same training; another seed, another
    def weights(*extra):
        out = tmp_path / f"w{len(os.listdir(tmp_path))}.npz"
        r = run_tool(tmp_path, *flags, "--shuffle", *extra, f"--save_weights={out}")
        assert r.returncode == 0, r.stderr
        return dict(np.load(out))
    a, b, c = weights("--seed=1"), weights("--seed=1"), weights("--seed=2")
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert any(not np.allclose(a[k], c[k]) for k in a)


def test_make_demo_training_part(tmp_path):
    """scripts/demo_train.py, which `make demo` runs (on TFRecord files): exit status 0 only when
    the loss fell and the trained SavedModel, loaded by Python, is more accurate than the
    untrained one."""
    script = os.path.join(WORKSPACE, "scripts", "demo_train.py")
    r = subprocess.run([sys.executable, script, f"--tf_ext_train={TOOL}", f"--library={LIBRARY}",
                        f"--work={tmp_path}"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "trained by tf_ext_train" in r.stdout and r.stdout.count("epoch ") == 8
    # from TFRecords, with metrics, validation, TensorBoard and a checkpoint per epoch
    assert "train-*.tfrecord" in r.stdout and r.stdout.count("val_accuracy") == 8
    assert "latest checkpoint: " in r.stdout and r.stdout.rstrip().endswith("demo-8")
    assert sorted(os.listdir(tmp_path / "train_demo" / "logs")) == ["train", "validation"]


def test_batchnorm_cnn_in_training_mode_matches_model_fit(tmp_path):
    """tf_ext.export_for_training adds a training-mode "train" signature: BatchNormalization
    normalizes with batch statistics and updates its moving averages, which the trainer runs in
    every step. A CNN with BatchNormalization trained with AdamW: losses, trained weights and
    moving statistics against model.fit; the export still answers in inference mode."""
    import keras
    import tensorflow as tf
    import tf_ext
    keras.utils.set_random_seed(21)
    x = keras.Input(shape=(8, 8, 3), name="image")
    # no bias before BatchNormalization: its gradient is round-off (the batch mean removes it),
    # which Adam's m / sqrt(v) would amplify into noise-driven updates
    h = keras.layers.Conv2D(4, 3, use_bias=False)(x)
    h = keras.layers.BatchNormalization(momentum=0.9)(h)
    h = keras.layers.ReLU()(h)
    model = keras.Model(x, keras.layers.Dense(3)(keras.layers.Flatten()(h)))
    export = str(tmp_path / "model")
    tf_ext.export_for_training(model, export)
    rng = np.random.default_rng(22)
    images = rng.normal(size=(N, 8, 8, 3)).astype(np.float32)
    labels = rng.integers(0, 3, size=(N,)).astype(np.int32)
    np.savez(tmp_path / "d.npz", image=images, label=labels)
    trained_dir = str(tmp_path / "trained")
    r = run_tool(tmp_path, f"--saved_model={export}", "--signature=train",
                 f"--data={tmp_path / 'd.npz'}", "--inputs=image", "--targets=label",
                 "--loss=sparse_categorical_crossentropy:from_logits", "--optimizer=adamw",
                 "--learning_rate=0.01", "--weight_decay=0.01", f"--batch_size={BATCH}",
                 f"--epochs={EPOCHS}", f"--history={tmp_path / 'h.csv'}",
                 f"--save_weights={tmp_path / 'w.npz'}", f"--export={trained_dir}")
    assert r.returncode == 0, r.stderr
    model.compile(optimizer=keras.optimizers.AdamW(0.01, weight_decay=0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=False)
    fit = model.fit(images, labels, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    _, ours = read_history(tmp_path / "h.csv")
    np.testing.assert_allclose(ours, fit.history["loss"], rtol=1e-4)
    trained = dict(np.load(tmp_path / "w.npz"))
    moving = [v for v in model.variables if "moving" in v.path]
    assert len(moving) == 2 and all(v.path in trained for v in moving)
    assert_weights(trained, model.trainable_variables + moving, atol=1e-5)
    assert np.abs(moving[0].numpy()).max() > 1e-3  # the moving mean moved from its zeros
    # inference mode (moving statistics) in the trained export, as the trained Keras model
    loaded = tf.saved_model.load(trained_dir)
    got = list(loaded.signatures["serving_default"](image=tf.constant(images)).values())[0]
    np.testing.assert_allclose(got.numpy(), model.predict(images, verbose=0), rtol=1e-4, atol=1e-4)


def test_checkpoint_restores_in_python_and_resumes(tmp_path):
    """--checkpoint writes an object-based checkpoint: Python's
    tf.train.Checkpoint(root=tf.saved_model.load(dir)).restore(prefix) restores the trained model
    (assert_existing_objects_matched passes). --resume continues with the optimizer's state at the
    checkpoint's epoch: 3 epochs, then resumed to 5, give the losses and weights of 5 uninterrupted ones, and the optimizer's iteration
    count (Trainer::Iterations) goes on from the checkpoint's."""
    import tensorflow as tf
    model = mlp(2, seed=31)
    export = str(tmp_path / "model")
    model.export(export, verbose=False)
    rng = np.random.default_rng(32)
    x, t = rng.normal(size=(N, 5)).astype(np.float32), rng.normal(size=(N, 2)).astype(np.float32)
    np.savez(tmp_path / "d.npz", x=x, t=t)
    flags = [f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}", "--inputs=x", "--targets=t",
             "--loss=mse", f"--batch_size={BATCH}", "--optimizer=adam", "--learning_rate=0.01"]

    def train(name, epochs, iterations, *extra):
        r = run_tool(tmp_path, *flags, f"--epochs={epochs}", f"--history={tmp_path / name}.csv",
                     f"--save_weights={tmp_path / name}.npz", *extra)
        assert r.returncode == 0, r.stderr
        # Trainer::Iterations: the optimizer's step count, the checkpoint's included on --resume
        assert f"optimizer iterations: {iterations}\n" in r.stdout, r.stdout
        with open(f"{tmp_path / name}.csv") as f:
            losses = [float(row["loss"]) for row in csv.DictReader(f)]
        return losses, dict(np.load(f"{tmp_path / name}.npz"))

    steps = N // BATCH
    full, full_w = train("full", 5, 5 * steps)
    first, first_w = train("first", 3, 3 * steps, f"--checkpoint={tmp_path / 'ckpt' / 'step'}")
    # DIR/NAME-<epochs done>; resumed at its epoch: --epochs=5 trains the 4th and 5th
    rest, rest_w = train("rest", 5, 5 * steps, f"--resume={tmp_path / 'ckpt' / 'step-3'}")
    np.testing.assert_allclose(first + rest, full, rtol=1e-5)
    for k in full_w:
        np.testing.assert_allclose(rest_w[k], full_w[k], rtol=1e-5, atol=1e-7, err_msg=k)
    # Python restores the 3-epoch model from the checkpoint
    loaded = tf.saved_model.load(export)
    status = tf.train.Checkpoint(root=loaded).restore(str(tmp_path / "ckpt" / "step-3"))
    status.assert_existing_objects_matched()
    got = list(loaded.signatures["serving_default"](x=tf.constant(x)).values())[0].numpy()
    model.set_weights([first_w[v.path] for v in model.weights])
    np.testing.assert_allclose(got, model.predict(x, verbose=0), rtol=1e-5, atol=1e-6)
    # a checkpoint of another optimizer's state is refused, naming what is missing
    r = run_tool(tmp_path, *[f for f in flags if not f.startswith("--optimizer")], "--optimizer=sgd",
                 "--momentum=0.9", "--epochs=4", f"--resume={tmp_path / 'ckpt' / 'step-3'}")
    assert r.returncode != 0 and "has no optimizer state" in r.stderr, r.stderr


def test_progress_bar_on_a_terminal_one_line_per_epoch_otherwise(tmp_path):
    import pty
    export = str(tmp_path / "model")
    mlp(2).export(export, verbose=False)
    rng = np.random.default_rng(41)
    np.savez(tmp_path / "d.npz", x=rng.normal(size=(N, 5)).astype(np.float32),
             t=rng.normal(size=(N, 2)).astype(np.float32))
    args = [TOOL, f"--library={LIBRARY}", f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}",
            "--inputs=x", "--targets=t", "--loss=mse", f"--batch_size={BATCH}", "--epochs=2"]
    piped = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert piped.returncode == 0, piped.stderr
    assert "\r" not in piped.stdout and piped.stdout.count("epoch ") == 2
    main, child = pty.openpty()
    p = subprocess.Popen(args, stdout=child, stderr=subprocess.DEVNULL, close_fds=True)
    os.close(child)
    out = b""
    while True:
        try:
            data = os.read(main, 4096)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        out += data
    assert p.wait(timeout=300) == 0
    text = out.decode()
    assert f"\repoch 1/2 [" in text and f"] {N}/{N} loss " in text  # the bar, redrawn in place
    assert "epoch 2/2: loss" in text


def test_options_are_one_table_for_flags_c_keys_and_docs():
    """Each trainer option is declared once (tf_ext/train/options/options.cc): tf_ext_train's flags and
    the C API's keys (both listed by --help) come from that table, and docs/training.md's flag
    table lists exactly the tool's flags and, in its C key column, exactly the keys."""
    r = subprocess.run([TOOL, "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    flags = set(re.findall(r"^  --([a-z0-9_]+)", r.stdout, re.M)) - {"help"}
    keys = set(re.search(r"TfExtNewTrainer's keys, flags without '--'\): ([a-z0-9_, ]+)\.",
                         r.stdout).group(1).split(", "))
    assert "initial_accumulator_value" in flags and "initial_accumulator_value" in keys
    with open(os.path.join(WORKSPACE, "docs", "training.md")) as f:
        text = f.read()
    table = text[text.index("| flag | C key | meaning |"):]
    table = table[:table.index("\n\n")]
    rows = [line.split("|")[1:3] for line in table.splitlines()[2:]]
    assert set(re.findall(r"`--([a-z0-9_]+)", "".join(r[0] for r in rows))) == flags
    assert set(re.findall(r"`([a-z0-9_]+)`", "".join(r[1] for r in rows))) == keys
    for flag_cell, key_cell in rows:  # a key sits on its flag's row
        assert set(re.findall(r"`([a-z0-9_]+)`", key_cell)) <= set(
            re.findall(r"`--([a-z0-9_]+)", flag_cell)), (flag_cell, key_cell)


def batchnorm_mlp(seed):
    import keras
    keras.utils.set_random_seed(seed)
    x = keras.Input(shape=(5,), name="x")
    h = keras.layers.BatchNormalization(momentum=0.9)(keras.layers.Dense(8, use_bias=False)(x))
    return keras.Model(x, keras.layers.Dense(2)(keras.layers.Activation("tanh")(h)))


def mse_data(tmp_path, seed, **names):
    rng = np.random.default_rng(seed)
    arrays = {name: rng.normal(size=(N, d)).astype(np.float32) for name, d in names.items()}
    arrays["t"] = rng.normal(size=(N, 2)).astype(np.float32)
    np.savez(tmp_path / "d.npz", **arrays)
    return arrays


def fit_sgd(model, x, t, epochs=EPOCHS):
    import keras
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", jit_compile=False)
    return model.fit(x, t, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0)


def test_train_signature_is_the_default_and_is_reported(tmp_path):
    """A SavedModel with a "train" signature (tf_ext.export_for_training) trains it with no
    --signature, as model.fit trains (batch statistics, moving averages updated), and the tool
    says which signature and mode; --signature=serving_default still picks the inference
    function, with a warning."""
    import tf_ext
    model = batchnorm_mlp(31)
    export = str(tmp_path / "model")
    tf_ext.export_for_training(model, export)
    d = mse_data(tmp_path, 32, x=5)
    base = [f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}", "--inputs=x", "--targets=t",
            "--loss=mse", "--learning_rate=0.1", f"--batch_size={BATCH}"]
    r = run_tool(tmp_path, *base, f"--epochs={EPOCHS}", f"--history={tmp_path / 'h.csv'}",
                 f"--save_weights={tmp_path / 'w.npz'}")
    assert r.returncode == 0, r.stderr
    assert "training signature 'train' in training mode\n" in r.stdout and "warning" not in r.stderr
    fit = fit_sgd(model, d["x"], d["t"])
    _, ours = read_history(tmp_path / "h.csv")
    np.testing.assert_allclose(ours, fit.history["loss"], rtol=1e-4)
    moving = [v for v in model.variables if "moving" in v.path]
    assert_weights(dict(np.load(tmp_path / "w.npz")), model.trainable_variables + moving, atol=1e-5)
    r = run_tool(tmp_path, *base, "--signature=serving_default")
    assert r.returncode == 0, r.stderr
    assert "training signature 'serving_default' in inference mode\n" in r.stdout
    assert ("tf_ext_train: warning: signature 'serving_default' runs BatchNormalization in "
            "inference mode") in r.stderr
    assert "This SavedModel's 'train' signature runs the model in training mode." in r.stderr


def test_inference_only_batchnorm_export_trains_with_a_warning(tmp_path):
    """A model.export of a model with BatchNormalization has only the inference function: it
    trains (the moving statistics stay as they are) with a warning naming
    tf_ext.export_for_training."""
    model = batchnorm_mlp(33)
    export = str(tmp_path / "model")
    model.export(export, verbose=False)
    mse_data(tmp_path, 34, x=5)
    r = run_tool(tmp_path, f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}", "--inputs=x",
                 "--targets=t", "--loss=mse", f"--batch_size={BATCH}",
                 f"--save_weights={tmp_path / 'w.npz'}")
    assert r.returncode == 0, r.stderr
    assert "training signature 'serving_default' in inference mode\n" in r.stdout
    warning = re.search(r"tf_ext_train: warning: (.*)", r.stderr).group(1)
    assert warning.startswith("signature 'serving_default' runs BatchNormalization in inference "
                              "mode: it normalizes with its moving statistics ("), warning
    assert warning.endswith("Export the model with tf_ext.export_for_training to train it in "
                            "training mode, as model.fit does."), warning
    trained = dict(np.load(tmp_path / "w.npz"))
    for v in model.variables:
        moved = not np.allclose(trained[v.path], v.numpy())
        assert moved == v.trainable, v.path  # weights trained, moving statistics untouched


def test_one_input_is_fed_by_any_key(tmp_path):
    """An unnamed keras.Input is exported as keras_tensor_<N>: with one input, any single
    --inputs key feeds it. Trained as model.fit trains."""
    import keras
    import tensorflow as tf
    keras.utils.set_random_seed(35)
    x = keras.Input(shape=(5,))
    model = keras.Model(x, keras.layers.Dense(2)(keras.layers.Dense(8, activation="tanh")(x)))
    export = str(tmp_path / "model")
    model.export(export, verbose=False)
    (name,) = tf.saved_model.load(export).signatures["serving_default"].structured_input_signature[1]
    assert name.startswith("keras_tensor")
    d = mse_data(tmp_path, 36, features=5)
    r = run_tool(tmp_path, f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}",
                 "--inputs=features", "--targets=t", "--loss=mse", "--learning_rate=0.1",
                 f"--batch_size={BATCH}", f"--epochs={EPOCHS}", f"--history={tmp_path / 'h.csv'}")
    assert r.returncode == 0, r.stderr
    fit = fit_sgd(model, d["features"], d["t"])
    _, ours = read_history(tmp_path / "h.csv")
    np.testing.assert_allclose(ours, fit.history["loss"], rtol=1e-4)


def test_several_inputs_by_name_or_key_to_input(tmp_path):
    """With several inputs, a key equal to an input's name feeds it, KEY:INPUT feeds another
    array to it (trained as model.fit trains), and anything else is an error listing the
    signature's inputs with dtypes and shapes."""
    import keras
    keras.utils.set_random_seed(37)
    a = keras.Input(shape=(5,), name="a")
    b = keras.Input(shape=(3,), name="b")
    h = keras.layers.Concatenate()([a, b])
    model = keras.Model([a, b], keras.layers.Dense(2)(keras.layers.Dense(8, activation="tanh")(h)))
    export = str(tmp_path / "model")
    model.export(export, verbose=False)
    d = mse_data(tmp_path, 38, a=5, q=3)
    base = [f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}", "--targets=t", "--loss=mse",
            "--learning_rate=0.1", f"--batch_size={BATCH}"]
    r = run_tool(tmp_path, *base, "--inputs=q:b,a", f"--epochs={EPOCHS}",
                 f"--history={tmp_path / 'h.csv'}")
    assert r.returncode == 0, r.stderr
    fit = fit_sgd(model, [d["a"], d["q"]], d["t"])
    _, ours = read_history(tmp_path / "h.csv")
    np.testing.assert_allclose(ours, fit.history["loss"], rtol=1e-4)
    takes = "; signature 'serving_default' takes a: float32 [?,5], b: float32 [?,3]"
    hint = " (inputs=KEY:INPUT feeds the data's KEY to the input INPUT)"
    for inputs, message in [
        ("a,q", "input 'q' is not one of the signature's inputs"),
        ("a", "input 'b' (float32 [?,3]) is missing"),
        ("a,q:a", "input 'a' is fed twice"),
    ]:
        r = run_tool(tmp_path, *base, f"--inputs={inputs}")
        assert r.returncode == 1, r.stdout
        assert f"tf_ext_train: trainer: {message}{takes}{hint}\n" in r.stderr, (inputs, r.stderr)


def test_one_input_fed_by_any_key_but_not_by_a_wrong_input_name(tmp_path):
    """With one input, a data key of any name feeds it (Keras names an unnamed Input
    keras_tensor_<N>); KEY:INPUT with an INPUT that is not the signature's is an error naming
    the signature's input, not training on the one input anyway."""
    import keras
    keras.utils.set_random_seed(38)
    x = keras.Input(shape=(5,), name="x")
    model = keras.Model(x, keras.layers.Dense(2)(x))
    export = str(tmp_path / "model")
    model.export(export, verbose=False)
    mse_data(tmp_path, 38, features=5)
    base = [f"--saved_model={export}", f"--data={tmp_path / 'd.npz'}", "--targets=t", "--loss=mse",
            f"--batch_size={BATCH}", "--epochs=1"]
    ok = run_tool(tmp_path, *base, "--inputs=features")
    assert ok.returncode == 0, ok.stderr
    for inputs in ("features:no_such_input", "features:x2"):
        r = run_tool(tmp_path, *base, f"--inputs={inputs}")
        assert r.returncode == 1, r.stdout
        name = inputs.split(":")[1]
        assert (f"tf_ext_train: trainer: input '{name}' is not one of the signature's inputs; "
                "signature 'serving_default' takes x: float32 [?,5]") in r.stderr, r.stderr
        assert "epoch 1/1" not in r.stdout, r.stdout

