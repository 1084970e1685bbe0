#!/usr/bin/env bash
# Build llama.cpp's own binaries from the sources vendored in the pinned llama-cpp-python
# sdist, with the same CPU flags as duo's wheel: the peer `duo bench --modes llama.cpp`
# measures against (llama-completion, llama-speculative-simple, llama-bench, llama-server,
# ggml-rpc-server).
#
#   scripts/build-llama-cpp.sh [PYTHON]      # prints the directory of the binaries
#
# The build (~8 minutes on 2 cores) is cached in $DUO_HOME/llama.cpp (default
# ~/.cache/duo/llama.cpp), keyed by version and flags.
set -euo pipefail

PY=${1:-python3}
VERSION=0.3.36
HOME_DIR=${DUO_HOME:-$HOME/.cache/duo}
source "$(dirname "$0")/cpu-flags.sh"
ARGS=${DUO_CMAKE_ARGS:-$(cpu_flags)}
KEY=$(printf '%s %s' "$VERSION" "$ARGS" | sha256sum | cut -c1-16)
OUT="$HOME_DIR/llama.cpp/$VERSION-$KEY"
TARGETS="llama-completion llama-speculative-simple llama-bench llama-server ggml-rpc-server"

if [[ -x "$OUT/bin/llama-speculative-simple" ]]; then
  echo "$OUT/bin"
  exit 0
fi
SRC="$HOME_DIR/llama.cpp/src-$VERSION"
if [[ ! -d "$SRC/vendor/llama.cpp" ]]; then
  mkdir -p "$HOME_DIR/llama.cpp/download"
  "$PY" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" \
    -d "$HOME_DIR/llama.cpp/download" >&2
  rm -rf "$SRC.tmp" && mkdir -p "$SRC.tmp"
  tar xzf "$HOME_DIR/llama.cpp/download/llama_cpp_python-$VERSION.tar.gz" -C "$SRC.tmp" \
    --strip-components=1
  mv "$SRC.tmp" "$SRC"
fi
echo "duo: building llama.cpp binaries ($TARGETS) with $ARGS" >&2
# shellcheck disable=SC2086
cmake -S "$SRC/vendor/llama.cpp" -B "$OUT.build" -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF $ARGS >&2
# shellcheck disable=SC2086
cmake --build "$OUT.build" --target $TARGETS -j "$(nproc 2>/dev/null || echo 2)" >&2
mkdir -p "$OUT/bin"
for t in $TARGETS; do cp "$OUT.build/bin/$t" "$OUT/bin/"; done
rm -rf "$OUT.build"
echo "$OUT/bin"
