"""What tf_ext's command-line tools write to stderr: their own messages, not TensorFlow's
start-up notices (oneDNN's "custom operations are on", cpu_feature_guard's instruction list,
MLIR's pass notice) unless TF_CPP_MIN_LOG_LEVEL asks for them; and for a bad command line one
error line that names the flag and points at --help, not the whole help text."""
import os
import subprocess

import pytest

RUNFILES = os.environ.get("TEST_SRCDIR", "")
WORKSPACE = os.path.join(RUNFILES, "tf_ext") if RUNFILES else os.getcwd()
LIBRARY = os.path.join(WORKSPACE, "tf_ext", "_tf_ext_ops.so")
TOOLS = {name: os.path.join(WORKSPACE, *path) for name, path in {
    "tf_ext_grad": ("tf_ext", "tf_ext_grad"),
    "tf_ext_gradcheck": ("tf_ext", "tf_ext_gradcheck"),
    "tf_ext_train": ("tf_ext", "tf_ext_train"),
    "tf_ext_serve": ("serving", "tf_ext_serve"),
}.items()}
STARTUP_NOTICES = ("oneDNN custom operations", "cpu_feature_guard", "mlir_graph_optimization",
                   "absl::InitializeLog")


def run(tool, *args, log_level=None):
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    if log_level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = log_level
    return subprocess.run([TOOLS[tool], *args], env=env, capture_output=True, text=True,
                          timeout=300)


def test_a_gradient_run_writes_no_tensorflow_startup_notice():
    quiet = run("tf_ext_grad", "--library=" + LIBRARY)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == "", quiet.stderr
    # Asked for (TF_CPP_MIN_LOG_LEVEL=0, TensorFlow's default): TensorFlow's lines are all there,
    # the one written before main() included; the values printed are the same.
    loud = run("tf_ext_grad", "--library=" + LIBRARY, log_level="0")
    assert loud.returncode == 0, loud.stderr
    for notice in ("oneDNN custom operations are on", "cpu_feature_guard"):
        assert notice in loud.stderr, loud.stderr
    values = lambda out: [l for l in out.splitlines() if l.startswith(("y = ", "d sum(y)"))]
    assert values(loud.stdout) == values(quiet.stdout) and values(quiet.stdout), quiet.stdout


def test_the_trainer_writes_its_own_error_and_nothing_else(tmp_path):
    r = run("tf_ext_train", "--saved_model=" + str(tmp_path / "missing"), "--data=d.npz",
            "--inputs=x:x", "--library=" + LIBRARY)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tf_ext_train: "), r.stderr
    assert not any(n in r.stderr for n in STARTUP_NOTICES), r.stderr


@pytest.mark.parametrize("tool,args,names", [
    ("tf_ext_grad", ["--seed=abc"], "--seed"),
    ("tf_ext_grad", ["--no_such_flag=1"], "--no_such_flag"),
    ("tf_ext_gradcheck", ["--seed=x"], "--seed"),
    ("tf_ext_train", ["--saved_model=m", "--epochs=many"], "--epochs"),
    ("tf_ext_train", ["--saved_model=m", "--inputs=x:x"], "--data"),
    ("tf_ext_serve", ["--saved_model=m", "--bogus"], "--bogus"),
], ids=["grad-bad-value", "grad-unknown-flag", "gradcheck-bad-value", "train-bad-value",
        "train-missing-data", "serve-unknown-flag"])
def test_a_bad_command_line_gets_one_error_line_and_see_help(tool, args, names):
    r = run(tool, *args)
    assert r.returncode != 0, r.stdout
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert names in lines[0] and lines[0].rstrip(")").endswith("--help"), lines[0]
    assert "usage:" not in r.stderr + r.stdout
    # --help itself still prints the whole text, on stdout.
    h = run(tool, "--help")
    assert h.returncode == 0 and h.stdout.startswith("usage: " + tool), h.stdout[:200]
