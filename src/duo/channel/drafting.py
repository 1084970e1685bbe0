"""What a back does, apart from how it reaches the lead (duo.channel.back).

It mirrors the committed tokens of the lead's running generations (BEGIN, COMMIT), one
session each, and drafts ahead for all of them on its own thread (a sequence of the draft
model per session, up to `parallel` at once, their next tokens evaluated in one pass); it
frames only what is new in each session's draft (DRAFT, then APPEND frames) and in its
branches (BRANCH frames, with fan-out) for the connection it is attached to.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from duo.channel import protocol as p
from duo.core.draft import Draft, common_prefix, delta
from duo.drafting.drafter import DraftWorker
from duo.errors import ProtocolError
from duo.llama.backend import Model

log = logging.getLogger(__name__)


class BackDrafter:
    """The drafting role of a back: lead messages in, draft frames out. Start it on the
    event loop's thread; attach it to each connection, detach it when that one ends."""

    def __init__(
        self,
        model: Model,
        *,
        parallel: int,
        max_ahead: int,
        fanout: int = 0,
        cores: frozenset[int] | None = None,
    ) -> None:
        self._send: Callable[[bytes], None] | None = None  # the attached connection's
        self._width = 4
        self._loop: asyncio.AbstractEventLoop | None = None
        # The running sessions: what the lead knows of each one's draft.
        self._sent: dict[int, Draft | None] = {}
        self._forks: dict[int, dict[int, tuple[int, ...]]] = {}  # branch tokens sent, by fork
        self._last = -1  # the session of the last draft frame sent (APPEND continues it)
        self.worker = DraftWorker(
            model,
            self._publish,
            sequences=parallel,
            max_ahead=max_ahead,
            fanout=fanout,
            cores=set(cores) if cores else None,
        )

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.worker.start()

    def stop(self) -> None:
        self.worker.stop()

    def attach(self, send: Callable[[bytes], None], token_width: int) -> None:
        """A new connection: its sessions start afresh; frames go to `send`."""
        self._send, self._width = send, token_width
        self._sent, self._forks, self._last = {}, {}, -1

    def detach(self) -> None:
        """The connection is gone: its sessions end, nothing more is framed; a rest the
        lead asked for ends with it (the next lead judges afresh)."""
        self._send = None
        self.worker.end()
        self.rest(False)

    def rest(self, resting: bool) -> None:
        """The lead's REST: while resting the worker drafts for no session; the lead sends
        no commits meanwhile, and what it missed comes before it drafts again, which the
        worker catches up with in one batch."""
        if resting != self.worker.held:
            self.worker.hold(resting)
            log.info("%s, as the lead asks", "resting" if resting else "drafting again")

    def on_message(self, msg: p.Message) -> None:
        """A message from the lead."""
        match msg:
            case p.Begin(session, tokens):
                self._sent[session], self._forks[session] = None, {}
                self.worker.begin(session, tokens)
            case p.Commit(session, start, tokens):
                self.worker.commit(session, start, tokens)  # ignored for unknown sessions
            case p.End(session):
                self._sent.pop(session, None)
                self._forks.pop(session, None)
                self.worker.end(session)
            case p.Rest(resting):
                self.rest(resting)
            case _:
                raise ProtocolError(f"unexpected {type(msg).__name__} from the lead")

    def _publish(self, session: int, draft: Draft, branches: tuple[Draft, ...]) -> None:
        """On the drafter thread: hand the draft to the event loop."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.frame, session, draft, branches)

    def frame(self, session: int, draft: Draft, branches: tuple[Draft, ...] = ()) -> None:
        """On the event loop: send what the lead does not know of this draft yet."""
        if self._send is None or session not in self._sent:  # over, or from a past connection
            return
        sent = self._sent[session]
        new = delta(sent, draft)
        if new is not None:
            follows = (
                session == self._last
                and sent is not None
                and new.start == sent.start + len(sent.tokens)
            )
            msg = p.Append(new.tokens) if follows else p.DraftMsg(session, new.start, new.tokens)
            self._sent[session], self._last = draft, session
            self._send(p.encode(msg, self._width))
        self._frame_branches(session, draft, branches)

    def _frame_branches(self, session: int, draft: Draft, branches: tuple[Draft, ...]) -> None:
        """BRANCH frames for what is new in each branch: a branch is its fork (where it
        leaves the chain) and its tokens from there."""
        send = self._send
        assert send is not None
        forks = self._forks[session]
        for fork in [fork for fork in forks if fork < draft.start]:
            del forks[fork]  # the lead has committed past it
        for branch in branches:
            split = common_prefix(draft.tokens, branch.tokens)
            fork, tokens = branch.start + split, branch.tokens[split:]
            known = forks.get(fork, ())
            at = common_prefix(known, tokens)
            if at == len(tokens) or at > p.MAX_AT:
                continue
            if at < len(known):  # a branch of its own at this fork: replace the old one
                at = 0
            forks[fork] = tokens
            send(p.encode(p.Branch(session, fork, at, tokens[at:]), self._width))
