"""duo sim on a recorded `duo bench` report (tests/unit/bench/sim/sim_bench_report.json: the default
pair, one bundled prompt, 48 tokens, target-1 / sync / async / lead+back, on a 2-vCPU
EPYC): its sync trace and measured device profile project every mode, and `duo sim
--bench` prints the projection beside each measurement."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from duo.bench.sim.profiles import bench_profile
from duo.bench.sim.projections import project_bench
from duo.cli.main import main

REPORT = Path(__file__).parent / "sim_bench_report.json"
MODES = ["target-1", "sync", "async", "lead+back"]


def report() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(REPORT.read_text())
    return data


def test_the_recorded_run_has_what_a_projection_needs() -> None:
    r = report()
    assert [m["mode"] for m in r["modes"]] == MODES
    assert r["profile"]["rounds"] >= 2  # before the prompts and after
    by_mode = {m["mode"]: m for m in r["modes"]}
    assert by_mode["sync"]["trace"], "the sync trace the projections replay"
    assert by_mode["lead+back"]["wire_bytes_per_token"] > 0
    assert by_mode["lead+back"]["lead_cpu_ms_per_token"] > 0


def test_every_mode_is_projected_from_the_runs_own_trace_and_costs() -> None:
    r = report()
    settings = r["settings"]
    profile = bench_profile(r)
    assert profile.main_ms(1) == pytest.approx(r["profile"]["main_ms_by_batch"]["1"], rel=1e-6)
    projections = project_bench(
        r, profile, k=settings["draft_max"], max_ahead=settings["max_ahead"],
        policy=settings["policy"],
    )  # fmt: skip
    assert [p.mode for p in projections] == MODES
    measured = {m["mode"]: m["tokens_per_second"] for m in r["modes"]}
    for p in projections:
        assert p.projected > 0 and p.measured == pytest.approx(measured[p.mode]), p
        assert p.error_percent == pytest.approx(100 * (p.projected / p.measured - 1), abs=0.05)
    # the main model alone: one single-token pass (and the loop around it) per token
    target = next(p for p in projections if p.mode == "target-1")
    assert target.projected == pytest.approx(1000 / profile.main_ms(1), rel=0.1)
    again = project_bench(
        r, profile, k=settings["draft_max"], max_ahead=settings["max_ahead"],
        policy=settings["policy"],
    )  # fmt: skip
    assert [p.projected for p in again] == [p.projected for p in projections]  # no clock


def test_duo_sim_prints_each_mode_beside_its_measurement(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["sim", "--bench", str(REPORT)]) == 0
    shown = capsys.readouterr().out
    for mode in MODES:
        assert mode in shown, shown
