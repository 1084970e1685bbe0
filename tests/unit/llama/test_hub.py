"""Picking a GGUF from a repository's files, as llama-server's -hf does."""

from __future__ import annotations

import pytest

from duo.errors import UsageError
from duo.llama.hub import choose, parse_ref

FILES = [
    "README.md",
    "model-Q8_0.gguf",
    "model-Q4_K_M.gguf",
    "model-q4_k_m-mmproj.gguf",
    "mmproj-model-f16.gguf",
    "model-F16-00002-of-00002.gguf",
    "model-F16-00001-of-00002.gguf",
]


def test_parse_ref() -> None:
    assert parse_ref("org/name", "-hf").quant is None
    assert parse_ref("org/Name-GGUF:q8_0", "-hf").quant == "q8_0"
    for bad in ("name", "org/name:", "org/na me", "/name", "a/b/c"):
        with pytest.raises(UsageError, match="expected a repository like org/name"):
            parse_ref(bad, "-hf")


@pytest.mark.parametrize(
    ("quant", "expected"),
    [
        (None, ["model-Q4_K_M.gguf"]),  # the default, projectors left out
        ("Q8_0", ["model-Q8_0.gguf"]),
        ("q8_0", ["model-Q8_0.gguf"]),
        ("F16", ["model-F16-00001-of-00002.gguf", "model-F16-00002-of-00002.gguf"]),
    ],
)
def test_choose(quant: str | None, expected: list[str]) -> None:
    assert choose(FILES, quant, "-hf r") == expected


def test_without_the_default_quant_the_first_gguf() -> None:
    assert choose(["b-Q8_0.gguf", "a-Q5_K_S.gguf"], None, "-hf r") == ["a-Q5_K_S.gguf"]


def test_a_quant_is_a_whole_token() -> None:
    """Q4_K does not take Q4_K_M's file."""
    with pytest.raises(UsageError, match=r"no GGUF file for Q4_K \(the repository has: Q4_K_M"):
        choose(["m-Q4_K_M.gguf"], "Q4_K", "-hf r")


def test_refusals() -> None:
    with pytest.raises(UsageError, match="holds no GGUF file"):
        choose(["README.md", "model.safetensors"], None, "-hf r")
    with pytest.raises(UsageError, match="split in 3 parts, the repository has 2"):
        choose(["m-F16-00001-of-00003.gguf", "m-F16-00002-of-00003.gguf"], "F16", "-hf r")
