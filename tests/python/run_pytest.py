"""Entry point of tf_ext's Python py_test targets: runs pytest on the test files given as
arguments (paths relative to the workspace root, Bazel's working directory for tests).

Exits non-zero when a test fails and also when no test was collected (pytest's exit code 5),
so a target whose tests silently vanished does not pass.
"""

import os
import sys

# Runfiles paths of the op libraries; exported (canonical) for tf_ext's loader and the tests.
_LIBRARIES = {
    "TF_EXT_LIBRARY": "tf_ext/_tf_ext_ops.so",
    "TF_EXT_TEST_LIBRARY": "tests/testlib/_tf_ext_test_ops.so",
}


def main(argv: list[str]) -> int:
    for env, path in _LIBRARIES.items():
        if not os.environ.get(env) and os.path.isfile(path):
            os.environ[env] = os.path.realpath(path)
    import pytest  # pylint: disable=g-import-not-at-top

    args = list(argv) + ["-q", "-p", "no:cacheprovider"]
    xml = os.environ.get("XML_OUTPUT_FILE")  # Bazel collects per-test results from it
    if xml:
        args.append(f"--junitxml={xml}")
    code = pytest.main(args)
    if code == pytest.ExitCode.NO_TESTS_COLLECTED:
        print(f"run_pytest: no tests were collected from {argv}", file=sys.stderr)
    return int(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
