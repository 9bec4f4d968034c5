"""`make demo`'s training part: a small Keras classifier exported with model.export, trained by
tf_ext_train (C++, no Python in that process) on TFRecord files of tf.train.Example (two
training shards, one validation file) read by TensorFlow's tf.data kernels, with its loss and
accuracy printed per epoch, TensorBoard curves and a checkpoint per epoch; then the trained
SavedModel loaded back in Python, answering better than the untrained one.

    demo_train.py --tf_ext_train=BIN --library=SO --work=DIR
"""
import argparse
import os
import shutil
import subprocess
import sys

import numpy as np


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tf_ext_train", required=True)
    p.add_argument("--library", required=True)
    p.add_argument("--work", required=True)
    args = p.parse_args(argv)
    import keras
    import tensorflow as tf

    work = os.path.abspath(os.path.join(args.work, "train_demo"))
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    # Three classes of points around three centres.
    rng = np.random.default_rng(0)
    centres = np.array([[2, 0], [-1, 1.7], [-1, -1.7]], np.float32)
    labels = rng.integers(0, 3, size=512).astype(np.int32)
    points = (centres[labels] + rng.normal(scale=0.8, size=(512, 2))).astype(np.float32)
    # TFRecords as a Python pipeline would write them: 384 training examples in two shards,
    # 128 for validation.
    def write(path, rows):
        with tf.io.TFRecordWriter(path) as w:
            for i in rows:
                w.write(tf.train.Example(features=tf.train.Features(feature={
                    "x": tf.train.Feature(float_list=tf.train.FloatList(value=points[i])),
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[labels[i]])),
                })).SerializeToString())
    write(os.path.join(work, "train-00000-of-00002.tfrecord"), range(0, 192))
    write(os.path.join(work, "train-00001-of-00002.tfrecord"), range(192, 384))
    write(os.path.join(work, "validation.tfrecord"), range(384, 512))
    keras.utils.set_random_seed(0)
    x = keras.Input(shape=(2,), name="x")
    h = keras.layers.Dense(16, activation="relu")(x)
    model = keras.Model(x, keras.layers.Dense(3, activation="softmax")(h))
    model.export(os.path.join(work, "untrained"), verbose=False)

    print("tf_ext_train: training the exported model in C++ (no Python in that process)", flush=True)
    cmd = [args.tf_ext_train, "--library=" + args.library,
           "--saved_model=" + os.path.join(work, "untrained"),
           "--data=" + os.path.join(work, "train-*.tfrecord"),
           "--validation=" + os.path.join(work, "validation.tfrecord"),
           "--inputs=x", "--targets=label", "--features=label:int64:",
           "--shuffle_buffer=384", "--seed=0",
           "--loss=sparse_categorical_crossentropy", "--metrics=accuracy", "--optimizer=adam",
           "--learning_rate=0.01", "--batch_size=32", "--epochs=8",
           "--tensorboard=" + os.path.join(work, "logs"),
           "--checkpoint=" + os.path.join(work, "checkpoints", "demo"),
           "--export=" + os.path.join(work, "trained")]
    print(" ".join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    print(r.stdout, end="")
    if r.returncode != 0:
        print(r.stderr, file=sys.stderr)
        return 1
    losses = [float(line.split("loss ")[1].split(",")[0]) for line in r.stdout.splitlines()
              if line.startswith("epoch")]
    if not losses or losses[-1] >= losses[0]:
        print("demo: the loss did not fall", file=sys.stderr)
        return 1

    def accuracy(path):
        f = tf.saved_model.load(path).signatures["serving_default"]
        probs = list(f(x=tf.constant(points)).values())[0].numpy()
        return float((probs.argmax(axis=1) == labels).mean())

    before, after = accuracy(os.path.join(work, "untrained")), accuracy(os.path.join(work, "trained"))
    print(f"Python, tf.saved_model.load: accuracy {before:.3f} untrained, {after:.3f} trained by tf_ext_train")
    if after <= before:
        print("demo: the trained model is no better", file=sys.stderr)
        return 1
    print(f"TensorBoard curves: tensorboard --logdir {os.path.join(work, 'logs')}; latest checkpoint: "
          f"{tf.train.latest_checkpoint(os.path.join(work, 'checkpoints'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
