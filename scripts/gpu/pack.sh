#!/usr/bin/env bash
# Pack what a rented GPU machine lacks into .gpu/ (git-ignored), under 60 MiB: the device
# tool carries it there beside the working tree (`run` with carry [".gpu"]), and
# scripts/gpu/check.sh builds and measures from it with no network.
#
#   scripts/gpu/pack.sh [DIR]        # default .gpu; prints each part's size
#
#   DIR/llama-cpp-python-0.3.36.tar.gz   llama-cpp-python's source tree as its sdist has
#       it (llama.cpp vendored), less what building libllama, llama-completion,
#       llama-server, llama-bench and llama-quantize does not need: llama.cpp's docs,
#       media, tests, examples, CI, the web UI's sources (llama-server then serves no
#       page) and every test vocabulary but ggml-vocab-llama-bpe.gguf (Llama 3's, which
#       scripts/gpu/synth.py writes into its models). gguf-py stays (synth.py uses it).
#   DIR/wheels/      duo's and llama-cpp-python's Python dependencies that the device's
#       image (Python 3.12 with numpy, httpx, torch, transformers) may lack, as CPython
#       3.12 manylinux x86-64 wheels, at the versions this .venv has. huggingface_hub
#       is left out: duo imports it only for -hf.
#
# Idempotent: the tarball is made again only when its sdist or this script changes, a
# wheel only when it is missing. Fails (exit 1, one line) when DIR is over 60 MiB.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DIR=${1:-$ROOT/.gpu}
VERSION=0.3.36
LIMIT_MIB=60
HOME_DIR=${DUO_HOME:-$HOME/.cache/duo}
PY=${DUO_PACK_PYTHON:-$ROOT/.venv/bin/python}
[[ -x $PY ]] || PY=python3
SDIST="$HOME_DIR/llama.cpp/download/llama_cpp_python-$VERSION.tar.gz"
NAME="llama-cpp-python-$VERSION"
TARBALL="$DIR/$NAME.tar.gz"
# Wheels: duo's dependencies (pyproject.toml) and llama-cpp-python's, less numpy and
# httpx (the image has them, and httpx's own: anyio, h11's peers), plus PyYAML, which
# gguf-py imports.
WHEELS="starlette uvicorn click h11 websockets msgspec httptools uvloop shtab diskcache
jinja2 markupsafe typing_extensions pyyaml"

mkdir -p "$DIR/wheels"

# -- llama.cpp's sources -------------------------------------------------------------------
if [[ ! -f $SDIST ]]; then
  mkdir -p "$(dirname "$SDIST")"
  "$PY" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" \
    -d "$(dirname "$SDIST")" >&2
fi
V=vendor/llama.cpp
EXCLUDES=(
  "$NAME/.git" "$NAME/docs" "$NAME/docker" "$NAME/examples" "$NAME/tests" "$NAME/.github"
  "$NAME/$V/.git" "$NAME/$V/.github" "$NAME/$V/.devops" "$NAME/$V/docs" "$NAME/$V/media"
  "$NAME/$V/examples" "$NAME/$V/tests" "$NAME/$V/benches" "$NAME/$V/pocs" "$NAME/$V/ci"
  "$NAME/$V/skills" "$NAME/$V/conversion" "$NAME/$V/requirements" "$NAME/$V/models/templates"
  "$NAME/$V/tools/server/tests" "$NAME/$V/tools/server/bench" "$NAME/$V/tools/mtmd/tests"
  "$NAME/$V/tools/mtmd/test-*" "$NAME/$V/tools/ui/src" "$NAME/$V/tools/ui/static"
  "$NAME/$V/tools/ui/tests" "$NAME/$V/tools/ui/package-lock.json"
  "$NAME/$V/gguf-py/tests"
)
STAMP=$( (sha256sum "$SDIST" | cut -c1-16; sha256sum "$0" | cut -c1-16) | tr -d '\n')
if [[ ! -f $TARBALL || "$(cat "$TARBALL.stamp" 2>/dev/null)" != "$STAMP" ]]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  tar xzf "$SDIST" -C "$work"
  [[ -d $work/$NAME ]] || mv "$work"/llama_cpp_python-* "$work/$NAME"
  for e in "${EXCLUDES[@]}"; do
    # shellcheck disable=SC2086  # the globs (test-*) are meant
    rm -rf "$work"/$e
  done
  # the test vocabularies (and their .inp/.out), all but Llama 3's
  find "$work/$NAME/$V/models" -name 'ggml-vocab-*' ! -name 'ggml-vocab-llama-bpe.gguf' -delete
  tar czf "$TARBALL.tmp" -C "$work" --sort=name --owner=0 --group=0 --mtime=@0 "$NAME"
  mv "$TARBALL.tmp" "$TARBALL"
  echo "$STAMP" >"$TARBALL.stamp"
  rm -rf "$work"
  trap - EXIT
fi

# -- wheels ----------------------------------------------------------------------------------
specs=()
for w in $WHEELS; do
  v=$("$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$w")
  specs+=("$w==$v")
done
"$PY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp --abi cp312 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_28_x86_64 -d "$DIR/wheels" "${specs[@]}" >&2
# a wheel of an older version, left by an earlier pack
for f in "$DIR"/wheels/*.whl; do
  keep=0
  for s in "${specs[@]}"; do
    n=${s%%==*} v=${s##*==}
    n=$(echo "$n" | tr '-' '_')
    case "$(basename "$f" | tr 'A-Z' 'a-z')" in "$(echo "${n}-${v}-" | tr 'A-Z' 'a-z')"*) keep=1 ;; esac
  done
  [[ $keep == 1 ]] || rm -f "$f"
done

# -- size ------------------------------------------------------------------------------------
bytes=$(du -sb "$DIR" | cut -f1)
mib=$(( (bytes + 1048575) / 1048576 ))
echo "pack: $TARBALL $(du -h "$TARBALL" | cut -f1), $(find "$DIR/wheels" -name '*.whl' | wc -l) wheels $(du -sh "$DIR/wheels" | cut -f1), $DIR in all ${mib} MiB"
if (( bytes > LIMIT_MIB * 1048576 )); then
  echo "pack: $DIR is $mib MiB, over the $LIMIT_MIB MiB the device tool carries" >&2
  exit 1
fi
