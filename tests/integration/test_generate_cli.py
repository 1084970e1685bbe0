"""`duo generate` as a user runs it: real models, real process, real exit codes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from .conftest import duo

pytestmark = pytest.mark.integration


def assert_clean_failure(result: subprocess.CompletedProcess[str], message: str) -> None:
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize("mode", ["target", "sync", "async"])
def test_generate_streams_text_and_a_summary(pair: tuple[Path, Path], mode: str) -> None:
    main, draft = pair
    r = duo(
        "generate",
        "-m",
        str(main),
        "-md",
        str(draft),
        "--mode",
        mode,
        "--policy",  # verify every ready draft (the adaptive policy may skip them all)
        "fixed",
        "--temp",
        "0",
        "-p",
        "The three primary colors are",
        "-n",
        "48",
        "--color",
        "never",
    )
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.strip()) > 10
    assert "\x1b[" not in r.stdout  # --color never
    for line in ("encoded", "decoded", "acceptance rate", "mean acceptance length"):
        assert line in r.stderr
    if mode != "target":
        assert "drafted 0," not in r.stderr


def test_same_text_in_every_mode(pair: tuple[Path, Path]) -> None:
    main, draft = pair
    outs = {
        mode: duo(
            "generate",
            "-m",
            str(main),
            "-md",
            str(draft),
            "--mode",
            mode,
            "--policy",
            "fixed",
            "--deterministic",  # bit-identical logits in every mode...
            "--seed",  # ...so one seed gives one text
            "7",
            "-p",
            "Once upon a time",
            "-n",
            "48",
        ).stdout
        for mode in ("target", "sync", "async")
    }
    assert outs["target"] and outs["sync"] == outs["target"] and outs["async"] == outs["target"]


def test_color_always_marks_accepted_draft_tokens(pair: tuple[Path, Path]) -> None:
    main, draft = pair
    r = duo(
        "generate",
        "-m",
        str(main),
        "-md",
        str(draft),
        "--mode",
        "sync",
        "-p",
        "1, 2, 3, 4, 5,",
        "-n",
        "32",
        "--color",
        "always",
    )
    assert "\x1b[32m" in r.stdout


def test_truncated_model_file(tmp_path: Path, pair: tuple[Path, Path]) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(pair[0].read_bytes()[:5_000_000])
    r = duo("generate", "-m", str(broken), "--mode", "target", "-p", "hi")
    assert_clean_failure(r, "could not load")


def test_draft_with_another_vocabulary(pair: tuple[Path, Path], other_vocab_draft: Path) -> None:
    r = duo("generate", "-m", str(pair[0]), "-md", str(other_vocab_draft), "-p", "hi")
    assert_clean_failure(r, "another vocabulary")


@pytest.mark.parametrize("mode", ["target", "sync", "async"])
def test_prompt_longer_than_the_context(pair: tuple[Path, Path], mode: str) -> None:
    """One line, whatever the mode: no drafter begins on a prompt that cannot fit."""
    models = ["-m", str(pair[0]), "-md", str(pair[1])]
    r = duo("generate", *models, "--mode", mode, "-c", "256", "-n", "4", "-p", "word " * 400)
    assert_clean_failure(r, "raise it with -c")


def test_a_context_of_a_few_tokens_generates_what_fits(
    pair: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No placement flags: the costs timed at start are those a context of 4 holds (the
    timing's own 8 tokens of context did not fit, and a size left out was asked for), and
    a context of one token holds no prompt and its answer."""
    monkeypatch.setenv("DUO_HOME", str(tmp_path))  # timed here, not read from a cache
    models = ["-m", str(pair[0]), "-md", str(pair[1])]
    r = duo("generate", *models, "-c", "4", "-n", "2", "--temp", "0", "-p", "Hi")
    assert r.returncode == 0, r.stderr
    assert "decoded" in r.stderr and "Traceback" not in r.stderr
    assert_clean_failure(duo("generate", *models, "-c", "1", "-n", "2", "-p", "Hi"), "-c")
