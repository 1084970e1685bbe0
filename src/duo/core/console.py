"""Showing generations as they happen: accepted draft tokens in green (as in llama duo)."""

from __future__ import annotations

import codecs
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from duo.core.engine import Round
from duo.core.stops import StopMatcher

GREEN = "\x1b[32m"
RESET = "\x1b[0m"


class TokenPrinter:
    """Streams emitted text to a terminal or file, round by round, honouring stop strings."""

    def __init__(
        self,
        piece: Callable[[int], bytes],
        color: bool,
        out: TextIO | None = None,
        stops: Sequence[str] = (),
    ) -> None:
        self.piece = piece
        self.color = color
        self.out = out or sys.stdout
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.stops = StopMatcher(stops)

    def __call__(self, r: Round) -> bool:
        """Print a round; True once a stop string was reached (stop generating)."""
        drafted = self._text(r.tokens[: r.accepted])
        own = "" if self.stops.stopped else self._text(r.tokens[r.accepted :])
        if self.color and drafted:
            drafted = f"{GREEN}{drafted}{RESET}"
        self.out.write(drafted + own)
        self.out.flush()
        return self.stops.stopped

    def finish(self) -> None:
        """The generation is over: print any text held back as a possible stop string."""
        self.out.write(self.stops.feed(self.decoder.decode(b"", final=True)) + self.stops.flush())
        self.out.flush()

    def _text(self, tokens: Sequence[int]) -> str:
        return self.stops.feed(self.decoder.decode(b"".join(self.piece(t) for t in tokens)))
