"""Which 16-bit type a main model is made in: BF16 where the CPU computes it natively."""

from __future__ import annotations

import pytest

from duo.errors import UsageError
from duo.llama.models import HALF, HALF_ENV, ModelFile, get_pair, half_type, native_bf16

EPYC_AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma f16c\n"
SAPPHIRE = "flags\t\t: avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 amx_tile\n"


def test_native_bf16_is_read_from_the_cpu_flags() -> None:
    assert not native_bf16(EPYC_AVX2)
    assert native_bf16(SAPPHIRE)
    assert not native_bf16("flags\t: avx512_bf16x\n")  # whole flags only
    assert not native_bf16("")


def test_the_environment_chooses_over_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    main = ModelFile("smollm2-135m-instruct", HALF)
    monkeypatch.setenv(HALF_ENV, "bf16")
    assert half_type() == "BF16"
    assert main.filename == "smollm2-135m-instruct-bf16.gguf"
    assert get_pair("smollm2").path("main").name == main.filename
    monkeypatch.setenv(HALF_ENV, "F16")
    assert main.filename == "smollm2-135m-instruct-f16.gguf"
    assert ModelFile("smollm2-135m-instruct", "Q3_K_M").filename.endswith("-q3_k_m.gguf")
    monkeypatch.setenv(HALF_ENV, "Q8_0")
    with pytest.raises(UsageError, match="must be BF16 or F16"):
        half_type()
