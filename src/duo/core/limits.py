"""An editor's limits on a completion, as llama-server applies them (`n_indent`,
`t_max_predict_ms`): they end the text where a code completion has gone past its block or
taken too long.

    n_indent          every line after the first must be indented by at least this many
                      spaces or tabs: the first line that is not ends the text, cut
                      after its indentation (llama.vim sends the cursor line's indent)
    t_max_predict_ms  once this long has passed since the first token, the text ends at
                      its next newline, that newline kept

`feed` takes the text as it is emitted (after stop strings) and returns what may be
emitted of it; `stopped` then says the generation should end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Limits:
    n_indent: int = 0  # 0: off
    t_max_predict_ms: float = 0.0  # 0: off
    clock: Callable[[], float] = time.perf_counter
    stopped: bool = False
    _text: str = ""  # emitted so far
    _line: int = -1  # where the line to judge starts (-1: the first, never judged)
    _judged: bool = False  # that line is indented enough
    _started: float | None = field(default=None)

    @property
    def active(self) -> bool:
        return self.n_indent > 0 or self.t_max_predict_ms > 0

    def feed(self, piece: str) -> str:
        if self.stopped:
            return ""
        if self._started is None:
            self._started = self.clock()
        start = len(self._text)
        self._text += piece
        if self.n_indent > 0:
            cut = self._under_indented(start)
            if cut is not None:
                self.stopped = True
                self._text = self._text[:cut]
                return self._text[start:]
        newline = piece.find("\n")
        if newline >= 0 and self._late():
            self.stopped = True
            self._text = self._text[: start + newline + 1]
            return piece[: newline + 1]
        return piece

    def _late(self) -> bool:
        """t_max_predict_ms has passed since the first piece."""
        started = self._started if self._started is not None else self.clock()
        return 0 < self.t_max_predict_ms < 1000 * (self.clock() - started)

    def _under_indented(self, start: int) -> int | None:
        """Where the text is cut: after the indentation of the first line (past the
        first) indented less than n_indent, once its first other character is here."""
        text = self._text
        while True:
            if self._line < 0 or self._judged:  # on to the next line, once it begins
                newline = text.find("\n", max(self._line, 0))
                if newline < 0:
                    return None
                self._line, self._judged = newline + 1, False
            pos = self._line
            while pos < len(text) and text[pos] in " \t":
                pos += 1
            if pos == len(text):  # only indentation so far: wait for more
                return None
            if pos - self._line < self.n_indent:
                return pos
            self._judged = True
