"""The lead's end of the drafter channel: one WebSocket per back, on the event loop.

Per connection: the handshake (key, protocol version, vocabulary fingerprint; a back of
a newer version is answered in the lead's, an older one from protocol.OLDEST on in its
own), then
incoming DRAFT/APPEND frames are checked and handed to `Backs.receive`; what the engine
sends a back is queued and written by a sender task. A back that breaks the protocol is
disconnected with a close frame that says why; it never affects a request.

A drafter is untrusted until its key is checked: nothing it sent is logged before that,
and its name is cut to `p.MAX_NAME` bytes of printable text. Each back's frames are
bounded by what the lead can use and paced by a token bucket (`Pacing`): a back that
sends faster is slowed down by TCP backpressure, not served faster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from starlette.websockets import WebSocket, WebSocketDisconnect

from duo.auth import credential
from duo.channel import protocol as p
from duo.channel.backs import Backs, Remote
from duo.errors import ProtocolError
from duo.mailbox import Mailboxes
from duo.net import is_loopback

log = logging.getLogger(__name__)

WS_HEADER = 2  # bytes of WebSocket framing on a small server->client frame
WS_HEADER_MASKED = 6  # client->server frames carry a 4-byte mask
HANDSHAKE_SECONDS = 10.0


@dataclass
class WireStats:
    """Bytes on the drafter channel (payload + WebSocket framing), both directions."""

    bytes_out: int = 0
    bytes_in: int = 0
    frames_out: int = 0
    frames_in: int = 0
    drafters_refused: int = 0
    drafters_dropped: int = 0


class Pacing:
    """A token bucket per back: `rate` bytes per second on average, bursts of `burst`.

    A back drafting one token per frame sends about 9 bytes per token (APPEND header,
    token, WebSocket mask and header): the default rate is room for ~7,000 tokens/s.
    """

    def __init__(
        self,
        rate: float = 64_000,
        burst: float = 16_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate, self.burst, self.clock = rate, burst, clock
        self.level = burst
        self.stamp = clock()

    def delay(self, n_bytes: int) -> float:
        """Seconds to wait before handling a frame of n_bytes (0 while within budget)."""
        now = self.clock()
        self.level = min(self.burst, self.level + (now - self.stamp) * self.rate) - n_bytes
        self.stamp = now
        return max(0.0, -self.level / self.rate)


Refusal = Callable[[str | None], str | None]  # the Authorization header -> why not, or None


class DrafterEndpoint:
    def __init__(
        self,
        backs: Backs,
        *,
        n_vocab: int,
        fingerprint: str,
        refusal: Refusal,
        mail: Mailboxes,
        pacing: Callable[[], Pacing] = Pacing,
    ) -> None:
        """`mail`: how the engine thread's messages reach the event loop (the lead's, which
        the engine flushes before each pass)."""
        self.backs = backs
        self.mail = mail
        self.n_vocab = n_vocab
        self.fingerprint = fingerprint
        self.refusal = refusal
        self.pacing = pacing
        self.width = p.token_width(n_vocab)
        self.wire = WireStats()

    async def serve(self, ws: WebSocket) -> None:
        """Run one back's connection until it leaves or breaks the protocol."""
        await ws.accept()
        remote: Remote | None = None
        sender: asyncio.Task[None] | None = None
        try:
            hello = await self._handshake(ws)
            if hello is None:
                return
            queue: asyncio.Queue[p.Message] = asyncio.Queue()
            send = _sender(queue, self.mail)

            remote = Remote(hello.name or "back", send, version=min(hello.version, p.VERSION))
            remote.host, remote.model = _peer(ws)
            remote.machine, remote.threads = hello.machine, hello.threads
            sender = asyncio.create_task(self._send_loop(ws, queue))
            self.backs.join(remote)
            log.info("drafter %s connected (%d connected)", remote.name, self.backs.connected)
            await self._receive_loop(ws, remote)
        except ProtocolError as e:
            self.wire.drafters_dropped += 1
            if remote is not None:  # unauthenticated drafters are not logged
                log.warning("drafter %s disconnected: %s", remote.name, e)
            await _close(ws, e.close_code, str(e))
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            if remote is not None:
                self.backs.leave(remote)
                log.info("drafter %s left (%d connected)", remote.name, self.backs.connected)
            if sender is not None:
                sender.cancel()

    async def _handshake(self, ws: WebSocket) -> p.Hello | None:
        try:
            data = await asyncio.wait_for(_receive_bytes(ws), HANDSHAKE_SECONDS)
        except TimeoutError:
            raise ProtocolError(f"no HELLO within {HANDSHAKE_SECONDS:g} s") from None
        reason = self.refusal(credential(ws.headers))
        if reason:
            await self._refuse(ws, reason, name=None)
            return None
        msg = p.decode(data, self.width)
        if not isinstance(msg, p.Hello):
            raise ProtocolError("the first frame must be HELLO")
        reason = self._refusal(msg)
        if reason:
            await self._refuse(ws, reason, name=msg.name)
            return None
        await ws.send_bytes(p.encode(p.Welcome(min(msg.version, p.VERSION), self.width)))
        return msg

    async def _refuse(self, ws: WebSocket, reason: str, name: str | None) -> None:
        self.wire.drafters_refused += 1
        client = f"{ws.client.host}:{ws.client.port}" if ws.client else "?"
        who = f"drafter {name} from {client}" if name is not None else f"a drafter from {client}"
        log.warning("refused %s: %s", who, reason)
        await ws.send_bytes(p.encode(p.Refuse(reason)))
        await _close(ws, 1008, "refused")

    def _refusal(self, hello: p.Hello) -> str | None:
        if hello.version < p.OLDEST:
            return (
                f"protocol version {hello.version} is not supported (lead speaks "
                f"{p.OLDEST} to {p.VERSION}): run the same duo release on the lead and its backs"
            )
        if hello.fingerprint != self.fingerprint or hello.n_vocab != self.n_vocab:
            return (
                f"the draft model's vocabulary (n_vocab {hello.n_vocab}, fingerprint "
                f"{hello.fingerprint}) differs from the main model's (n_vocab {self.n_vocab}, "
                f"fingerprint {self.fingerprint}); use a draft model from the same family"
            )
        return None

    async def _receive_loop(self, ws: WebSocket, remote: Remote) -> None:
        pacing = self.pacing()
        session, end = -1, 0  # of the last DRAFT; the position right after the last token
        while True:
            data = await _receive_bytes(ws)
            size = len(data) + WS_HEADER_MASKED
            self.wire.bytes_in += size
            self.wire.frames_in += 1
            wait = pacing.delay(size)
            if wait:
                await asyncio.sleep(wait)
            msg = p.decode_draft(data, self.width, self.n_vocab)
            remote.last_seen = time.time()
            remote.received += len(msg.tokens)
            if isinstance(msg, p.Branch):
                self.backs.receive_branch(remote, msg.session, msg.fork, msg.at, msg.tokens)
                continue
            if isinstance(msg, p.DraftMsg):
                session, end = msg.session, msg.start
            start, end = end, end + len(msg.tokens)
            self.backs.receive(remote, session, start, msg.tokens)

    async def _send_loop(self, ws: WebSocket, queue: asyncio.Queue[p.Message]) -> None:
        while True:
            frame = p.encode(await queue.get(), self.width)
            await ws.send_bytes(frame)
            self.wire.bytes_out += len(frame) + WS_HEADER
            self.wire.frames_out += 1


def _sender(queue: asyncio.Queue[p.Message], mail: Mailboxes) -> Callable[[p.Message], None]:
    """What queues a message for this back's connection, from any thread (the engine's)."""
    mailbox = mail.here()

    def send(msg: p.Message) -> None:
        mailbox.post(queue.put_nowait, msg)

    return send


def _peer(ws: WebSocket) -> tuple[str, str]:
    """The back's address and draft model, for display: the model as the back tells it;
    the address as a supervisor on loopback relays it, else as the connection shows it."""
    host = ws.client.host if ws.client else ""
    relayed = ws.headers.get(p.PEER_HEADER)
    if relayed and is_loopback(host):
        host = relayed
    model = ws.headers.get(p.MODEL_HEADER, "")
    return _shown(host), _shown(model)


def _shown(header: str) -> str:
    """A header's text as the dashboard may show it (see protocol.printable)."""
    return p.printable(header.encode("latin-1", "replace"))


async def _receive_bytes(ws: WebSocket) -> bytes:
    """The next binary frame; a text frame is a protocol error, a close ends the loop."""
    message = await ws.receive()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000))
    data = message.get("bytes")
    if data is None:
        raise ProtocolError("text frames are not part of the drafter protocol", close_code=1003)
    return bytes(data)


async def _close(ws: WebSocket, code: int, reason: str) -> None:
    with contextlib.suppress(RuntimeError):  # already closed
        await ws.close(code, reason[:120])
