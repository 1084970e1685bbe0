"""The connected backs as a draft source of every generation of the lead.

Each generation is a session of its own, which every back hears of (BEGIN, COMMIT, END)
and drafts for, all running sessions at once. The engine thread calls a session's
begin/propose/commit/end (a DraftSource, `Backs.source`) and never blocks on the network:
a proposal reads each back's latest draft for that session, and what the backs must hear
is handed to each back's `send`, which the transport makes thread-safe. The transport
(duo.channel.endpoint) calls join/leave and `receive` with each back's guesses, whose
tokens it has checked against the vocabulary.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from duo.channel import protocol as p
from duo.core.draft import Draft, Proposal, advance, first_usable, graft, merge, usable

BackState = Literal["drafting", "resting", "looking"]

MAX_KEPT = 1024  # tokens of guesses kept per back
MAX_BRANCHES = 16  # branches kept per session and back (the lowest forks go first)


@dataclass(eq=False)
class Remote:
    """One connected back, as the lead's engine sees it."""

    name: str
    send: Callable[[p.Message], None]  # to this back; callable from any thread
    lock: threading.Lock = field(default_factory=threading.Lock)
    drafts: dict[int, Draft] = field(default_factory=dict)  # by session; guarded by lock
    # by session, its draft's branches by fork (each the whole path); guarded by lock
    branches: dict[int, dict[int, Draft]] = field(default_factory=dict)
    host: str = ""  # the peer's address, as the lead sees it
    model: str = ""  # the draft model's name, as the back tells it (unchecked)
    joined: float = field(default_factory=time.time)
    last_seen: float = field(default_factory=time.time)  # its last frame
    received: int = 0  # draft tokens received
    version: int = p.VERSION  # the protocol version agreed with it
    machine: str = ""  # its machine, as it tells it (protocol.Hello)
    threads: int = 0  # its drafting threads, as it tells it (0: not told)
    # what the lead's placement makes of it (duo.session.placement): drafting, resting or
    # looking, and why; set on the engine thread, read by the pages that show it
    state: BackState = "drafting"
    why: str = ""
    # told to rest (Backs.rest): it hears no commits meanwhile, only how far each session's
    # tokens stood when it last heard them, and is caught up when it drafts again
    resting: bool = False
    heard: dict[int, int] = field(default_factory=dict)  # by session; guarded by Backs' lock

    @property
    def source(self) -> str:
        return f"back:{self.name}"

    @property
    def can_rest(self) -> bool:
        """Whether it understands REST (a back of version 3 drafts all the time)."""
        return self.version >= 4


class Backs:
    def __init__(self) -> None:
        self._remotes: tuple[Remote, ...] = ()  # replaced whole: the engine reads it lock-free
        self._lock = threading.Lock()  # orders joins against begin/commit
        self._sessions = 0  # the last session's number
        self._live: dict[int, list[int]] = {}  # the running sessions' committed tokens
        # the draft tokens each running session received, by source: counted on the
        # transport's thread, read by the session's BackSession
        self._received: dict[int, Counter[str]] = {}
        self._listeners: list[Callable[[str, Remote], None]] = []

    @property
    def connected(self) -> int:
        return len(self._remotes)

    @property
    def remotes(self) -> tuple[Remote, ...]:
        return self._remotes

    def watch(self, listener: Callable[[str, Remote], None]) -> None:
        """Call listener("join" | "leave", remote) as backs come and go (on the thread of
        the transport: the event loop)."""
        self._listeners.append(listener)

    def source(self, slot: int) -> BackSession:
        """A generation's DraftSource: a session of its own with every back."""
        return BackSession(self)

    # -- a session's DraftSource calls: on the engine thread ------------------------------

    def _begin(self, prompt: Sequence[int]) -> tuple[int, Counter[str]]:
        with self._lock:
            self._sessions += 1
            session = self._sessions
            self._live[session] = list(prompt)
            received = self._received[session] = Counter()
            self._send_all(p.Begin(session, tuple(prompt)))
            for remote in self._remotes:
                if remote.resting:
                    remote.heard[session] = len(prompt)
            return session, received

    def _propose(self, session: int, committed: Sequence[int], limit: int) -> list[Proposal]:
        """One proposal per back with a usable draft: each back is a source of its own."""
        proposals = []
        for remote in self._remotes:
            with remote.lock:
                draft = advance(committed, remote.drafts.pop(session, None))
                if draft is not None:  # else stale: the back's next frame starts afresh
                    remote.drafts[session] = draft
                tokens = usable(committed, draft, limit)
                if not tokens and (forks := remote.branches.get(session)):
                    tokens = _branch(committed, forks, limit)
            if tokens:
                proposals.append(Proposal(remote.source, tuple(tokens)))
        return proposals

    def _commit(self, session: int, start: int, tokens: Sequence[int]) -> None:
        with self._lock:
            committed = self._live.get(session)
            if committed is None:
                return
            del committed[start:]
            committed.extend(tokens)
            msg = p.Commit(session, start, tuple(tokens))
            for remote in self._remotes:  # (a message only where a back hears it)
                if not remote.resting:
                    remote.send(msg)
                elif (heard := remote.heard.get(session)) is not None and start < heard:
                    remote.heard[session] = start

    def _end(self, session: int) -> None:
        with self._lock:
            if self._live.pop(session, None) is None:
                return
            self._received.pop(session, None)
            self._send_all(p.End(session))
            for remote in self._remotes:
                remote.heard.pop(session, None)
                with remote.lock:
                    remote.drafts.pop(session, None)
                    remote.branches.pop(session, None)

    def rest(self, remote: Remote, resting: bool) -> None:
        """Tell a back to rest (REST) or to draft again. A resting back hears no commits,
        which would wake it on every round for nothing (on the lead's machine, a wake-up
        costs the main model's threads their core); before it drafts again, it hears in
        one COMMIT per running session all that it missed. On the engine thread."""
        with self._lock:
            if resting == remote.resting:
                return
            if resting:
                remote.heard = {session: len(c) for session, c in self._live.items()}
            else:
                for session, start in remote.heard.items():
                    if (committed := self._live.get(session)) is not None:
                        remote.send(p.Commit(session, start, tuple(committed[start:])))
                remote.heard = {}
            remote.resting = resting
            remote.send(p.Rest(resting))

    def _send_all(self, msg: p.Message) -> None:
        for remote in self._remotes:
            remote.send(msg)

    # -- called by the transport ----------------------------------------------------------

    def join(self, remote: Remote) -> None:
        with self._lock:
            self._remotes = (*self._remotes, remote)
            for session, committed in self._live.items():  # joining mid-generation
                remote.send(p.Begin(session, tuple(committed)))
        self._tell("join", remote)

    def leave(self, remote: Remote) -> None:
        with self._lock:
            self._remotes = tuple(r for r in self._remotes if r is not remote)
        self._tell("leave", remote)

    def _tell(self, change: str, remote: Remote) -> None:
        for listener in self._listeners:
            listener(change, remote)

    def receive(self, remote: Remote, session: int, start: int, tokens: tuple[int, ...]) -> None:
        """Guesses for positions start, start+1, ... of `session` (those for a session
        that is over are ignored: the back had not heard of its end yet)."""
        received = self._received.get(session)
        if received is None:
            return
        received[remote.source] += len(tokens)
        with remote.lock:
            remote.drafts[session] = merge(remote.drafts.get(session), start, tokens, MAX_KEPT)

    def receive_branch(
        self, remote: Remote, session: int, fork: int, at: int, tokens: tuple[int, ...]
    ) -> None:
        """A branch of the session's draft that leaves it at `fork`: its tokens from the
        branch's token `at` on (at 0: a new branch, grafted onto the draft as it stands)."""
        received = self._received.get(session)
        if received is None:
            return
        received[remote.source] += len(tokens)
        with remote.lock:
            forks = remote.branches.setdefault(session, {})
            old = forks.pop(fork, None)
            if at == 0:
                path = graft(remote.drafts.get(session), fork, tokens)
            elif old is not None and old.start + len(old.tokens) == fork + at:
                path = Draft(old.start, old.tokens + tokens)
            else:
                path = None  # a continuation of a branch this lead does not hold
            if path is not None:
                forks[fork] = Draft(path.start, path.tokens[:MAX_KEPT])
                while len(forks) > MAX_BRANCHES:
                    del forks[min(forks)]


def _branch(committed: Sequence[int], forks: dict[int, Draft], limit: int) -> list[int]:
    """The usable part of the first branch that continues the committed tokens; the
    branches that no longer can are dropped."""
    for fork, path in list(forks.items()):
        if advance(committed, path) is None:
            del forks[fork]
    return first_usable(committed, list(forks.values()), limit)


class BackSession:
    """One generation's session with the backs (a DraftSource)."""

    def __init__(self, backs: Backs) -> None:
        self.backs = backs
        self.session = 0  # none yet
        self._received: Counter[str] = Counter()

    def begin(self, prompt: Sequence[int]) -> None:
        self.session, self._received = self.backs._begin(prompt)

    def propose(self, committed: Sequence[int], limit: int) -> list[Proposal]:
        return self.backs._propose(self.session, committed, limit)

    def commit(self, start: int, tokens: Sequence[int]) -> None:
        self.backs._commit(self.session, start, tokens)

    def end(self) -> None:
        self.backs._end(self.session)

    def rest(self, resting: frozenset[str]) -> None:
        """Backs keep drafting: on a device of their own they cost the lead nothing."""

    def received(self) -> Mapping[str, int]:
        return dict(self._received)  # a copy: the transport's thread adds to it
