#!/usr/bin/env python3
"""tf_ext's ROI kernels against torchvision's CUDA kernels on the same GPU and the same boxes.

`make gpu-bench` runs `gpu_harness --bench --bench-out DIR` first: it times tf_ext's RoiPool
and PsRoiAlign bodies (the kernels the op library launches) at detection-head sizes and writes
DIR/bench.json and the ROI rows it used. This script times `torchvision.ops.roi_pool` and
`torchvision.ops.ps_roi_align` on those rows, with the same feature-map size, channel count,
bins, spatial scale and sampling ratio, and prints one table with the ratios.

Same work, different layouts: tf_ext is NHWC, torchvision NCHW; both read [R, 5] rows
(batch index, x1, y1, x2, y2). tf_ext's backward passes are deterministic gathers;
torchvision's use float atomicAdd (non-deterministic summation order).

Needs PyTorch with CUDA and torchvision (no TensorFlow). Exit status: 0 table printed,
2 no torchvision or no CUDA device (nothing compared).

    python3 tests/gpu/torchvision_bench.py DIR [--reps N]
"""
import argparse
import json
import os
import struct
import sys


def load_workloads(bench_dir):
    """bench.json's shared geometry and rows, each with its ROI rows ([R][5] floats) read back."""
    with open(os.path.join(bench_dir, "bench.json")) as f:
        bench = json.load(f)
    rows = []
    for row in bench["results"]:
        with open(os.path.join(bench_dir, row["rois_file"]), "rb") as f:
            raw = f.read()
        if len(raw) != 20 * row["rois"]:
            raise ValueError(f"{row['rois_file']}: {len(raw)} bytes, want {20 * row['rois']}")
        flat = struct.unpack(f"<{5 * row['rois']}f", raw)
        rows.append(dict(row, boxes=[list(flat[5 * i:5 * i + 5]) for i in range(row["rois"])]))
    return bench, rows


def format_table(results):
    """results: dicts with op, rois, tf_ext_ms and torchvision_ms (fwd+bwd). Markdown table."""
    lines = ["| op | ROIs | tf_ext fwd+bwd ms | torchvision fwd+bwd ms | tf_ext speed-up |",
             "|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['op']} | {r['rois']} | {r['tf_ext_ms']:.3f} | "
                     f"{r['torchvision_ms']:.3f} | {r['torchvision_ms'] / r['tf_ext_ms']:.2f}x |")
    return "\n".join(lines)


def time_torchvision(bench, row, reps):
    """Mean of `reps` runs after a warm-up (CUDA events), forward and backward separately, in ms."""
    import torch
    import torchvision

    device = torch.device("cuda")
    n, h, w = bench["batch"], bench["height"], bench["width"]
    pooled, scale = bench["pooled"], bench["spatial_scale"]
    boxes = torch.tensor(row["boxes"], dtype=torch.float32, device=device)
    if row["op"] == "roi_pool":
        c = bench["roi_pool_channels"]
        op = lambda x: torchvision.ops.roi_pool(x, boxes, pooled, scale)
    else:
        c = bench["ps_output_channels"] * pooled * pooled
        op = lambda x: torchvision.ops.ps_roi_align(x, boxes, pooled, scale,
                                                     bench["sampling_ratio"])
    x = torch.randn(n, c, h, w, device=device, requires_grad=True)

    def timed(fn):
        fn()  # warm-up
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / reps

    with torch.no_grad():
        fwd = timed(lambda: op(x))
    y = op(x)
    dy = torch.ones_like(y)
    bwd = timed(lambda: torch.autograd.grad(y, x, dy, retain_graph=True))
    return fwd, bwd


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench_dir")
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args()
    bench, rows = load_workloads(args.bench_dir)
    try:
        import torch
        import torchvision  # noqa: F401
    except ImportError as e:
        print(f"torchvision_bench: {e}; nothing compared (pip install torchvision)")
        return 2
    if not torch.cuda.is_available():
        print("torchvision_bench: no CUDA device; nothing compared")
        return 2
    results = []
    for row in rows:
        fwd, bwd = time_torchvision(bench, row, args.reps)
        results.append(dict(op=row["op"], rois=row["rois"], tf_ext_ms=row["fwd_ms"] + row["bwd_ms"],
                            torchvision_ms=fwd + bwd))
        print(f"{row['op']:<12} {row['rois']:5d} ROIs  tf_ext fwd {row['fwd_ms']:.3f} "
              f"bwd {row['bwd_ms']:.3f} ms   torchvision fwd {fwd:.3f} bwd {bwd:.3f} ms")
    print(f"\n{torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"torchvision {torchvision.__version__}\n")
    print(format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
