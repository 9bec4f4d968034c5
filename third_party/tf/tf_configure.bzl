"""Repository rule that locates the pip-installed TensorFlow and exposes it to Bazel.

It runs the configured Python interpreter (PYTHON_BIN_PATH, default: the project's .venv),
reads tf.sysconfig's compile and link flags (so the C++ ABI and -std flags always match the
installed wheel) and records the version and pip distribution (tf_info.bzl; python/BUILD writes
them into the package's _build_info.json for the import-time version guard), symlinks the headers and the two shared libraries, and writes a BUILD file
with:
  :tf_header_lib        headers + the compile flags TensorFlow was built with
  :libtensorflow_framework   the framework library (all that an op library needs)
  :libtensorflow_cc     the C++ runtime (Session, graph-level gradients, C API)
  :python_runtime / :py_toolchain   a Python toolchain bound to that interpreter
  :cuda_include         include root in which third_party/gpus/cuda/include exists (nvcc)
"""

_PY_SCRIPT = """
import json, os, sys
import importlib.metadata as md
import tensorflow as tf
inc = tf.sysconfig.get_include()
lib = tf.sysconfig.get_lib()
# Which pip distribution provides the tensorflow package (tensorflow-cpu, tensorflow, ...):
# the one whose RECORD lists tensorflow/__init__.py.
dist = ""
for d in md.distributions():
    if any(str(f) == "tensorflow/__init__.py" for f in (d.files or [])):
        dist = d.metadata["Name"].lower().replace("_", "-")
        break
# What pip must install for a compatible TensorFlow: the same distribution, any patch release
# of the same minor release (TensorFlow keeps its C++ ABI within one).
major, minor = (int(v) for v in tf.__version__.split(".")[:2])
print(json.dumps({
    "requirement": "%s>=%d.%d.0,<%d.%d" % (dist or "tensorflow", major, minor, major, minor + 1),
    "distribution": dist,
    "git_version": tf.version.GIT_VERSION,
    "include": inc,
    "lib": lib,
    "cflags": tf.sysconfig.get_compile_flags(),
    "lflags": tf.sysconfig.get_link_flags(),
    "version": tf.__version__,
    "python": sys.executable,
}))
"""

def _fail(msg):
    fail("\n%s tf_configure: %s%s\n" % ("\033[0;31m", msg, "\033[0m"))

def _impl(ctx):
    python = ctx.os.environ.get("PYTHON_BIN_PATH", "")
    if not python:
        python = str(ctx.path(Label("//:WORKSPACE")).dirname) + "/.venv/bin/python"
    if not ctx.path(python).exists:
        _fail("no Python interpreter at %s; run scripts/setup.sh or set PYTHON_BIN_PATH" % python)
    res = ctx.execute([python, "-c", _PY_SCRIPT], quiet = True)
    if res.return_code != 0:
        _fail("could not import tensorflow with %s:\n%s" % (python, res.stderr))
    info = json.decode(res.stdout.strip().splitlines()[-1])

    ctx.symlink(info["include"], "include")
    lib = info["lib"]
    ctx.symlink(lib + "/libtensorflow_framework.so.2", "libtensorflow_framework.so.2")
    ctx.symlink(lib + "/libtensorflow_cc.so.2", "libtensorflow_cc.so.2")

    defines = []
    copts = []
    for f in info["cflags"]:
        if f.startswith("-I"):
            continue
        elif f.startswith("-D"):
            defines.append(f[2:])
        else:
            copts.append(f.replace("--std=", "-std="))

    # nvcc needs <third_party/gpus/cuda/include/...>, which TF's headers include.
    cuda_home = ctx.os.environ.get("CUDA_HOME", "/usr/local/cuda")
    if ctx.path(cuda_home + "/include").exists:
        ctx.symlink(cuda_home + "/include", "cuda_include/third_party/gpus/cuda/include")
    else:
        ctx.file("cuda_include/third_party/gpus/cuda/include/.missing", "")

    ctx.file("tf_info.bzl", "\n".join([
        "TF_VERSION = %r" % info["version"],
        "TF_GIT_VERSION = %r" % info["git_version"],
        # The pip distribution that provided TensorFlow (tensorflow-cpu or tensorflow).
        "TF_DISTRIBUTION = %r" % info["distribution"],
        # The pip requirement a compatible TensorFlow satisfies (the wheel's Requires-Dist).
        "TF_REQUIREMENT = %r" % info["requirement"],
        "TF_DEFINES = %r" % defines,
        "TF_COPTS = %r" % copts,
        "TF_INCLUDE = %r" % info["include"],
        "TF_LIB_DIR = %r" % lib,
        "PYTHON_BIN = %r" % python,
        "CUDA_HOME = %r" % cuda_home,
    ]) + "\n")

    ctx.file("BUILD", """
load(":tf_info.bzl", "TF_COPTS", "TF_DEFINES")
load("@bazel_tools//tools/python:toolchain.bzl", "py_runtime_pair")

package(default_visibility = ["//visibility:public"])

exports_files(["tf_info.bzl"])

cc_library(
    name = "tf_header_lib",
    hdrs = glob(["include/**"], exclude = ["include/**/*.py"]),
    includes = ["include"],
    defines = TF_DEFINES,
    copts = TF_COPTS,
)

cc_library(
    name = "libtensorflow_framework",
    srcs = ["libtensorflow_framework.so.2"],
    deps = [":tf_header_lib"],
)

cc_library(
    name = "libtensorflow_cc",
    srcs = ["libtensorflow_cc.so.2"],
    deps = [":libtensorflow_framework"],
)

# The headers as plain files, for nvcc genrules (a cc_library in a genrule gives no headers).
filegroup(
    name = "tf_headers",
    srcs = glob(["include/**"], exclude = ["include/**/*.py"]),
)

filegroup(
    name = "cuda_include",
    srcs = glob(["cuda_include/**"]),
)

# CUDA runtime headers for host code compiled with GOOGLE_CUDA (kernel registration).
cc_library(
    name = "cuda_headers",
    hdrs = glob(["cuda_include/third_party/gpus/cuda/include/**"]),
    includes = ["cuda_include/third_party/gpus/cuda/include"],
)

# stub_shebang: Bazel's launcher script defaults to `#!/usr/bin/env python`, which the strict
# test PATH does not have; the launcher runs fine under the same interpreter.
py_runtime(
    name = "python_runtime",
    interpreter_path = %r,
    python_version = "PY3",
    stub_shebang = "#!%s",
)

py_runtime_pair(
    name = "python_runtime_pair",
    py3_runtime = ":python_runtime",
)

toolchain(
    name = "py_toolchain",
    toolchain = ":python_runtime_pair",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)
""" % (python, python))

tf_configure = repository_rule(
    implementation = _impl,
    environ = ["PYTHON_BIN_PATH", "CUDA_HOME"],
    local = True,
)
