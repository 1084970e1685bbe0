"""What a command shows on the terminal while it waits: preparing a model file."""

from __future__ import annotations

import sys
import threading
import time


class Spinner:
    """A one-line elapsed-time display on stderr while a blocking step runs (a
    duo.llama.models.Step: preparing a model file)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._t0 = 0.0

    def __enter__(self) -> Spinner:
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        status = "failed" if exc[0] else "done"
        elapsed = time.monotonic() - self._t0
        print(f"\rpreparing {self.label} ... {status} in {elapsed:.1f}s", file=sys.stderr)

    def _run(self) -> None:
        tty = sys.stderr.isatty()
        frames = "|/-\\"
        i = 0
        if not tty:
            print(f"preparing {self.label} ...", file=sys.stderr)
        while not self._done.wait(0.2):
            if tty:
                elapsed = time.monotonic() - self._t0
                print(
                    f"\rpreparing {self.label} {frames[i % 4]} {elapsed:5.1f}s",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
                i += 1
