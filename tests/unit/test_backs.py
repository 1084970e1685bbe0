"""Backs and their sessions: a session per generation of the lead, drafts per session,
on the lead's side and on the back's."""

from __future__ import annotations

from typing import cast

from duo.channel import protocol as p
from duo.channel.backs import Backs, Remote
from duo.channel.drafting import BackDrafter
from duo.core.draft import Draft
from duo.llama.backend import Model
from tests.unit.fakes import FakeBatchModel, FakeModel, table_model


def connect(backs: Backs, name: str) -> list[p.Message]:
    sent: list[p.Message] = []
    backs.join(Remote(name, sent.append))
    return sent


def test_every_running_generation_is_a_session_of_its_own() -> None:
    backs = Backs()
    early = connect(backs, "early")
    a, b = backs.source(0), backs.source(1)
    a.begin([1, 2, 3])
    b.begin([7, 8])
    late = connect(backs, "late")  # hears of both running sessions when it joins
    assert early == [p.Begin(a.session, (1, 2, 3)), p.Begin(b.session, (7, 8))]
    assert late == early and a.session != b.session

    remote = backs.remotes[0]
    backs.receive(remote, a.session, 3, (4, 5, 6))
    backs.receive(remote, b.session, 2, (9,))
    assert a.propose([1, 2, 3], 8)[0].tokens == (4, 5, 6)
    assert b.propose([7, 8], 8)[0].tokens == (9,)

    a.commit(3, [4, 0])  # accepts one guess, corrects the next: the draft went stale...
    assert early[-1] == p.Commit(a.session, 3, (4, 0))
    assert a.propose([1, 2, 3, 4, 0], 8) == []
    backs.receive(remote, a.session, 5, (1, 2))  # ...and the back's next frame starts afresh
    assert a.propose([1, 2, 3, 4, 0], 8)[0].tokens == (1, 2)

    b.end()
    backs.receive(remote, b.session, 3, (5,))  # for a session that is over: ignored
    assert b.session not in remote.drafts
    assert early[-1] == p.End(b.session) and late[-1] == p.End(b.session)
    # what each session received, by back, the stale guesses too
    assert a.received() == {"back:early": 5} and b.received() == {"back:early": 1}


class Outbox:
    def __init__(self) -> None:
        self.frames: list[p.Message] = []

    def put_nowait(self, data: bytes) -> None:
        self.frames.append(p.decode(data, 2))


def test_a_back_frames_each_sessions_draft_apart() -> None:
    """APPEND continues the last DRAFT's session only; a session that is over sends
    nothing more."""
    model = FakeBatchModel([FakeModel(table_model(3)) for _ in range(2)])
    back = BackDrafter(cast(Model, model), parallel=2, max_ahead=4)
    outbox = Outbox()
    back.attach(outbox.put_nowait, 2)
    back.on_message(p.Begin(1, (1, 2, 3)))
    back.on_message(p.Begin(2, (4, 5)))
    back.frame(1, Draft(3, (5, 6)))
    back.frame(1, Draft(3, (5, 6, 7)))
    back.frame(2, Draft(2, (9,)))
    back.frame(1, Draft(3, (5, 6, 7, 8)))
    back.frame(1, Draft(4, (6, 7, 8)))  # nothing new
    back.on_message(p.End(1))
    back.frame(1, Draft(3, (5, 6, 7, 8, 9)))  # published after the end
    assert outbox.frames == [
        p.DraftMsg(1, 3, (5, 6)),
        p.Append((7,)),
        p.DraftMsg(2, 2, (9,)),
        p.DraftMsg(1, 6, (8,)),
    ]
