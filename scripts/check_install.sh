#!/usr/bin/env bash
# Installs tf_ext into a new virtualenv the way a user would, then imports it there and takes
# a gradient through the installed package (from outside the source tree).
#   --in-tree      `pip install .` of this tree (`make test`; shares the make build's Bazel cache)
#   --clean-clone  `pip install .` of a fresh `git clone` of HEAD, interpreter defaults only
#                  (cold Bazel build, ~10 min; `make test-install`)
#   --wheel        `pip install dist/tf_ext-*.whl` with no TensorFlow present: pip must pull a
#                  compatible one from the index by itself (`make test-wheel`)
# then, with --example=LIBRARY (`make test`: examples/third_party_ops's swish_ops.so), that
# third-party library's Python test with the installed tf_ext bridging its C++ gradient.
# For the two source builds the new virtualenv sees .venv's TensorFlow through a .pth file and
# pip runs with --no-index, so the install only succeeds if the wheel's Requires-Dist is
# satisfied by the TensorFlow distribution already there (pip must not fetch another).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage="usage: scripts/check_install.sh --in-tree|--clean-clone|--wheel [--example=LIBRARY.so]"
mode="${1:?$usage}"
example=""
case "${2:-}" in
  "") ;;
  --example=*) example="$(realpath "${2#--example=}")" ;;
  *) echo "check_install: unknown argument '$2' ($usage)"; exit 2 ;;
esac
[ -z "$example" ] || [ -f "$example" ] || { echo "check_install: no library '$example'"; exit 1; }
tmp="$(mktemp -d /tmp/tf_ext_install.XXXXXX)"
clone=""
cleanup() {
  if [ -n "$clone" ] && [ -d "$clone" ]; then
    # The clone's Bazel server and output base exist only for this check.
    base="$(cd "$clone" && bazel info output_base 2>/dev/null || true)"
    (cd "$clone" && bazel shutdown 2>/dev/null || true)
    [ -n "$base" ] && rm -rf "$base"
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
start=$SECONDS

venv="$tmp/venv"
python3 -m venv "$venv"
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
quiet_pip() { grep -v "is ignored: it is neither a file nor a directory" >&2; }

case "$mode" in
  --in-tree|--clean-clone)
    "$root/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
      > "$site/tf_ext_check_tensorflow.pth"
    if [ "$mode" = --in-tree ]; then
      src="$root"
      # The same interpreter as make's builds, so Bazel's configuration (and cache) is shared.
      PYTHON_BIN_PATH="$root/.venv/bin/python" "${pip[@]}" --no-index "$src" 2> >(quiet_pip)
    else
      clone="$tmp/clone"
      git clone -q "$root" "$clone"
      src="$clone"
      env -u PYTHON_BIN_PATH "${pip[@]}" --no-index "$src" 2> >(quiet_pip)
    fi
    ;;
  --wheel)
    shopt -s nullglob
    wheels=("$root"/dist/tf_ext-*manylinux*.whl)
    [ ${#wheels[@]} -eq 1 ] || { echo "check_install: want one manylinux wheel in dist/ (make wheel), found ${#wheels[@]}"; exit 1; }
    "${pip[@]}" "${wheels[0]}" 2> >(quiet_pip)
    ;;
  *) echo "check_install: unknown mode $mode"; exit 2 ;;
esac

cd "$tmp"
env -u PYTHONPATH -u TF_EXT_LIBRARY -u RUNFILES_DIR "$venv/bin/python" - "$venv" "$mode" <<'PY'
import importlib.metadata as md
import os
import sys

import numpy as np
import tensorflow as tf
import tf_ext
from packaging.requirements import Requirement

venv, mode = sys.argv[1], sys.argv[2]
assert tf_ext.__file__.startswith(venv), f"tf_ext imported from {tf_ext.__file__}, not {venv}"
assert tf_ext.library_path().startswith(os.path.realpath(venv)), tf_ext.library_path()
# The wheel's TensorFlow requirement is met by the TensorFlow this process runs.
(req,) = [Requirement(r) for r in md.requires("tf_ext") if r.startswith("tensorflow")]
installed = md.version(req.name)
assert req.specifier.contains(installed), (str(req), installed)
assert installed == tf.__version__, (installed, tf.__version__)
tf_site = os.path.dirname(os.path.dirname(tf.__file__))
if mode == "--wheel":
    assert tf_site.startswith(venv), f"TensorFlow should come with the wheel: {tf_site}"
else:
    assert not tf_site.startswith(venv), f"pip installed a second TensorFlow: {tf_site}"
x = tf.constant([1.0, 2.0, 3.0, 4.0])
with tf.GradientTape() as tape:
    tape.watch(x)
    y = tf_ext.zero_out(x, preserve_index=2)
g = tape.gradient(y, x, output_gradients=tf.constant([5.0, 6.0, 7.0, 8.0]))
np.testing.assert_array_equal(y.numpy(), [0, 0, 3, 0])
np.testing.assert_array_equal(g.numpy(), [0, 0, 7, 0])
print(f"check_install {mode}: tf_ext {md.version('tf_ext')} requires {req}; "
      f"running {req.name} {installed}; import and gradient OK")
PY
# The C++ training program through the wheel's console script (no Python once it runs), and
# the C API headers next to it.
version="$(env -u PYTHONPATH -u TF_EXT_LIBRARY -u RUNFILES_DIR "$venv/bin/tf_ext_train" --version 2>/dev/null)"
want="$("$venv/bin/python" -c 'import importlib.metadata as md; print(md.version("tf_ext"))')"
[[ "$version" == "tf_ext_train $want (TensorFlow "* ]] || { echo "check_install $mode: tf_ext_train --version said '$version'"; exit 1; }
include="$(env -u PYTHONPATH "$venv/bin/python" -c 'import tf_ext; print(tf_ext.get_include())' 2>/dev/null)"
[ -f "$include/tf_ext/train/c_trainer.h" ] || { echo "check_install $mode: no c_trainer.h under $include"; exit 1; }
echo "check_install $mode: $version; C API headers in $include"
if [ -n "$example" ]; then
  env -u PYTHONPATH -u TF_EXT_LIBRARY -u RUNFILES_DIR SWISH_OPS_LIBRARY="$example" \
    "$venv/bin/python" "$root/examples/third_party_ops/swish_test.py"
  echo "check_install $mode: $example's gradient through the installed tf_ext"
fi
echo "check_install $mode: passed in $((SECONDS - start)) s"
