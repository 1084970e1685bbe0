"""The one place where rounds become text.

Every front end (`duo generate`, the lead's API and console) reads generated text from a
`TextStream`: UTF-8 decoded across token boundaries (a character may span tokens), cut
exactly at stop strings (even inside an accepted draft chunk), and split into the part the
accepted draft tokens spelled and the part the main model produced on its own.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from duo.core.limits import Limits
from duo.core.rounds import Round
from duo.core.stops import StopMatcher

GREEN = "\x1b[32m"
RESET = "\x1b[0m"


@dataclass(frozen=True, slots=True)
class Chunk:
    """The text one round added."""

    drafted: str  # spelled by accepted draft tokens
    own: str  # spelled by the main model's own token (correction or bonus)

    @property
    def text(self) -> str:
        return self.drafted + self.own

    def colored(self) -> str:
        """For a terminal: accepted draft text in green (as llama_duo shows it)."""
        return f"{GREEN}{self.drafted}{RESET}{self.own}" if self.drafted else self.own


class TextStream:
    def __init__(
        self,
        piece: Callable[[int], bytes],
        stops: Sequence[str] = (),
        limits: Limits | None = None,
    ) -> None:
        """`limits`: an editor's limits (duo.core.limits), applied after the stops."""
        self.piece = piece
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._stops = StopMatcher(stops)
        self._limits = limits if limits is not None and limits.active else None

    @property
    def stopped(self) -> bool:
        """A stop string or a limit was reached: nothing more is emitted; stop generating."""
        return self._stops.stopped or self.limited

    @property
    def limited(self) -> bool:
        """A limit (not a stop string) ended the text."""
        return self._limits is not None and self._limits.stopped

    @property
    def word(self) -> str:
        """The stop string that ended the text ("" if none did)."""
        return self._stops.word

    def feed(self, r: Round) -> Chunk:
        drafted = self._text(r.tokens[: r.accepted])
        own = "" if self.stopped else self._text(r.tokens[r.accepted :])
        return Chunk(drafted, own)

    def finish(self) -> str:
        """The generation is over: the text held back (an incomplete character, or what
        might have begun a stop string)."""
        tail = self._stops.feed(self._decoder.decode(b"", final=True))
        return self._limited(tail + self._stops.flush())

    def _text(self, tokens: Sequence[int]) -> str:
        if self.stopped:
            return ""
        text = self._decoder.decode(b"".join(self.piece(t) for t in tokens))
        return self._limited(self._stops.feed(text))

    def _limited(self, text: str) -> str:
        return text if self._limits is None or not text else self._limits.feed(text)
