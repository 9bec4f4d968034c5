#!/usr/bin/env python3
"""Differentiates frozen Keras models with tf_ext_grad (C++, no Python in that process) and
compares with TensorFlow's Python gradient of the same function.

    check_keras_models.py --tf_ext_grad=BIN --library=SO --work=DIR [--models=A,B] [--modes=...]
                          [--batch=2] [--training_batch=8] [--table=FILE.md] [--json=FILE]

Each (model, mode) is frozen by freeze_keras_model.py into DIR/<model>_<mode> (kept as a
cache), then `tf_ext_grad --graph=model.pb --y=y --x=x --feed=x=@input.npy --save=grad.npz`
runs and the result is compared with expected.npz: relative error = max|g - ref| / max|ref|.
PASS when <= --tolerance (1e-3). Exit 1 if any row fails.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

# Models with loops (docs/control_flow.md): Keras recurrent layers, and a Transformer decoder
# decoding greedily in a tf.while_loop. Python cannot differentiate their frozen graphs (v1
# loop frames once imported), so their reference is the eager Keras call's gradient (they draw
# no dropout masks: the same function).
RECURRENT_MODELS = ["LSTM", "GRU", "SimpleRNN", "BidirectionalLSTM", "ConvLSTM2D",
                    "TransformerDecoderGreedy"]
# Every image model in tf.keras.applications (smallest input size each accepts), a Transformer
# encoder block and the recurrent models.
ALL_MODELS = [
    "MobileNet", "MobileNetV2", "MobileNetV3Small", "MobileNetV3Large",
    "ResNet50", "ResNet50V2", "ResNet101", "ResNet101V2", "ResNet152", "ResNet152V2",
    "DenseNet121", "DenseNet169", "DenseNet201",
    "EfficientNetB0", "EfficientNetB1", "EfficientNetB2", "EfficientNetB3", "EfficientNetB4",
    "EfficientNetB5", "EfficientNetB6", "EfficientNetB7",
    "EfficientNetV2B0", "EfficientNetV2B1", "EfficientNetV2B2", "EfficientNetV2B3",
    "EfficientNetV2S", "EfficientNetV2M", "EfficientNetV2L",
    "VGG16", "VGG19", "NASNetMobile", "NASNetLarge",
    "ConvNeXtTiny", "ConvNeXtSmall", "ConvNeXtBase", "ConvNeXtLarge", "ConvNeXtXLarge",
    "InceptionV3", "InceptionResNetV2", "Xception", "TransformerEncoder",
] + RECURRENT_MODELS
# The frozen-graph reference of these does not fit in 24 GiB beside the model (350M
# parameters); they are deterministic (no dropout), so the eager Keras call's gradient is the
# same function's.
EAGER_REFERENCE = {"ConvNeXtXLarge"} | set(RECURRENT_MODELS)
MIN_SIZE = {"InceptionV3": 75, "InceptionResNetV2": 75, "Xception": 71, "TransformerEncoder": 16,
            # recurrent models: steps (ConvLSTM2D: frame size)
            "LSTM": 12, "GRU": 12, "SimpleRNN": 12, "BidirectionalLSTM": 12, "ConvLSTM2D": 8,
            "TransformerDecoderGreedy": 6}


def freeze(model, mode, out, python, batch):
    info = os.path.join(out, "info.json")
    if os.path.exists(info) and json.load(open(info)).get("batch") == batch:
        return None
    cmd = [python, os.path.join(HERE, "freeze_keras_model.py"), model, "--out=" + out,
           "--size=%d" % MIN_SIZE.get(model, 32), "--batch=%d" % batch]
    if mode == "training":
        cmd.append("--training")
    if model in EAGER_REFERENCE:
        cmd.append("--eager_reference")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return "freezing failed: " + r.stderr.strip().splitlines()[-1]
    return None


def run_measured(cmd):
    """subprocess.run(cmd, capture_output=True, text=True), plus the child's peak RSS in MB
    (os.wait4's rusage of that one process)."""
    import threading
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = {}
    readers = [threading.Thread(target=lambda k, f: out.__setitem__(k, f.read()), args=(k, f))
               for k, f in (("stdout", p.stdout), ("stderr", p.stderr))]
    for t in readers:
        t.start()
    _, status, usage = os.wait4(p.pid, 0)
    for t in readers:
        t.join()
    p.returncode = os.waitstatus_to_exitcode(status)
    result = subprocess.CompletedProcess(cmd, p.returncode, out["stdout"], out["stderr"])
    result.peak_mb = round(usage.ru_maxrss / 1024)
    return result


def check(model, mode, args):
    out = os.path.join(args.work, "%s_%s" % (model, mode))
    row = dict(model=model, mode=mode)
    batch = args.training_batch if mode == "training" else args.batch
    err = freeze(model, mode, out, sys.executable, batch)
    if err:
        row.update(result="ERROR", note=err)
        return row
    info = json.load(open(os.path.join(out, "info.json")))
    row.update(params=info["params"], nodes=info["nodes"], input=info["input_shape"])
    grad = os.path.join(out, "grad.npz")
    if os.path.exists(grad):
        os.remove(grad)
    cmd = [args.tf_ext_grad, "--library=" + args.library, "--graph=" + os.path.join(out, "model.pb"),
           "--y=y", "--x=x", "--feed=x=@" + os.path.join(out, "input.npy"), "--save=" + grad,
           # The reference runs op by op (no Grappler fusions, which move float32 rounding;
           # random-weight models amplify it), and so does this run, which also keeps the
           # largest models' memory low.
           "--optimize=false"]
    t0 = time.time()
    r = run_measured(cmd)
    row["tf_ext_grad_s"] = round(time.time() - t0, 2)
    row["tf_ext_grad_peak_mb"] = r.peak_mb
    if r.returncode != 0:
        msg = [l for l in r.stderr.splitlines() if "tf_ext_grad: error" in l or l.startswith("  ")]
        row.update(result="ERROR", note=" ".join(msg)[:400])
        return row
    for line in r.stdout.splitlines():
        if line.startswith("built the backward graph"):
            row["timing"] = line
    got = np.load(grad)["d_x"]
    ref = np.load(os.path.join(out, "expected.npz"))["dy_dx"]
    scale = float(np.abs(ref).max())
    rel = float(np.abs(got - ref).max() / scale) if scale > 0 else float(np.abs(got).max())
    row["rel_error"] = rel
    row["result"] = "PASS" if rel <= args.tolerance and scale > 0 else "FAIL"
    if scale == 0:
        row["note"] = "reference gradient is identically zero"
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tf_ext_grad", required=True)
    p.add_argument("--library", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--models", default=",".join(ALL_MODELS))
    p.add_argument("--modes", default="inference,training")
    p.add_argument("--tolerance", type=float, default=1e-3)
    p.add_argument("--batch", type=int, default=2, help="batch size in inference mode")
    p.add_argument("--training_batch", type=int, default=8,
                   help="batch size in training mode: BatchNorm's batch statistics over the "
                   "1x1 maps that 32x32 inputs end in are ill-conditioned in float32 at batch 2 "
                   "(gradients up to 1e15 in EfficientNetV2B0-B3)")
    p.add_argument("--table")
    p.add_argument("--json")
    args = p.parse_args(argv)
    rows = []
    for model in args.models.split(","):
        for mode in args.modes.split(","):
            row = check(model, mode, args)
            rows.append(row)
            print("%-20s %-9s %-5s %s %s" % (model, mode, row["result"],
                                             "%.2e" % row["rel_error"] if "rel_error" in row else "",
                                             row.get("note", "")), flush=True)
            write_results(rows, args)  # kept current: an interrupted run keeps its rows
    failed = [r for r in rows if r["result"] != "PASS"]
    print("%d passed, %d failed" % (len(rows) - len(failed), len(failed)))
    return 1 if failed else 0


def write_results(rows, args):
    if args.json:
        json.dump(rows, open(args.json, "w"), indent=1)
    if args.table:
        with open(args.table, "w") as f:
            f.write("| model | mode | input | params | rel. error vs Python | tf_ext_grad wall "
                    "| tf_ext_grad peak RSS | result |\n")
            f.write("|---|---|---|---|---|---|---|---|\n")
            for r in rows:
                f.write("| %s | %s | %s | %s | %s | %s s | %s MB | %s |\n" % (
                    r["model"], r["mode"], "x".join(map(str, r.get("input", []))),
                    "{:,}".format(r["params"]) if "params" in r else "",
                    "%.1e" % r["rel_error"] if "rel_error" in r else "",
                    r.get("tf_ext_grad_s", ""), r.get("tf_ext_grad_peak_mb", ""),
                    r["result"] + (" " + r["note"] if r.get("note") else "")))


if __name__ == "__main__":
    sys.exit(main())
