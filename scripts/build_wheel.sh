#!/usr/bin/env bash
# Builds dist/tf_ext-<version>-<python>-manylinux_2_X_x86_64.whl: the op library, tf_ext_train and
# libtf_ext_c.so (Bazel), the C API headers and python/tf_ext, retagged by auditwheel (TensorFlow's own libraries excluded, never bundled).
#   scripts/build_wheel.sh [OUT_DIR] [build_wheel.py options, e.g. --tensorflow-dist tensorflow]
# Install with: pip install dist/tf_ext-*.whl   (pulls the TensorFlow it was built for).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${1:-dist}"
shift || true
bazel build //tf_ext:_tf_ext_ops.so //tf_ext:tf_ext_train //tf_ext:libtf_ext_c.so //python:build_info
bin="$(bazel info bazel-bin 2>/dev/null)"
python="${PYTHON_BIN_PATH:-$root/.venv/bin/python}"
"$python" python/build_wheel.py \
  --library "$bin/tf_ext/_tf_ext_ops.so" \
  --tf-ext-train "$bin/tf_ext/tf_ext_train" \
  --c-library "$bin/tf_ext/libtf_ext_c.so" \
  --build-info "$bin/python/tf_ext/_build_info.json" \
  --out "$out" --manylinux "$@"
