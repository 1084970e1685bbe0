"""The `logprobs` of a choice, in the chat shape ({"content": [{token, logprob, bytes,
top_logprobs}]}) or the legacy completions shape ({tokens, token_logprobs, top_logprobs,
text_offset}). (A request asks for them with `logprobs` / `top_logprobs`:
duo.lead.openai.requests.)
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence

from duo.core.logprobs import TokenLogprob
from duo.lead.protocol.openai import ChatLogprobs, TextLogprobs, TokenLogprobs, TopLogprob

Piece = Callable[[int], bytes]


def chat_logprobs(entries: Sequence[TokenLogprob], piece: Piece) -> ChatLogprobs:
    """The `logprobs` of a chat choice (or of a streamed chunk's choice)."""

    def token(t: int, logprob: float) -> TopLogprob:
        raw = piece(t)
        return {"token": raw.decode("utf-8", "replace"), "logprob": logprob, "bytes": list(raw)}

    content: list[TokenLogprobs] = [
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

    def shape(self, entries: Sequence[TokenLogprob]) -> TextLogprobs:
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
