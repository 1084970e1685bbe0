"""Seed 003's verifier server on the lead: drafter-driven clients, one session each.

    POST /prefill  {prompt, session?, sampling?}  -> {prompt_len, prompt_ids, session}
    POST /verify   {draft_tokens, session?}       -> {accepted_prefix_len, preds,
                                                      total_tokens, session}
    GET  /stats    drafted, accepted, acceptance rate, tokens per second: in all and by session

(also with a trailing slash, as seed 003's client calls them). A client names its session
in the body or the X-Duo-Session header; without one it is 'default', as seed 003's
single client expects. `/prefill` starts its session afresh. A session left idle for
`idle_seconds` is forgotten, and the least recently used one when there are `max_sessions`.
Each verification is a pass of the main model of its own, between the rounds of the
lead's other requests, in a free slot (the one whose KV cache shares most with the
session's tokens, so a session that keeps its slot evaluates only its new tokens).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from duo.core.prompt import prefill_steps
from duo.core.rounds import MainModel
from duo.core.verifier import Checked, DraftedGeneration
from duo.errors import UsageError
from duo.lead.protocol.verifier import Prefilled, Verified, VerifierStats
from duo.lead.routes import Answer, Operation
from duo.lead.verifier.requests import (
    SESSION_HEADER,
    SESSION_PATTERN,
    PrefillRequest,
    SessionId,
    VerifyRequest,
)

IDLE_SECONDS = 600.0
MAX_SESSIONS = 256


class VerifierLead(Protocol):
    """What the verifier needs of the lead (duo.lead.engine.lead.Lead)."""

    def call(self, fn: Callable[[MainModel], Any], tokens: list[int]) -> Future[Any]:
        """fn(sequence) on the engine thread; a generator it returns is run a step at a
        time between the other requests' rounds (duo.core.rounds.Steps)."""
        ...


class VerifierPrompts(Protocol):
    """What the verifier needs to read a prompt (duo.lead.openai.prompts.Prompts, which the
    app hands in)."""

    async def tokenize(
        self, text: str, *, add_special: bool, param: str, parse_special: bool = True
    ) -> list[int]: ...

    def token_ids(self, tokens: Sequence[int], param: str) -> list[int]: ...

    def check_fits(self, tokens: list[int], param: str) -> None: ...


@dataclass(eq=False)
class VerifierSession:
    gen: DraftedGeneration
    started: float
    used: float
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one verification at a time

    def stats(self) -> dict[str, Any]:
        gen = self.gen
        return {
            "prompt_tokens": gen.prompt_len,
            "total_tokens": len(gen.tokens),
            **figures(gen.calls, gen.drafted, gen.accepted, self.used - self.started),
        }


@dataclass
class Totals:
    """What sessions verified, over `seconds` of their lives (first prefill to last verify)."""

    calls: int = 0
    drafted: int = 0
    accepted: int = 0
    seconds: float = 0.0

    def add(self, s: VerifierSession) -> None:
        self.calls += s.gen.calls
        self.drafted += s.gen.drafted
        self.accepted += s.gen.accepted
        self.seconds += s.used - s.started


def figures(calls: int, drafted: int, accepted: int, seconds: float) -> dict[str, Any]:
    """Seed 003's summary: what was drafted and accepted, and how fast tokens came."""
    return {
        "verifications": calls,
        "drafted": drafted,
        "accepted": accepted,
        "acceptance_rate": accepted / drafted if drafted else 0.0,
        "tokens_per_verification": accepted / calls if calls else 0.0,
        "tokens_per_second": accepted / seconds if seconds > 0 else 0.0,
    }


class Verifier:
    def __init__(
        self,
        lead: VerifierLead,
        prompts: VerifierPrompts,
        *,
        idle_seconds: float = IDLE_SECONDS,
        max_sessions: int = MAX_SESSIONS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lead = lead
        self.prompts = prompts
        self.idle_seconds = idle_seconds
        self.max_sessions = max_sessions
        self.clock = clock
        self.sessions: dict[str, VerifierSession] = {}  # least recently used first
        self.ended = Totals()  # of the sessions forgotten

    def operations(self) -> list[Operation]:
        """Its part of the route table (duo.lead.routes): seed 003's paths, with and without
        its trailing slash."""
        prefill = "Start a drafter-driven session afresh"
        verify = "Verify a client's draft; commit the prefix the main model accepts"
        return [
            *(
                Operation("POST", path, prefill, self.prefill, Answer(Prefilled), PrefillRequest)
                for path in ("/prefill", "/prefill/")
            ),
            *(
                Operation("POST", path, verify, self.verify, Answer(Verified), VerifyRequest)
                for path in ("/verify", "/verify/")
            ),
            Operation(
                "GET",
                "/stats",
                "The drafter-driven sessions' figures",
                self.stats,
                Answer(VerifierStats),
            ),
        ]

    async def prefill(self, request: Request, body: PrefillRequest) -> Response:
        sampling = body.sampling()
        if isinstance(body.prompt, str):
            tokens = await self.prompts.tokenize(body.prompt, add_special=True, param="prompt")
        else:
            tokens = self.prompts.token_ids(body.prompt, "prompt")
        self.prompts.check_fits(tokens, "prompt")
        name = session_name(request, body.session)
        gen = DraftedGeneration(tokens, sampling)
        # In pieces, the other requests' rounds between them (duo.lead.engine.calls)
        steps = self.lead.call(lambda seq: prefill_steps(seq, tokens), tokens)
        await asyncio.wrap_future(steps)
        self._forget(name)
        now = self.clock()
        self.sessions[name] = VerifierSession(gen, now, now)
        self._expire()
        return JSONResponse(Prefilled(prompt_len=len(tokens), prompt_ids=tokens, session=name))

    async def verify(self, request: Request, body: VerifyRequest) -> Response:
        name = session_name(request, body.session)
        self._expire()
        session = self.sessions.get(name)
        if session is None:
            raise UsageError(
                f"no session {name!r} (never started, or idle too long): POST /prefill first",
                param="session",
            )
        draft = self.prompts.token_ids(body.draft_tokens, "draft_tokens")
        async with session.lock:
            gen = session.gen
            future = self.lead.call(lambda seq: gen.check_steps(seq, draft), [*gen.tokens, *draft])
            checked: Checked = await asyncio.wrap_future(future)
            session.used = self.clock()
        if self.sessions.get(name) is session:  # (not restarted or dropped meanwhile)
            self.sessions[name] = self.sessions.pop(name)  # now the most recently used
        return JSONResponse(
            Verified(
                accepted_prefix_len=checked.accepted,
                preds=checked.preds,
                total_tokens=checked.total,
                session=name,
            )
        )

    async def stats(self, request: Request) -> Response:
        self._expire()
        total = replace(self.ended)
        for s in self.sessions.values():
            total.add(s)
        sessions = {name: s.stats() for name, s in self.sessions.items()}
        figured = figures(total.calls, total.drafted, total.accepted, total.seconds)
        return JSONResponse(VerifierStats(**figured, sessions=sessions))  # type: ignore[typeddict-item]

    def _expire(self) -> None:
        now = self.clock()
        for name, s in list(self.sessions.items()):
            if now - s.used > self.idle_seconds and not s.lock.locked():
                self._forget(name)
        while len(self.sessions) > self.max_sessions:
            self._forget(next(iter(self.sessions)))

    def _forget(self, name: str) -> None:
        s = self.sessions.pop(name, None)
        if s is not None:
            self.ended.add(s)


def session_name(request: Request, named: SessionId | None) -> str:
    name = named or request.headers.get(SESSION_HEADER) or "default"
    if not re.fullmatch(SESSION_PATTERN, name, re.ASCII):
        raise UsageError(
            f"a session is 1-128 letters, digits and ._:- (the {SESSION_HEADER} header too)",
            param="session",
        )
    return name
