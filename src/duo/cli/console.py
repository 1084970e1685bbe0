"""`duo lead`'s console: each generation as it happens, accepted draft text in green."""

from __future__ import annotations

import sys
from typing import TextIO

from duo.core.text import Chunk


class Console:
    """The lead's console: each generation as it happens, accepted draft text in green.
    With several slots, whole lines, each marked with its slot."""

    def __init__(self, color: bool, out: TextIO | None = None, slots: int = 1) -> None:
        self.color = color
        self.out = out or sys.stdout
        self.slots = slots
        self._lines: dict[int, str] = {}

    def show(self, slot: int, chunk: Chunk | str) -> None:
        text = chunk if isinstance(chunk, str) else chunk.colored() if self.color else chunk.text
        if self.slots > 1:
            *lines, self._lines[slot] = (self._lines.get(slot, "") + text).split("\n")
            text = "".join(f"[{slot}] {line}\n" for line in lines)
        self.out.write(text)
        self.out.flush()
