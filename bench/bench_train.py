"""Step time of tf_ext_train (C++, no Python in that process) against Keras 3's model.fit on the
same model, batches and optimizer (issue 24 item 9): an MLP, a small CNN with BatchNormalization
and a ResNet-18-sized CNN at 64x64, each trained in training mode (tf_ext.export_for_training).
Runs are interleaved (C++, Python, C++, Python); each side's figure is the median steady-state
step time (the first step, which builds the graph, left out), the ratio C++/Python.

    bench_train.py --tf_ext_train=BIN --library=SO --work=DIR [--out=DIR] [--models=mlp,cnn,resnet18]
"""
import argparse
import json
import os
import re
import shutil
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tf_ext_train", required=True)
    p.add_argument("--library", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--out", default="")
    p.add_argument("--models", default="mlp,cnn,resnet18")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    os.environ.setdefault("TF_EXT_LIBRARY", args.library)
    import keras
    import tf_ext

    rows = []
    for name in args.models.split(","):
        keras.utils.set_random_seed(0)
        model, shape, batch = MODELS[name]()
        work = os.path.join(args.work, "train_" + name)
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        export = os.path.join(work, "model")
        tf_ext.export_for_training(model, export)
        rng = np.random.default_rng(0)
        n = batch * args.steps
        x = rng.normal(size=(n,) + shape).astype(np.float32)
        y = rng.integers(0, 10, size=(n,)).astype(np.int32)
        data = os.path.join(work, "data.npz")
        np.savez(data, x=x, y=y)
        model.compile(optimizer=keras.optimizers.Adam(),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      jit_compile=False)
        cpp, py = [], []
        for _ in range(args.rounds):
            cpp.append(run_cpp(args.tf_ext_train, args.library, export, data, batch, args.steps))
            py.append(run_python(model, x, y, batch))
        row = {"model": name, "batch": batch, "cpp_ms": min(cpp), "python_ms": min(py)}
        row["ratio"] = row["cpp_ms"] / row["python_ms"]
        rows.append(row)
        print("%-9s batch %3d: tf_ext_train %8.2f ms/step, model.fit %8.2f ms/step, C++/Python %.2fx"
              % (name, batch, row["cpp_ms"], row["python_ms"], row["ratio"]), flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "bench_train.json"), "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
