"""A bench mode opened in a process of its own (real processes and pipes, a fake mode)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from duo.bench.harness.isolated import Isolated
from duo.bench.harness.runners import Runner
from duo.core.stats import Stats
from duo.errors import UsageError


class Counting(Runner):
    """Answers prompt i with i tokens; fails where told to; notes its close in a file."""

    def __init__(self, mode: str, closed: Path, fail_open: bool = False) -> None:
        if fail_open:
            raise UsageError(f"{mode}: no such model")
        self.mode, self.devices, self.closed = mode, f"pid {os.getpid()}", closed

    def one(self, i: int) -> tuple[Stats, float]:
        if i < 0:
            raise ValueError("no prompt before the first")
        if i == 99:
            os._exit(3)  # the process dies, as on a crash in llama.cpp
        return Stats(tokens=i), 0.5

    def extras(self) -> dict[str, Any]:
        return {"pid": os.getpid()}

    def close(self) -> None:
        self.closed.write_text("closed")


def test_a_mode_runs_in_a_process_of_its_own_and_closes_there(tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    runner = Isolated("m", Counting, "m", closed)
    try:
        assert runner.devices != f"pid {os.getpid()}"
        stats, ttft = runner.one(3)
        assert (stats.tokens, ttft) == (3, 0.5)
        assert runner.extras()["pid"] != os.getpid()
        with pytest.raises(ValueError, match="before the first"):
            runner.one(-1)
        assert runner.one(4)[0].tokens == 4  # a failed prompt leaves the mode usable
    finally:
        runner.close()
    assert closed.read_text() == "closed"
    assert not runner._proc.is_alive()


def test_a_renewed_mode_answers_from_a_new_process_once_the_old_one_closed(
    tmp_path: Path,
) -> None:
    """Each repeat of a bench mode runs in a process of its own (a process's speed depends
    on where its memory lands)."""
    closed = tmp_path / "closed"
    runner = Isolated("m", Counting, "m", closed)
    try:
        first, old = runner.extras()["pid"], runner._proc
        runner.renew()
        assert closed.read_text() == "closed" and not old.is_alive()
        closed.unlink()
        assert runner.extras()["pid"] not in (first, os.getpid())
        assert runner.one(2)[0].tokens == 2
        assert runner.devices == f"pid {runner.extras()['pid']}"
    finally:
        runner.close()
    assert closed.read_text() == "closed"


def test_a_mode_that_cannot_open_fails_with_its_own_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="m: no such model"):
        Isolated("m", Counting, "m", tmp_path / "closed", True)


def test_a_mode_whose_process_dies_fails_the_bench_instead_of_hanging(tmp_path: Path) -> None:
    runner = Isolated("m", Counting, "m", tmp_path / "closed")
    try:
        with pytest.raises(RuntimeError, match=r"m: its process ended \(exit code 3\)"):
            runner.one(99)
    finally:
        runner.close()
