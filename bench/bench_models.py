"""The C++ gradient of real frozen models against Python's tf.function gradient, same graph.

For each model (frozen once into --work with scripts/freeze_keras_model.py), rounds alternate:
one process runs `tf_ext_grad --benchmark=N` (the gradient built once as a GradientSession and
run per request in C++, no Python in the process), the next a Python worker that runs the same frozen GraphDef's gradient as a
`tf.function` (tf.gradients of the imported graph, TensorFlow's default graph optimizations
on: what a Python server would run), N steady-state runs each after one warm-up. Each side
reports the min and median of its runs and its peak resident memory minus its resident memory
once the model was loaded (VmHWM - VmRSS, its own process). The table gives, per model, the
best median of each side over the rounds and the C++/Python ratios (<= 1.0: C++ at least as
fast, or as lean), and checks that the two gradients agree.

    make bench-models                               # every model
    make bench-models BENCH_MODELS_ARGS="--models MobileNetV2:1 --rounds 2"
    make bench-models BENCH_MODELS_ARGS="--models ResNet50:2:64:0.5 --rounds 1 --runs 1"

A fourth field is tf_ext_grad's --memory_budget (docs/memory.md): the C++ side recomputes
forward tensors to fit it; Python runs the same gradient without one.

Not part of `make test`: minutes per model, and the numbers are the machine's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FREEZE = os.path.join(ROOT, "scripts", "freeze_keras_model.py")

# name:batch[:size[:memory budget]]. The BERT-base-sized encoder: 12 layers, hidden 768, sequence 128.
# LSTM128: a Keras LSTM(128) over `size` steps (200, 1000, 2000) of 32 features, batch 16, frozen
# with its loop functional (a StatelessWhile: Python's gradient differentiates it once imported;
# it cannot differentiate the v1 frames of the default freeze). With a budget (any: the loop
# saves its carried state and recomputes its body, docs/memory.md) against none at 2000 steps.
DEFAULT_MODELS = ["MobileNetV2:1:224", "MobileNetV2:8:224", "ResNet50:1:224", "ResNet50:8:224",
                  "BertBaseEncoder:8:128", "LSTM128:16:200", "LSTM128:16:1000",
                  "LSTM128:16:2000", "LSTM128:16:2000:64M",
                  "ResNet50:8:224:0.5", "ResNet50:16:224:0.5", "BertBaseEncoder:8:256:0.5"]


def resident_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return -1


def python_worker(model_dir: str, runs: int, out: str) -> int:
    """Python's side: the frozen graph's gradient as a tf.function, timed in this process."""
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2

    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from freeze_keras_model import inline_function_calls

    info = json.load(open(os.path.join(model_dir, "info.json")))
    graph_def = graph_pb2.GraphDef()
    graph_def.ParseFromString(open(os.path.join(model_dir, "model.pb"), "rb").read())
    graph_def = inline_function_calls(graph_def)
    for n in graph_def.node:
        n.attr.pop("_gradient_op_type", None)
    x_val = tf.constant(np.load(os.path.join(model_dir, "input.npy")))
    loaded = resident_mb("VmRSS")

    def forward(x):
        (y,) = tf.compat.v1.import_graph_def(graph_def, input_map={info["x"] + ":0": x},
                                             return_elements=["y:0"], name="frozen")
        return y

    @tf.function(input_signature=[tf.TensorSpec(x_val.shape, tf.float32)])
    def gradient(x):
        y = forward(x)
        return y, tf.gradients(y, x)[0]

    y, dx = gradient(x_val)  # trace + warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        y, dx = gradient(x_val)
        dx.numpy()
        times.append((time.perf_counter() - start) * 1e3)
    np.save(out, dx.numpy())
    print(json.dumps({"min_ms": min(times), "median_ms": float(np.median(times)),
                      "peak_mb": resident_mb("VmHWM"), "loaded_mb": loaded}))
    return 0


def run_cpp(tool: str, library: str, model_dir: str, runs: int, out: str, extra) -> dict:
    info = json.load(open(os.path.join(model_dir, "info.json")))
    cmd = [tool, "--library=" + library, "--graph=" + os.path.join(model_dir, "model.pb"),
           "--y=y", "--x=" + info["x"], "--feed=%s=@%s" % (info["x"], os.path.join(model_dir,
                                                                                   "input.npy")),
           "--benchmark=%d" % runs, "--save=" + out] + list(extra)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("tf_ext_grad failed: " + r.stderr[-2000:])
    m = re.search(r"steady state over \d+ runs: min ([0-9.]+) ms, median ([0-9.]+) ms", r.stdout)
    p = re.search(r"peak resident memory: (\d+) MB \((\d+) MB once", r.stdout)
    return {"min_ms": float(m.group(1)), "median_ms": float(m.group(2)),
            "peak_mb": float(p.group(1)), "loaded_mb": float(p.group(2))}


def run_python(model_dir: str, runs: int, out: str) -> dict:
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--python_worker", model_dir,
                        "--runs", str(runs), "--worker_out", out], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("Python worker failed: " + r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def freeze(work: str, name: str, batch: int, size: int) -> str:
    d = os.path.join(work, "%s_b%d_s%d" % (name, batch, size))
    if not os.path.exists(os.path.join(d, "info.json")):
        extra = ["--functional_control_flow"] if name.startswith("LSTM") else []
        subprocess.run([sys.executable, FREEZE, name, "--out=" + d, "--size=%d" % size,
                        "--batch=%d" % batch, "--no_reference"] + extra, check=True,
                       stdout=subprocess.DEVNULL)
    return d


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tf_ext_grad")
    p.add_argument("--library")
    p.add_argument("--work", default=os.path.join(ROOT, ".models", "bench"))
    p.add_argument("--out", default=os.path.join(ROOT, "bench_results"))
    p.add_argument("--models", default=",".join(DEFAULT_MODELS),
                   help="comma-separated NAME:BATCH[:SIZE]")
    p.add_argument("--runs", type=int, default=5, help="timed runs per process")
    p.add_argument("--rounds", type=int, default=3, help="alternating C++/Python rounds")
    p.add_argument("--cpp_flags", default="", help="extra tf_ext_grad flags, space-separated")
    p.add_argument("--python_worker", help=argparse.SUPPRESS)
    p.add_argument("--worker_out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.python_worker:
        return python_worker(args.python_worker, args.runs, args.worker_out)
    if not (args.tf_ext_grad and args.library):
        p.error("--tf_ext_grad and --library are required")
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for spec in args.models.split(","):
        parts = spec.split(":")
        name, batch = parts[0], int(parts[1])
        size = int(parts[2]) if len(parts) > 2 else 224
        budget = parts[3] if len(parts) > 3 else ""
        flags = args.cpp_flags.split() + (["--memory_budget=" + budget] if budget else [])
        d = freeze(args.work, name, batch, size)
        cpp, py = [], []
        refused = None
        for _ in range(args.rounds):
            try:
                cpp.append(run_cpp(args.tf_ext_grad, args.library, d, args.runs,
                                   os.path.join(d, "cpp.npz"), flags))
            except RuntimeError as e:
                if not budget:
                    raise
                # A budget the builder cannot meet (or a graph with loops) is a row of its own.
                refused = str(e).strip().splitlines()[-1].replace("tf_ext_grad: error: ", "")
                break
            py.append(run_python(d, args.runs, os.path.join(d, "python.npy")))
        if refused is not None:
            rows.append({"model": name, "batch": batch, "size": size, "budget": budget,
                         "refused": refused})
            print("%-16s b%-2d budget %s refused: %s" % (name, batch, budget, refused), flush=True)
            continue
        g_cpp = np.load(os.path.join(d, "cpp.npz"))["d_" + json.load(open(
            os.path.join(d, "info.json")))["x"]]
        g_py = np.load(os.path.join(d, "python.npy"))
        rel = float(np.abs(g_cpp - g_py).max() / max(np.abs(g_py).max(), 1e-30))
        best = lambda rs, k: min(r[k] for r in rs)
        row = {"model": name, "batch": batch, "size": size, "budget": budget,
               "cpp_median_ms": best(cpp, "median_ms"), "python_median_ms": best(py, "median_ms"),
               "cpp_min_ms": best(cpp, "min_ms"), "python_min_ms": best(py, "min_ms"),
               "cpp_mem_mb": min(r["peak_mb"] - r["loaded_mb"] for r in cpp),
               "python_mem_mb": min(r["peak_mb"] - r["loaded_mb"] for r in py),
               # the whole processes' VmHWM, TensorFlow's runtime and the loaded model included
               "cpp_peak_mb": min(r["peak_mb"] for r in cpp),
               "python_peak_mb": min(r["peak_mb"] for r in py),
               "max_rel_diff": rel}
        row["time_ratio"] = row["cpp_median_ms"] / row["python_median_ms"]
        row["mem_ratio"] = row["cpp_mem_mb"] / max(row["python_mem_mb"], 1e-9)
        rows.append(row)
        print("%-16s b%-2d%s C++ %8.1f ms  Python %8.1f ms  time %.2fx  memory %6.0f / %6.0f MB "
              "(%.2fx)  gradients differ by %.1e" % (
                  name, batch, " budget " + budget if budget else "", row["cpp_median_ms"],
                  row["python_median_ms"], row["time_ratio"],
                  row["cpp_mem_mb"], row["python_mem_mb"], row["mem_ratio"], rel), flush=True)
        print("%-16s     whole processes' peak: C++ %6.0f MB, Python %6.0f MB (%.2fx)" % (
            name, row["cpp_peak_mb"], row["python_peak_mb"],
            row["cpp_peak_mb"] / max(row["python_peak_mb"], 1e-9)), flush=True)
    meta = {"machine": platform.machine(), "cpus": os.cpu_count(), "runs": args.runs,
            "rounds": args.rounds, "cpp_flags": args.cpp_flags}
    json.dump({"meta": meta, "rows": rows}, open(os.path.join(args.out, "models.json"), "w"),
              indent=1)
    lines = ["| model | batch | C++ median ms | Python median ms | time C++/Python | "
             "C++ memory MB | Python memory MB | memory C++/Python | max rel. difference |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    def label(r):
        if r.get("budget"):
            return "%s, --memory_budget=%s" % (label(dict(r, budget="")), r["budget"])
        if r["model"].startswith("LSTM"):
            return "%s T=%d" % (r["model"], r["size"])  # steps
        if r["model"] == "BertBaseEncoder":
            return "%s seq %d" % (r["model"], r["size"])
        return "%s %dx%d" % (r["model"], r["size"], r["size"])

    for r in rows:
        if "refused" in r:
            lines.append("| %s | %d | refused: %s | | | | | | |" % (label(r), r["batch"],
                                                                 r["refused"]))
            continue
        lines.append("| %s | %d | %.1f | %.1f | %.2fx | %.0f | %.0f | %.2fx | %.1e |" % (
            label(r), r["batch"], r["cpp_median_ms"],
            r["python_median_ms"], r["time_ratio"], r["cpp_mem_mb"], r["python_mem_mb"],
            r["mem_ratio"], r["max_rel_diff"]))
    open(os.path.join(args.out, "models.md"), "w").write("\n".join(lines) + "\n")
    chart([r for r in rows if "refused" not in r], os.path.join(args.out, "models.png"))
    print("\n".join(lines))
    return 0


def chart(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    # The size too: an image side (224) or an LSTM's steps (200, 1000), which tell rows apart.
    labels = ["%s b%d %s%d" % (r["model"], r["batch"], "T=" if "LSTM" in r["model"] else "",
                                r["size"]) for r in rows]
    fig, ax = plt.subplots(figsize=(1.6 * len(rows) + 2, 4))
    xs = np.arange(len(rows))
    ax.bar(xs - 0.2, [r["time_ratio"] for r in rows], 0.4, label="time C++/Python")
    ax.bar(xs + 0.2, [r["mem_ratio"] for r in rows], 0.4, label="memory C++/Python")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(xs, labels, rotation=20, ha="right")
    ax.set_ylabel("C++ / Python (lower is better)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
