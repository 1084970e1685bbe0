"""The lead's judgement of its backs (duo.session.placement), with fake models and real
Backs: REST frames when a back's rounds do not pay, looks, lent threads."""

from __future__ import annotations

import pytest

from duo.channel import protocol as p
from duo.channel.backs import Backs, Remote
from duo.core.policy import CostModel
from duo.core.rounds import Round
from duo.net import machine_id
from duo.session import placement, share
from duo.session.placement import BackPlacement
from duo.session.share import JUDGED, WINDOW
from tests.unit.session.test_sharing import FakeModel

# SmolLM2-135M F16 on this project's 2-vCPU host, seconds by batch: on both cores (alone),
# and on one (split: a back drafts on the other).
ALONE = {1: 0.0075, 2: 0.0119, 3: 0.0125, 5: 0.0138, 9: 0.0180}
SPLIT = {1: 0.0104, 2: 0.0170, 3: 0.0178, 5: 0.0208, 9: 0.0305}


class Lead:
    """A lead's main model and backs, judged by a BackPlacement."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, lendable: int = 0) -> None:
        by_threads = {2: ALONE, 1: SPLIT}
        monkeypatch.setattr(share, "_timed", lambda model, threads, *_a, **_k: by_threads[threads])
        self.main = FakeModel(2)
        self.backs = Backs()
        self.costs = CostModel(dict(ALONE))
        self.placement = BackPlacement(
            self.main,  # type: ignore[arg-type]
            self.backs,
            lambda: self.costs,
            draft_max=8,
            lendable=lendable,
        )
        self.looks: list[str] = []

    def join(
        self, name: str, version: int = p.VERSION, machine: str = "0" * 16, threads: int = 1
    ) -> tuple[Remote, list[p.Message]]:
        sent: list[p.Message] = []
        remote = Remote(name, sent.append, version=version, host="10.0.0.9")
        remote.machine, remote.threads = machine, threads
        self.backs.join(remote)
        self.passes(1, ALONE[1], None, 1)  # the judge is made at the next pass
        return remote, sent

    def passes(self, tokens: int, seconds: float, source: str | None, n: int) -> None:
        """n passes of one round each, emitting `tokens` tokens in `seconds`."""
        for _ in range(n):
            drafted = tokens - 1 if source else 0
            r = Round(tuple(range(tokens)), drafted, drafted, seconds, seconds, source=source)
            if not source:  # (the policies' cost model learns the passes it can name)
                self.costs.observe(tokens, seconds)
            self.looks += self.placement.observe([r])


def test_a_back_whose_rounds_do_not_pay_is_rested_then_looked_at_then_rested_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lead = Lead(monkeypatch)
    remote, sent = lead.join("far")
    assert (remote.state, sent) == ("drafting", [])
    # its drafts are verified and wrong: one token a round, in passes of 5 tokens
    lead.passes(1, ALONE[5], remote.source, JUDGED + 1)
    assert sent == [p.Rest(True)]
    assert remote.state == "resting" and "do not pay" in remote.why
    assert lead.main.n_threads == 2  # a back on another machine lends nothing
    lead.passes(1, ALONE[1], None, placement.FIRST_LOOK * WINDOW)
    assert sent == [p.Rest(True), p.Rest(False)]
    assert remote.state == "looking" and lead.looks == [remote.source]
    lead.passes(1, ALONE[5], remote.source, JUDGED + 1)
    assert sent == [p.Rest(True), p.Rest(False), p.Rest(True)]
    assert remote.state == "resting"


def test_a_back_whose_rounds_pay_drafts_on_and_a_look_that_pays_ends_its_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lead = Lead(monkeypatch)
    remote, sent = lead.join("good")
    lead.passes(5, ALONE[5], remote.source, 2 * WINDOW)  # 5 tokens for a pass of 5
    assert (sent, remote.state) == ([], "drafting")
    assert "pay (" in remote.why
    lead.passes(1, ALONE[5], remote.source, 2 * WINDOW)  # the text changed
    assert remote.state == "resting"
    lead.passes(1, ALONE[1], None, placement.FIRST_LOOK * WINDOW)
    assert remote.state == "looking"
    lead.passes(5, ALONE[5], remote.source, 2 * WINDOW)  # and changed back
    assert remote.state == "drafting" and sent[-1] == p.Rest(False)


def test_a_version_3_back_is_never_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    lead = Lead(monkeypatch)
    remote, sent = lead.join("old", version=3)
    lead.passes(1, ALONE[5], remote.source, 4 * WINDOW)
    assert (sent, remote.state, remote.why) == ([], "drafting", "")
    assert not lead.placement.judges


def test_a_back_on_this_machine_borrows_its_threads_while_it_drafts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lead = Lead(monkeypatch, lendable=2)
    remote, sent = lead.join("beside", machine=machine_id(), threads=1)
    assert lead.main.n_threads == 1  # the back drafts on the other core
    lead.passes(1, SPLIT[5], remote.source, JUDGED + 1)
    assert sent == [p.Rest(True)] and lead.main.n_threads == 2
    assert "the main model on 2 threads" in remote.why
    lead.passes(1, ALONE[1], None, share.FIRST_LOOK * WINDOW)  # as the in-process drafter's
    assert sent[-1] == p.Rest(False) and lead.main.n_threads == 1
    lead.backs.leave(remote)
    lead.passes(1, SPLIT[1], None, 1)
    assert lead.main.n_threads == 2  # gone: its threads are the main model's again


def test_a_second_back_on_this_machine_only_rests_and_the_log_says_why(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    lead = Lead(monkeypatch, lendable=2)
    lead.join("first", machine=machine_id(), threads=1)
    with caplog.at_level("INFO", logger="duo.session.placement"):
        lead.join("second", machine=machine_id(), threads=1)
    assert "another back on this machine already borrows" in caplog.text
    judges = list(lead.placement.judges.values())
    assert [j.lends for j in judges] == [True, False]
    lead_fixed = Lead(monkeypatch, lendable=0)
    with caplog.at_level("INFO", logger="duo.session.placement"):
        lead_fixed.join("pinned", machine=machine_id(), threads=1)
    assert "threads are fixed" in caplog.text


def test_a_back_beside_the_lead_must_pay_at_its_first_judgements(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A back on the lead's machine that slows every pass by 5% and whose drafts are never
    taken is rested at its first judgement (as at a look: no margin); the 10% margin
    would have kept it, at 0.95x the main model alone, for good."""
    lead = Lead(monkeypatch)  # nothing to lend: it can only rest
    remote, sent = lead.join("beside", machine=machine_id(), threads=1)
    lead.passes(1, ALONE[1] * 1.05, None, WINDOW + 2)
    assert sent == [p.Rest(True)] and remote.state == "resting"
    assert lead.main.n_threads == 2


def test_a_back_whose_drafts_are_never_ready_in_time_rests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Drafts that always come too late are never verified: the rounds are the main
    model's alone, and a back on another machine that brings nothing rests."""
    lead = Lead(monkeypatch)
    remote, sent = lead.join("late")
    lead.passes(1, ALONE[1], None, WINDOW + 2)
    assert sent == [p.Rest(True)] and remote.state == "resting"
