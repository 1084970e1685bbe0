"""The lead's live events, for its dashboard: backs joining and leaving, each finished
response's figures, and once a second the state (backs with their rates, queue, busy).

A subscriber reads server-sent events:

    event: state     {"model", "busy", "queued", "local_drafter", "requests", "backs": [...]}
    event: join      {"back": {...}}          a back connected
    event: leave     {"back": {...}}          a back left (or was dropped)
    event: response  {"timings": {...}}       a generation finished (any client's)

A back is {"id", "name", "host", "model", "joined", "last_seen" (Unix seconds), "received"
(draft tokens it sent), "drafts_per_second" (over the last second), "drafted" and
"accepted" (its draft tokens verified and accepted, since the lead started, shared by backs
of the same name), "acceptance_rate"}.

Events are published on the event loop; a finished response is handed over from the
engine thread. A subscriber too slow to keep up is dropped (its stream ends).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from duo.channel.backs import Backs, Remote
from duo.core.stats import SourceStats, Stats
from duo.lead.protocol.openai import timings
from duo.sse import encode

MAX_PENDING = 256  # events queued for one subscriber before it is dropped


def event(kind: str, data: dict[str, Any]) -> bytes:
    """One server-sent event."""
    return encode(data, kind)


class Feed:
    def __init__(
        self,
        backs: Backs,
        health: Callable[[], Mapping[str, object]],
        by_source: Callable[[], dict[str, SourceStats]],
        requests: Callable[[], int],
        interval: float = 1.0,
    ) -> None:
        self.backs = backs
        self.health = health  # /health's body: model, busy, queued, local_drafter
        self.by_source = by_source  # draft tokens verified and accepted per source, so far
        self.requests = requests
        self.interval = interval
        self._subscribers: set[asyncio.Queue[bytes | None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._ids: dict[Remote, int] = {}
        self._next_id = itertools.count(1)
        backs.watch(self._changed)
        for remote in backs.remotes:
            self._ids[remote] = next(self._next_id)

    def close(self) -> None:
        """End every stream, now and to come: the server is shutting down, and waits for
        open responses (these never end by themselves). Callable from a signal handler."""
        self._closed = True
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._publish, None)

    # -- publishing -----------------------------------------------------------------------

    def finished(self, stats: Stats) -> None:
        """A generation finished; callable from any thread (the engine's)."""
        loop = self._loop
        if loop is None or not self._subscribers:
            return
        data = event("response", {"timings": timings(stats)})
        loop.call_soon_threadsafe(self._publish, data)

    def _changed(self, change: str, remote: Remote) -> None:
        if change == "join":
            self._ids[remote] = next(self._next_id)
        data = event(change, {"back": self._describe(remote, 0.0)})
        if change == "leave":
            self._ids.pop(remote, None)
        self._publish(data)

    def _publish(self, data: bytes | None) -> None:
        """Hand data to every subscriber; None ends their streams."""
        for queue in list(self._subscribers):
            if data is None:
                self._end(queue)
                continue
            try:
                queue.put_nowait(data)
            except asyncio.QueueFull:  # too slow: drop it, its stream ends
                self._end(queue)

    def _end(self, queue: asyncio.Queue[bytes | None]) -> None:
        self._subscribers.discard(queue)
        if queue.full():
            queue.get_nowait()
        queue.put_nowait(None)

    # -- subscribing ----------------------------------------------------------------------

    async def stream(self) -> AsyncIterator[bytes]:
        """One subscriber's events: the state first, then as they come, the state again
        every `interval` seconds."""
        self._loop = asyncio.get_running_loop()
        if self._closed:
            return
        queue: asyncio.Queue[bytes | None] = asyncio.Queue(MAX_PENDING)
        self._subscribers.add(queue)
        rates = Rates()
        try:
            yield event("state", self.state(rates))
            next_tick = time.monotonic() + self.interval
            while True:
                wait = next_tick - time.monotonic()
                if wait <= 0:
                    yield event("state", self.state(rates))
                    next_tick = time.monotonic() + self.interval
                    continue
                try:
                    data = await asyncio.wait_for(queue.get(), wait)
                except TimeoutError:
                    continue
                if data is None:
                    return
                yield data
        finally:
            self._subscribers.discard(queue)

    def state(self, rates: Rates | None = None) -> dict[str, Any]:
        health = self.health()
        now = time.monotonic()
        backs = []
        for remote in self.backs.remotes:
            per_second = rates.rate(remote, now) if rates else 0.0
            backs.append(self._describe(remote, per_second))
        if rates:
            rates.keep(self.backs.remotes)
        return {
            "model": health.get("model"),
            "busy": health.get("busy"),
            "queued": health.get("queued"),
            "local_drafter": health.get("local_drafter"),
            "requests": self.requests(),
            "backs": backs,
            "time": time.time(),
        }

    def _describe(self, remote: Remote, per_second: float) -> dict[str, Any]:
        counts = self.by_source().get(remote.source, SourceStats())
        return {
            "id": self._ids.get(remote, 0),
            "name": remote.name,
            "source": remote.source,
            "host": remote.host,
            "model": remote.model,
            "joined": remote.joined,
            "last_seen": remote.last_seen,
            "received": remote.received,
            "state": remote.state,
            "why": remote.why,
            "drafts_per_second": per_second,
            "drafted": counts.drafted,
            "accepted": counts.accepted,
            "acceptance_rate": counts.acceptance_rate,
        }


class Rates:
    """Draft tokens per second of each back, between one subscriber's state events."""

    def __init__(self) -> None:
        self._seen: dict[Remote, tuple[float, int]] = {}

    def rate(self, remote: Remote, now: float) -> float:
        before = self._seen.get(remote)
        self._seen[remote] = (now, remote.received)
        if before is None or now <= before[0]:
            return 0.0
        return (remote.received - before[1]) / (now - before[0])

    def keep(self, remotes: tuple[Remote, ...]) -> None:
        """Forget the backs that left."""
        for gone in self._seen.keys() - set(remotes):
            del self._seen[gone]
