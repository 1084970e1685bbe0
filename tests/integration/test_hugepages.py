"""A lead starts again, in the same process, with glibc asking for huge pages where the
kernel gives them on request (duo.llama.hugepages); DUO_HUGEPAGES=0 keeps 4 KiB pages."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from duo.llama.hugepages import THP_MODE, TUNABLE, wanted

from .conftest import Cluster

pytestmark = pytest.mark.integration


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().partition("=")[::2] for item in raw if item)


def _huge_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    return 0


def _expected() -> bool:
    """What this machine's kernel and glibc allow (the rule itself is unit-tested)."""
    thp = Path(THP_MODE).read_text() if Path(THP_MODE).exists() else ""
    glibc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    return wanted(["lead"], {}, thp, glibc)


def test_a_lead_asks_for_huge_pages_in_the_process_it_was_started_as(cluster: Cluster) -> None:
    proc, _ = cluster.lead("-np", "1")
    env = _environ(proc.popen.pid)  # the pid Popen started: the restart is an exec
    assert (TUNABLE in env.get("GLIBC_TUNABLES", "").split(":")) == _expected()
    if _expected():
        assert _huge_kb(proc.popen.pid) > 0


def test_duo_hugepages_0_keeps_the_environment_as_given(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DUO_HUGEPAGES", "0")
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    proc, _ = cluster.lead("-np", "1")
    env = _environ(proc.popen.pid)
    assert "GLIBC_TUNABLES" not in env
    assert "DUO_GLIBC_TUNABLES_BEFORE" not in env
