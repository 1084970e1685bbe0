"""`duo back`: a drafter process that serves a lead over one persistent connection.

It mirrors the committed tokens of the lead's running generations (BEGIN, COMMIT), one
session each, and drafts ahead for all of them on its own thread (a sequence of the draft
model per session, up to `--parallel` at once, their next tokens evaluated in one pass);
it streams only what is new in each session's draft (DRAFT, then APPEND frames). When
the lead goes away it reconnects with backoff; an incompatible draft model is refused at
the handshake.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import websockets
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from duo import auth
from duo.channel import protocol as p
from duo.core.draft import Draft, delta
from duo.drafting.drafter import DraftWorker
from duo.errors import CertificateError, ProtocolError, Refused, UsageError
from duo.llama.backend import Model

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BackConfig:
    lead: str = "http://127.0.0.1:5555"  # --lead: the lead's URL
    max_ahead: int = 12  # --max-ahead: most tokens drafted past the committed ones
    parallel: int = 4  # --parallel: sessions drafted for at once (the model's sequences)
    api_key: str | None = None  # --api-key (or --api-key-file, DUO_DRAFTER_KEY, DUO_API_KEY)
    name: str = ""  # --name: shown in the lead's logs and on its web page
    cores: frozenset[int] | None = None  # --pin: cores of the drafter thread
    retry_max: float = 8.0  # seconds between reconnection attempts, at most
    tls: ssl.SSLContext | None = None  # verifies a wss:// lead (--ca-file); None: the system's


def drafter_url(lead: str) -> str:
    """http://host:port -> ws://host:port/v1/drafter (https -> wss)."""
    parts = urlsplit(lead if "://" in lead else f"http://{lead}")
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme)
    if scheme is None or not parts.hostname:
        raise UsageError(f"--lead expects a URL such as http://127.0.0.1:5555, not {lead!r}")
    return urlunsplit((scheme, parts.netloc, p.PATH, "", ""))


class Back:
    def __init__(
        self,
        model: Model,
        config: BackConfig,
        on_connect: Callable[[str], None] | None = None,
    ) -> None:
        self.model = model
        self.config = config
        self.on_connect = on_connect  # told the lead's URL at every (re)connection
        self.url = drafter_url(config.lead)
        self.name = config.name or f"{socket.gethostname()}:{os.getpid()}"
        self._outbox: asyncio.Queue[bytes] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # The running sessions: what the lead knows of each one's draft.
        self._sent: dict[int, Draft | None] = {}
        self._last = -1  # the session of the last draft frame sent (APPEND continues it)
        self._width = 4
        self.worker = DraftWorker(
            model,
            self._publish,
            sequences=config.parallel,
            max_ahead=config.max_ahead,
            cores=set(config.cores) if config.cores else None,
        )

    async def run(self) -> None:
        """Serve leads until cancelled; raise Refused if a lead refuses us, CertificateError
        if its certificate does not verify (neither is fixed by retrying)."""
        self._loop = asyncio.get_running_loop()
        self.worker.start()
        delay = 0.25
        try:
            while True:
                try:
                    await self._connection()
                    delay = 0.25
                except ssl.SSLCertVerificationError as e:
                    raise CertificateError(
                        f"the certificate of {self.url} does not verify "
                        f"({auth.certificate_reason(e)}); give the CA that signed it (or the "
                        "self-signed certificate) with --ca-file; not retrying, as retrying "
                        "cannot fix this"
                    ) from None
                except (
                    OSError,
                    ConnectionClosed,
                    InvalidHandshake,
                    TimeoutError,
                    ProtocolError,  # a lead that speaks nonsense: drop it and try again
                ) as e:
                    log.warning(
                        "lead %s unavailable (%s); retrying in %.1fs",
                        self.url,
                        type(e).__name__,
                        delay,
                    )
                self.worker.end()
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.config.retry_max)
        finally:
            self.worker.stop()

    async def _connection(self) -> None:
        headers = {p.MODEL_HEADER: _header_text(self.model.path.stem)}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        secure = self.url.startswith("wss:")
        try:
            ws = await websockets.connect(
                self.url,
                ssl=(self.config.tls or True) if secure else None,  # True: the system's CAs
                additional_headers=headers,
                open_timeout=5,
                max_size=1 << 22,
                compression=None,
            )
        except InvalidURI as e:
            raise UsageError(f"bad lead URL: {e}") from None
        async with ws:
            hello = p.Hello(p.VERSION, self.model.n_vocab, self.model.vocab.fingerprint, self.name)
            await ws.send(p.encode(hello))
            reply = p.decode(await asyncio.wait_for(ws.recv(), 10))
            if isinstance(reply, p.Refuse):
                raise Refused(reply.reason)
            if not isinstance(reply, p.Welcome):
                raise ProtocolError("expected WELCOME")
            self._width = reply.token_width
            self._sent, self._last = {}, -1
            self._outbox = asyncio.Queue()
            sender = asyncio.create_task(self._send_loop(ws, self._outbox))
            log.info("connected to %s", self.url)
            if self.on_connect is not None:
                self.on_connect(self.config.lead)
            try:
                async for data in ws:
                    self._on_frame(p.decode(data, self._width))
            finally:
                self._outbox = None
                sender.cancel()
                log.info("disconnected from %s", self.url)

    def _on_frame(self, msg: p.Message) -> None:
        match msg:
            case p.Begin(session, tokens):
                self._sent[session] = None
                self.worker.begin(session, tokens)
            case p.Commit(session, start, tokens):
                self.worker.commit(session, start, tokens)  # ignored for unknown sessions
            case p.End(session):
                self._sent.pop(session, None)
                self.worker.end(session)
            case _:
                raise ProtocolError(f"unexpected {type(msg).__name__} from the lead")

    def _publish(self, session: int, draft: Draft) -> None:
        """On the drafter thread: hand the draft to the event loop."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._send_draft, session, draft)

    def _send_draft(self, session: int, draft: Draft) -> None:
        """On the event loop: queue what the lead does not know of this draft yet."""
        if self._outbox is None or session not in self._sent:  # over, or from a past connection
            return
        sent = self._sent[session]
        new = delta(sent, draft)
        if new is None:
            return
        follows = (
            session == self._last
            and sent is not None
            and new.start == sent.start + len(sent.tokens)
        )
        msg = p.Append(new.tokens) if follows else p.DraftMsg(session, new.start, new.tokens)
        self._sent[session], self._last = draft, session
        self._outbox.put_nowait(p.encode(msg, self._width))

    @staticmethod
    async def _send_loop(ws: websockets.ClientConnection, outbox: asyncio.Queue[bytes]) -> None:
        with contextlib.suppress(ConnectionClosed):
            while True:
                await ws.send(await outbox.get())


def _header_text(text: str) -> str:
    """Text as an HTTP header value may carry it: printable ASCII, at most MAX_NAME bytes."""
    return "".join(c if " " <= c <= "~" else "?" for c in text)[: p.MAX_NAME]
