"""Fixtures for integration tests: the real default models and real duo processes."""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from duo.llama.models import get_pair, prepare

# `make test` runs a worker per core, each starting leads and backs of its own: each of
# those processes takes one thread, not every core as duo gives by default (a process per
# core spinning on more threads than the machine has slows every test down). The default
# placement is tested in process (test_sharing, test_coder15) and measured by `duo bench`.
os.environ.setdefault("DUO_ARG_THREADS", "1")


@pytest.fixture(scope="session")
def pair() -> tuple[Path, Path]:
    """(main, draft) paths of the default smollm2 pair, prepared once."""
    main, draft = prepare(get_pair("smollm2"))
    return main, draft


@pytest.fixture(scope="session")
def other_vocab_draft() -> Path:
    """A draft model whose vocabulary differs from smollm2's (gemma3's Q2_K)."""
    return prepare(get_pair("gemma3"))[1]


def duo(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run `duo ARGS` to completion, as a user would: (exit code, stdout, stderr)."""
    return subprocess.run(
        [sys.executable, "-m", "duo", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


# Ports for the servers tests start: below Linux's ephemeral range (32768-60999), so no
# connection's local port takes one, and a range of its own for each pytest-xdist worker
# (gw0, gw1, ...), so two workers never hand out the same port.
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
_SPAN = 12000 // max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
_PORTS = itertools.cycle(range(20000 + _SPAN * _WORKER, 20000 + _SPAN * (_WORKER + 1)))


def free_port() -> int:
    """A port nothing listens on, from this worker's range."""
    for port in _PORTS:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("unreachable")


def _default_sigint() -> None:
    """In the child before exec: SIGINT as a terminal gives it. An ignored signal stays
    ignored across exec (restore_signals only resets SIGPIPE, SIGXFZ and SIGXFSZ), and
    Python installs its KeyboardInterrupt handler only where SIGINT is not ignored: under
    `make test &` the child would shrug off the Ctrl-C a test sends it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Proc:
    """A duo subprocess whose output is kept in a file; always torn down."""

    def __init__(
        self, args: list[str], log: Path, host: Callable[[list[str]], list[str]] | None = None
    ) -> None:
        """`host` makes the command one that runs elsewhere (a namespace's `FarHost.run`)."""
        self.log = log
        self._out = log.open("wb")
        cmd = [sys.executable, "-m", "duo", *args]
        self.popen = subprocess.Popen(
            host(cmd) if host else cmd,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=_default_sigint,
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.alive():
            self.popen.send_signal(sig)
        self.popen.wait(timeout=30)

    def stop(self) -> None:
        if self.alive():
            self.popen.terminate()
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=15)
        self._out.close()


def wait_until(predicate, timeout: float, what: str, proc: Proc | None = None) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            raise AssertionError(f"{what}: process exited early:\n{proc.output()[-3000:]}")
        try:
            if predicate():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def health(url: str) -> dict:  # type: ignore[type-arg]
    return httpx.get(f"{url}/health", timeout=5).json()  # type: ignore[no-any-return]


class Cluster:
    """Starts leads and backs on loopback for one test, and stops them all after."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[Proc] = []

    def lead(self, *args: str) -> tuple[Proc, str]:
        port = free_port()
        proc = Proc(["lead", "--port", str(port), *args], self.tmp / f"lead-{port}.log")
        self.procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: health(url)["status"] == "ok", 180, "lead ready", proc)
        return proc, url

    def back(
        self,
        url: str,
        *args: str,
        wait: bool = True,
        host: Callable[[list[str]], list[str]] | None = None,
    ) -> Proc:
        before = health(url)["drafters"] if wait else 0
        log = self.tmp / f"back-{len(self.procs)}.log"
        proc = Proc(["back", "--lead", url, *args], log, host)
        self.procs.append(proc)
        if wait:
            wait_until(lambda: health(url)["drafters"] > before, 120, "back connected", proc)
        return proc

    def drafted(self, main: str, draft: str, ctx: int) -> tuple[str, list[str]]:
        """A lead of the main model alone, and three that draft for it: with the draft
        model in its process (-md), with the free drafters, and with a `duo back`; each
        deterministic and with a fixed draft length, so that texts compare exactly."""
        fixed = ("--deterministic", "-np", "1", "-c", str(ctx), "--quiet", "--policy", "fixed")
        _, plain = self.lead("-m", main, "--spec-type", "none", *fixed)
        _, with_draft = self.lead("-m", main, "-md", draft, "--spec-type", "model", *fixed)
        _, free = self.lead("-m", main, "--spec-type", "ngram,suffix", *fixed)
        _, backed = self.lead("-m", main, "--spec-type", "model", *fixed)
        self.back(backed, "-m", draft)
        return plain, [with_draft, free, backed]

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(tmp_path) as c:
        yield c
