"""The backs as the lead's engine sees them: a session per generation, drafts per session."""

from __future__ import annotations

from duo.channel import protocol as p
from duo.channel.backs import Backs, Remote


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
