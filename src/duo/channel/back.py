"""`duo back`'s connection to its lead: one persistent WebSocket, the handshake, and
reconnection with backoff when the lead goes away. What it carries is the drafting role's
(duo.channel.drafting): lead messages in, draft frames out. An incompatible draft model is
refused at the handshake.
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
from websockets.exceptions import (
    ConnectionClosed,
    InvalidHandshake,
    InvalidMessage,
    InvalidStatus,
    InvalidURI,
)

from duo import auth
from duo.channel import protocol as p
from duo.channel.drafting import BackDrafter
from duo.errors import CertificateError, ProtocolError, Refused, UsageError
from duo.llama.backend import Model
from duo.net import machine_id

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BackConfig:
    lead: str = "http://127.0.0.1:5555"  # --lead: the lead's URL
    max_ahead: int = 12  # --max-ahead: most tokens drafted past the committed ones
    fanout: int = 0  # --fanout: branches kept past the chain's unsure guesses, per session
    parallel: int = 4  # --parallel: sessions drafted for at once (the model's sequences)
    api_key: str | None = None  # --api-key (or --api-key-file, DUO_DRAFTER_KEY, DUO_API_KEY)
    name: str = ""  # --name: shown in the lead's logs and on its web page
    cores: frozenset[int] | None = None  # --pin: cores of the drafter thread
    retry_max: float = 8.0  # seconds between reconnection attempts, at most
    tls: ssl.SSLContext | None = None  # verifies a wss:// lead (--ca-file); None: the system's
    ca_file: str | None = None  # --ca-file, as given (named in advice)


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
        self.drafter = BackDrafter(
            model,
            parallel=config.parallel,
            max_ahead=config.max_ahead,
            fanout=config.fanout,
            cores=config.cores,
        )

    async def run(self) -> None:
        """Serve leads until cancelled; raise Refused if a lead refuses us, CertificateError
        if its certificate does not verify (neither is fixed by retrying)."""
        self.drafter.start()
        delay = 0.25
        try:
            while True:
                try:
                    await self._connection()
                    delay = 0.25
                except ssl.SSLCertVerificationError as e:
                    problem = auth.certificate_problem(self.url, e, self.config.ca_file)
                    raise CertificateError(
                        f"{problem}; not retrying, as retrying cannot fix this"
                    ) from None
                except ssl.SSLError as e:
                    if e.reason != "WRONG_VERSION_NUMBER":  # a lead gone mid-handshake, ...
                        self._unavailable(str(e), delay)
                    else:  # it answered the TLS hello in plain text
                        raise UsageError(
                            f"{self.url} does not speak TLS: is the lead's URL http://? Not "
                            "retrying, as retrying cannot fix this"
                        ) from None
                except InvalidStatus as e:
                    status = e.response.status_code
                    if status not in (404, 405, 426):  # a proxy's 502 while the lead restarts
                        self._unavailable(f"HTTP {status}", delay)
                    else:
                        raise UsageError(
                            f"{self.url} answered HTTP {status}: no duo lead's drafter channel "
                            "there (is --lead the lead's URL?); not retrying"
                        ) from None
                except InvalidMessage:  # not HTTP, or a lead that went mid-handshake
                    self._unavailable("no HTTP answer to the handshake: is it a duo lead?", delay)
                except (
                    OSError,
                    ConnectionClosed,
                    InvalidHandshake,
                    TimeoutError,
                    ProtocolError,  # a lead that speaks nonsense: drop it and try again
                ) as e:
                    self._unavailable(str(e) or type(e).__name__, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.config.retry_max)
        finally:
            self.drafter.stop()

    def _unavailable(self, reason: str, delay: float) -> None:
        log.warning("lead %s unavailable (%s); retrying in %.1fs", self.url, reason[:200], delay)

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
            hello = p.Hello(
                p.VERSION,
                self.model.n_vocab,
                self.model.vocab.fingerprint,
                self.name,
                machine_id(),
                min(self.model.n_threads, 0xFFFF),
            )
            await ws.send(p.encode(hello))
            reply = p.decode(await asyncio.wait_for(ws.recv(), 10))
            if isinstance(reply, p.Refuse):
                raise Refused(reply.reason)
            if not isinstance(reply, p.Welcome):
                raise ProtocolError("expected WELCOME")
            outbox: asyncio.Queue[bytes] = asyncio.Queue()
            self.drafter.attach(outbox.put_nowait, reply.token_width)
            sender = asyncio.create_task(self._send_loop(ws, outbox))
            log.info("connected to %s", self.url)
            if self.on_connect is not None:
                self.on_connect(self.config.lead)
            try:
                async for data in ws:
                    self.drafter.on_message(p.decode(data, reply.token_width))
            finally:
                self.drafter.detach()
                sender.cancel()
                log.info("disconnected from %s", self.url)

    @staticmethod
    async def _send_loop(ws: websockets.ClientConnection, outbox: asyncio.Queue[bytes]) -> None:
        with contextlib.suppress(ConnectionClosed):
            while True:
                await ws.send(await outbox.get())


def _header_text(text: str) -> str:
    """Text as an HTTP header value may carry it: printable ASCII, at most MAX_NAME bytes."""
    return "".join(c if " " <= c <= "~" else "?" for c in text)[: p.MAX_NAME]
