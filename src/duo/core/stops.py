"""Stop strings, honoured exactly on streamed text.

Text that might be the start of a stop string is held back until the next piece shows
whether it is; nothing at or past a stop string is ever emitted, even when the stop
string straddles several tokens or an accepted draft chunk.
"""

from __future__ import annotations

from collections.abc import Sequence


class StopMatcher:
    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self._held = ""
        self.stopped = False
        self.word = ""  # the stop string found

    def feed(self, text: str) -> str:
        """Add generated text; return what can be emitted now (check .stopped after)."""
        if self.stopped:
            return ""
        buf = self._held + text
        if not self.stops:
            self._held = ""
            return buf
        # The earliest, and of those the first listed (llama-server's stopping_word).
        found = [(i, k) for k, i in enumerate(buf.find(s) for s in self.stops) if i >= 0]
        if found:
            cut, k = min(found)
            self.word = self.stops[k]
            self.stopped = True
            self._held = ""
            return buf[:cut]
        keep = self._partial_suffix(buf)
        self._held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep]

    def flush(self) -> str:
        """The end of generation: held-back text was not a stop string after all."""
        held, self._held = self._held, ""
        return "" if self.stopped else held

    def _partial_suffix(self, buf: str) -> int:
        """Length of the longest suffix of buf that is a proper prefix of a stop string."""
        return max(tail_of(buf, stop) for stop in self.stops)


def tail_of(text: str, tag: str) -> int:
    """How many characters at the end of `text` begin `tag` (text to hold back while it
    streams, in case the tag is coming)."""
    for k in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-k:]):
            return k
    return 0
