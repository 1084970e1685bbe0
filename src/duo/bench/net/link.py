"""A network link's delay on one machine: a TCP proxy that holds every byte for a fixed
time in each direction, in order.

`duo bench --rtt` puts one between a lead and its back, so a drafter on loopback hears of
the commits, and the lead of the drafts, as late as across a LAN, Wi-Fi or a WAN. Each
direction's bytes are forwarded `rtt / 2` (plus or minus `jitter`, never reordered) after
they arrived; TCP_NODELAY on both legs, so the proxy adds no batching of its own.
"""

from __future__ import annotations

import asyncio
import random
import socket
import threading
import time
from dataclasses import dataclass

from duo.bench.net.netns import FarHost

CHUNK = 1 << 16


class DelayProxy:
    """Listens on `host` (`port`, once started) and forwards every connection to
    `target`, delaying each direction by `one_way` seconds (± `jitter`)."""

    def __init__(
        self,
        target: tuple[str, int],
        one_way: float,
        jitter: float = 0.0,
        host: str = "127.0.0.1",
    ) -> None:
        self.target = target
        self.host = host
        self.one_way = one_way
        self.jitter = jitter
        self.port = 0
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="link", daemon=True)
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    def started(
        cls, target: tuple[str, int], rtt_ms: float, jitter_ms: float = 0.0, host: str = "127.0.0.1"
    ) -> DelayProxy:
        """A running proxy for a link of this round trip: half of it each way."""
        return cls(target, rtt_ms / 2000, jitter_ms / 1000, host).start()

    def start(self) -> DelayProxy:
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        self.port = started.result(timeout=10)
        return self

    def cut(self) -> None:
        """Break every connection open now, as a link that goes down (new ones are taken)."""
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._drop(), self._loop).result(timeout=10)

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            await self._drop()

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        self._loop.close()

    async def _drop(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _listen(self) -> int:
        self._server = await asyncio.start_server(self._accept, self.host, 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            self._tasks.discard(task)
            return
        for w in (writer, up_writer):
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            for w in (writer, up_writer):
                w.close()
            self._tasks.discard(task)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Copy reader to writer, each chunk `one_way` after it came; an end of stream is
        passed on as late as the bytes before it."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    writer.write_eof() if writer.can_write_eof() else writer.close()
                    return
                writer.write(data)
                await writer.drain()

        sender = asyncio.create_task(deliver())
        last = 0.0
        try:
            while True:
                data = await reader.read(CHUNK)
                spread = random.uniform(-self.jitter, self.jitter) if self.jitter else 0.0
                last = max(last, time.monotonic() + max(0.0, self.one_way + spread))
                queue.put_nowait((last, data))  # never before what came first
                if not data:
                    break
            await sender
        finally:
            sender.cancel()


@dataclass(frozen=True)
class Link:
    """How the bench's far side (a back, an rpc-server) and its near side (the lead, the
    main model) reach each other: the round trip and jitter a proxy adds, and the
    namespace the far side runs in (None: this host's loopback)."""

    rtt_ms: float = 0.0
    jitter_ms: float = 0.0
    far: FarHost | None = None

    @property
    def near_host(self) -> str:
        """Where the far side finds this side's proxies."""
        return self.far.near if self.far else "127.0.0.1"

    @property
    def far_host(self) -> str:
        """Where a far-side server listens, and this side finds it."""
        return self.far.far if self.far else "127.0.0.1"

    def command(self, cmd: list[str]) -> list[str]:
        """`cmd` as a far-side process."""
        return self.far.run(cmd) if self.far else cmd

    def proxy(self, target: tuple[str, int], host: str) -> DelayProxy | None:
        """A started proxy on `host` in front of `target`; None where the two sides meet
        on loopback without delay."""
        if self.far is None and not self.rtt_ms and not self.jitter_ms:
            return None
        return DelayProxy.started(target, self.rtt_ms, self.jitter_ms, host)


LOOPBACK = Link()  # no proxy, no namespace
