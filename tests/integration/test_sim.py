"""duo sim against duo bench on this machine: one `duo bench` run of every duo mode (the
modes take turns prompt by prompt, and the device costs are measured in rounds spread over
the run) is projected by `duo sim --bench` from its own sync trace and device profile.

How close the projections come is a measurement, not a test: it depends on how still the
host holds while the bench runs (this one drifts by tens of percent), and `duo sim --bench
REPORT` prints each mode's error for whoever runs it. This test checks that every part of
the projection is there and measured: the profile's rounds, the back's wire bytes and the
lead's CPU per token (counted on CPU clocks, so a loaded host cannot zero it), and a
projection beside a measurement for every mode.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from duo.bench.sim.profiles import bench_profile
from duo.bench.sim.projections import Projection, project_bench

pytestmark = pytest.mark.integration

# One prompt of the bundled suite: every part of the projection, not its accuracy.
PROMPTS = (3,)
MODES = ("target-1", "sync", "async", "lead+back")


def run_bench(prompts: Path, out: Path) -> dict[str, Any]:
    subprocess.run(
        [
            sys.executable, "-m", "duo", "bench", "--prompts", str(prompts), "-n", "48",
            "--repeat", "1", "--modes", *MODES, "--json", str(out),
        ],
        check=True,
        timeout=600,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def project(report: dict[str, Any]) -> list[Projection]:
    settings = report["settings"]
    return project_bench(
        report,
        bench_profile(report),
        k=settings["draft_max"],
        max_ahead=settings["max_ahead"],
        policy=settings["policy"],
    )


def test_duo_sim_projects_every_mode_of_a_bench_run(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    suite = resources.files("duo").joinpath("prompts/suite.jsonl").read_text().splitlines()
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(suite[i] for i in PROMPTS) + "\n")
    out = tmp_path / "bench.json"
    report = run_bench(prompts, out)
    assert report["settings"]["order"] == "interleaved"
    assert report["profile"]["rounds"] >= 2  # before the prompts and after
    by_mode = {m["mode"]: m for m in report["modes"]}
    assert list(by_mode) == list(MODES)
    assert by_mode["lead+back"]["wire_bytes_per_token"] > 0
    assert by_mode["lead+back"]["wire_messages_per_round"] >= 1  # a commit, at least
    assert by_mode["lead+back"]["lead_cpu_ms_per_token"] > 0

    projections = project(report)
    assert [r.mode for r in projections] == list(MODES)
    for r in projections:
        assert r.projected > 0 and r.measured and r.measured > 0, r
        assert r.error_percent is not None
    shown = subprocess.run(
        [sys.executable, "-m", "duo", "sim", "--bench", str(out)],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    for mode in MODES:
        assert mode in shown, shown
