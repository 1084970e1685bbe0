"""The lead: the main model, its draft sources, and a queue of generation jobs.

One engine thread owns the main model's context and runs one job at a time; requests
wait their turn on an asyncio lock (concurrent clients wait, never fail). Draft sources
are the connected backs (duo.hub) and, with -md, a drafter thread of the lead's own.
"""

from __future__ import annotations

import asyncio
import codecs
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from duo.channel.hub import Hub
from duo.core.console import TokenPrinter
from duo.core.engine import DraftSource, Round, generate
from duo.core.policy import AdaptivePolicy, FixedPolicy, Policy, calibrate
from duo.core.sampling import GREEDY, SamplingParams
from duo.core.stats import Stats
from duo.core.stops import StopMatcher
from duo.drafting.sources import Longest, ThreadDrafts
from duo.errors import DuoError, PromptTooLong
from duo.llama.backend import Model
from duo.service.local import ModelConfig, SpecConfig, check_compatible
from duo.service.metrics import Metrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeadConfig:
    models: ModelConfig
    spec: SpecConfig
    host: str = "127.0.0.1"  # --host: loopback unless the user says otherwise
    port: int = 5555  # --port
    api_key: str | None = None  # --api-key: Bearer token for the API and drafter channel
    max_body: int = 8 * 1024 * 1024  # --max-body: larger request bodies are refused (413)
    console: bool = False  # show generations on stdout, accepted draft tokens in green
    color: bool = False


@dataclass(frozen=True)
class Delta:
    text: str


@dataclass(frozen=True)
class Done:
    finish_reason: str  # "stop" | "length"
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


class Lead:
    def __init__(self, config: LeadConfig) -> None:
        self.config = config
        models, spec = config.models, config.spec
        self.main = Model(
            models.main,
            n_ctx=models.n_ctx,
            n_threads=models.threads,
            n_gpu_layers=models.n_gpu_layers,
        )
        self.model_name = models.main.stem
        self.hub = Hub(
            n_vocab=self.main.n_vocab, fingerprint=self.main.fingerprint, api_key=config.api_key
        )
        self.local: ThreadDrafts | None = None
        self.drafts: DraftSource = self.hub
        if models.draft is not None:
            draft = Model(
                models.draft,
                n_ctx=self.main.n_ctx,
                n_threads=models.draft_threads,
                n_gpu_layers=models.n_gpu_layers_draft,
            )
            check_compatible(self.main, draft)
            cores = set(spec.draft_cores) if spec.draft_cores else None
            self.local = ThreadDrafts(draft, max_ahead=spec.max_ahead, cores=cores)
            self.drafts = Longest([self.local, self.hub])
        self.metrics = Metrics()
        self.executor = ThreadPoolExecutor(1, "engine", initializer=self._pin)
        self.policy: Policy = FixedPolicy()
        if spec.adaptive:
            costs = self.executor.submit(calibrate, self.main, spec.draft_max + 1).result()
            self.policy = AdaptivePolicy(costs)
        self.busy = asyncio.Lock()
        self.queued = 0

    def _pin(self) -> None:
        if self.config.spec.main_cores:
            os.sched_setaffinity(0, self.config.spec.main_cores)

    def close(self) -> None:
        self.executor.shutdown(wait=True)
        if self.local is not None:
            self.local.close()
            self.local.worker.mirror.model.close()
        self.main.close()

    # -- prompts --------------------------------------------------------------------------

    def tokenize_chat(self, messages: list[dict[str, str]]) -> list[int]:
        return self.main.tokenize(self.main.render_chat(messages), add_special=False)

    def tokenize(self, text: str) -> list[int]:
        return self.main.tokenize(text)

    def check_fits(self, prompt: list[int]) -> None:
        if not prompt:
            raise DuoError("the prompt is empty")
        if len(prompt) >= self.main.n_ctx:
            raise PromptTooLong(
                f"the prompt has {len(prompt)} tokens; the context holds {self.main.n_ctx}"
            )

    # -- running jobs ---------------------------------------------------------------------

    async def events(self, job: Job) -> AsyncIterator[Event]:
        """Queue the job, then stream its events; cancels it if the caller goes away."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Event] = asyncio.Queue()

        def emit(event: Event) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, event)

        self.queued += 1
        try:
            await self.busy.acquire()
        finally:
            self.queued -= 1
        try:
            future = loop.run_in_executor(self.executor, self._run, job, emit)
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
            self.busy.release()

    def _run(self, job: Job, emit: Callable[[Event], None]) -> None:
        """On the engine thread: one generation, streamed as text deltas."""
        stats = Stats()
        try:
            decoder = codecs.getincrementaldecoder("utf-8")("replace")
            stops = StopMatcher(job.stops)
            show = TokenPrinter(self.main.piece, self.config.color) if self.config.console else None
            finish = "length"
            for r in generate(
                self.main,
                job.prompt,
                max_tokens=job.max_tokens,
                drafts=self.drafts,
                draft_max=self.config.spec.draft_max,
                policy=self.policy,
                sampler=job.sampling.sampler(),
                on_prefill=stats.add_prefill,
                min_batch=2 if self.config.spec.deterministic else 1,
            ):
                stats.add(r)
                if show:
                    show(r)
                text = stops.feed(decoder.decode(self._bytes(r)))
                if text:
                    emit(Delta(text))
                if stops.stopped:
                    finish = "stop"
                    break
                if r.finish:
                    finish = r.finish
                if job.cancelled.is_set():
                    break
            tail = stops.feed(decoder.decode(b"", final=True)) + stops.flush()
            if tail:
                emit(Delta(tail))
            if show:
                print(flush=True)
            self.metrics.add(stats)
            log.info(
                "request: prompt %d tokens (%d ms), generated %d tokens at %.1f tok/s, "
                "drafted %d, accepted %d, mean acceptance length %.2f, finish %s",
                stats.prompt_tokens,
                1000 * stats.prefill_seconds,
                stats.tokens,
                stats.tokens_per_second,
                stats.drafted,
                stats.accepted,
                stats.mean_acceptance_length,
                finish,
            )
            emit(Done(finish, stats))
        except DuoError as e:
            self.metrics.requests_failed += 1
            emit(Failed(str(e)))
        except Exception as e:  # never let one request take the lead down
            self.metrics.requests_failed += 1
            log.exception("generation failed")
            emit(Failed(f"internal error: {e}"))

    def _bytes(self, r: Round) -> bytes:
        return b"".join(self.main.piece(t) for t in r.tokens)

    def health(self) -> dict[str, object]:
        return {
            "status": "ok",
            "model": self.model_name,
            "drafters": self.hub.connected,
            "local_drafter": self.local is not None,
            "busy": self.busy.locked(),
            "queued": self.queued,
            "time": time.time(),
        }
