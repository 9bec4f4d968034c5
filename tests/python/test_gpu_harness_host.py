"""The standalone CUDA harness (tests/gpu/gpu_harness.cu) compiled by the host compiler with
CUDA emulated on the host, as `make gpu-harness-host` does: its case generators, references
and comparisons pass, and its bench output is what tests/gpu/torchvision_bench.py reads.
This says nothing about a GPU (`make gpu-test` and `make gpu-bench` do, on a GPU machine)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest


def _tmp() -> str:
    return os.environ.get("TEST_TMPDIR", "/tmp")


@pytest.fixture(scope="module")
def harness() -> str:
    cxx = os.environ.get("CXX", "") or shutil.which("g++") or shutil.which("c++")
    assert cxx, "no host C++ compiler"
    exe = os.path.join(_tmp(), "gpu_harness_host")
    subprocess.run([cxx, "-std=c++17", "-O1", "-DTF_EXT_HARNESS_HOST_EMULATION", "-I.", "-x",
                    "c++", "-o", exe, os.path.join("tests", "gpu", "gpu_harness.cu")],
                   check=True)
    return exe


def _bench_module():
    spec = importlib.util.spec_from_file_location(
        "torchvision_bench", os.path.join("tests", "gpu", "torchvision_bench.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_harness_checks_pass_on_the_host(harness):
    p = subprocess.run([harness, "--quick", "--seed", "3"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    checks = int(p.stdout.strip().splitlines()[-1].split()[1])
    assert checks > 500, p.stdout


def test_the_bench_output_is_what_the_torchvision_comparison_reads(harness):
    out = os.path.join(_tmp(), "bench")
    os.makedirs(out, exist_ok=True)
    p = subprocess.run([harness, "--bench", "--quick", "--bench-out", out], capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    bench_py = _bench_module()
    bench, rows = bench_py.load_workloads(out)
    assert [r["op"] for r in rows] == ["roi_pool", "ps_roi_align"]
    for r in rows:
        assert len(r["boxes"]) == r["rois"] == 16
        assert r["fwd_ms"] >= 0 and r["bwd_ms"] >= 0
        for box in r["boxes"]:
            # batch index within the batch; boxes inside the image, x1 <= x2, y1 <= y2
            image = 16 * bench["width"]
            assert 0 <= box[0] < bench["batch"] and box[0] == int(box[0])
            assert 0 <= box[1] <= box[3] < image and 0 <= box[2] <= box[4] < image
    table = bench_py.format_table([dict(op="roi_pool", rois=16, tf_ext_ms=2.0,
                                        torchvision_ms=3.0)])
    assert table.splitlines()[-1] == "| roi_pool | 16 | 2.000 | 3.000 | 1.50x |"
    # A truncated ROI file is refused, not misread.
    with open(os.path.join(out, rows[0]["rois_file"]), "r+b") as f:
        f.truncate(19)
    with pytest.raises(ValueError, match="19 bytes"):
        bench_py.load_workloads(out)


def test_the_torchvision_comparison_says_when_it_compared_nothing(harness):
    out = os.path.join(_tmp(), "bench_none")
    os.makedirs(out, exist_ok=True)
    subprocess.run([harness, "--bench", "--quick", "--bench-out", out], check=True,
                   capture_output=True)
    p = subprocess.run([sys.executable, os.path.join("tests", "gpu", "torchvision_bench.py"), out],
                       capture_output=True, text=True)
    # No torchvision or no CUDA device here: exit 2 and say so (never a silent "pass").
    assert p.returncode == 2, p.stdout + p.stderr
    assert "nothing compared" in p.stdout
    with open(os.path.join(out, "bench.json")) as f:
        assert json.load(f)["pooled"] == 7
