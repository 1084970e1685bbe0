"""`duo lead`'s console: each generation as it happens, accepted draft text in green."""

from __future__ import annotations

import sys
from typing import TextIO

from duo.core.text import Chunk


class Console:
    """The lead's console: each generation as it happens, accepted draft text in green.

    A generation alone streams as it is made. While several run at once (in several
    slots), each shows in whole lines marked with its slot (`[2] ...`), and the one that
    was streaming goes on in marked lines from a new one; once they have all ended, the
    next one streams again. `show` gets a generation's text as Chunks, then its end: its
    last text and a newline, as a str."""

    def __init__(self, color: bool, out: TextIO | None = None) -> None:
        self.color = color
        self.out = out or sys.stdout
        self._streaming: int | None = None  # the slot whose text goes out as it comes
        self._open = False  # it left a line unfinished
        self._lines: dict[int, str] = {}  # the others, by slot: their unfinished line

    def show(self, slot: int, chunk: Chunk | str) -> None:
        ended = isinstance(chunk, str)
        text = chunk if isinstance(chunk, str) else chunk.colored() if self.color else chunk.text
        if self._streaming in (None, slot) and not self._lines:  # alone
            self._streaming = None if ended else slot
            if text:
                self._open = not text.endswith("\n")
            self._write(text)
            return
        if self._streaming is not None:  # a second one: both in marked lines from here
            self._write("\n" if self._open else "")
            self._lines[self._streaming], self._streaming = "", None
        *lines, rest = (self._lines.pop(slot, "") + text).split("\n")
        if not ended:
            self._lines[slot] = rest
        self._write("".join(f"[{slot}] {line}\n" for line in lines))

    def _write(self, text: str) -> None:
        if text:
            self.out.write(text)
            self.out.flush()
