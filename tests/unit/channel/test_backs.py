"""Backs and their sessions: a session per generation of the lead, drafts per session,
on the lead's side and on the back's."""

from __future__ import annotations

from typing import cast

from duo.channel import protocol as p
from duo.channel.backs import Backs, BackSession, Remote
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


def one_back_one_session() -> tuple[Backs, list[p.Message], Remote, BackSession]:
    """A back that has heard a generation begin: the backs, what it was sent, it, and the
    generation's session."""
    backs = Backs()
    sent = connect(backs, "beside")
    a = backs.source(0)
    a.begin([1, 2, 3])
    return backs, sent, backs.remotes[0], a


def test_a_resting_back_hears_no_commits_and_is_caught_up_when_it_drafts_again() -> None:
    backs, sent, remote, a = one_back_one_session()
    backs.rest(remote, True)
    backs.rest(remote, True)  # already resting: nothing more is said
    b = backs.source(1)
    b.begin([7, 8])  # a generation begun while it rests: heard of, not followed
    a.commit(3, [4, 5])
    a.commit(5, [6])
    b.commit(2, [9])
    c = backs.source(2)
    c.begin([5])
    c.end()  # over while it rested: nothing to catch up with
    assert sent[1:] == [
        p.Rest(True),
        p.Begin(b.session, (7, 8)),
        p.Begin(c.session, (5,)),
        p.End(c.session),
    ]
    del sent[:]
    backs.rest(remote, False)  # what it missed, a COMMIT per running session, then REST
    assert sent == [
        p.Commit(a.session, 3, (4, 5, 6)),
        p.Commit(b.session, 2, (9,)),
        p.Rest(False),
    ]
    a.commit(6, [7])  # and every commit from then on
    assert sent[-1] == p.Commit(a.session, 6, (7,))


def test_a_commit_that_rewrites_what_a_resting_back_heard_is_caught_up_from_there() -> None:
    backs, sent, remote, a = one_back_one_session()
    a.commit(3, [4, 5])
    backs.rest(remote, True)
    a.commit(4, [6, 7])  # position 4 rewritten: the back heard 5 there
    del sent[:]
    backs.rest(remote, False)
    assert sent == [p.Commit(a.session, 4, (6, 7)), p.Rest(False)]


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


def test_the_lead_takes_the_branch_that_its_correction_took() -> None:
    """A back's branch leaves its draft where the back was unsure: after the lead rejects
    the draft's guess there and commits the branch's token, the branch is proposed."""
    backs = Backs()
    connect(backs, "gpu")
    remote = backs.remotes[0]
    a = backs.source(0)
    a.begin([1, 2, 3])
    backs.receive(remote, a.session, 3, (4, 5, 6, 7))
    backs.receive_branch(remote, a.session, 5, 0, (9, 10))  # 1 2 3 | 4 5 -> 9 10
    backs.receive_branch(remote, a.session, 5, 2, (11,))  # the branch grows: 9 10 11
    backs.receive_branch(remote, a.session, 4, 0, (8, 8))  # 1 2 3 | 4 -> 8 8
    backs.receive_branch(remote, a.session, 6, 1, (12,))  # continues no branch held
    assert set(remote.branches[a.session]) == {4, 5}
    assert a.propose([1, 2, 3], 8)[0].tokens == (4, 5, 6, 7)  # the draft first

    a.commit(3, [4, 5, 9])  # the draft's 6 rejected, the lead's token is the branch's
    assert a.propose([1, 2, 3, 4, 5, 9], 8)[0].tokens == (10, 11)
    assert set(remote.branches[a.session]) == {5}  # the branch at 4 can no longer be
    a.commit(6, [10, 0])
    assert a.propose([1, 2, 3, 4, 5, 9, 10, 0], 8) == []
    assert a.received() == {"back:gpu": 4 + 2 + 1 + 2 + 1}
    a.end()
    assert a.session not in remote.branches


def test_a_back_frames_what_is_new_in_each_branch() -> None:
    model = FakeBatchModel([FakeModel(table_model(3)) for _ in range(2)])
    back = BackDrafter(cast(Model, model), parallel=2, max_ahead=4)
    outbox = Outbox()
    back.attach(outbox.put_nowait, 2)
    back.on_message(p.Begin(1, (1, 2, 3)))
    back.frame(1, Draft(3, (5, 6)), (Draft(3, (5, 9, 1)),))
    back.frame(1, Draft(3, (5, 6, 7)), (Draft(3, (5, 9, 1, 2)), Draft(3, (8, 4))))
    back.frame(1, Draft(3, (5, 6, 7)), (Draft(3, (5, 9, 3)),))  # another branch at 4
    back.frame(1, Draft(5, (7,)), (Draft(5, (2, 2)),))  # committed past 4: at 5 is new
    assert outbox.frames == [
        p.DraftMsg(1, 3, (5, 6)),
        p.Branch(1, 4, 0, (9, 1)),
        p.Append((7,)),
        p.Branch(1, 4, 2, (2,)),
        p.Branch(1, 3, 0, (8, 4)),
        p.Branch(1, 4, 0, (9, 3)),
        p.Branch(1, 5, 0, (2, 2)),
    ]
