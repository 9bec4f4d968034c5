#!/usr/bin/env bash
# Builds dist/tf_ext-<version>-<python>-<platform>.whl: the op library (Bazel) + python/tf_ext.
#   scripts/build_wheel.sh [OUT_DIR]      (default: dist/)
# Install with: pip install dist/tf_ext-*.whl   (next to the TensorFlow it was built for).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${1:-dist}"
bazel build //tf_ext:_tf_ext_ops.so //python:build_info
python="${PYTHON_BIN_PATH:-$root/.venv/bin/python}"
"$python" python/build_wheel.py \
  --library bazel-bin/tf_ext/_tf_ext_ops.so \
  --build-info bazel-bin/python/tf_ext/_build_info.json \
  --out "$out"
