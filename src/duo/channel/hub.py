"""The lead's side of the drafter channel: connected backs as one draft source.

The engine thread calls begin/propose/commit/end (a DraftSource) and never blocks on the
network: proposals read each back's latest draft, and outgoing frames are handed to the
event loop. The event loop runs one `serve` task per connected back: handshake, then
merge incoming DRAFT frames into that back's draft. A back that breaks the protocol is
disconnected; it never affects a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from starlette.websockets import WebSocket, WebSocketDisconnect

from duo import auth
from duo.channel import protocol as p
from duo.core.draft import Draft, advance, merge, usable
from duo.errors import ProtocolError

log = logging.getLogger(__name__)

MAX_DRAFT = 1024  # tokens of guesses kept per back
WS_HEADER = 2  # bytes of WebSocket framing on a small server->client frame
WS_HEADER_MASKED = 6  # client->server frames carry a 4-byte mask


@dataclass(eq=False)
class Peer:
    name: str
    queue: asyncio.Queue[bytes | None]
    lock: threading.Lock = field(default_factory=threading.Lock)
    draft: Draft | None = None  # guarded by lock
    session: int = -1  # of the last DRAFT frame
    end: int = 0  # the position right after the last token received (where APPEND goes)

    def merge(self, start: int, tokens: tuple[int, ...]) -> None:
        with self.lock:
            self.draft = merge(self.draft, start, tokens, MAX_DRAFT)


@dataclass
class WireStats:
    """Bytes on the drafter channel (payload + WebSocket framing), both directions."""

    bytes_out: int = 0
    bytes_in: int = 0
    frames_out: int = 0
    frames_in: int = 0
    drafters_refused: int = 0
    drafters_dropped: int = 0


class Hub:
    def __init__(self, *, n_vocab: int, fingerprint: str, api_key: auth.KeySpec = None) -> None:
        self.n_vocab = n_vocab
        self.fingerprint = fingerprint
        self.api_key = api_key
        self.width = p.token_width(n_vocab)
        self.wire = WireStats()
        self._peers: tuple[Peer, ...] = ()  # replaced whole: the engine reads it lock-free
        self._lock = threading.Lock()  # orders joins against begin/commit
        self._session = 0
        self._committed: list[int] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def connected(self) -> int:
        return len(self._peers)

    # -- DraftSource: called on the engine thread ---------------------------------------

    def begin(self, prompt: Sequence[int]) -> None:
        with self._lock:
            self._session += 1
            self._committed = list(prompt)
            for peer in self._peers:
                with peer.lock:
                    peer.draft = None
            self._send_all(p.encode(p.Begin(self._session, tuple(prompt)), self.width))

    def propose(self, committed: Sequence[int], limit: int) -> list[int]:
        best: list[int] = []
        for peer in self._peers:
            with peer.lock:
                peer.draft = advance(committed, peer.draft)
                tokens = usable(committed, peer.draft, limit, self.n_vocab)
            if len(tokens) > len(best):
                best = tokens
        return best

    def commit(self, start: int, tokens: Sequence[int]) -> None:
        with self._lock:
            if self._committed is None:
                return
            del self._committed[start:]
            self._committed.extend(tokens)
            self._send_all(p.encode(p.Commit(self._session, start, tuple(tokens)), self.width))

    def end(self) -> None:
        with self._lock:
            self._committed = None
            self._send_all(p.encode(p.End(self._session), self.width))

    def rest(self, resting: bool) -> None:
        """Backs keep drafting: on a device of their own they cost the lead nothing."""

    def _send_all(self, frame: bytes) -> None:
        if self._loop is not None and self._peers:
            self._loop.call_soon_threadsafe(self._enqueue_all, frame)

    def _enqueue_all(self, frame: bytes) -> None:
        for peer in self._peers:
            peer.queue.put_nowait(frame)

    # -- the event loop side --------------------------------------------------------------

    async def serve(self, ws: WebSocket) -> None:
        """Run one back's connection until it leaves or breaks the protocol."""
        self._loop = asyncio.get_running_loop()
        await ws.accept()
        peer: Peer | None = None
        sender: asyncio.Task[None] | None = None
        try:
            hello = await self._handshake(ws)
            if hello is None:
                return
            peer = Peer(hello.name or "back", asyncio.Queue())
            sender = asyncio.create_task(self._send_loop(ws, peer))
            self._join(peer)
            log.info("drafter %s connected (%d connected)", peer.name, self.connected)
            while True:
                data = await ws.receive_bytes()
                self.wire.bytes_in += len(data) + WS_HEADER_MASKED
                self.wire.frames_in += 1
                self._on_frame(peer, p.decode(data, self.width))
        except ProtocolError as e:
            self.wire.drafters_dropped += 1
            log.warning("drafter %s disconnected: %s", peer.name if peer else "?", e)
            await _close(ws, 1002, str(e))
        except (WebSocketDisconnect, RuntimeError, KeyError):
            pass
        finally:
            if peer is not None:
                self._leave(peer)
                log.info("drafter %s left (%d connected)", peer.name, self.connected)
            if sender is not None:
                sender.cancel()

    async def _handshake(self, ws: WebSocket) -> p.Hello | None:
        try:
            msg = p.decode(await asyncio.wait_for(ws.receive_bytes(), 10), self.width)
        except TimeoutError:
            raise ProtocolError("no HELLO within 10 s") from None
        if not isinstance(msg, p.Hello):
            raise ProtocolError("the first frame must be HELLO")
        reason = self._refusal(ws, msg)
        if reason:
            self.wire.drafters_refused += 1
            log.warning("refused drafter %s: %s", msg.name, reason)
            await ws.send_bytes(p.encode(p.Refuse(reason)))
            await _close(ws, 1008, "refused")
            return None
        await ws.send_bytes(p.encode(p.Welcome(p.VERSION, self.width)))
        return msg

    def _refusal(self, ws: WebSocket, hello: p.Hello) -> str | None:
        if refusal := auth.drafter_refusal(self.api_key, ws.headers.get("authorization")):
            return refusal
        if hello.version != p.VERSION:
            return f"protocol version {hello.version} is not supported (lead speaks {p.VERSION})"
        if hello.fingerprint != self.fingerprint or hello.n_vocab != self.n_vocab:
            return (
                f"the draft model's vocabulary (n_vocab {hello.n_vocab}, fingerprint "
                f"{hello.fingerprint}) differs from the main model's (n_vocab {self.n_vocab}, "
                f"fingerprint {self.fingerprint}); use a draft model from the same family"
            )
        return None

    def _join(self, peer: Peer) -> None:
        with self._lock:
            self._peers = (*self._peers, peer)
            if self._committed is not None:  # joining mid-generation: catch up first
                peer.queue.put_nowait(
                    p.encode(p.Begin(self._session, tuple(self._committed)), self.width)
                )

    def _leave(self, peer: Peer) -> None:
        with self._lock:
            self._peers = tuple(x for x in self._peers if x is not peer)

    def _on_frame(self, peer: Peer, msg: p.Message) -> None:
        if not isinstance(msg, p.DraftMsg | p.Append):
            raise ProtocolError(f"a drafter may only send drafts, got {type(msg).__name__}")
        if any(not 0 <= t < self.n_vocab for t in msg.tokens):
            raise ProtocolError("draft token outside the vocabulary")
        if isinstance(msg, p.DraftMsg):
            peer.session, peer.end = msg.session, msg.start
        start, peer.end = peer.end, peer.end + len(msg.tokens)
        if peer.session == self._session:
            peer.merge(start, msg.tokens)

    async def _send_loop(self, ws: WebSocket, peer: Peer) -> None:
        while True:
            frame = await peer.queue.get()
            if frame is None:
                return
            await ws.send_bytes(frame)
            self.wire.bytes_out += len(frame) + WS_HEADER
            self.wire.frames_out += 1

    async def close_all(self) -> None:
        for peer in self._peers:
            peer.queue.put_nowait(None)


async def _close(ws: WebSocket, code: int, reason: str) -> None:
    with contextlib.suppress(RuntimeError):  # already closed
        await ws.close(code, reason[:120])
