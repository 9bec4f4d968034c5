"""The fuzz target (tests/fuzz/tf_ext_fuzz.py): CI's short seeded run over every op finds
nothing, and the harness does catch, confirm and report a crash and a hang in a child."""

from __future__ import annotations

import json
import os
import subprocess
import sys

FUZZ = os.path.join("tests", "fuzz", "tf_ext_fuzz.py")
# Calls per op of CI's seeded run: about a minute on the 2-core CI machine.
SMOKE_CALLS_PER_OP = int(os.environ.get("TF_EXT_FUZZ_SMOKE_N", "40"))


def fuzz(*args: str, inject: str = "", timeout: float = 600) -> tuple[int, str, dict]:
    report = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), "fuzz_report.json")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_EXT_FUZZ_INJECT=inject,
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))  # tf_ext for the children
    p = subprocess.run([sys.executable, FUZZ, "--library", os.environ["TF_EXT_LIBRARY"],
                        "--report", report, *args], capture_output=True, text=True, env=env,
                       timeout=timeout)
    with open(report) as f:
        return p.returncode, p.stdout + p.stderr[-3000:], json.load(f)


def test_seeded_run_over_every_op_finds_nothing():
    rc, out, report = fuzz("--seed", "10", "--calls-per-op", str(SMOKE_CALLS_PER_OP))
    print(out)
    assert report["findings"] == [], json.dumps(report["findings"], indent=1)[:5000]
    assert rc == 0, out
    # Every op of the library is fuzzed (an op without a hand-written generator from its
    # declaration: test_the_generic_generator_makes_valid_and_hostile_calls_of_every_op).
    import tf_ext
    assert sorted(report["per_op"]) == sorted(tf_ext.op_names())
    for op, counts in report["per_op"].items():
        assert counts["calls"] >= SMOKE_CALLS_PER_OP, (op, counts)


def test_the_generic_generator_makes_valid_and_hostile_calls_of_every_op():
    # Every op generated from its declaration alone (what a new op gets): no findings, and for
    # every forward op both accepted calls (the spec's valid calls survive the mutations) and
    # rejected ones (the hostile mutations reach the op's checks).
    rc, out, report = fuzz("--generic", "--seed", "11", "--calls-per-op", "25")
    print(out)
    assert report["findings"] == [], json.dumps(report["findings"], indent=1)[:5000]
    assert rc == 0, out
    import tf_ext
    for facts in tf_ext.declared_ops():
        counts = report["per_op"][facts["op"]]
        assert counts["calls"] >= 25, (facts["op"], counts)
        if facts["differentiability"] == "gradient":
            assert counts.get("ok", 0) > 0 and counts.get("error", 0) > 0, (facts["op"], counts)


def test_a_crash_is_caught_confirmed_and_reported():
    rc, out, report = fuzz("--ops", "TfExt>ZeroOut,TfExt>SignSTE", "--calls-per-op", "1",
                           "--shrink-budget", "1", inject="crash:TfExt>SignSTE")
    assert rc == 1, out
    kinds = {f["kind"] for f in report["findings"]}
    assert any(k.startswith("crash") for k in kinds), kinds
    crash = next(f for f in report["findings"] if f["kind"].startswith("crash"))
    assert crash["case"]["op"] == "TfExt>SignSTE" and "minimised" in crash
    # The calls before the crash were run and counted; the run went on after it.
    assert report["per_op"]["TfExt>ZeroOut"]["calls"] >= 1, report["per_op"]


def test_a_hang_is_caught_and_reported():
    rc, out, report = fuzz("--ops", "TfExt>GradientReversal", "--calls-per-op", "1",
                           "--case-timeout", "5", "--shrink-budget", "0",
                           inject="hang:TfExt>GradientReversal")
    assert rc == 1, out
    assert [f["kind"] for f in report["findings"]] == ["hang"], report["findings"]
