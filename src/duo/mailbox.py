"""Events from the engine thread to the event loop, handed over once per pass.

`loop.call_soon_threadsafe` wakes the loop with a write to a socket, and the write
releases the GIL (as does any foreign call that may block). The woken loop takes the GIL
and the engine thread waits, between two passes of the main model, while the loop streams
what it was sent: py-spy put 2.3% of the engine thread's samples in that write with one
client streaming, 2% with four. A Mailbox keeps the events, and the engine flushes it just
before its next pass with a wake-up written without releasing the GIL: the loop wakes, waits
for the GIL, and gets it when the pass releases it, so it streams while the pass runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import threading
from collections.abc import Callable
from typing import Any

_Call = tuple[Callable[[Any], object], Any]


def _write_holding_gil() -> Callable[[int, bytes], object]:
    """libc's write(2), called with the GIL held (ctypes.PyDLL); os.write where that is
    not available. The wake-up pipe is non-blocking: the write never waits."""
    try:
        write = ctypes.PyDLL(None).write
    except (OSError, AttributeError, TypeError):
        return os.write
    write.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
    write.restype = ctypes.c_ssize_t
    return lambda fd, data: write(fd, data, len(data))


_write = _write_holding_gil()


class Mailbox:
    """Calls for one event loop, posted by any thread, run there after a flush. Create it
    on the loop's thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._posted: list[_Call] = []
        self._flushed: list[_Call] = []
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        loop.add_reader(self._wake_r, self._deliver)

    def post(self, fn: Callable[[Any], object], arg: Any) -> None:
        """Run fn(arg) on the loop after the next flush, after the calls posted before it."""
        with self._lock:
            self._posted.append((fn, arg))

    def flush(self) -> None:
        """Hand what was posted to the loop (any thread; nothing to do if nothing was)."""
        with self._lock:
            if not self._posted:
                return
            wake = not self._flushed  # else a wake-up is already on its way
            self._flushed += self._posted
            self._posted = []
        if wake:
            with contextlib.suppress(BlockingIOError):  # a full pipe wakes the loop anyway
                _write(self._wake_w, b"\0")

    def close(self) -> None:
        """On the loop's thread: stop listening for wake-ups."""
        self.loop.remove_reader(self._wake_r)  # (nothing to do once the loop is closed)
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _deliver(self) -> None:
        # One read: a wake-up is written only when the last one's calls were taken (one
        # byte each); a byte left over wakes the loop once more, to find nothing.
        with contextlib.suppress(BlockingIOError):
            os.read(self._wake_r, 4096)
        with self._lock:
            calls, self._flushed = self._flushed, []
        for fn, arg in calls:  # each on its own, as call_soon_threadsafe would run it
            self.loop.call_soon(fn, arg)


class Mailboxes:
    """A mailbox per event loop that takes the engine's calls (a server has one loop; a
    test may run several), flushed together by the engine before each pass."""

    def __init__(self) -> None:
        self._by_loop: dict[asyncio.AbstractEventLoop, Mailbox] = {}

    def here(self) -> Mailbox:
        """The running loop's mailbox (call it on the loop)."""
        loop = asyncio.get_running_loop()
        mailbox = self._by_loop.get(loop)
        if mailbox is None:
            mailbox = self._by_loop[loop] = Mailbox(loop)
        return mailbox

    def flush(self) -> None:
        for mailbox in list(self._by_loop.values()):
            mailbox.flush()

    def close(self) -> None:
        for mailbox in self._by_loop.values():
            mailbox.close()
        self._by_loop = {}
