"""Where streamed text came from: the `duo` extension field of the SSE chunks.

Each streamed chunk's text has one origin, named in a field OpenAI clients ignore:

    "duo": {"source": "back:NAME", "tokens": 3}

`source` is the draft source whose accepted tokens spelled the chunk's text ("back:NAME"
for a back, "model" for the lead's own drafter, "ngram", "suffix"), or null for the main
model's own tokens (a correction or bonus token, or a round without a draft). `tokens`
counts the tokens emitted since the previous chunk: text held back (an incomplete UTF-8
character, or what might begin a stop string) comes out later, with a later chunk, so the
counts of a response add up to its `timings.predicted_n` (less the tokens of a stop string
that ended it, whose text is never sent).
"""

from __future__ import annotations

from typing import Any, Protocol


class Piece(Protocol):
    """A piece of streamed text (duo.lead.engine.events.Delta)."""

    @property
    def text(self) -> str: ...

    @property
    def source(self) -> str | None: ...

    @property
    def tokens(self) -> int: ...


class StreamOrigins:
    """The extension field of each chunk of one stream; None for a piece with no text
    (its tokens are counted with the next chunk)."""

    def __init__(self) -> None:
        self._pending = 0

    def of(self, piece: Piece) -> dict[str, Any] | None:
        self._pending += piece.tokens
        if not piece.text:
            return None
        tokens, self._pending = self._pending, 0
        return {"source": piece.source, "tokens": tokens}
