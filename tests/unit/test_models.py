"""Which 16-bit type a main model is made in (BF16 where the CPU computes it natively), and
a model assembled from chunk packages."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from duo.errors import ModelError, UsageError
from duo.llama.models import (
    HALF,
    HALF_ENV,
    ModelFile,
    assemble,
    get_pair,
    half_type,
    native_bf16,
)

EPYC_AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma f16c\n"
SAPPHIRE = "flags\t\t: avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 amx_tile\n"


def test_native_bf16_is_read_from_the_cpu_flags() -> None:
    assert not native_bf16(EPYC_AVX2)
    assert native_bf16(SAPPHIRE)
    assert not native_bf16("flags\t: avx512_bf16x\n")  # whole flags only
    assert not native_bf16("")


def test_main_models_are_f16_unless_the_environment_asks_for_bf16(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    main = ModelFile("smollm2-135m-instruct", HALF)
    monkeypatch.delenv(HALF_ENV, raising=False)
    assert half_type() == "F16"  # whatever the CPU: exact output first (see half_type)
    monkeypatch.setenv(HALF_ENV, "bf16")
    assert half_type() == "BF16"
    assert main.filename == "smollm2-135m-instruct-bf16.gguf"
    assert get_pair("smollm2").path("main").name == main.filename
    monkeypatch.setenv(HALF_ENV, "F16")
    assert main.filename == "smollm2-135m-instruct-f16.gguf"
    assert ModelFile("smollm2-135m-instruct", "Q3_K_M").filename.endswith("-q3_k_m.gguf")
    assert get_pair("smollm2").path("main", "BF16").name == "smollm2-135m-instruct-bf16.gguf"
    assert get_pair("smollm2").path("draft", "BF16").name.endswith("-q3_k_m.gguf")
    monkeypatch.setenv(HALF_ENV, "Q8_0")
    with pytest.raises(UsageError, match="must be BF16 or F16"):
        half_type()


def chunks(tmp_path: Path, parts: list[bytes]) -> list[Path]:
    out = []
    for i, data in enumerate(parts, 1):
        path = tmp_path / f"part{i:02d}.bin"
        path.write_bytes(data)
        out.append(path)
    return out


PARTS = [b"GGUF" + b"a" * 1000, b"b" * 3000, b"c" * 17]
WHOLE = b"".join(PARTS)
SHA = hashlib.sha256(WHOLE).hexdigest()


def test_chunks_are_assembled_in_order_and_checked(tmp_path: Path) -> None:
    out = tmp_path / "model.gguf"
    assemble(chunks(tmp_path, PARTS), out, len(WHOLE), SHA)
    assert out.read_bytes() == WHOLE
    with pytest.raises(ModelError, match="SHA-256"):  # the same bytes in another order
        swapped = chunks(tmp_path, [PARTS[1], PARTS[0], PARTS[2]])
        assemble(swapped, tmp_path / "x.gguf", len(WHOLE), SHA)
    assert not (tmp_path / "x.gguf").exists()
    assert not list(tmp_path.glob("*.tmp*"))  # nothing half-written is left


def test_a_truncated_or_missing_chunk_is_refused(tmp_path: Path) -> None:
    parts = chunks(tmp_path, [PARTS[0], PARTS[1][:-5], PARTS[2]])
    with pytest.raises(ModelError, match="truncated"):
        assemble(parts, tmp_path / "x.gguf", len(WHOLE), SHA)
    parts[1].unlink()
    with pytest.raises(ModelError, match=r"part02\.bin"):
        assemble(parts, tmp_path / "x.gguf", len(WHOLE), SHA)
    assert not (tmp_path / "x.gguf").exists()
