"""The lead: generation jobs, run one at a time on the engine thread.

One engine thread owns the main model's context (the Session). Requests take turns: each
waits for the previous one to finish (concurrent clients wait, never fail), then runs as a
job whose text streams back as events. A job is cancelled when its consumer goes away.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TextIO

from duo.auth import KeySpec
from duo.channel.backs import Backs
from duo.core.engine import Finish
from duo.core.logprobs import LogprobQueue, TokenLogprob
from duo.core.sampling import GREEDY, SamplingParams
from duo.core.stats import Stats
from duo.core.text import Chunk, TextStream
from duo.errors import DuoError, PromptTooLong, UsageError
from duo.llama.grammar import Grammar
from duo.service.config import ModelConfig, SpecConfig
from duo.service.metrics import Metrics
from duo.service.session import Session

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeadConfig:
    models: ModelConfig
    spec: SpecConfig
    host: str = "127.0.0.1"  # --host: loopback unless the user says otherwise
    port: int = 5555  # --port
    api_key: KeySpec = None  # one Bearer key for the API and drafters, or duo.auth.Keys
    max_body: int = 8 * 1024 * 1024  # --max-body: larger request bodies are refused (413)
    console: bool = False  # show generations on stdout, accepted draft tokens in green
    color: bool = False


@dataclass(frozen=True)
class Delta:
    text: str
    logprobs: tuple[TokenLogprob, ...] = ()  # the tokens this text completes (if asked for)


@dataclass(frozen=True)
class Done:
    finish_reason: Finish
    stats: Stats


@dataclass(frozen=True)
class Failed:
    message: str


Event = Delta | Done | Failed


@dataclass
class Job:
    prompt: list[int]
    max_tokens: int
    stops: Sequence[str] = ()
    sampling: SamplingParams = GREEDY
    cancelled: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class ModelInfo:
    name: str
    n_ctx: int
    n_vocab: int


class Console:
    """The lead's console: each generation as it happens, accepted draft text in green."""

    def __init__(self, color: bool, out: TextIO | None = None) -> None:
        self.color = color
        self.out = out or sys.stdout

    def show(self, chunk: Chunk | str) -> None:
        text = chunk if isinstance(chunk, str) else chunk.colored() if self.color else chunk.text
        self.out.write(text)
        self.out.flush()


class Lead:
    def __init__(
        self, session: Session, backs: Backs, metrics: Metrics, console: Console | None = None
    ) -> None:
        self.session = session
        self.backs = backs
        self.metrics = metrics
        self.console = console
        main = session.main
        self.info = ModelInfo(main.path.stem, main.n_ctx, main.n_vocab)
        self._engine = ThreadPoolExecutor(1, "engine")
        self._engine.submit(session.policy).result()  # calibrate on the engine thread
        self._turn = asyncio.Lock()  # one job at a time; the others wait for their turn
        self.waiting = 0

    def close(self) -> None:
        self._engine.shutdown(wait=True)
        self.session.close()

    # -- prompts --------------------------------------------------------------------------

    def render_chat(self, messages: list[dict[str, str]]) -> str:
        """The prompt text of a chat, through the main model's own chat template."""
        return self.session.main.render_chat(messages)

    def tokenize(self, text: str, *, add_special: bool = True) -> list[int]:
        """Safe on any thread: llama_tokenize only reads the vocabulary."""
        return self.session.main.tokenize(text, add_special=add_special)

    def piece(self, token: int) -> bytes:
        """The bytes a token stands for."""
        return self.session.main.piece(token)

    def check_grammar(self, gbnf: str) -> None:
        """Raise UsageError if llama.cpp cannot parse the grammar (safe on any thread: it
        only reads the vocabulary)."""
        Grammar(self.session.main, gbnf).close()

    def longest_token_bytes(self) -> int | None:
        return self.session.main.longest_token_bytes()

    def check_fits(self, prompt: list[int]) -> None:
        if not prompt:
            raise UsageError("the prompt is empty")
        if len(prompt) >= self.info.n_ctx:
            raise PromptTooLong(
                f"the prompt has {len(prompt)} tokens; the context holds {self.info.n_ctx}"
            )

    # -- running jobs ---------------------------------------------------------------------

    async def events(self, job: Job) -> AsyncIterator[Event]:
        """Wait for the job's turn, then stream its events; cancels it if the caller goes
        away."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Event] = asyncio.Queue()

        def emit(event: Event) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, event)

        self.waiting += 1
        try:
            await self._turn.acquire()
        finally:
            self.waiting -= 1
        try:
            future = loop.run_in_executor(self._engine, self._run, job, emit)
            try:
                while True:
                    event = await queue.get()
                    yield event
                    if not isinstance(event, Delta):
                        return
            finally:
                job.cancelled.set()
                await asyncio.shield(future)
        finally:
            self._turn.release()

    def _run(self, job: Job, emit: Callable[[Event], None]) -> None:
        """On the engine thread: one generation, streamed as text deltas."""
        stats = Stats()
        try:
            finish = self._generate(job, stats, emit)
            self.metrics.add(stats)
            log.info(
                "request: prompt %d tokens (%d ms), generated %d tokens at %.1f tok/s, "
                "drafted %d, accepted %d, mean acceptance length %.2f, finish %s%s",
                stats.prompt_tokens,
                1000 * stats.prefill_seconds,
                stats.tokens,
                stats.tokens_per_second,
                stats.drafted,
                stats.accepted,
                stats.mean_acceptance_length,
                finish,
                f" (by source: {stats.sources_text()})" if stats.by_source else "",
            )
            emit(Done(finish, stats))
        except DuoError as e:
            self.metrics.requests_failed += 1
            emit(Failed(str(e)))
        except Exception as e:  # never let one request take the lead down
            self.metrics.requests_failed += 1
            log.exception("generation failed")
            emit(Failed(f"internal error: {e}"))

    def _generate(self, job: Job, stats: Stats, emit: Callable[[Event], None]) -> Finish:
        text = TextStream(self.session.main.piece, job.stops)
        record: list[TokenLogprob] | None = [] if job.sampling.logprobs is not None else None
        entries = LogprobQueue(self.session.main.piece)
        finish: Finish = "length"
        for r in self.session.rounds(job.prompt, job.max_tokens, stats, job.sampling, record):
            chunk = text.feed(r)
            if self.console:
                self.console.show(chunk)
            if record is not None:
                entries.add(record[: len(r.tokens)])  # none past an end-of-generation token
                record.clear()
                logprobs = entries.emitted(chunk.text)
                if chunk.text or logprobs:
                    emit(Delta(chunk.text, logprobs))
            elif chunk.text:
                emit(Delta(chunk.text))
            if text.stopped:
                finish = "stop"
                break
            if r.finish:
                finish = r.finish
            if job.cancelled.is_set():
                break
        tail = text.finish()
        if self.console:
            self.console.show(tail + "\n")
        logprobs = entries.finish(tail, text.stopped) if record is not None else ()
        if tail or logprobs:
            emit(Delta(tail, logprobs))
        return finish

    def health(self) -> dict[str, object]:
        return {
            "status": "ok",
            "model": self.info.name,
            "drafters": self.backs.connected,
            "local_drafter": self.session.local is not None,
            "busy": self._turn.locked(),
            "queued": self.waiting,
            "time": time.time(),
        }
