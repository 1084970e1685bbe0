"""`duo lead --rpcd`: the draft model on rpc-servers, drafting from a process of its own.

llama.cpp aborts the process that loses an RPC device. A draft model on rpc-servers inside
the lead would take the lead down with its device; so the lead runs it as a back of its
own, a `duo back` child connected over loopback. When the device dies, that back dies and
the lead goes on without its drafts, as it does when any back leaves (no request fails);
the back is started again, with backoff, until its rpc-servers answer again. The child
also ends with the lead (PR_SET_PDEATHSIG), whatever kills the lead.
"""

from __future__ import annotations

import ctypes
import logging
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
RESTART_DELAYS = (1.0, 30.0)  # the first delay before a restart, and the longest
STEADY_SECONDS = 30.0  # a back that ran this long starts again after the first delay


def _child_setup() -> None:
    """In the child before exec: die with the lead, and leave a terminal's Ctrl-C to the
    lead, which stops it (else it would stop first, and be restarted)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class LocalBack:
    """A `duo back` child, restarted whenever it exits until `close()`."""

    def __init__(self, argv: Sequence[str], env: dict[str, str], what: str) -> None:
        self.argv = list(argv)
        self.env = env
        self.what = what  # "the draft model on rpc-servers HOST:PORT", for the log
        self.restarts = 0
        self._tail: deque[str] = deque(maxlen=10)
        self._proc: subprocess.Popen[bytes] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="local-back", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._thread.join(timeout=15)

    def _run(self) -> None:
        delay = RESTART_DELAYS[0]
        while not self._stop.is_set():
            started = time.monotonic()
            code = self._once()
            if self._stop.is_set():
                return
            if time.monotonic() - started > STEADY_SECONDS:
                delay = RESTART_DELAYS[0]
            log.warning(
                "%s: its drafter stopped (%s); going on without its drafts, starting it "
                "again in %.0f s",
                self.what,
                self.reason(code),
                delay,
            )
            self.restarts += 1
            self._stop.wait(delay)
            delay = min(delay * 2, RESTART_DELAYS[1])

    def _once(self) -> int:
        self._tail.clear()
        self._proc = proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self.env,
            preexec_fn=_child_setup,
        )
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            if line:
                self._tail.append(line)
                log.debug("local back: %s", line)
        return proc.wait()

    def reason(self, code: int) -> str:
        """The back's last words: llama.cpp's abort or duo's error line, else its exit."""
        for line in reversed(self._tail):
            if line.startswith(("duo: fatal:", "duo back:", "duo: error:")):
                return line.removeprefix("duo: ").removeprefix("duo back: ")
        if code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exit code {code}"


def back_argv(url: str, draft: str, rpcd: str, layers: int, options: Sequence[str]) -> list[str]:
    """`duo back` for the lead at `url`, its draft model's layers on the --rpcd servers."""
    return [
        sys.executable, "-m", "duo", "back", "--lead", url, "-m", draft, "--rpcd", rpcd,
        "-ngl", str(layers), "--name", "rpcd", *options,
    ]  # fmt: skip
