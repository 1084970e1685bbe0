"""`duo demo` (what `make demo` runs): a lead and a back stream an answer, then the main
model alone, duo with no flags and lead+back side by side, under `duo bench`'s names."""

from __future__ import annotations

import re

import pytest

from .conftest import duo

pytestmark = pytest.mark.integration


def test_the_demo_streams_an_answer_then_compares_the_modes_it_names_as_the_bench_does() -> None:
    r = duo("demo", "-n", "24", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "== duo lead and duo back, two processes" in out
    answer = out.split("== the same prompt")[0].split("\n", 1)[1]
    assert len(answer.strip()) > 10  # the streamed answer
    rows = {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\S+)\s+([\d.]+)\s", out, re.M)}
    assert {"target-all", "default", "lead+back"} <= rows.keys(), out
    assert all(rows[mode] > 0 for mode in ("target-all", "default", "lead+back"))
    for mode in ("default", "lead+back"):  # slower than the main model alone: it says why
        if rows[mode] < rows["target-all"]:
            assert f"{mode} is " in out and "docs/placement.md" in out, out
    assert "Traceback" not in r.stderr
