"""tf_ext_train on TFRecord files of tf.train.Example (tf_ext/train/data/tfrecord_data.cc: TensorFlow's
own tf.data kernels in C++) against Keras 3's model.fit on the equivalent tf.data pipeline over
the same files (TFRecordDataset(files) -> batch -> parse_example -> prefetch): the per-epoch
losses of an MLP and of a small CNN agree to a relative 1e-4, with a partial last batch and
several files. Memory is bounded by the pipeline's buffers, not by the data: the peak resident
size (ru_maxrss, the process's VmHWM) of a 1-epoch run on ~128 MB of records exceeds that on
~8 MB by at most the buffers' size plus 64 MB. Bad input (a corrupt record, a file truncated
inside a record, a feature missing or of another shape, a name in --inputs, --targets or
--features matching nothing, a glob matching nothing, a --features syntax error) gets one clear
error naming the value, exit status 1, no crash and no hang; --skip_corrupt_records trains on a
bad file's records before the bad one, with a warning."""
import csv
import os
import re
import subprocess

import numpy as np
import pytest

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.path.join(RUNFILES, "tf_ext") if RUNFILES else os.getcwd()
TOOL = os.path.join(WORKSPACE, "tf_ext", "tf_ext_train")
LIBRARY = os.path.join(WORKSPACE, "tf_ext", "_tf_ext_ops.so")
EPOCHS = 3


def run_tool(*flags, timeout=300):
    return subprocess.run([TOOL, f"--library={LIBRARY}"] + list(flags), capture_output=True,
                          text=True, timeout=timeout)


def write_tfrecords(paths, x, y):
    """Examples i of x (float, flattened) and y (int64 or float) spread over `paths` in order."""
    import tensorflow as tf
    parts = np.array_split(np.arange(len(x)), len(paths))
    for path, rows in zip(paths, parts):
        with tf.io.TFRecordWriter(str(path)) as w:
            for i in rows:
                yv = np.atleast_1d(y[i])
                label = (tf.train.Feature(int64_list=tf.train.Int64List(value=yv))
                         if np.issubdtype(yv.dtype, np.integer)
                         else tf.train.Feature(float_list=tf.train.FloatList(value=yv)))
                e = tf.train.Example(features=tf.train.Features(feature={
                    "x": tf.train.Feature(float_list=tf.train.FloatList(value=x[i].ravel())),
                    "y": label}))
                w.write(e.SerializeToString())


def keras_dataset(files, x_shape, y_feature, batch, examples):
    """The tf.data pipeline model.fit trains on: the same files, records in order, batched, then
    parsed. Its cardinality is asserted: with an unknown one, Keras 3 ends each epoch by a step
    that finds no data, and the optimizer's steps after the first epoch differ from
    model.fit's on the same batches of arrays (Adam's bias correction is off by a step)."""
    import tensorflow as tf
    spec = {"x": tf.io.FixedLenFeature(x_shape, tf.float32), "y": y_feature}

    def parse(serialized):
        f = tf.io.parse_example(serialized, spec)
        return f["x"], f["y"]

    records = tf.data.TFRecordDataset([str(f) for f in files])
    records = records.apply(tf.data.experimental.assert_cardinality(examples))
    return (records.batch(batch).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
            .prefetch(tf.data.AUTOTUNE))


def epoch_losses(history):
    with open(str(history)[:-4] + ".epochs.csv") as f:
        return [float(r["loss"]) for r in csv.DictReader(f)]


def mlp():
    import keras
    keras.utils.set_random_seed(1)
    x = keras.Input(shape=(5,), name="x")
    h = keras.layers.Dense(8, activation="tanh")(x)
    return keras.Model(x, keras.layers.Dense(2)(h))


def cnn():
    import keras
    keras.utils.set_random_seed(2)
    x = keras.Input(shape=(8, 8, 3), name="x")
    h = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(x)
    h = keras.layers.MaxPooling2D()(h)
    h = keras.layers.Flatten()(h)
    return keras.Model(x, keras.layers.Dense(3)(h))


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_losses_match_model_fit_on_tf_data(name, tmp_path):
    import keras
    import tensorflow as tf
    import tf_ext
    rng = np.random.default_rng(3)
    n, batch = 52, 16  # 3 full batches and a partial one of 4
    if name == "mlp":
        model, x_shape = mlp(), (5,)
        y = rng.normal(size=(n, 2)).astype(np.float32)
        loss, keras_loss = "mse", "mse"
        features, y_feature = "y:float32:2", tf.io.FixedLenFeature([2], tf.float32)
    else:
        model, x_shape = cnn(), (8, 8, 3)
        y = rng.integers(0, 3, size=(n,)).astype(np.int64)
        loss = "sparse_categorical_crossentropy:from_logits"
        keras_loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        features, y_feature = "y:int64:", tf.io.FixedLenFeature([], tf.int64)
    x = rng.normal(size=(n,) + x_shape).astype(np.float32)
    export = str(tmp_path / "model")
    tf_ext.export_for_training(model, export)
    # File names whose sorted order is the examples' order; listed as a glob.
    files = [tmp_path / f"train-{i:02d}.tfrecord" for i in range(3)]
    write_tfrecords(files, x, y)
    history = tmp_path / "history.csv"
    r = run_tool(f"--saved_model={export}", f"--data={tmp_path / 'train-*.tfrecord'}", "--inputs=x",
                 "--targets=y", f"--features={features}", f"--loss={loss}", "--optimizer=adam",
                 "--learning_rate=0.01", f"--batch_size={batch}", f"--epochs={EPOCHS}",
                 f"--history={history}")
    assert r.returncode == 0, r.stdout + r.stderr
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01), loss=keras_loss,
                  jit_compile=False)
    fit = model.fit(keras_dataset(files, x_shape, y_feature, batch, n), epochs=EPOCHS, verbose=0)
    ours = epoch_losses(history)
    np.testing.assert_allclose(ours, fit.history["loss"], rtol=1e-4)
    assert fit.history["loss"][-1] < fit.history["loss"][0]  # it trained
    printed = [float(v) for v in re.findall(r"epoch \d+/\d+: loss ([-+.0-9e]+)", r.stdout)]
    np.testing.assert_allclose(printed, fit.history["loss"], rtol=1e-4)
    with open(history) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == EPOCHS * 4  # the partial batch is a step


def peak_mb(args):
    """Runs the tool from a fresh python process whose only child it is: that process's
    RUSAGE_CHILDREN ru_maxrss is the tool's VmHWM, in MiB."""
    import json
    import sys
    code = ("import json, resource, subprocess, sys; "
            "r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
            "print(json.dumps([r.returncode, r.stdout, r.stderr, "
            "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0]))")
    r = subprocess.run([sys.executable, "-c", code, TOOL, f"--library={LIBRARY}"] + args,
                       capture_output=True, text=True, timeout=600)
    rc, out, err, peak = json.loads(r.stdout)
    assert rc == 0, out + err
    return peak, out


def write_sized(directory, megabytes, files=8, width=1024):
    """~megabytes MiB of records (`width` floats x and a float y each) in `files` files; returns
    the record's size in bytes and the number of records."""
    import tensorflow as tf
    os.makedirs(directory, exist_ok=True)
    template = tf.train.Example(features=tf.train.Features(feature={
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=np.zeros(width, np.float32))),
        "y": tf.train.Feature(float_list=tf.train.FloatList(value=[0.0]))}))
    record = len(template.SerializeToString())
    n = int(megabytes * 2**20 / record)
    rng = np.random.default_rng(0)
    block = rng.normal(size=(256, width)).astype(np.float32)
    for i in range(files):
        with tf.io.TFRecordWriter(os.path.join(directory, f"part-{i}.tfrecord")) as w:
            for j in range(n // files):
                row = block[j % 256]
                e = tf.train.Example(features=tf.train.Features(feature={
                    "x": tf.train.Feature(float_list=tf.train.FloatList(value=row)),
                    "y": tf.train.Feature(float_list=tf.train.FloatList(value=[row[0]]))}))
                w.write(e.SerializeToString())
    return record, n


def test_memory_is_bounded_by_buffers_not_data(tmp_path):
    """128 MB against 8 MB of records: the peak resident sizes differ by at most the buffers'
    size + 64 MB. Buffers (batch B = 32, record R bytes, 8 files): 4 files open at once, each
    with a 1 MiB read buffer and B records read ahead; at most 32 batches in flight between
    the batching, the parallel parse calls and the prefetch buffer, each held serialized and
    parsed (2 x B x R)."""
    import keras
    width, batch = 1024, 32
    keras.utils.set_random_seed(0)
    x = keras.Input(shape=(width,), name="x")
    model = keras.Model(x, keras.layers.Dense(1)(keras.layers.Dense(16, activation="relu")(x)))
    export = str(tmp_path / "model")
    model.export(export, verbose=False)
    peaks, npz_peaks = {}, {}
    for size in (8, 128):
        record, n = write_sized(str(tmp_path / f"d{size}"), size, width=width)
        peaks[size], out = peak_mb([f"--saved_model={export}", f"--data={tmp_path}/d{size}/*.tfrecord",
                                    "--inputs=x", "--targets=y", "--features=y:float32:",
                                    f"--batch_size={batch}", "--epochs=1",
                                    f"--history={tmp_path}/h{size}.csv"])
        with open(tmp_path / f"h{size}.csv") as f:
            assert len(list(csv.DictReader(f))) == -(-(n // 8 * 8) // batch)  # every record read
        # The control: the same data as an .npz, which the tool holds in memory, shows the
        # measurement sees data held.
        rows = n // 8 * 8
        np.savez(tmp_path / f"d{size}.npz", x=np.zeros((rows, width), np.float32) + 1,
                 y=np.zeros((rows,), np.float32))
        npz_peaks[size], _ = peak_mb([f"--saved_model={export}", f"--data={tmp_path}/d{size}.npz",
                                      "--inputs=x", "--targets=y", f"--batch_size={batch}",
                                      "--epochs=1"])
        os.remove(tmp_path / f"d{size}.npz")
    buffers_mb = (4 * (2**20 + batch * record) + 32 * 2 * batch * record) / 2**20
    print(f"peak VmHWM: TFRecords 8 MB {peaks[8]:.1f} MiB, 128 MB {peaks[128]:.1f} MiB; "
          f".npz 8 MB {npz_peaks[8]:.1f} MiB, 128 MB {npz_peaks[128]:.1f} MiB; "
          f"buffers {buffers_mb:.1f} MiB")
    assert npz_peaks[128] - npz_peaks[8] >= 100, npz_peaks
    assert peaks[128] - peaks[8] <= buffers_mb + 64, (peaks, buffers_mb)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """An exported MLP and 40 good records in two files."""
    tmp = tmp_path_factory.mktemp("small")
    model = mlp()
    export = str(tmp / "model")
    model.export(export, verbose=False)
    rng = np.random.default_rng(4)
    x = rng.normal(size=(40, 5)).astype(np.float32)
    y = rng.normal(size=(40, 2)).astype(np.float32)
    write_tfrecords([tmp / "a.tfrecord", tmp / "b.tfrecord"], x, y)
    return tmp, export, x, y


def test_bad_input_gets_one_clear_error(small, tmp_path):
    tmp, export, x, y = small
    good = open(tmp / "a.tfrecord", "rb").read()
    corrupt = bytearray(good)
    corrupt[len(corrupt) // 2] ^= 0x55
    (tmp_path / "corrupt.tfrecord").write_bytes(bytes(corrupt))
    # Records of x with 4 values, not 5.
    write_tfrecords([tmp_path / "short.tfrecord"], x[:, :4], y)
    base = [f"--saved_model={export}", "--inputs=x", "--batch_size=8", "--epochs=1"]
    cases = [
        ([f"--data={tmp_path / 'corrupt.tfrecord'}", "--features=y:float32:2"],
         [str(tmp_path / "corrupt.tfrecord"), "corrupt"]),
        ([f"--data={tmp / 'a.tfrecord'}", "--features=y:float32:2", "--targets=label"],
         ["label"]),
        ([f"--data={tmp / 'a.tfrecord'}", "--features=label:float32:2", "--targets=label"],
         ["label", str(tmp / "a.tfrecord")]),
        ([f"--data={tmp_path / 'short.tfrecord'}", "--features=y:float32:2"],
         ["x", str(tmp_path / "short.tfrecord")]),
        ([f"--data={tmp / 'a.tfrecord'}", "--features=y:float32:3"], ["y"]),
        ([f"--data={tmp / 'nothing-*.tfrecord'}", "--features=y:float32:2"],
         ["nothing-*.tfrecord", "matches no file"]),
        ([f"--data={tmp / 'a.tfrecord'}", "--features=y:float32"], ["'y:float32'", "NAME:DTYPE:SHAPE"]),
        ([f"--data={tmp / 'a.tfrecord'}", "--features=y:float:2"], ["float"]),
        ([f"--data={tmp / 'a.tfrecord'}", "--features=y:float32:2x"], ["2x"]),
        ([f"--data={tmp / 'a.tfrecord'}"], ["'y'", "--features"]),
        ([f"--data={tmp / 'a.tfrecord'}", "--features=y:float32:2", "--compression=ZIP"], ["ZIP"]),
    ]
    for flags, words in cases:
        if not any(f.startswith("--targets=") for f in flags):
            flags = flags + ["--targets=y"]
        r = run_tool(*(base + flags), timeout=120)
        assert r.returncode == 1, (flags, r.returncode, r.stdout, r.stderr)
        errors = [line for line in r.stderr.splitlines() if line.startswith("tf_ext_train:")]
        assert len(errors) == 1, (flags, r.stderr)
        for w in words:
            assert w in errors[0], (flags, w, errors[0])


def one_error(r, flags):
    assert r.returncode == 1, (flags, r.returncode, r.stdout, r.stderr)
    errors = [line for line in r.stderr.splitlines() if line.startswith("tf_ext_train:")]
    assert len(errors) == 1, (flags, r.stderr)
    assert "epoch 1/1" not in r.stdout, (flags, r.stdout)
    return errors[0]


def test_truncated_or_corrupt_records_stop_training_or_are_skipped(small, tmp_path):
    """A file cut inside a record (its 12-byte header, its data, its trailing CRC: TensorFlow's
    reader ends a file cut in the header silently) or with a record failing its length's or its
    data's CRC is one error naming the file, the byte offset and the records read before it.
    With --skip_corrupt_records the same file trains on those records, with a warning saying so:
    one step per record trained on at batch size 1."""
    import struct
    tmp, export, _, _ = small
    good = open(tmp / "a.tfrecord", "rb").read()
    record = 16 + struct.unpack("<Q", good[:8])[0]  # every record of the fixture: x 5, y 2 floats
    assert len(good) == 20 * record
    cuts = {"header": 6 * record + 5, "data": 6 * record + 20, "crc": 7 * record - 2}
    bad = {}
    for name, end in cuts.items():
        bad[name] = (good[:end], 6, f"is truncated: it ends inside the record at byte offset {6 * record} (")
    for name, byte, what in [("length_crc", 9, "length"), ("data_crc", 12 + 3, "data")]:
        flipped = bytearray(good)
        flipped[3 * record + byte] ^= 0x10
        bad[name] = (bytes(flipped), 3, f"has a corrupt record at byte offset {3 * record} "
                                        f"(the CRC of its {what} does not match)")
    base = [f"--saved_model={export}", "--inputs=x", "--targets=y", "--features=y:float32:2",
            "--epochs=1"]
    for name, (data, before, what) in bad.items():
        path = tmp_path / f"{name}.tfrecord"
        path.write_bytes(data)
        flags = base + [f"--data={path},{tmp / 'b.tfrecord'}", "--batch_size=8"]
        error = one_error(run_tool(*flags, timeout=120), flags)
        assert f"TFRecord file '{path}' {what}" in error, (name, error)
        assert f"after {before} records read from it" in error, (name, error)
        assert "option 'skip_corrupt_records'" in error, (name, error)
        history = tmp_path / f"{name}.csv"
        r = run_tool(*(flags[:-1] + ["--batch_size=1", "--skip_corrupt_records",
                                     f"--history={history}"]), timeout=120)
        assert r.returncode == 0, (name, r.stdout, r.stderr)
        warning = [line for line in r.stderr.splitlines() if f"TFRecord file '{path}' {what}" in line]
        assert len(warning) == 1, (name, r.stderr)
        assert (f"after {before} records read from it; option 'skip_corrupt_records': reading the "
                f"{before} records before it, skipping the rest of the file") in warning[0], warning
        with open(history) as f:
            assert len(list(csv.DictReader(f))) == before + 20, name  # b.tfrecord's 20 records too


def test_unmatched_names_are_errors_listing_what_exists(small, tmp_path):
    """Each --inputs, --targets, --sample_weights and --features name matching nothing, on
    either side of --inputs=KEY:INPUT, is one error naming it and listing what there is: the
    records' features (or the .npz's arrays), the signature's inputs, the keys fed."""
    tmp, export, x, y = small
    np.savez(tmp_path / "d.npz", x=x, y=y)
    records = tmp / "a.tfrecord"
    for data, has in [(records, f"the records of {records} have no feature 'nope' (the first has: x, y)"),
                      (tmp_path / "d.npz", f"{tmp_path / 'd.npz'} has no array 'nope' (it has: x, y)")]:
        features = ["--features=y:float32:2"] if data == records else []
        takes = ("trainer: input 'nope' is not one of the signature's inputs; signature "
                 "'serving_default' takes x: float32 [?,5]")
        for flags, message in [
            (["--inputs=nope", "--targets=y"], f"option 'inputs': {has}"),
            (["--inputs=nope:x", "--targets=y"], f"option 'inputs': {has}"),
            (["--inputs=x:nope", "--targets=y"], takes),
            (["--inputs=x", "--targets=nope"], f"option 'targets': {has}"),
            (["--inputs=x", "--targets=y", "--sample_weights=nope"], f"option 'sample_weights': {has}"),
            (["--inputs=x", "--targets=y", "--features=y:float32:2,nope:float32:"],
             "option 'features': 'nope' is none of the inputs, targets or sample weights "
             "(those are: x, y)"),
        ]:
            if not any(f.startswith("--features=") for f in flags):
                flags = flags + features
            flags = [f"--saved_model={export}", f"--data={data}", "--batch_size=8",
                     "--epochs=1"] + flags
            error = one_error(run_tool(*flags, timeout=120), flags)
            assert f"tf_ext_train: {message}" in error, (flags, error)


def test_shuffle_buffer_is_reproducible_and_reshuffles(small):
    """--shuffle_buffer: the same seed the same losses; another seed other losses; with a
    shuffle the epochs differ from the file order's."""
    tmp, export, _, _ = small

    def losses(*flags):
        r = run_tool(f"--saved_model={export}", f"--data={tmp}/*.tfrecord", "--inputs=x",
                     "--targets=y", "--features=y:float32:2", "--batch_size=8", "--epochs=2",
                     "--learning_rate=0.05", f"--history={tmp}/h.csv", *flags)
        assert r.returncode == 0, r.stdout + r.stderr
        with open(f"{tmp}/h.csv") as f:
            return [float(row["loss"]) for row in csv.DictReader(f)]

    ordered = losses()
    a, b = losses("--shuffle_buffer=16", "--seed=3"), losses("--shuffle_buffer=16", "--seed=3")
    assert a == b
    assert losses("--shuffle_buffer=16", "--seed=4") != a
    assert a != ordered
