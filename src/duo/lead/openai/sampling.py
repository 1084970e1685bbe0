"""The OpenAI sampling fields beyond llama.cpp's basic sampler, in and out.

In: `logprobs` / `top_logprobs`, `logit_bias`, `presence_penalty`, `frequency_penalty`
and `response_format` (JSON object or JSON schema, enforced by a grammar). Out: the
`logprobs` of a choice, in the chat shape ({"content": [{token, logprob, bytes,
top_logprobs}]}) or the legacy completions shape ({tokens, token_logprobs, top_logprobs,
text_offset}).
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from duo.core.logprobs import MAX_TOP_LOGPROBS, TokenLogprob
from duo.core.sampling import SamplingParams
from duo.errors import UsageError
from duo.lead.openai.format import field, integer, number
from duo.llama.grammar import JSON_OBJECT, json_schema_gbnf

Piece = Callable[[int], bytes]


def sampling_extras(
    body: dict[str, Any], params: SamplingParams, n_vocab: int, *, chat: bool
) -> SamplingParams:
    """`params` with the request's logprobs, logit bias and penalties (the grammar of a
    response_format comes from `grammar_text`, which may take longer)."""
    return replace(
        params,
        logprobs=_chat_logprobs(body) if chat else _completion_logprobs(body),
        logit_bias=logit_bias(body, n_vocab),
        # OpenAI's range; llama.cpp subtracts them from the logits as they are.
        presence_penalty=number(body, "presence_penalty", 0.0, -2.0, 2.0),
        frequency_penalty=number(body, "frequency_penalty", 0.0, -2.0, 2.0),
    )


def _chat_logprobs(body: dict[str, Any]) -> int | None:
    wanted = field(body, "logprobs", bool, False)
    top = integer(body, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS)
    if body.get("top_logprobs") is not None and not wanted:
        raise UsageError("'top_logprobs' needs 'logprobs': true", param="top_logprobs")
    return top if wanted else None


def _completion_logprobs(body: dict[str, Any]) -> int | None:
    if body.get("logprobs") is None:
        return None
    return integer(body, "logprobs", 0, 0, MAX_TOP_LOGPROBS)


def logit_bias(body: dict[str, Any], n_vocab: int) -> tuple[tuple[int, float], ...]:
    """{"token ID": bias in [-100, 100]}: added to the token's logit before sampling."""
    raw = field(body, "logit_bias", dict, {})
    if len(raw) > n_vocab:
        raise UsageError("'logit_bias' has more entries than the vocabulary", param="logit_bias")
    out: dict[int, float] = {}
    for key, value in raw.items():
        token = int(key) if key.isascii() and key.isdigit() and len(key) < 12 else -1
        if not 0 <= token < n_vocab:
            raise UsageError(
                f"'logit_bias' keys must be token IDs in [0, {n_vocab}), not {key[:20]!r}",
                param="logit_bias",
            )
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise UsageError("'logit_bias' values must be numbers", param="logit_bias")
        if not -100 <= value <= 100:
            raise UsageError("'logit_bias' values must be in [-100, 100]", param="logit_bias")
        out[token] = float(value)
    return tuple(sorted(out.items()))


def grammar_text(body: dict[str, Any]) -> str | None:
    """The GBNF a response_format asks for: None for text, llama.cpp's JSON grammar for
    json_object (or the schema's grammar, when one is given as llama-server allows), the
    schema's grammar for json_schema."""
    fmt = field(body, "response_format", dict, None)
    if fmt is None:
        return None
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        schema = fmt.get("schema")
        if schema is None:
            return JSON_OBJECT
        return json_schema_gbnf(_schema(schema))
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        if not isinstance(spec, dict):
            raise UsageError(
                "'response_format.json_schema' must be an object", param="response_format"
            )
        return json_schema_gbnf(_schema(spec.get("schema", {})))
    raise UsageError(
        "'response_format.type' must be 'text', 'json_object' or 'json_schema'",
        param="response_format",
    )


def _schema(schema: object) -> dict[str, Any]:
    if not isinstance(schema, dict):
        raise UsageError("a JSON schema must be an object", param="response_format")
    return schema


# -- responses ----------------------------------------------------------------------------


def chat_logprobs(entries: Sequence[TokenLogprob], piece: Piece) -> dict[str, Any]:
    """The `logprobs` of a chat choice (or of a streamed chunk's choice)."""

    def token(t: int, logprob: float) -> dict[str, Any]:
        raw = piece(t)
        return {"token": raw.decode("utf-8", "replace"), "logprob": logprob, "bytes": list(raw)}

    content = [
        {**token(e.token, e.logprob), "top_logprobs": [token(t, lp) for t, lp in e.top]}
        for e in entries
    ]
    return {"content": content, "refusal": None}


class CompletionLogprobs:
    """The legacy `logprobs` of completions; `text_offset` counts characters from the
    start of the generated text, across the chunks of a stream."""

    def __init__(self, piece: Piece) -> None:
        self.piece = piece
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._chars = 0  # characters the tokens so far spelled (whole characters only)

    def shape(self, entries: Sequence[TokenLogprob]) -> dict[str, Any]:
        tokens, offsets, tops = [], [], []
        for e in entries:
            offsets.append(self._chars)
            raw = self.piece(e.token)
            self._chars += len(self._decoder.decode(raw))
            tokens.append(raw.decode("utf-8", "replace"))
            # Up to N + 1 entries: the N most likely, and the sampled token (OpenAI's rule).
            top = {self._text(t): lp for t, lp in e.top}
            top.setdefault(tokens[-1], e.logprob)
            tops.append(top)
        return {
            "tokens": tokens,
            "token_logprobs": [e.logprob for e in entries],
            "top_logprobs": tops,
            "text_offset": offsets,
        }

    def _text(self, token: int) -> str:
        return self.piece(token).decode("utf-8", "replace")
