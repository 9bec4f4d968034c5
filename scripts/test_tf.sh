#!/usr/bin/env bash
# The whole test suite against another TensorFlow release (`make test-tf VERSION=2.20.0`):
#   .tf/VERSION/venv         a virtualenv with tensorflow-cpu==VERSION (+ requirements.txt's rest)
#   .tf/VERSION/output_base  its own Bazel output base (the pinned build's cache is untouched)
#   .tf/VERSION/bazel-*      its convenience symlinks
# Then checks the import-time version guard across releases: the wheel built here, imported
# under the pinned TensorFlow of .venv, must fail with tf_ext's TensorFlowVersionError.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
version="${1:?usage: scripts/test_tf.sh VERSION (e.g. 2.20.0)}"
bazel="${BAZEL:-bazel}"
dir=".tf/$version"
venv="$root/$dir/venv"
mkdir -p "$dir"

# The same set as make setup's (requirements.txt, then requirements-nodeps.txt without their
# dependencies), with this release's companions: TensorBoard is released with TensorFlow and
# each TensorFlow requires its own minor release of it.
minor="${version%.*}"
reqs="$(grep -vE '^\s*(#|$)|^tensorflow' requirements.txt \
  | sed -E "s/^tensorboard==.*/tensorboard~=$minor.0/" | tr '\n' ' ')"
nodeps="$(grep -vE '^\s*(#|$)' requirements-nodeps.txt | tr '\n' ' ')"
want="tensorflow-cpu==$version $reqs; no deps: $nodeps"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.requirements" 2>/dev/null)" != "$want" ]; then
  echo "test-tf: creating $venv with $want"
  python3 -m venv "$venv"
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "tensorflow-cpu==$version" $reqs \
    2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps $nodeps \
    2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
  echo "$want" > "$venv/.requirements"
fi
export PYTHON_BIN_PATH="$venv/bin/python"
TF_CPP_MIN_LOG_LEVEL=2 "$PYTHON_BIN_PATH" -c "import tensorflow as tf; assert tf.__version__ == '$version', tf.__version__"

startup=(--output_base="$root/$dir/output_base")
flags=(--symlink_prefix="$dir/bazel-")
# Every package of the repository, as //... would give (listed, because //... would also walk
# into the pinned build's convenience symlinks, which this output base does not know as such).
mapfile -t patterns < <(git ls-files | grep -E '(^|/)BUILD$' | grep -v '^examples/' \
  | awk -F/ '{ print (NF == 1 ? "//:all" : "//" $1 "/...") }' | sort -u)
# shellcheck disable=SC2086
"$bazel" "${startup[@]}" test "${patterns[@]}" "${flags[@]}" ${BAZEL_TEST_FLAGS:-}

# The guard across releases, with real libraries: this build's wheel under the pinned TF.
pinned="$root/.venv/bin/python"
if [ ! -x "$pinned" ]; then
  echo "test-tf: FAILED: no pinned TensorFlow in .venv for the cross-release check (make setup)"
  exit 1
fi
pinned_version="$(TF_CPP_MIN_LOG_LEVEL=2 "$pinned" -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null)"
if [ "$pinned_version" = "$version" ]; then
  echo "test-tf: $version is the pinned release; no cross-release check"
else
  "$bazel" "${startup[@]}" build //tf_ext:_tf_ext_ops.so //tf_ext:tf_ext_train //tf_ext:libtf_ext_c.so \
    //python:build_info "${flags[@]}"
  bin="$("$bazel" "${startup[@]}" info bazel-bin 2>/dev/null)"
  rm -rf "$dir/guard"
  wheel="$("$PYTHON_BIN_PATH" python/build_wheel.py --library "$bin/tf_ext/_tf_ext_ops.so" \
    --tf-ext-train "$bin/tf_ext/tf_ext_train" --c-library "$bin/tf_ext/libtf_ext_c.so" \
    --build-info "$bin/python/tf_ext/_build_info.json" --out "$dir/guard/dist" | tail -1)"
  "$pinned" -m pip install -q --no-deps --no-index --disable-pip-version-check \
    --target "$dir/guard/site" "$wheel"
  set +e
  out="$(cd / && PYTHONPATH="$root/$dir/guard/site" "$pinned" -c 'import tf_ext' 2>&1)"
  rc=$?
  set -e
  if [ "$rc" -eq 0 ] || ! grep -q "TensorFlowVersionError: tf_ext's op library was built for TensorFlow $version" <<<"$out"; then
    echo "$out" | tail -5
    echo "test-tf: FAILED: a wheel built for TensorFlow $version imported under $pinned_version without the version error"
    exit 1
  fi
  echo "test-tf: version guard: the $version wheel under TensorFlow $pinned_version says:"
  grep "TensorFlowVersionError" <<<"$out" | fold -s -w 100 | sed 's/^/  /'
fi
"$bazel" "${startup[@]}" shutdown
echo "test-tf: TensorFlow $version: all tests passed"
