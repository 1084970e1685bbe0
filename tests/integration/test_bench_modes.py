"""duo bench end to end: one short run of a mode of every family (each of duo.bench.
harness.modes' openers: duo's in-process modes, with a model drafter and free ones, its
two-process ones, the default with no placement flags, llama.cpp's peers), each measured,
and `duo sim --bench` projecting the run from its own trace and costs.

How fast each mode is belongs to the bench itself, not to this test; how close the
projections come is checked on a recorded report (tests/unit/bench/sim/test_projections.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
MODES = (
    "default", "target-1", "sync", "async", "async+free", "lead+back", "lead+client",
    "llama.cpp-ngram-mod",
)  # fmt: skip


def llama_cpp_bin() -> str:
    """llama.cpp's binaries, as `make test` built them (cached: prints their folder)."""
    built = subprocess.run(
        ["bash", str(ROOT / "scripts/build-llama-cpp.sh"), sys.executable],
        capture_output=True, text=True, timeout=1200, check=True,
    )  # fmt: skip
    return built.stdout.strip().splitlines()[-1]


def test_a_mode_of_every_family_is_measured_and_projected(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    suite = resources.files("duo").joinpath("prompts/suite.jsonl").read_text().splitlines()
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(suite[3] + "\n")
    out = tmp_path / "bench.json"
    subprocess.run(
        [
            sys.executable, "-m", "duo", "bench", "--prompts", str(prompts), "-n", "32",
            "--repeat", "1", "--modes", *MODES, "--llama-cpp-bin", llama_cpp_bin(),
            "--json", str(out),
        ],
        check=True, timeout=900, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    report: dict[str, Any] = json.loads(out.read_text())
    assert report["settings"]["order"] == "interleaved"
    assert report["profile"]["rounds"] >= 2  # before the prompts and after
    by_mode = {m["mode"]: m for m in report["modes"]}
    assert list(by_mode) == list(MODES)
    for mode, m in by_mode.items():
        assert m["tokens_per_second"] > 0, mode
    assert "main model on" in by_mode["default"]["placement"]  # where it ended
    assert by_mode["lead+back"]["wire_bytes_per_token"] > 0
    assert by_mode["lead+back"]["lead_cpu_ms_per_token"] > 0  # counted on CPU clocks
    shown = subprocess.run(
        [sys.executable, "-m", "duo", "sim", "--bench", str(out)],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    for mode in ("target-1", "sync", "async", "lead+back"):
        assert mode in shown, shown
