"""Step time of tf_ext_train (C++, no Python in that process) against Keras 3's model.fit on the
same model, batches and optimizer: an MLP, a small CNN with BatchNormalization
and a ResNet-18-sized CNN at 64x64, each trained in training mode (tf_ext.export_for_training).
Runs are interleaved (C++, Python, C++, Python); each side's figure is the median steady-state
step time (the first step, which builds the graph, left out), the ratio C++/Python.

    bench_train.py --tf_ext_train=BIN --library=SO --work=DIR [--out=DIR] [--models=mlp,cnn,resnet18]
                   [--sources=npz,tfrecord,memory,budget] [--memory_mb=4096] [--tfrecord_files=4]
                   [--budget=0.5]

TFRecord rows (--sources=tfrecord): the same examples written as tf.train.Example records in
--tfrecord_files files; tf_ext_train reading them (tf_ext/train/data/tfrecord_data.cc) against
model.fit on the equivalent tf.data pipeline (TFRecordDataset(files) -> batch -> parse_example
with AUTOTUNE parallel calls -> prefetch(AUTOTUNE)) and against tf_ext_train from the .npz in
memory. Each figure is the wall time of the epochs after the first (--epochs, 3 by default)
over their steps, read when each epoch's line is printed (tf_ext_train) or its on_epoch_end
runs (model.fit): reading and parsing included, as model.fit's step function pulls its batch
itself. The memory row (--sources=memory)
is tf_ext_train's peak resident size (VmHWM) on --memory_mb MB of records (4 GB) against 64 MB.
Budget rows (--sources=budget, --budget=0.5): tf_ext_train --memory_budget against no budget on
the same model and .npz, interleaved: the median step times, their ratio, each side's peak VmHWM.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np


def mlp():
    import keras
    x = keras.Input(shape=(256,), name="x")
    h = keras.layers.Dense(512, activation="relu")(x)
    h = keras.layers.Dense(512, activation="relu")(h)
    return keras.Model(x, keras.layers.Dense(10)(h)), (256,), 64


def cnn():
    import keras
    x = keras.Input(shape=(32, 32, 3), name="x")
    h = x
    for filters in (32, 64):
        h = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(h)
        h = keras.layers.BatchNormalization()(h)
        h = keras.layers.ReLU()(h)
        h = keras.layers.MaxPooling2D()(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    return keras.Model(x, keras.layers.Dense(10)(h)), (32, 32, 3), 32


def resnet18():
    import keras
    L = keras.layers

    def block(h, filters, stride):
        shortcut = h
        h = L.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False)(h)
        h = L.ReLU()(L.BatchNormalization()(h))
        h = L.BatchNormalization()(L.Conv2D(filters, 3, padding="same", use_bias=False)(h))
        if stride != 1 or shortcut.shape[-1] != filters:
            shortcut = L.BatchNormalization()(
                L.Conv2D(filters, 1, strides=stride, use_bias=False)(shortcut))
        return L.ReLU()(L.Add()([h, shortcut]))

    x = keras.Input(shape=(64, 64, 3), name="x")
    h = L.ReLU()(L.BatchNormalization()(L.Conv2D(64, 7, strides=2, padding="same", use_bias=False)(x)))
    h = L.MaxPooling2D(3, strides=2, padding="same")(h)
    for filters, stride in ((64, 1), (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1)):
        h = block(h, filters, stride)
    h = L.GlobalAveragePooling2D()(h)
    return keras.Model(x, L.Dense(10)(h)), (64, 64, 3), 32


MODELS = {"mlp": mlp, "cnn": cnn, "resnet18": resnet18}


def prepare_model(name, work, steps):
    """MODELS[name] built (seed 0), exported with tf_ext.export_for_training to WORK/model, and
    `steps` batches of seeded data written to WORK/data.npz (WORK emptied first). Returns
    (model, shape, batch, export, data, x, y)."""
    import keras
    import tf_ext
    keras.utils.set_random_seed(0)
    model, shape, batch = MODELS[name]()
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    export = os.path.join(work, "model")
    tf_ext.export_for_training(model, export)
    rng = np.random.default_rng(0)
    n = batch * steps
    x = rng.normal(size=(n,) + shape).astype(np.float32)
    y = rng.integers(0, 10, size=(n,)).astype(np.int32)
    data = os.path.join(work, "data.npz")
    np.savez(data, x=x, y=y)
    return model, shape, batch, export, data, x, y


def run_cpp(tool, library, export, data, batch, steps):
    cmd = [tool, "--library=" + library, "--saved_model=" + export, "--signature=train",
           "--data=" + data, "--inputs=x", "--targets=y",
           "--loss=sparse_categorical_crossentropy:from_logits", "--optimizer=adam",
           "--batch_size=%d" % batch, "--epochs=1"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("tf_ext_train failed: " + r.stderr[-2000:])
    m = re.search(r"median ([0-9.]+) ms per step", r.stdout)
    return float(m.group(1))


def run_python(model, x, y, batch):
    import keras
    times = []

    class Timer(keras.callbacks.Callback):
        def on_train_batch_begin(self, b, logs=None):
            self.start = time.perf_counter()

        def on_train_batch_end(self, b, logs=None):
            times.append((time.perf_counter() - self.start) * 1e3)

    model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0, callbacks=[Timer()])
    return float(np.median(times[1:]))


def write_tfrecords(directory, x, y, files):
    """x[i] (float, flattened) and y[i] (int64) as Example i, spread over `files` files in order."""
    import tensorflow as tf
    os.makedirs(directory, exist_ok=True)
    paths = []
    for k, rows in enumerate(np.array_split(np.arange(len(x)), files)):
        path = os.path.join(directory, "part-%02d.tfrecord" % k)
        with tf.io.TFRecordWriter(path) as w:
            for i in rows:
                w.write(tf.train.Example(features=tf.train.Features(feature={
                    "x": tf.train.Feature(float_list=tf.train.FloatList(value=x[i].ravel())),
                    "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(y[i])])),
                })).SerializeToString())
        paths.append(path)
    return paths


def epoch_step_ms(times, steps):
    """ms per step over the epochs after the first, from the times each epoch ended."""
    return (times[-1] - times[0]) * 1e3 / (steps * (len(times) - 1))


def run_cpp_epochs(tool, library, export, data, batch, steps, epochs, extra=()):
    """tf_ext_train's wall time per step over epochs 2.., its epoch lines timed as printed."""
    cmd = ["stdbuf", "-oL", tool, "--library=" + library, "--saved_model=" + export,
           "--signature=train", "--data=" + data, "--inputs=x", "--targets=y",
           "--loss=sparse_categorical_crossentropy:from_logits", "--optimizer=adam",
           "--batch_size=%d" % batch, "--epochs=%d" % epochs] + list(extra)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    times = []
    for line in p.stdout:
        if re.match(r"epoch \d+/\d+: loss", line):
            times.append(time.perf_counter())
    err = p.stderr.read()
    if p.wait() != 0 or len(times) != epochs:
        raise RuntimeError("tf_ext_train failed: " + err[-2000:])
    return epoch_step_ms(times, steps)


def keras_tfrecord_dataset(files, shape, batch, examples):
    import tensorflow as tf
    spec = {"x": tf.io.FixedLenFeature(shape, tf.float32), "y": tf.io.FixedLenFeature([], tf.int64)}

    def parse(serialized):
        f = tf.io.parse_example(serialized, spec)
        return f["x"], f["y"]

    records = tf.data.TFRecordDataset(files).apply(tf.data.experimental.assert_cardinality(examples))
    return (records.batch(batch).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
            .prefetch(tf.data.AUTOTUNE))


def run_python_epochs(model, dataset, steps, epochs):
    import keras
    times = []

    class Timer(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            times.append(time.perf_counter())

    model.fit(dataset, epochs=epochs, verbose=0, callbacks=[Timer()])
    return epoch_step_ms(times, steps)


def peak_mb(cmd):
    """The peak resident size (VmHWM) of `cmd`, run as the only child of a fresh python, in MiB."""
    code = ("import json, resource, subprocess, sys; "
            "r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
            "print(json.dumps([r.returncode, r.stderr[-2000:], "
            "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0]))")
    r = subprocess.run([sys.executable, "-c", code] + cmd, capture_output=True, text=True)
    rc, err, peak = json.loads(r.stdout)
    if rc != 0:
        raise RuntimeError("tf_ext_train failed: " + err)
    return peak


def write_repeated_tfrecords(directory, n, files):
    """n Examples of 1024 floats and a class id, spread over `files` files, streamed: 256 distinct
    rows x 10 classes serialized once and written by index, so gigabytes write in seconds."""
    import tensorflow as tf
    rng = np.random.default_rng(0)
    block = rng.normal(size=(256, 1024)).astype(np.float32)
    serialized = [[tf.train.Example(features=tf.train.Features(feature={
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=block[r])),
        "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[c])),
    })).SerializeToString() for c in range(10)] for r in range(256)]
    classes = rng.integers(0, 10, size=4096)
    os.makedirs(directory, exist_ok=True)
    for k, rows in enumerate(np.array_split(np.arange(n), files)):
        with tf.io.TFRecordWriter(os.path.join(directory, "part-%02d.tfrecord" % k)) as w:
            for i in rows:
                w.write(serialized[i % 256][classes[i % 4096]])


# The memory row's batch, and the TFRecord pipeline's buffers at that batch (tfrecord_data.cc):
# at most 4 files open, each with a 1 MiB read buffer and max(batch, 16) records read ahead, and
# at most 32 batches in flight between parsing and prefetch, serialized and parsed.
MEMORY_BATCH = 256
RECORD_BYTES = 1024 * 4 + 40


def buffers_mib(batch=MEMORY_BATCH):
    return (4 * (2**20 + max(batch, 16) * RECORD_BYTES) + 32 * 2 * batch * RECORD_BYTES) / 2**20


def memory_row(args, work):
    """tf_ext_train's peak VmHWM on --memory_mb MB of 1024-float records (4 GB by default)
    against 64 MB: the difference must stay within the buffers' size plus 64 MB."""
    import keras
    keras.utils.set_random_seed(0)
    x = keras.Input(shape=(1024,), name="x")
    model = keras.Model(x, keras.layers.Dense(10)(keras.layers.Dense(64, activation="relu")(x)))
    export = os.path.join(work, "memory_model")
    model.export(export, verbose=False)
    small = 64
    peaks = {}
    for mb in (small, args.memory_mb):
        directory = os.path.join(work, "memory_%d" % mb)
        write_repeated_tfrecords(directory, int(mb * 2**20 / RECORD_BYTES), args.tfrecord_files)
        peaks[mb] = peak_mb([args.tf_ext_train, "--library=" + args.library, "--saved_model=" + export,
                             "--data=" + directory + "/*.tfrecord", "--inputs=x", "--targets=y",
                             "--features=y:int64:", "--loss=sparse_categorical_crossentropy:from_logits",
                             "--batch_size=%d" % MEMORY_BATCH, "--epochs=1"])
        shutil.rmtree(directory)
    bound = buffers_mib() + 64
    row = {"model": "memory", "small_mb": small, "big_mb": args.memory_mb,
           "peak_small_mib": peaks[small], "peak_big_mib": peaks[args.memory_mb],
           "difference_mib": peaks[args.memory_mb] - peaks[small], "bound_mib": bound}
    row["within_bound"] = row["difference_mib"] <= bound
    print("memory   TFRecords %d MB vs %d MB: peak VmHWM %.1f vs %.1f MiB, difference %.1f MiB "
          "(bound: buffers %.1f + 64 MiB = %.1f: %s)"
          % (args.memory_mb, small, row["peak_big_mib"], row["peak_small_mib"], row["difference_mib"],
             buffers_mib(), bound, "met" if row["within_bound"] else "NOT met"), flush=True)
    return row


def run_measured(cmd):
    """(returncode, stdout, stderr, peak VmHWM in MiB) of `cmd`, run as the only child of a fresh
    python (ru_maxrss survives exec: a child of this process would report this one's size)."""
    code = ("import json, resource, subprocess, sys; "
            "r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
            "print(json.dumps([r.returncode, r.stdout, r.stderr[-2000:], "
            "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0]))")
    r = subprocess.run([sys.executable, "-c", code] + cmd, capture_output=True, text=True)
    return json.loads(r.stdout)


def budget_row(args, name, export, data, batch):
    """tf_ext_train with --memory_budget=--budget (a fraction of the builder's unbudgeted
    estimate) against no budget, interleaved --rounds times: the median step times, their ratio
    (the target: at most 1.3x at half the peak) and each side's peak VmHWM (the largest of its
    rounds). A budget the builder refuses is a row saying why."""
    cmd = [args.tf_ext_train, "--library=" + args.library, "--saved_model=" + export,
           "--signature=train", "--data=" + data, "--inputs=x", "--targets=y",
           "--loss=sparse_categorical_crossentropy:from_logits", "--optimizer=adam",
           "--batch_size=%d" % batch, "--epochs=1"]
    budget_flag = "--memory_budget=%s" % args.budget
    ms = {"plain": [], "budget": []}
    peaks = {"plain": [], "budget": []}
    lines = ""
    for _ in range(args.rounds):
        for side, extra in (("plain", []), ("budget", [budget_flag])):
            rc, out, err, peak = run_measured(cmd + extra)
            if rc != 0:
                if side == "budget":
                    message = err.strip().splitlines()[-1] if err.strip() else "exit %d" % rc
                    print("%-9s batch %3d: %s refused: %s" % (name, batch, budget_flag, message),
                          flush=True)
                    return {"model": name, "source": "budget", "batch": batch,
                            "budget": args.budget, "refused": message}
                raise RuntimeError("tf_ext_train failed: " + err)
            ms[side].append(float(re.search(r"median ([0-9.]+) ms per step", out).group(1)))
            peaks[side].append(peak)
            if side == "budget":
                lines = "\n".join(l for l in out.splitlines()
                                  if l.startswith(("estimated peak:", "memory budget")))
    m = re.search(r"estimated peak: ([0-9.]+) MB", lines)
    u = re.search(r"unbudgeted estimate ([0-9.]+) MB(?:, [0-9.]+ MB once TensorFlow optimized "
                  r"the graph)?\): (.*)", lines)
    row = {"model": name, "source": "budget", "batch": batch, "budget": args.budget,
           "plain_ms": statistics.median(ms["plain"]), "budget_ms": statistics.median(ms["budget"]),
           "plain_peak_mib": max(peaks["plain"]), "budget_peak_mib": max(peaks["budget"]),
           "estimate_mb": float(m.group(1)) if m else None,
           "unbudgeted_estimate_mb": float(u.group(1)) if u else None,
           "plan": u.group(2) if u else lines, "rounds": {"ms": ms, "peak_mib": peaks}}
    row["time_ratio"] = row["budget_ms"] / row["plain_ms"]
    row["peak_ratio"] = row["budget_peak_mib"] / row["plain_peak_mib"]
    print("%-9s batch %3d: --memory_budget=%s %8.2f ms/step vs %8.2f without, %.2fx time; peak VmHWM "
          "%.1f vs %.1f MiB; estimate %s of %s MB (%s)"
          % (name, batch, args.budget, row["budget_ms"], row["plain_ms"], row["time_ratio"],
             row["budget_peak_mib"], row["plain_peak_mib"], row["estimate_mb"],
             row["unbudgeted_estimate_mb"], row["plan"]), flush=True)
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tf_ext_train", required=True)
    p.add_argument("--library", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--out", default="")
    p.add_argument("--models", default="mlp,cnn,resnet18")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--sources", default="npz,tfrecord,memory",
                   help="npz: model.fit on arrays vs tf_ext_train from .npz; tfrecord: the TFRecord "
                        "rows; memory: the peak-memory row; budget: tf_ext_train with --memory_budget "
                        "against none (not in the default)")
    p.add_argument("--budget", default="0.5",
                   help="the budget rows' --memory_budget (a fraction of the unbudgeted estimate)")
    p.add_argument("--memory_mb", type=int, default=4096,
                   help="the memory row's large dataset, MB (against 64 MB)")
    p.add_argument("--tfrecord_files", type=int, default=4)
    p.add_argument("--epochs", type=int, default=3,
                   help="TFRecord rows: epochs a run trains; the first is not timed")
    args = p.parse_args(argv)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    os.environ.setdefault("TF_EXT_LIBRARY", args.library)
    import keras
    import tf_ext

    rows = []
    for name in args.models.split(","):
        work = os.path.join(args.work, "train_" + name)
        model, shape, batch, export, data, x, y = prepare_model(name, work, args.steps)
        n = batch * args.steps
        model.compile(optimizer=keras.optimizers.Adam(),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      jit_compile=False)
        sources = args.sources.split(",")
        if "npz" in sources:
            cpp, py = [], []
            for _ in range(args.rounds):
                cpp.append(run_cpp(args.tf_ext_train, args.library, export, data, batch, args.steps))
                py.append(run_python(model, x, y, batch))
            row = {"model": name, "batch": batch, "cpp_ms": min(cpp), "python_ms": min(py)}
            row["ratio"] = row["cpp_ms"] / row["python_ms"]
            rows.append(row)
            print("%-9s batch %3d: tf_ext_train %8.2f ms/step, model.fit %8.2f ms/step, C++/Python %.2fx"
                  % (name, batch, row["cpp_ms"], row["python_ms"], row["ratio"]), flush=True)
        if "tfrecord" in sources:
            files = write_tfrecords(os.path.join(work, "tfrecords"), x, y, args.tfrecord_files)
            glob = os.path.join(work, "tfrecords", "*.tfrecord")
            epochs = args.epochs
            tfr, fit, mem = [], [], []
            for _ in range(args.rounds):
                tfr.append(run_cpp_epochs(args.tf_ext_train, args.library, export, glob, batch,
                                          args.steps, epochs, ["--features=y:int64:"]))
                fit.append(run_python_epochs(model, keras_tfrecord_dataset(files, list(shape), batch, n),
                                             args.steps, epochs))
                mem.append(run_cpp_epochs(args.tf_ext_train, args.library, export, data, batch,
                                          args.steps, epochs))
            # The median of the interleaved rounds (this machine's spread is a few percent).
            row = {"model": name, "source": "tfrecord", "batch": batch, "tfrecord_ms": statistics.median(tfr),
                   "fit_tf_data_ms": statistics.median(fit), "npz_ms": statistics.median(mem),
                   "rounds": {"tfrecord_ms": tfr, "fit_tf_data_ms": fit, "npz_ms": mem}}
            row["vs_fit"] = row["tfrecord_ms"] / row["fit_tf_data_ms"]
            row["vs_npz"] = row["tfrecord_ms"] / row["npz_ms"]
            rows.append(row)
            print("%-9s batch %3d: TFRecords tf_ext_train %8.2f ms/step, model.fit(tf.data) %8.2f, "
                  "tf_ext_train .npz %8.2f; %.2fx model.fit, %.2fx .npz"
                  % (name, batch, row["tfrecord_ms"], row["fit_tf_data_ms"], row["npz_ms"],
                     row["vs_fit"], row["vs_npz"]), flush=True)
        if "budget" in sources:
            rows.append(budget_row(args, name, export, data, batch))
    if "memory" in args.sources.split(","):
        rows.append(memory_row(args, args.work))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "bench_train.json"), "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
