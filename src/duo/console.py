"""Showing generations as they happen: accepted draft tokens in green (as in llama duo)."""

from __future__ import annotations

import codecs
import sys
from collections.abc import Callable
from typing import TextIO

from duo.engine import Round

GREEN = "\x1b[32m"
RESET = "\x1b[0m"


class TokenPrinter:
    """Streams emitted text to a terminal or file, round by round."""

    def __init__(
        self, piece: Callable[[int], bytes], color: bool, out: TextIO | None = None
    ) -> None:
        self.piece = piece
        self.color = color
        self.out = out or sys.stdout
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def __call__(self, r: Round) -> None:
        drafted = self.decoder.decode(b"".join(self.piece(t) for t in r.tokens[: r.accepted]))
        own = self.decoder.decode(b"".join(self.piece(t) for t in r.tokens[r.accepted :]))
        if self.color and drafted:
            drafted = f"{GREEN}{drafted}{RESET}"
        self.out.write(drafted + own)
        self.out.flush()
