"""TensorFlow's own gradient test bases, shipped in its wheel, run under use_cpp_gradients.

Every test of each base runs twice, each time in a process of its own: with Python's gradients,
then under tf_ext.enable_cpp_gradients() (TensorFlow's ops then differentiated by their C++
gradients, tf_ext's and TensorFlow's own). A test that passes the first way and not the second is
a regression. Prints one line per base, then each regression and `regressions: N`; exits 1 when N
is not 0 (OPEN_REGRESSIONS: those not fixed yet, and why).

    python scripts/tf_test_bases.py [--bases=M1,M2] [--sample=K --seed=S] [--json=OUT]

--sample=K runs K tests of each base drawn with --seed (`make test`'s subset); the default runs
all of them (`make tf-test-bases`). A test that fails both ways is reported, not counted. The op
library comes from TF_EXT_LIBRARY or the package's own lookup (tf_ext._loader).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import unittest

# The wheel's gradient test bases (python/kernel_tests/..., python/ops/...).
BASES = (
    "tensorflow.python.kernel_tests.nn_ops.xent_op_test_base",
    "tensorflow.python.kernel_tests.nn_ops.bias_op_base",
    "tensorflow.python.kernel_tests.nn_ops.depthwise_conv_op_base",
    "tensorflow.python.kernel_tests.nn_ops.cudnn_deterministic_base",
    "tensorflow.python.kernel_tests.sparse_ops.sparse_xent_op_test_base",
    "tensorflow.python.ops.image_grad_test_base",
)

# Regressions not fixed yet, each with why: the only accepted entries until fixed (the list may
# only shrink; //tests:tf_test_bases_py_test fails on a regression not listed here).
OPEN_REGRESSIONS = {
    f"tensorflow.python.kernel_tests.{base}.testSecondGradient":
        "asserts a BatchMatMulV2 node of the second derivative in the graph; in graph mode the "
        "bridged C++ gradient is a call (PartitionedCall) whose body holds it: the bridge does "
        "not inline its gradients into the caller's graph yet"
    for base in ("nn_ops.xent_op_test_base.XentOpTestBase",
                 "sparse_ops.sparse_xent_op_test_base.SparseXentOpTestBase")
}

# Seconds before a child process (all the tests, one way) is stopped.
CHILD_TIMEOUT_S = 3600


def test_ids(module_name: str) -> list[str]:
    """Every test of the module's TestCase classes (those defined there), as unittest ids."""
    import importlib  # pylint: disable=g-import-not-at-top
    module = importlib.import_module(module_name)
    loader = unittest.TestLoader()
    ids = []
    for name in sorted(dir(module)):
        cls = getattr(module, name)
        if (isinstance(cls, type) and issubclass(cls, unittest.TestCase) and
                cls.__module__ == module.__name__):
            # (TensorFlow's TestCase.test_session is a deprecated session helper, not a test)
            ids += [_key(t) for t in loader.loadTestsFromTestCase(cls)
                    if not _key(t).endswith(".test_session")]
    return ids


def _key(test: unittest.TestCase) -> str:
    """module.Class.method (a parameterized test's id() adds its parameters)."""
    cls = type(test)
    return f"{cls.__module__}.{cls.__name__}.{test._testMethodName}"  # pylint: disable=protected-access


class _Recorder(unittest.TestResult):
    """Each test's outcome: pass, skip, or fail/error with the first line of its message."""

    def __init__(self) -> None:
        super().__init__()
        self.outcomes: dict[str, str] = {}

    @staticmethod
    def _first_line(err) -> str:
        text = str(err[1]).strip()
        return f"{err[0].__name__}: {text.splitlines()[0][:300] if text else ''}"

    def addSuccess(self, test):  # noqa: N802 (unittest's names)
        self.outcomes[_key(test)] = "pass"

    def addExpectedFailure(self, test, err):  # noqa: N802
        self.outcomes[_key(test)] = "pass"

    def addSkip(self, test, reason):  # noqa: N802
        self.outcomes[_key(test)] = "skip"

    def addFailure(self, test, err):  # noqa: N802
        self.outcomes[_key(test)] = "fail: " + self._first_line(err)

    def addError(self, test, err):  # noqa: N802
        self.outcomes[_key(test)] = "error: " + self._first_line(err)

    def addSubTest(self, test, subtest, err):  # noqa: N802 (a failed subTest fails its test)
        if err is not None:
            self.outcomes[_key(test)] = "fail: subTest: " + self._first_line(err)

    def addUnexpectedSuccess(self, test):  # noqa: N802
        self.outcomes[_key(test)] = "fail: unexpected success"


def child(mode: str, ids: list[str], out: str) -> int:
    """Runs the tests `ids` with Python's gradients (mode py) or the C++ ones (cpp)."""
    from absl import flags  # pylint: disable=g-import-not-at-top
    flags.FLAGS(["tf_test_bases"])  # TensorFlow's test classes read absl flags
    import tensorflow as tf  # pylint: disable=g-import-not-at-top,unused-import
    if mode == "cpp":
        import tf_ext  # pylint: disable=g-import-not-at-top
        tf_ext.enable_cpp_gradients()
    import importlib  # pylint: disable=g-import-not-at-top
    suite = unittest.TestSuite()
    for test_id in ids:  # module.Class.method
        module_name, class_name, method = test_id.rsplit(".", 2)
        cls = getattr(importlib.import_module(module_name), class_name)
        suite.addTest(cls(method))
    recorder = _Recorder()
    suite.run(recorder)
    calls = {}
    if mode == "cpp":  # the C++ gradients the tests ran, by op type (not vacuous)
        calls = dict(tf_ext.gradient_counts().cpp)
    with open(out, "w") as f:
        json.dump({"outcomes": recorder.outcomes, "cpp_gradient_calls": calls}, f)
    return 0


class ChildFailed(RuntimeError):
    """A child process died (a crash, a hang past CHILD_TIMEOUT_S) or left tests unrun."""


def run(mode: str, ids: list[str]) -> tuple[dict[str, str], dict[str, int]]:
    """The outcomes of `ids` run by a child process in `mode`, and the C++ gradient calls by op
    type. Raises ChildFailed when the child did not report every test: the harness then says
    nothing about regressions.
    """
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "outcomes.json")
        cmd = [sys.executable, os.path.abspath(__file__), f"--child={mode}", f"--out={out}",
               "--ids=" + ",".join(ids)]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
            died = None if r.returncode == 0 and os.path.exists(out) else (
                f"error: child exited {r.returncode}: {r.stderr.strip().splitlines()[-1:]}")
        except subprocess.TimeoutExpired:
            died = f"error: child still running after {CHILD_TIMEOUT_S} s"
        result = json.load(open(out)) if os.path.exists(out) else {}
    outcomes = result.get("outcomes", {})
    missing = [i for i in ids if i not in outcomes]
    if died or missing:
        raise ChildFailed(f"the {mode} run {died or 'ended'} with {len(missing)} of {len(ids)} "
                          f"tests unreported (first: {missing[:1]})")
    return outcomes, result.get("cpp_gradient_calls", {})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bases", default=",".join(BASES))
    parser.add_argument("--sample", type=int, default=0, help="tests per base (0: all)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", default="")
    parser.add_argument("--child", choices=["py", "cpp"], help=argparse.SUPPRESS)
    parser.add_argument("--ids", default="", help=argparse.SUPPRESS)
    parser.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.ids.split(","), args.out)

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    start = time.time()
    chosen: dict[str, list[str]] = {}
    for base in args.bases.split(","):
        ids = test_ids(base)
        if not ids:
            print(f"tf_test_bases: {base} has no tests", file=sys.stderr)
            return 2
        if args.sample:
            ids = sorted(random.Random(f"{args.seed}:{base}").sample(ids, min(args.sample, len(ids))))
        chosen[base] = ids
    every = [i for ids in chosen.values() for i in ids]
    # One process each way for all of them (TensorFlow's import is most of a short run).
    try:
        (py, _), (cpp, calls) = run("py", every), run("cpp", every)
    except ChildFailed as e:
        print(f"tf_test_bases: {e}", file=sys.stderr)
        return 2
    regressions, report = [], {}
    for base, ids in chosen.items():
        both_fail = [i for i in ids if py[i] not in ("pass", "skip") and cpp[i] != "pass"]
        lost = [i for i in ids if py[i] == "pass" and cpp[i] != "pass"]
        regressions += [(i, cpp[i]) for i in lost]
        report[base] = {i: {"python": py[i], "cpp": cpp[i]} for i in ids}
        print(f"{base.rsplit('.', 1)[-1]:28s} tests {len(ids):3d}  pass with Python's "
              f"{sum(py[i] == 'pass' for i in ids):3d}, with C++ "
              f"{sum(cpp[i] == 'pass' for i in ids):3d}  skipped "
              f"{sum(py[i] == 'skip' for i in ids):2d}  both fail {len(both_fail):2d}  "
              f"regressions {len(lost):2d}")
        for i in both_fail:
            print(f"  both fail: {i}: {py[i]}")
    print(f"tf_test_bases: {len(every)} tests, {time.time() - start:.0f} s; C++ gradients run "
          f"under use_cpp_gradients: {sum(calls.values())} calls of {len(calls)} op types "
          f"({', '.join(sorted(calls))})")
    for test, outcome in regressions:
        why = OPEN_REGRESSIONS.get(test)
        print(f"REGRESSION {test}: {outcome}" + (f" [open: {why}]" if why else ""))
    print(f"regressions: {len(regressions)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, sort_keys=True)
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
