"""What the engine is asked and what it answers: a Job, handed over as a Ticket, and the
events its text streams back as (Delta, then Done or Failed)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from duo.core.limits import Limits
from duo.core.logprobs import TokenLogprob
from duo.core.rounds import Finish, Round
from duo.core.sampling import GREEDY, SamplingParams
from duo.core.stats import Stats
from duo.core.text import Chunk

# Why a request left its slot: its generation finished (an end-of-generation token or a
# stop string; its token budget), or its client went away (llama-server's and vLLM's
# "abort"): never told as "length", which a client reads as a reply cut at max_tokens.
Ending = Finish | Literal["cancelled"]
ENDINGS: tuple[Ending, ...] = (*get_args(Finish), "cancelled")


@dataclass
class Job:
    prompt: list[int]
    max_tokens: int
    stops: Sequence[str] = ()
    sampling: SamplingParams = GREEDY
    cancelled: threading.Event = field(default_factory=threading.Event)
    limits: Limits | None = None  # an editor's indentation and time limits
    slot: int | None = None  # the slot asked for (llama-server's id_slot), when it is free
    cache_prompt: bool = True  # False: the prompt is read whole, none of a slot's KV kept

    @property
    def warm_up(self) -> bool:
        """max_tokens 0: the prompt is read into its slot's cache and nothing generated
        (llama-server's n_predict 0, which editors send ahead of the requests that need it)."""
        return self.max_tokens == 0


@dataclass(frozen=True)
class Delta:
    text: str
    # Where the text came from: the draft source whose accepted tokens spelled it
    # ("back:NAME", "model", "ngram", "suffix"), or None for the main model's own tokens.
    source: str | None = None
    ids: tuple[int, ...] = ()  # the tokens that spelled it (none for text held back by a stop)
    logprobs: tuple[TokenLogprob, ...] = ()  # the tokens this text completes (if asked for)

    @property
    def tokens(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class Done:
    finish_reason: Finish  # "length" too where a Limits cut the text
    stats: Stats
    word: str = ""  # the stop string that ended the text, if one did
    slot: int = -1  # the slot it ran in
    cached: int = 0  # the tokens that slot's KV cache holds now


@dataclass(frozen=True)
class Failed:
    message: str


Event = Delta | Done | Failed


def deltas(chunk: Chunk, r: Round) -> list[Delta]:
    """A round's text as deltas of one origin each: what the accepted draft tokens spelled
    (with their source), then what the main model's own token spelled."""
    drafted = min(r.accepted, len(r.tokens))  # an end-of-generation token is not emitted
    parts = [
        Delta(chunk.drafted, r.source, tuple(r.tokens[:drafted])),
        Delta(chunk.own, None, tuple(r.tokens[drafted:])),
    ]
    return [d for d in parts if d.text or d.tokens]


@dataclass(eq=False)
class Ticket:
    """A job and where its events go."""

    job: Job
    emit: Callable[[Event], None]
