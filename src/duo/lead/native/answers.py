"""The native answers of /completion and /infill, in llama-server's shapes
(duo.lead.protocol.llama): a completion whole, a stream's event, and response_fields.

    stop_type(done)               eos, limit or word: why a completion ended
    probabilities(entries, ...)   completion_probabilities
    selected(result, paths)       only the fields a request's response_fields name
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from duo.core.logprobs import TokenLogprob
from duo.core.sampling import SamplingParams
from duo.lead.engine.events import Done
from duo.lead.protocol.llama import NativeChunk, NativeResult, TokenProbability, TopProbability
from duo.lead.protocol.openai import timings

Piece = Callable[[int], bytes]
StopType = Literal["none", "eos", "limit", "word"]


def stop_type(done: Done) -> StopType:
    """eos: the model ended its text; word: a stop string did; limit: the budget, the
    context, or an editor's limits (n_indent, t_max_predict_ms) did."""
    if done.finish_reason == "stop":
        return "word" if done.word else "eos"
    return "limit"


def probabilities(entries: Sequence[TokenLogprob], piece: Piece) -> list[TokenProbability]:
    """completion_probabilities: each token's logprob and its likeliest alternatives."""

    def top(token: int, logprob: float) -> TopProbability:
        raw = piece(token)
        return {
            "id": token,
            "token": raw.decode("utf-8", "ignore"),
            "bytes": list(raw),
            "logprob": logprob,
        }

    return [
        {**top(e.token, e.logprob), "top_logprobs": [top(t, lp) for t, lp in e.top]}
        for e in entries
    ]


def selected(result: NativeResult, paths: Sequence[str]) -> dict[str, Any]:
    """llama-server's response_fields: each path ("timings/prompt_n") that leads through
    objects to a value, keyed by the path itself; the others are left out."""
    out: dict[str, Any] = {}
    for path in paths:
        value: Any = result
        for key in path.split("/"):
            if not isinstance(value, dict) or key not in value:
                break
            value = value[key]
        else:
            out[path] = value
    return out


@dataclass(frozen=True)
class RequestFacts:
    """What every answer of one request says about it."""

    model: str
    settings: dict[str, Any]  # generation_settings
    n_ctx: int
    cut: bool  # the prompt was cut to fit (infill's budgets)


def settings(
    sampling: SamplingParams,
    n_predict: int,
    stops: Sequence[str],
    stream: bool,
    extra: dict[str, Any],
) -> dict[str, Any]:
    """generation_settings: the sampler and length a completion ran with, in llama-server's
    names."""
    return {
        "seed": -1 if sampling.seed is None else sampling.seed,
        "temperature": sampling.temperature,
        "top_k": sampling.top_k,
        "top_p": sampling.top_p,
        "min_p": sampling.min_p,
        "repeat_last_n": sampling.repeat_last_n,
        "repeat_penalty": sampling.repeat_penalty,
        "presence_penalty": sampling.presence_penalty,
        "frequency_penalty": sampling.frequency_penalty,
        "stop": list(stops),
        "max_tokens": n_predict,
        "n_predict": n_predict,
        "stream": stream,
        "logit_bias": [{"token": t, "bias": b} for t, b in sampling.logit_bias],
        "n_probs": sampling.logprobs or 0,
        "grammar": sampling.grammar or "",
        "samplers": list(sampling.samplers)
        if sampling.samplers is not None
        else ["penalties", "top_k", "top_p", "min_p", "temperature"],
        **extra,
    }


def result(
    request: RequestFacts,
    index: int,
    prompt: Sequence[int],
    prompt_text: str,
    done: Done,
    text: str = "",
    ids: Sequence[int] = (),
    probs: list[TokenProbability] | None = None,
) -> NativeResult:
    """One completion, whole; streamed, its text and tokens were sent before (none here)."""
    s = done.stats
    answer: NativeResult = {
        "index": index,
        "content": text,
        "tokens": list(ids),
        "id_slot": done.slot,
        "stop": True,
        "model": request.model,
        "tokens_predicted": s.tokens,
        "tokens_evaluated": len(prompt),
        "generation_settings": request.settings,
        "prompt": prompt_text,
        "has_new_line": "\n" in text,
        "truncated": request.cut or len(prompt) + s.tokens >= request.n_ctx,
        "stop_type": stop_type(done),
        "stopping_word": done.word,
        "tokens_cached": done.cached,
        "timings": timings(s),
    }
    if probs:
        answer["completion_probabilities"] = probs
    return answer


def chunk(
    index: int,
    text: str,
    ids: Sequence[int],
    predicted: int,
    evaluated: int,
    probs: list[TokenProbability] | None = None,
) -> NativeChunk:
    """A streamed piece of one completion (llama-server says id_slot -1 until the end)."""
    event: NativeChunk = {
        "index": index,
        "content": text,
        "tokens": list(ids),
        "stop": False,
        "id_slot": -1,
        "tokens_predicted": predicted,
        "tokens_evaluated": evaluated,
    }
    if probs:
        event["completion_probabilities"] = probs
    return event
