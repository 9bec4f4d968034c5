#!/usr/bin/env bash
# Idempotent set-up for a fresh machine: Debian packages for Bazel + googletest and the two
# headers TensorFlow's XLA headers include but the wheel does not ship (highwayhash, farmhash;
# tf_ext/xla/ compiles against them),
# and a virtualenv (.venv) with the pinned requirements (requirements-nodeps.txt's without their
# dependencies). Quiet when nothing to do.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

debs=(bazel-bootstrap bazel-platforms bazel-skylib googletest libgtest-dev libhighwayhash-dev
      libfarmhash-dev)
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

venv="$root/.venv"
stamp="$venv/.requirements.sha256"
# Both files: requirements-nodeps.txt's packages are installed without their dependencies
# (keras-hub's would replace the pinned tensorflow-cpu), after requirements.txt's.
want="$(cat requirements.txt requirements-nodeps.txt | sha256sum | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating virtualenv $venv"
  python3 -m venv "$venv"
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: installing Python requirements into $venv"
  # (the filter drops pip's notes about find-links folders this machine's pip config names
  # but does not have)
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r requirements.txt \
    2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
    -r requirements-nodeps.txt 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
  echo "$want" > "$stamp"
fi
