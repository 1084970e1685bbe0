"""The bench's peers run in the environment the user gave duo, not the one duo restarted
itself with (duo.llama.hugepages)."""

from __future__ import annotations

import os

import pytest

from duo.bench.harness.llamacpp import _run
from duo.llama.hugepages import TUNABLE, with_tunable


def test_a_peer_gets_the_users_glibc_tunables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in with_tunable({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}).items():
        monkeypatch.setenv(name, value)
    assert TUNABLE in os.environ["GLIBC_TUNABLES"]  # as in a duo that started again
    seen = _run(["env"], None).splitlines()
    assert "GLIBC_TUNABLES=glibc.malloc.arena_max=2" in seen
    assert not any(line.startswith("DUO_GLIBC_TUNABLES_BEFORE=") for line in seen)
