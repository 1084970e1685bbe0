"""`duo bench --clients` plays a workload's sessions against a real lead: turn by turn,
each request holding the session's earlier turns and the lead's own earlier answers."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from duo.bench.harness.traffic import load
from duo.bench.harness.workloads import sessions
from duo.core.sampling import GREEDY
from duo.llama.backend import Model

from .conftest import Cluster

pytestmark = pytest.mark.integration


def test_sessions_are_played_as_dependent_requests(
    cluster: Cluster, pair: tuple[Path, Path]
) -> None:
    _, url = cluster.lead("--parallel", "2", "--spec-type", "ngram,suffix", "--quiet")
    work = sessions("multiturn", count=2)
    sent: list[list[dict[str, Any]]] = []
    with Model(pair[0], n_ctx=512) as model:

        def render(messages: list[dict[str, Any]]) -> str:
            sent.append([dict(m) for m in messages])
            return model.vocab.render_chat(messages)

        runs, seconds = load(url, work, 2, 8, GREEDY, render)
    assert len(sent) == sum(len(s.turns) for s in work) == 8
    assert seconds > 0 and 0 < sum(r.tokens for r in runs) <= 8 * 8
    for session in work:
        mine = [m for m in sent if m[0]["content"] == session.turns[0][0]["content"]]
        assert [len(m) for m in mine] == [1, 3, 5, 7]  # each turn: earlier turns and answers
        answers = [m["content"] for m in mine[-1] if m["role"] == "assistant"]
        assert len(answers) == 3 and all(answers), "the lead's own answers go back in"
        for earlier, later in itertools.pairwise(mine):
            assert later[: len(earlier)] == earlier
    assert all(r.drafted >= r.accepted >= 0 for r in runs)
