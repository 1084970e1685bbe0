"""A bench runner in a process of its own, asked over a pipe.

duo's in-process modes (a Session each) used to share the bench's process, and models
opened side by side in one process run their passes apart by as much as the modes
differ: on the 1.5B pair's chat prompts `default` and `target-all`, the same main model
on the same threads, ran theirs 0.4-1.4% apart, one way or the other depending on the
order they were opened in. A user runs each in a process of its own, with its own heap
and its own mapping of the model, as the bench runs llama.cpp's peers; so each mode now
runs in one, started fresh (spawn: nothing of the bench's memory is inherited). Modes
with rpc-servers stay in the bench's process (duo.bench.harness.modes.Opening).

Processes differ too. Five processes of `target-all` taking turns on the same prompts ran
at 40.4, 40.7, 40.4, 42.2 and 42.4 tok/s (2-core EPYC VM): where a process's memory lands
(its pages, and how the host backs them) sets its speed for as long as it lives. llama.cpp's
peers start a process per prompt, so their figure averages over dozens; so each repeat of
a mode here runs in a new process (`renew`), and the median over the repeats is taken over
as many processes.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from duo.bench.harness.runners import Runner
from duo.core.stats import Stats


class Isolated(Runner):
    """The runner `open_(*args)` makes, opened and asked in a child process."""

    def __init__(self, mode: str, open_: Callable[..., Runner], *args: Any) -> None:
        self.mode = mode
        self._open = open_
        self._args = args
        self._start()

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._proc = context.Process(
            target=_serve,
            args=(child, self._open, self._args),
            name=f"duo bench {self.mode}",
            daemon=True,
        )
        self._proc.start()
        child.close()
        try:
            self.devices: str = self._answer()
        except BaseException:
            self._stop()
            raise

    def renew(self) -> None:
        """Close the child and open the mode again in a new one."""
        self.close()
        self._start()

    def one(self, i: int) -> tuple[Stats, float]:
        self._conn.send(i)
        stats, ttft = self._answer()
        return stats, ttft

    def extras(self) -> dict[str, Any]:
        self._conn.send("extras")
        extras: dict[str, Any] = self._answer()
        return extras

    def close(self) -> None:
        if self._proc.is_alive():
            with contextlib.suppress(OSError):  # a broken pipe: the child is gone already
                self._conn.send(None)  # the child closes its runner, then exits
        self._stop()

    def _answer(self) -> Any:
        try:
            kind, value = self._conn.recv()
        except EOFError:
            self._proc.join(timeout=5)
            raise RuntimeError(
                f"{self.mode}: its process ended (exit code {self._proc.exitcode})"
            ) from None
        if kind == "error":
            raise value
        return value

    def _stop(self) -> None:
        self._proc.join(timeout=60)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()
        self._conn.close()


def _serve(conn: Connection, open_: Callable[..., Runner], args: tuple[Any, ...]) -> None:
    """The child: open the runner, then answer prompt numbers (and "extras") until None."""
    # Ctrl-C reaches the whole process group: the bench closes its modes itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        runner = open_(*args)
    except Exception as e:
        conn.send(("error", e))
        return
    try:
        conn.send(("ok", runner.devices))
        while (request := conn.recv()) is not None:
            try:
                reply = runner.extras() if request == "extras" else runner.one(request)
            except Exception as e:
                conn.send(("error", e))
            else:
                conn.send(("ok", reply))
    except EOFError:
        pass  # the bench is gone
    finally:
        runner.close()
