"""The lead: generation jobs, run on the engine thread (duo.lead.engine.jobs) in its slots.

One engine thread owns the main model's context (the Session). Requests wait for a free
slot (concurrent clients wait, never fail), then run as jobs whose text streams back as
events. A job is cancelled when its consumer goes away.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from duo.auth import KeySpec
from duo.channel.backs import Backs
from duo.channel.endpoint import WireStats
from duo.core.rounds import MainModel
from duo.core.text import Chunk
from duo.errors import PromptTooLong, UsageError
from duo.lead.engine.events import Delta, Event, Job, Ticket
from duo.lead.engine.jobs import Engine
from duo.lead.engine.metrics import Metrics
from duo.lead.engine.schedule import PIECE_STRETCH
from duo.llama.backend import CACHE_BYTES
from duo.llama.grammar import Grammar
from duo.llama.vocab import FimTokens
from duo.mailbox import Mailboxes
from duo.session.config import ModelConfig, SpecConfig
from duo.session.session import Session
from duo.session.share import Sharing

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeadConfig:
    models: ModelConfig
    spec: SpecConfig
    api_key: KeySpec = None  # one Bearer key for the API and drafters, or duo.auth.Keys
    # --max-body: larger request bodies are refused (413). A full 128K-token context of
    # JSON-escaped text, with room to spare, and little enough that a hostile body costs the
    # lead only a few tens of megabytes while it is read.
    max_body: int = 8 * 1024 * 1024
    parallel: int = 4  # --parallel / -np: requests decoded together, one slot each (as
    # llama-server's default: 4 slots in one KV buffer)
    # --prompt-stretch: a round that reads a piece of a new prompt beside running requests
    # costs at most this many times their round (duo.lead.engine.schedule)
    prompt_stretch: float = PIECE_STRETCH
    # --cache-ram: MiB of host memory for idle slots' KV cells (0: none, -1: no limit)
    cache_ram: int = CACHE_BYTES // 2**20
    # --cache-reuse: a prompt's moved runs of at least this many cached tokens have their KV
    # shifted into place instead of read again (llama-server's; 0: off)
    cache_reuse: int = 0
    # --spm-infill: /infill lays its prompt out suffix first (llama-server's)
    spm_infill: bool = False
    # --cors-origins: web pages of these origins ("*": any) may call the API from a
    # browser; none by default
    cors_origins: tuple[str, ...] = ()
    alias: str | None = None  # --alias: the model's name in the API (default: its file's)
    # --reasoning-format: how a reasoning model's thoughts are given (duo.lead.openai.reasoning)
    reasoning_format: str = "auto"


@dataclass(frozen=True)
class ModelInfo:
    name: str
    n_ctx: int
    n_vocab: int
    n_batch: int = 512  # most tokens in one pass (-b)


@dataclass(frozen=True)
class Slot:
    """One slot, as GET /slots shows it (duo.lead.protocol.llama.SlotState)."""

    id: int
    n_ctx: int
    speculative: bool  # whether any draft source serves it
    is_processing: bool
    n_cached: int  # tokens in its KV cache (a next prompt sharing them skips them)
    n_prompt_tokens: int  # of its request, while processing (else 0)
    n_decoded: int  # tokens its request generated so far


@dataclass(frozen=True)
class Status:
    """Whether the lead is up, and how busy, as GET /health shows it
    (duo.lead.protocol.llama.Health)."""

    model: str
    drafters: int  # backs connected
    local_drafter: bool
    slots: int
    slots_busy: int
    queued: int  # requests waiting for a slot
    time: float  # when this was taken (Unix seconds)


@dataclass(frozen=True)
class Props:
    """The lead's settings as llama-server's /props shows them, with duo's speculation."""

    model_path: str
    chat_template: str
    bos_token: str
    eos_token: str
    slots: int  # requests decoded together (--parallel)
    spec: SpecConfig
    local_drafter: bool
    drafters: int  # backs connected now
    sharing: Sharing  # the main model's and the in-process drafter's threads now


class Lead:
    def __init__(
        self,
        session: Session,
        backs: Backs,
        wire: WireStats,
        mail: Mailboxes,
        show: Callable[[int, Chunk | str], None] | None = None,
        alias: str | None = None,
        stretch: float = PIECE_STRETCH,
        cache_bytes: int = CACHE_BYTES,
    ) -> None:
        """`mail` carries the engine thread's calls to the event loop (the drafter channel
        may share it, so that the engine hands over everything at once); `show` sees each
        generation's text as it is made (the console), on the engine thread; `wire`: the
        drafter channel's counters, which /metrics shows."""
        self.session = session
        self.mail = mail
        self.backs = backs
        main = session.main
        self.info = ModelInfo(alias or main.path.stem, main.n_ctx, main.n_vocab, main.n_batch)
        self.metrics = Metrics(
            wire,
            lambda: backs.connected,
            session.local is not None,
            decode_cpu=lambda: main.decode_cpu_seconds,
            drafter_states=lambda: [(r.name, r.state) for r in backs.remotes],
            load=lambda: (self.engine.busy, self.engine.queued, self.engine.slots),
        )
        self.engine = Engine(
            session,
            show=show,
            done=self.metrics.add,
            failed=self.metrics.fail,
            flush=self.mail.flush,
            stretch=stretch,
            cache_bytes=cache_bytes,
        )

    def close(self) -> None:
        self.engine.close()
        self.session.close()
        self.mail.close()

    # -- prompts --------------------------------------------------------------------------

    def render_chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> str:
        """The prompt text of a chat, through the main model's own chat template."""
        return self.session.main.vocab.render_chat(messages, tools)

    def tokenize(
        self, text: str, *, add_special: bool = True, parse_special: bool = True
    ) -> list[int]:
        """Safe on any thread: llama_tokenize only reads the vocabulary."""
        return self.session.main.vocab.tokenize(
            text, add_special=add_special, parse_special=parse_special
        )

    def piece(self, token: int) -> bytes:
        """The bytes a token stands for."""
        return self.session.main.vocab.piece(token)

    def special_piece(self, token: int) -> bytes:
        """The same, with a special token shown by its text ("<|im_end|>")."""
        return self.session.main.vocab.special_piece(token)

    def fim_tokens(self) -> FimTokens:
        """The main model's fill-in-the-middle tokens (/infill)."""
        return self.session.main.vocab.fim_tokens()

    def check_grammar(self, gbnf: str) -> None:
        """Raise UsageError if llama.cpp cannot parse the grammar (safe on any thread: it
        only reads the vocabulary)."""
        Grammar(self.session.main, gbnf).close()

    def longest_token_bytes(self) -> int | None:
        return self.session.main.vocab.longest_token_bytes()

    def check_fits(self, prompt: list[int]) -> None:
        if not prompt:
            raise UsageError("the prompt is empty")
        if len(prompt) >= self.info.n_ctx:
            raise PromptTooLong(
                f"the prompt has {len(prompt)} tokens; the context holds {self.info.n_ctx}"
            )

    # -- running jobs ---------------------------------------------------------------------

    async def events(self, job: Job) -> AsyncIterator[Event]:
        """Queue the job for a slot, then stream its events; cancels it if the caller goes
        away (queued, it never runs; running, it leaves its slot after this round)."""
        mailbox = self.mail.here()
        queue: asyncio.Queue[Event] = asyncio.Queue()

        def emit(event: Event) -> None:
            mailbox.post(queue.put_nowait, event)

        self.engine.submit(Ticket(job, emit))
        try:
            while True:
                event = await queue.get()
                yield event
                if not isinstance(event, Delta):
                    return
        finally:
            job.cancelled.set()
            self.engine.cancelled()

    def call(self, fn: Callable[[MainModel], Any], tokens: list[int]) -> Future[Any]:
        """Run fn on a sequence of the main model on the engine thread (Engine.call)."""
        return self.engine.call(fn, tokens)

    def props(self) -> Props:
        main = self.session.main
        bos, eos = main.vocab.special_tokens()
        return Props(
            model_path=str(main.path),
            chat_template=main.vocab.chat_template() or "",
            bos_token=bos,
            eos_token=eos,
            slots=self.engine.slots,
            spec=self.session.spec,
            local_drafter=self.session.local is not None,
            drafters=self.backs.connected,
            sharing=self.session.sharing(),
        )

    def slots(self) -> list[Slot]:
        speculative = bool(self.session.pools or self.session.types - {"model"})
        out: list[Slot] = []
        for slot, cached, running in self.engine.slot_states():
            out.append(
                Slot(
                    id=slot,
                    n_ctx=self.info.n_ctx,
                    speculative=speculative,
                    is_processing=running is not None,
                    n_cached=cached,
                    n_prompt_tokens=len(running.gen.prompt) if running else 0,
                    n_decoded=running.gen.produced if running else 0,
                )
            )
        return out

    def health(self) -> Status:
        return Status(
            model=self.info.name,
            drafters=self.backs.connected,
            local_drafter=self.session.local is not None,
            slots=self.engine.slots,
            slots_busy=self.engine.busy,
            queued=self.engine.queued,
            time=time.time(),
        )
