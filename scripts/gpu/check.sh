#!/usr/bin/env bash
# The one command to run on a rented GPU machine (no network; scripts/gpu/pack.sh's .gpu/
# carried beside the working tree): builds llama.cpp with CUDA from the packed sources,
# sets up duo's Python dependencies from the packed wheels, then scripts/gpu/check.py
# synthesizes the models and measures (correctness, device costs, throughput).
# Everything lands under $OUT (default ./out); every step prints its time. ~9 minutes on
# an H100 box with 16 cores.
#
#   scripts/gpu/check.sh                    # on the GPU machine
#   scripts/gpu/check.sh --cpu-only --tiny  # here: no CUDA, toy models, a few minutes
#
#   --cpu-only  no CUDA: the CPU binaries scripts/build-llama-cpp.sh built
#               ($DUO_HOME/llama.cpp/0.3.36-*/bin) where there are some, else a CPU build
#   --tiny      toy models (synth.py --shape tiny) and few tokens
#
# The build, the Python packages and the models are cached in .gpu-work/ (outside .gpu/,
# which the device tool replaces at every call: a second run on a warm machine skips
# them); $DUO_GPU_WORK moves it. $DUO_CHECK_CMAKE_ARGS: more flags for llama.cpp's cmake.
# $DUO_CHECK_PYTHON: the Python to run duo with (default: this project's .venv where it
# has duo, else python3.12 or python3 with the packed wheels); DUO_CHECK_BUILD=1: build
# from the packed sources even with --cpu-only where CPU binaries exist.
set -euo pipefail

T0=$(date +%s)
GPU=1 TINY=0
for a in "$@"; do
  case $a in
    --cpu-only) GPU=0 ;;
    --tiny) TINY=1 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "check: unknown flag $a (--cpu-only, --tiny)" >&2; exit 2 ;;
  esac
done
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$(realpath -m "${OUT:-./out}")
PACK=${DUO_GPU_PACK:-$ROOT/.gpu}
WORK=${DUO_GPU_WORK:-$ROOT/.gpu-work}
VERSION=0.3.36
HOME_DIR=${DUO_HOME:-$HOME/.cache/duo}
BUDGET=${DUO_CHECK_SECONDS:-540}  # 9 minutes, the build's included
JOBS=$(nproc 2>/dev/null || echo 2)
mkdir -p "$OUT" "$WORK"
rm -f "$OUT/steps.txt"
exec > >(tee -a "$OUT/check.log") 2>&1

step_start() { STEP=$1; STEP_T=$(date +%s.%N); echo "[check] $STEP ..."; }
step_end() {
  local s
  s=$(echo "$(date +%s.%N) - $STEP_T" | bc)
  printf '[check] %s: %.1f s\n' "$STEP" "$s"
  echo "$STEP $s" >>"$OUT/steps.txt"
}

# -- sources ---------------------------------------------------------------------------------
step_start sources
SRC=""
if [[ -f $PACK/llama-cpp-python-$VERSION.tar.gz ]]; then
  SRC=$WORK/src/llama-cpp-python-$VERSION
  stamp=$(cat "$PACK/llama-cpp-python-$VERSION.tar.gz.stamp" 2>/dev/null || echo none)
  if [[ "$(cat "$SRC.stamp" 2>/dev/null)" != "$stamp" ]]; then
    rm -rf "$WORK/src" && mkdir -p "$WORK/src"
    tar xzf "$PACK/llama-cpp-python-$VERSION.tar.gz" -C "$WORK/src"
    echo "$stamp" >"$SRC.stamp"
  fi
elif [[ -d $HOME_DIR/llama.cpp/src-$VERSION/vendor/llama.cpp ]]; then
  SRC=$HOME_DIR/llama.cpp/src-$VERSION
else
  echo "check: no llama.cpp sources: run scripts/gpu/pack.sh (or scripts/build-llama-cpp.sh)" >&2
  exit 1
fi
echo "[check]   sources: $SRC"
step_end

# -- build -----------------------------------------------------------------------------------
step_start build
TARGETS="llama llama-completion llama-server llama-bench llama-quantize"
FLAGS=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_RPC=ON
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DGGML_CCACHE=OFF)
# shellcheck disable=SC2206  # word splitting meant
FLAGS+=(${DUO_CHECK_CMAKE_ARGS:-})
LIB=""
BIN=""
if (( GPU )); then
  if ! command -v nvcc >/dev/null; then  # CUDA's usual home, where PATH lacks it
    for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
      [[ -x $d/nvcc ]] && export PATH=$PATH:$d && break
    done
  fi
  BUILD=$WORK/build-cuda
  FLAGS+=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90)
elif [[ ${DUO_CHECK_BUILD:-0} != 1 ]]; then
  BIN=$(ls -d "$HOME_DIR"/llama.cpp/$VERSION-*/bin 2>/dev/null | head -1 || true)
  [[ -n $BIN && -x $BIN/llama-completion && -x $BIN/llama-server ]] || BIN=""
fi
(( GPU )) || BUILD=$WORK/build-cpu
if [[ -z $BIN ]]; then
  gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  if [[ ! -f $BUILD/CMakeCache.txt ]]; then
    cmake -S "$SRC/vendor/llama.cpp" -B "$BUILD" "${gen[@]}" "${FLAGS[@]}" >"$OUT/build.log" 2>&1 ||
      { tail -30 "$OUT/build.log"; echo "check: cmake configure failed (build.log)" >&2; exit 1; }
  fi
  # shellcheck disable=SC2086
  cmake --build "$BUILD" --target $TARGETS -j "$JOBS" >>"$OUT/build.log" 2>&1 ||
    { tail -30 "$OUT/build.log"; echo "check: build failed (build.log)" >&2; exit 1; }
  BIN=$BUILD/bin
  LIB=$BUILD/bin
  tail -c 200000 "$OUT/build.log" >"$OUT/build.log.tail" && mv "$OUT/build.log.tail" "$OUT/build.log"
else
  echo "[check]   reusing the CPU binaries in $BIN (scripts/build-llama-cpp.sh)"
fi
echo "[check]   binaries: $BIN"
(( GPU )) && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
step_end

# -- Python ----------------------------------------------------------------------------------
step_start python
PY=${DUO_CHECK_PYTHON:-}
if [[ -z $PY ]]; then
  for c in python3.12 python3; do
    if "$c" -c "import sys" 2>/dev/null; then PY=$(command -v "$c"); break; fi
  done
fi
if [[ -z ${DUO_CHECK_PYTHON:-} && -x $ROOT/.venv/bin/python ]] &&
  "$ROOT/.venv/bin/python" -c "import duo, llama_cpp" 2>/dev/null; then
  PY=$ROOT/.venv/bin/python  # this project's venv (here): it has everything
else
  SITE=$WORK/site
  stamp=$(ls "$PACK"/wheels/*.whl 2>/dev/null | xargs -r -n1 basename | sha256sum | cut -c1-16)
  if [[ "$(cat "$SITE/.stamp" 2>/dev/null)" != "$stamp" ]]; then
    rm -rf "$SITE" && mkdir -p "$SITE"
    if "$PY" -m pip --version >/dev/null 2>&1; then
      "$PY" -m pip install --quiet --disable-pip-version-check --no-index --no-deps \
        --target "$SITE" "$PACK"/wheels/*.whl
    else  # no pip: a wheel is a zip of what goes into site-packages
      "$PY" -c 'import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]' \
        "$SITE" "$PACK"/wheels/*.whl
    fi
    # llama-cpp-python's own package, as the sources have it: pure Python over ctypes,
    # loading the libraries just built ($LLAMA_CPP_LIB_PATH); nothing to compile
    cp -r "$SRC/llama_cpp" "$SITE/"
    echo "$stamp" >"$SITE/.stamp"
  fi
  export PYTHONPATH=$SITE:$ROOT/src${PYTHONPATH:+:$PYTHONPATH}
fi
[[ -n $LIB ]] && export LLAMA_CPP_LIB_PATH=$LIB
"$PY" -c "import duo.cli, llama_cpp, starlette, uvicorn, msgspec; print('[check]   python:', __import__('sys').version.split()[0], 'llama_cpp from', llama_cpp.__file__)" ||
  { echo "check: duo does not import (above)" >&2; exit 1; }
step_end

# -- measure ---------------------------------------------------------------------------------
args=(run --bin "$BIN" --out "$OUT" --work "$WORK" --llama-src "$SRC" --deadline $((T0 + BUDGET)))
(( GPU )) && args+=(--gpu)
(( TINY )) && args+=(--tiny)
rc=0
"$PY" "$ROOT/scripts/gpu/check.py" "${args[@]}" || rc=$?
echo "[check] all: $(( $(date +%s) - T0 )) s; results: $OUT/results.json, profile: $OUT/profile.json"
exit $rc
