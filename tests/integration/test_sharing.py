"""Switching the main model's cores to and from the in-process drafter never changes the
output (real default pair; switches forced every few tokens)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from duo.core.sampling import GREEDY, SamplingParams
from duo.core.sharing import ALONE, SPLIT
from duo.session import share
from duo.session.config import ModelConfig, SpecConfig
from duo.session.session import Session

pytestmark = pytest.mark.integration

PROMPTS = [
    "Write a short story about a robot learning to paint.",
    "List the planets of the solar system, one per line, with a fact about each.",
]
N = 64


@pytest.fixture
def flipping(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every look at the choice takes the other way: a switch every 8 tokens."""

    def flip(self: share.CoreShare) -> None:
        self._take(SPLIT if self.state == ALONE else ALONE)

    monkeypatch.setattr(share.CoreShare, "_choose", flip)
    monkeypatch.setattr(share, "WINDOW", 8)
    monkeypatch.setattr(share, "JUDGED", 8)  # beside the drafter, after its first draft


def generate(session: Session, text: str, sampling: SamplingParams) -> list[int]:
    prompt = session.chat_tokens([{"role": "user", "content": text}])
    out: list[int] = []
    session.run(prompt, N, lambda r: out.extend(r.tokens), sampling)
    return out


def sessions(pair: tuple[Path, Path], spec: SpecConfig) -> Iterator[tuple[Session, Session]]:
    main, draft = pair
    lent = ModelConfig(main=main, draft=draft, threads=1, draft_threads=1, threads_alone=2)
    target = SpecConfig(mode="target", deterministic=spec.deterministic)
    with Session(lent, spec) as switching, Session(ModelConfig(main, None), target) as alone:
        assert switching.share is not None
        yield switching, alone


@pytest.mark.parametrize(
    ("spec", "sampling"),
    [
        (SpecConfig(), GREEDY),  # what a user gets: every source, the adaptive policy
        (
            SpecConfig(adaptive=False, deterministic=True, spec_types=frozenset({"model"})),
            SamplingParams(temperature=0.8, seed=7),
        ),
    ],
    ids=["greedy", "seeded"],
)
@pytest.mark.usefixtures("flipping")
def test_switching_cores_online_never_changes_the_output(
    pair: tuple[Path, Path], spec: SpecConfig, sampling: SamplingParams
) -> None:
    for switching, alone in sessions(pair, spec):
        assert switching.share is not None
        for text in PROMPTS:
            assert generate(switching, text, sampling) == generate(alone, text, sampling)
        assert switching.share.switches >= 8
        assert switching.sharing().main_threads in (1, 2)
