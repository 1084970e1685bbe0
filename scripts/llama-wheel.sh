#!/usr/bin/env bash
# Build (once) and install the pinned llama-cpp-python wheel into a virtualenv.
#
#   scripts/llama-wheel.sh PYTHON
#
# The wheel is cached under $DUO_HOME/wheels (default ~/.cache/duo/wheels), keyed by
# the version and the CMake flags, so a second setup on the same machine reinstalls
# in seconds instead of rebuilding llama.cpp (~8 minutes on 2 cores).
#
# CPU flags come from scripts/cpu-flags.sh (explicit ISA flags on x86-64, see there).
# Set DUO_CMAKE_ARGS to override them entirely (e.g. add -DGGML_CUDA=ON).
set -euo pipefail

PY=${1:?usage: llama-wheel.sh PYTHON}
VERSION=0.3.36
CACHE=${DUO_HOME:-$HOME/.cache/duo}/wheels

source "$(dirname "$0")/cpu-flags.sh"

ARGS=${DUO_CMAKE_ARGS:-$(cpu_flags)}
KEY=$(printf '%s %s %s' "$VERSION" "$ARGS" "$("$PY" -c 'import sys; print(sys.implementation.cache_tag)')" | sha256sum | cut -c1-16)
DIR="$CACHE/llama-cpp-python-$VERSION-$KEY"
cached() { ls "$DIR"/llama_cpp_python-*.whl >/dev/null 2>&1; }

if "$PY" -c "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '$VERSION')" 2>/dev/null \
   && [[ -f "$DIR/.installed-in-$(echo "$PY" | sha256sum | cut -c1-8)" ]]; then
  exit 0
fi

if ! cached; then
  echo "duo: building llama-cpp-python $VERSION once (about 8 minutes on 2 cores)"
  echo "duo: CMAKE_ARGS=$ARGS"
  # A build directory of this run's own: two setups at once (a checkout's and a clean
  # clone's) each build, and the first to finish puts its wheel in place.
  mkdir -p "$CACHE"
  TMP=$(mktemp -d "$DIR.tmp.XXXXXX")
  # --no-cache-dir: pip's own wheel cache knows the sdist, not these flags, and would hand
  # back a wheel built with other ones.
  CMAKE_ARGS="$ARGS" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc 2>/dev/null || echo 2) \
    "$PY" -m pip wheel --no-cache-dir --no-deps --no-binary llama-cpp-python \
    "llama-cpp-python==$VERSION" -w "$TMP"
  echo "$ARGS" > "$TMP/CMAKE_ARGS"
  # Under a lock: a setup that finishes second must not remove the wheel the first one has
  # just put in place (the check and the removal of a stale $DIR are one step). Once $DIR
  # holds a wheel it is never removed, so the install below needs no lock.
  (
    flock 9
    if ! cached; then
      rm -rf "$DIR"
      mv -T "$TMP" "$DIR"
    fi
  ) 9>"$(dirname "$CACHE")/.wheel.lock"  # beside the cache: only wheels in it
  rm -rf "$TMP"
fi
"$PY" -m pip install --quiet --force-reinstall --no-deps "$DIR"/llama_cpp_python-*.whl
"$PY" -m pip install --quiet "numpy>=1.20" "typing-extensions>=4.5" "diskcache>=5.6.1" "jinja2>=2.11.3"
# This Python holds this wheel now, and no other cached one.
rm -f "$CACHE"/*/".installed-in-$(echo "$PY" | sha256sum | cut -c1-8)"
touch "$DIR/.installed-in-$(echo "$PY" | sha256sum | cut -c1-8)"
