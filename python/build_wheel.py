"""Packs python/tf_ext + the compiled op library into a wheel (no setuptools needed).

    python python/build_wheel.py --library bazel-bin/tf_ext/_tf_ext_ops.so \
        --build-info bazel-bin/python/tf_ext/_build_info.json --out dist/

scripts/build_wheel.sh runs Bazel first and then this. The wheel is specific to this Python
(cpXY tag) and platform, and to the TensorFlow it was compiled against (recorded in
tf_ext/_build_info.json, quoted by the loader on a mismatch); it declares no TensorFlow
dependency so pip never swaps the user's TensorFlow (tensorflow vs tensorflow-cpu) for another.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import sys
import sysconfig
import zipfile

NAME = "tf_ext"
VERSION = "0.1.0"
_PACKAGE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), NAME)
# Fixed timestamps: the same inputs give byte-identical wheels.
_EPOCH = (1980, 1, 1, 0, 0, 0)


def wheel_tag() -> str:
    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{py}-{py}-{platform}"


def _record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def build(library: str, build_info: str, out_dir: str) -> str:
    """Writes the wheel into out_dir and returns its path."""
    files: dict[str, bytes] = {}
    for name in sorted(os.listdir(_PACKAGE_DIR)):
        if name.endswith(".py"):
            with open(os.path.join(_PACKAGE_DIR, name), "rb") as f:
                files[f"{NAME}/{name}"] = f.read()
    with open(library, "rb") as f:
        files[f"{NAME}/_tf_ext_ops.so"] = f.read()
    with open(build_info, "rb") as f:
        info = json.loads(f.read())
        files[f"{NAME}/_build_info.json"] = json.dumps(info, sort_keys=True).encode()

    dist_info = f"{NAME}-{VERSION}.dist-info"
    tf_version = info.get("tensorflow_version", "unknown")
    files[f"{dist_info}/METADATA"] = "\n".join([
        "Metadata-Version: 2.1",
        f"Name: {NAME}",
        f"Version: {VERSION}",
        "Summary: TensorFlow custom ops whose kernels and gradients are all C++",
        f"Requires-Python: =={sys.version_info.major}.{sys.version_info.minor}.*",
        "",
        f"Built for TensorFlow {tf_version} (install a matching tensorflow or tensorflow-cpu).",
        "",
    ]).encode()
    files[f"{dist_info}/WHEEL"] = "\n".join([
        "Wheel-Version: 1.0",
        "Generator: tf_ext build_wheel.py",
        "Root-Is-Purelib: false",
        f"Tag: {wheel_tag()}",
        "",
    ]).encode()
    files[f"{dist_info}/top_level.txt"] = f"{NAME}\n".encode()
    record = [_record_line(name, data) for name, data in files.items()]
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()

    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{NAME}-{VERSION}-{wheel_tag()}.whl")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as whl:
        for name, data in files.items():
            info_ = zipfile.ZipInfo(name, date_time=_EPOCH)
            info_.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            info_.compress_type = zipfile.ZIP_DEFLATED
            whl.writestr(info_, data)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", required=True, help="the built _tf_ext_ops.so")
    parser.add_argument("--build-info", required=True, help="the built _build_info.json")
    parser.add_argument("--out", default="dist", help="output directory")
    args = parser.parse_args()
    print(build(args.library, args.build_info, args.out))


if __name__ == "__main__":
    main()
