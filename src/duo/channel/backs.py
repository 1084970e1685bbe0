"""The connected backs as one draft source of the lead.

The engine thread calls begin/propose/commit/end (a DraftSource) and never blocks on the
network: a proposal reads each back's latest draft, and what the backs must hear (BEGIN,
COMMIT, END) is handed to each back's `send`, which the transport makes thread-safe. The
transport (duo.channel.endpoint) calls join/leave and `receive` with each back's guesses,
whose tokens it has checked against the vocabulary.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from duo.channel import protocol as p
from duo.core.draft import Draft, Proposal, advance, merge, usable

MAX_KEPT = 1024  # tokens of guesses kept per back


@dataclass(eq=False)
class Remote:
    """One connected back, as the lead's engine sees it."""

    name: str
    send: Callable[[p.Message], None]  # to this back; callable from any thread
    lock: threading.Lock = field(default_factory=threading.Lock)
    draft: Draft | None = None  # guarded by lock
    host: str = ""  # the peer's address, as the lead sees it
    model: str = ""  # the draft model's name, as the back tells it (unchecked)
    joined: float = field(default_factory=time.time)
    last_seen: float = field(default_factory=time.time)  # its last frame
    received: int = 0  # draft tokens received

    @property
    def source(self) -> str:
        return f"back:{self.name}"


class Backs:
    def __init__(self) -> None:
        self._remotes: tuple[Remote, ...] = ()  # replaced whole: the engine reads it lock-free
        self._lock = threading.Lock()  # orders joins against begin/commit
        self.session = 0
        self._committed: list[int] | None = None
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

    # -- DraftSource: called on the engine thread ---------------------------------------

    def begin(self, prompt: Sequence[int]) -> None:
        with self._lock:
            self.session += 1
            self._committed = list(prompt)
            for remote in self._remotes:
                with remote.lock:
                    remote.draft = None
            self._send_all(p.Begin(self.session, tuple(prompt)))

    def propose(self, committed: Sequence[int], limit: int) -> list[Proposal]:
        """One proposal per back with a usable draft: each back is a source of its own."""
        proposals = []
        for remote in self._remotes:
            with remote.lock:
                remote.draft = advance(committed, remote.draft)
                tokens = usable(committed, remote.draft, limit)
            if tokens:
                proposals.append(Proposal(remote.source, tuple(tokens)))
        return proposals

    def commit(self, start: int, tokens: Sequence[int]) -> None:
        with self._lock:
            if self._committed is None:
                return
            del self._committed[start:]
            self._committed.extend(tokens)
            self._send_all(p.Commit(self.session, start, tuple(tokens)))

    def end(self) -> None:
        with self._lock:
            self._committed = None
            self._send_all(p.End(self.session))

    def rest(self, resting: frozenset[str]) -> None:
        """Backs keep drafting: on a device of their own they cost the lead nothing."""

    def _send_all(self, msg: p.Message) -> None:
        for remote in self._remotes:
            remote.send(msg)

    # -- called by the transport ----------------------------------------------------------

    def join(self, remote: Remote) -> None:
        with self._lock:
            self._remotes = (*self._remotes, remote)
            if self._committed is not None:  # joining mid-generation: catch up first
                remote.send(p.Begin(self.session, tuple(self._committed)))
        self._tell("join", remote)

    def leave(self, remote: Remote) -> None:
        with self._lock:
            self._remotes = tuple(r for r in self._remotes if r is not remote)
        self._tell("leave", remote)

    def _tell(self, change: str, remote: Remote) -> None:
        for listener in self._listeners:
            listener(change, remote)

    def receive(self, remote: Remote, session: int, start: int, tokens: tuple[int, ...]) -> None:
        """Guesses for positions start, start+1, ... of `session` (stale sessions are
        ignored: the back has not heard of the new generation yet)."""
        if session != self.session:
            return
        with remote.lock:
            remote.draft = merge(remote.draft, start, tokens, MAX_KEPT)
